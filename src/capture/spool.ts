/**
 * Backups that do not make the repository a single point of failure: when an
 * object-storage repository can not be reached, the backup is made into its
 * local spool instead (the receipt says "spooled"), and the next backup that
 * reaches the repository, or `agentbak flush`, uploads it. Folder repositories
 * are written directly. Both paths are the one backup pipeline, run against
 * two repositories.
 *
 * Where the line lies: "unreachable" is no answer from the store (refused,
 * reset, timed out, DNS, 502/503/504 after retries): the backup spools.
 * "Gone" is an answer that the repository is not there (no bucket, no
 * repository marker, or another repository's marker than the one opened):
 * "repository not found" (10), never spooled, never begun again as an empty
 * one. A snapshot whose commit marker was written is committed, whatever
 * fails after it.
 */
import type { LoadedConfig } from "../config/load.js";
import { hasCause, UnreachableError, wrap } from "../errors.js";
import type { Repository } from "../repository/repository.js";
import { backupTarget, remoteReceipt, settleBackup, type BackupTarget } from "../repository/spool.js";
import { replay, runBackup, type BackupOptions, type BackupReceipt, type Landed } from "./backup.js";
import { type AgentRef } from "../facts.js";

/** How long a process that found a repository unreachable spools without trying it again (a server's next checkpoints stay fast). */
export const RETRY_AFTER_MS = 30_000;
const downUntil = new Map<string, number>();

export interface SpoolingBackupOptions extends Omit<BackupOptions, "repo"> {
  /** where the repository is (a folder or s3://...) */
  location: string;
  /**
   * the repositories this process opened, by location (one handle each): the one at `location` is opened on first
   * use; for object storage that is its first request, so it may throw UnreachableError
   */
  repositories: Map<string, Promise<Repository>>;
  /** check that the repository is still the one opened, and list it afresh (a long-running server: other processes write it too) */
  fresh?: boolean;
}

/**
 * Runs one backup into the repository, or into its local spool when the
 * repository is unreachable; then uploads what waited in the spool (a failure
 * there is a warning: the new snapshot is committed either way). Where it goes
 * and the sequence floor are answered once, before (backupTarget), and settled
 * once, after (settleBackup: the spool uploaded, this host's watermark raised).
 * @throws what runBackup throws, except that an unreachable object store spools instead.
 */
export async function backupOrSpool(lc: LoadedConfig, o: SpoolingBackupOptions): Promise<BackupReceipt> {
  const a: AgentRef = { tenant: lc.config.agent.tenant, agent: lc.config.agent.id };
  const down = (downUntil.get(o.location) ?? 0) > Date.now() ? new UnreachableError(`${o.location} was unreachable moments ago; trying it again in at most ${RETRY_AFTER_MS / 1000} s`) : null;
  const t = await backupTarget(o.repositories, o.location, { home: o.home, fresh: o.fresh, a, trust: o.trust, floor: o.sequenceFloor, down });
  const { receipt, reached } = await backupInto(lc, a, o, t);
  if (reached && t.spool) downUntil.delete(o.location);
  const f = await settleBackup(t, o.trust, { ...a, signingKey: o.signingKey }, receipt, { home: o.home, reached, idempotencyKey: o.idempotencyKey });
  if (f instanceof Error) receipt.warnings.push(`spooled snapshots of ${a.tenant}/${a.agent} not uploaded yet: ${f.message}`);
  else if (f) {
    for (const q of f.quarantined) receipt.warnings.push(`spooled snapshot ${q.snapshot_id} does not verify, set aside ${q.earlier ? "by an earlier run " : ""}(not uploaded, not deleted) in ${q.path}: ${q.problem}`);
    receipt.warnings.push(...f.warnings);
  }
  return receipt;
}

/**
 * The backup into the target's repository or, when it is unreachable (before or during the backup), into its spool.
 * @returns the receipt, and whether it was committed in the repository itself (`reached`)
 */
async function backupInto(lc: LoadedConfig, a: AgentRef, o: SpoolingBackupOptions, t: BackupTarget): Promise<{ receipt: BackupReceipt; reached: boolean }> {
  // a folder repository is written directly: what fails, fails the backup
  const landed: Landed = {};
  try {
    if (t.unreachable) throw t.unreachable;
    return { receipt: await runBackup(lc, { ...o, repo: t.remote!, sequenceFloor: t.remoteFloor, landed }), reached: true };
  } catch (e) {
    const spool = t.spool;
    if (!spool || !hasCause(e, UnreachableError)) throw e;
    // committed, then the repository went away (its audit entry or the lock's release failed): the snapshot is there,
    // and a second one in the spool would be a duplicate reported as the only one
    if (landed.path) {
      const r = landed.receipt!;
      return { receipt: { ...r, path: landed.path, warnings: [...r.warnings, `snapshot ${r.snapshot_id} is committed in ${o.location}; then the repository became unreachable (${(e as Error).message}), so its audit entry or lock release may be missing`] }, reached: false };
    }
    if (!downUntil.has(o.location) || downUntil.get(o.location)! <= Date.now()) downUntil.set(o.location, Date.now() + RETRY_AFTER_MS);
    const known = o.idempotencyKey ? await remoteReceipt<BackupReceipt>(spool, a, o.idempotencyKey) : undefined;
    if (known) return { receipt: replay(known, o), reached: false };
    // into the spool every file goes into the payload: its flush uploads bundles, not chunks
    const r = await runBackup(lc, { ...o, repo: spool, sequenceFloor: t.floor, chunks: false }).catch((x: unknown) => {
      // the spool is this host's own folder: its failure (read-only, immutable, full) is named as the spool's
      throw wrap(x, `repository ${o.location} is unreachable (${(e as Error).message}), and spooling the backup into ${spool.location} failed; nothing was committed or spooled (what was spooled before stays there)`);
    });
    const note = `repository ${o.location} is unreachable (${(e as Error).message}); the signed bundle waits in ${spool.location} for the next backup or "agentbak flush"`;
    return { receipt: { ...r, status: "spooled", warnings: [...r.warnings, note] }, reached: false };
  }
}
