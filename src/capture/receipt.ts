/**
 * What a backup returns and is given (the receipt, the options): types only, apart from the stage's modules so that
 * the "nothing changed" path (backup.ts) loads none of the capture.
 */
import type { NotCaptured } from "../bundle/manifest.js";
import type { SigningKey } from "../crypto/sshsig.js";
import type { Trust } from "../crypto/trust.js";
import type { Repository } from "../repository/repository.js";
import type { Progress } from "../progress.js";

/** What a backup returns (and what `--idempotency-key` replays). */
export interface BackupReceipt {
  snapshot_id: string;
  tenant: string;
  agent_id: string;
  sequence: number;
  created_at: string;
  manifest_sha256: string;
  payload_sha256: string;
  size: number;
  kind: "full" | "incremental";
  parent: string | null;
  /**
   * how the databases were read and checked: "copy" (copied at the instant, integrity_check on the copy) or
   * "in-place" (an incremental the integrity policy does not check: changed pages read in place, counts checked);
   * null when nothing new was written
   */
  databases_read: "copy" | "in-place" | null;
  /** why an incremental backup made a full snapshot (the first one, fullEvery, or a chain that does not verify), else null */
  full_reason: string | null;
  path: string;
  repeated: boolean;
  /** committed in the repository, kept in the local spool until it can be uploaded (capture/spool.ts), or
   * "unchanged": nothing changed since the snapshot named here, and no bundle was written (capture/unchanged.ts) */
  status: "committed" | "spooled" | "unchanged";
  /** the request's parameters (label, incremental): an idempotency key used again with others is refused */
  params_sha256: string;
  /** what was deliberately left out (credential files, excluded names, nested repositories' history) */
  not_captured: NotCaptured[];
  warnings: string[];
}

/** A backup's snapshot once its commit marker is written: its receipt, and where the bundle is. */
export interface Landed {
  receipt?: Omit<BackupReceipt, "path">;
  path?: string;
}

export interface BackupOptions {
  repo: Repository;
  trust: Trust;
  /** AGENTBAK_HOME: the page-index key lives there */
  home: string;
  signingKey: SigningKey;
  principal: string;
  /** page-level incremental against the latest verified snapshot (config incremental.enabled by default) */
  incremental?: boolean;
  idempotencyKey?: string;
  label?: string;
  waitMs?: number;
  /** the lowest sequence this host will accept (its watermark) */
  sequenceFloor?: number;
  /** no new snapshot when nothing changed since this host's last one (capture/unchanged.ts), as restic's --skip-if-unchanged */
  skipUnchanged?: boolean;
  /** false: the unchanged check reads and hashes every file instead of trusting its identity and times (--no-stat-cache) */
  statCache?: boolean;
  /** where long work reports how far it has got (src/progress.ts) */
  progress?: Progress;
  /**
   * large files stored as chunks in the repository's chunk store (default true); false for a spool, whose flush
   * copies bundles only
   */
  chunks?: boolean;
  /**
   * Filled in the moment the commit marker is written (the receipt, and `path`: where the bundle is): from then on the
   * snapshot exists, whatever fails after it (the audit entry, the lock's release), and the caller must not report it
   * lost or take it again.
   */
  landed?: Landed;
}

