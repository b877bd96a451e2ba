/**
 * The backup stage, a forward pipeline of small stages, each in its own file:
 * unchanged? (unchanged.ts) → lock → read plan, the parent included (plan.ts) →
 * the instant between the hooks: databases, sources, files, workspace (instant.ts,
 * databases.ts, sources.ts, files.ts, workspace.ts) → payload beside the
 * inspection (databases.ts) → manifest (one pure function) → signed bundle →
 * published through the repository. This file holds the steps up to the unchanged check, and the answer to a
 * repeated idempotency key; take.ts the rest, loaded only when a snapshot is taken.
 */
import type { LoadedConfig } from "../config/load.js";
import { createHash } from "node:crypto";
import { removeOnInterrupt, removeTree } from "../cleanup.js";
import { ConflictError, usageError } from "../errors.js";
import { type AgentRef, hasUnsafeText } from "../facts.js";
import type { BackupOptions, BackupReceipt } from "./receipt.js";
import { unchanged } from "./unchanged.js";

export type { BackupOptions, BackupReceipt, Landed } from "./receipt.js";

/**
 * Runs one backup of the configured agent.
 * @throws AgentbakError: 10 repository/database missing, 11 locked, 13 snapshot failed integrity_check, 14 secrets or refused dirty workspace, 1 hook failures;
 *   ConflictError (2) when the idempotency key was first used with another label or incremental choice.
 */
export async function runBackup(lc: LoadedConfig, o: BackupOptions): Promise<BackupReceipt> {
  // a label is shown in listings and logs: a line break, escape sequence or bidi control there could forge a row
  if (o.label !== undefined && (hasUnsafeText(o.label) || o.label.length > 200))
    throw usageError("--label: at most 200 characters, none of them control characters, escape sequences, Unicode bidi/format controls or noncharacters");
  const cfg = lc.config;
  const a: AgentRef = { tenant: cfg.agent.tenant, agent: cfg.agent.id };
  const repoDir = o.repo.store.inPlace ? o.repo.location : null;
  // the signer, as the manifest names it and the unchanged check fingerprints it
  const signer = o.signingKey.fingerprint;
  // before the lease: an agent whose state did not change costs reads only, no lease grant written (docs/fleet.md)
  const { listed, other, last } = await unchanged<BackupReceipt>(lc, o, a, { repoDir, signer });
  if (last) return { ...last.receipt, repeated: false, status: "unchanged", warnings: [] };
  // the repository answers once: the agent's lock, what dead runs left swept, and the receipt an idempotency key
  // already recorded, else the sequence, the agent's newest manifest, an incremental's chain head, and the chunk
  // writer with the source entries it may reuse. No chunks with Object Lock: a reused chunk's retention is not
  // extended yet, so a locked snapshot keeps its bytes in its own locked bundle (docs/chunk-store.md)
  const incremental = o.incremental ?? cfg.incremental.enabled;
  const chunks = o.chunks === false || cfg.objectLock ? null : { recipients: cfg.recipients, sources: cfg.sources.length > 0 };
  const begun = await o.repo.beginBackup<BackupReceipt>(a, { waitMs: o.waitMs ?? 0, idempotencyKey: o.idempotencyKey, trust: o.trust, sequenceFloor: o.sequenceFloor, home: o.home, incremental: incremental ? cfg.databases.map((d) => d.name) : null, chunks });
  const { lock, prior } = begun;
  const staging = o.repo.store.tempDir(`backup-${a.agent}`);
  const unregister = removeOnInterrupt(staging);
  try {
    if (prior) return replay(prior, o);
    // the capture's modules (SQLite, the bundle writer, the inspection, git's capture) load only now: a backup that
    // finds nothing changed never compiles them
    const { takeSnapshot } = await import("./take.js");
    return await takeSnapshot(lc, o, a, { staging, repoDir, listed, other, signer, begun, incremental, params: paramsDigest(o) });
  } catch (e) {
    // a repository renamed, deleted or unmounted under the run failed it at whatever step came next: say that (10)
    throw await o.repo.goneOr(e);
  } finally {
    removeTree(staging);
    unregister();
    await lock.release();
  }
}

/**
 * The unchanged check alone, as `runBackup` with `skipUnchanged` makes it first: the receipt of this host's last
 * snapshot when the agent's state is exactly what it captured (a stat-level read, no lease, no capture module
 * loaded), else null. `serve --host` answers an idle agent with it and starts a capture process only for the others.
 */
export async function unchangedBackup(lc: LoadedConfig, o: BackupOptions): Promise<BackupReceipt | null> {
  const cfg = lc.config;
  const repoDir = o.repo.store.inPlace ? o.repo.location : null;
  const { last } = await unchanged<BackupReceipt>(lc, { ...o, skipUnchanged: true }, { tenant: cfg.agent.tenant, agent: cfg.agent.id }, { repoDir, signer: o.signingKey.fingerprint });
  return last ? { ...last.receipt, repeated: false, status: "unchanged", warnings: [] } : null;
}

/** The digest of what a backup request asked for, beside its idempotency key. */
export const paramsDigest = (o: Pick<BackupOptions, "label" | "incremental">) => createHash("sha256").update(JSON.stringify({ label: o.label ?? null, incremental: o.incremental ?? null })).digest("hex");

/**
 * The answer to a repeated idempotency key: the first receipt, marked repeated.
 * @throws ConflictError (2) when the key was first used with another label or incremental choice.
 */
export function replay(prior: BackupReceipt, o: Pick<BackupOptions, "label" | "incremental" | "idempotencyKey">): BackupReceipt {
  if (prior.params_sha256 && prior.params_sha256 !== paramsDigest(o))
    throw new ConflictError(`idempotency key ${o.idempotencyKey} was first used with another label or incremental choice (snapshot ${prior.snapshot_id})`);
  return { ...prior, repeated: true, status: "committed" };
}

