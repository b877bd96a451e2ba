/**
 * The backup stage, a forward pipeline of small stages, each in its own file:
 * unchanged? (unchanged.ts) → lock → parent (parent.ts) → read plan (plan.ts) →
 * the instant between the hooks: databases, sources, files, workspace (instant.ts,
 * databases.ts, sources.ts, files.ts, workspace.ts, hooks.ts) → payload beside the
 * inspection (databases.ts) → manifest (one pure function) → signed bundle →
 * published through the repository. This file holds the steps up to the unchanged check; take.ts the rest,
 * loaded only when a snapshot is taken.
 */
import type { LoadedConfig } from "../config/load.js";
import { fingerprint } from "../crypto/sshsig.js";
import { crashStep } from "../crashpoint.js";
import { removeOnInterrupt, removeTree } from "../cleanup.js";
import { AgentbakError, Exit, usageError } from "../errors.js";
import { type AgentRef, hasUnsafeText } from "../facts.js";
import { listFiles, readableFiles } from "./files.js";
import { replay, type BackupOptions, type BackupReceipt } from "./receipt.js";
import { otherState, unchangedSince } from "./unchanged.js";

export { replay, type BackupOptions, type BackupReceipt, type Landed } from "./receipt.js";

/**
 * Runs one backup of the configured agent.
 * @throws AgentbakError: 10 repository/database missing, 11 locked, 13 snapshot failed integrity_check, 14 secrets or refused dirty workspace, 1 hook failures;
 *   ConflictError (2) when the idempotency key was first used with another label or incremental choice.
 */
export async function runBackup(lc: LoadedConfig, o: BackupOptions): Promise<BackupReceipt> {
  // a label is shown in listings and logs: a line break, escape sequence or bidi control there could forge a row
  if (o.label !== undefined && (hasUnsafeText(o.label) || o.label.length > 200))
    throw usageError("--label: at most 200 characters, none of them control characters, escape sequences or Unicode bidi/format controls");
  const cfg = lc.config;
  const a: AgentRef = { tenant: cfg.agent.tenant, agent: cfg.agent.id };
  const repoDir = o.repo.store.inPlace ? o.repo.location : null;
  // before the lease: an agent whose state did not change costs reads only, no lease grant written (docs/fleet.md)
  const { listed, other, last } = await unchanged(lc, o, a, repoDir);
  if (last) return { ...last.receipt, repeated: false, status: "unchanged", warnings: [] };
  const lock = await o.repo.lock(a, "agent", o.waitMs ?? 0);
  const staging = o.repo.store.tempDir(`backup-${a.agent}`);
  const unregister = removeOnInterrupt(staging);
  try {
    crashStep("locked");
    await o.repo.sweep(a);
    if (o.idempotencyKey) {
      const prior = await o.repo.idempotent<BackupReceipt>(a, o.idempotencyKey, o.trust);
      if (prior) return replay(prior, o);
    }
    // the capture's modules (SQLite, the bundle writer, the inspection, git's capture) load only now: a backup that
    // finds nothing changed never compiles them
    const { takeSnapshot } = await import("./take.js");
    return await takeSnapshot(lc, o, a, { staging, repoDir, listed, other });
  } catch (e) {
    // a repository renamed, deleted or unmounted under the run failed it at whatever step came next: say that (10)
    await o.repo.recheck().catch((gone: unknown) => {
      if (gone instanceof AgentbakError && gone.code === Exit.notFound) throw gone;
    });
    throw e;
  } finally {
    removeTree(staging);
    unregister();
    await lock.release();
  }
}

/**
 * Whether nothing changed since this host's last snapshot, which is still the newest and far from expiring (then no
 * bundle is written). Without hooks nothing can change what the `files` patterns name before the capture: they are
 * listed once, here, and the capture takes that list.
 * @returns the files listed (or null: the capture lists them after the pre hook), the state's fingerprint without
 *   the databases (or null: not skippable), and the last backup when it holds this very state
 */
async function unchanged(lc: LoadedConfig, o: BackupOptions, a: AgentRef, repoDir: string | null) {
  const cfg = lc.config;
  const skippable = o.skipUnchanged && !o.label && !o.idempotencyKey && !cfg.hooks.pre.length && !cfg.hooks.post.length && !cfg.sources.length;
  const listed = skippable ? listFiles(lc, repoDir) : null;
  const other = listed ? await otherState(lc, readableFiles(lc, listed), fingerprint(o.signingKey.publicKey)).catch(() => null) : null;
  const last = other ? await unchangedSince<BackupReceipt>(lc, o.repo, o.home, a, other) : null;
  return { listed, other, last };
}
