/** `agentbak backup`: one signed, encrypted snapshot of the configured agent. */
import type { BackupReceipt } from "../capture/backup.js";
import { backupOrSpool } from "../capture/spool.js";
import { usageError } from "../errors.js";
import { parseDuration } from "./duration.js";
import { context, type GlobalOpts } from "./context.js";
import type { Progress } from "../progress.js";

export interface BackupCmdOptions extends GlobalOpts {
  idempotencyKey?: string;
  label?: string;
  wait?: string;
  incremental?: boolean;
  skipIfUnchanged?: boolean;
  /** false (--no-stat-cache): the unchanged check hashes every file */
  statCache?: boolean;
  principal?: string;
  progress?: Progress;
}

export async function backup(opts: BackupCmdOptions): Promise<BackupReceipt> {
  const ctx = context(opts);
  if (!ctx.lc) throw usageError("backup needs a config: pass -c FILE or create ./agentbak.json (agentbak init)");
  const key = ctx.signingKey();
  return backupOrSpool(ctx.lc, {
    location: ctx.repoLocation!,
    repositories: ctx.repositories,
    trust: ctx.trust,
    home: ctx.home,
    signingKey: key,
    principal: opts.principal ?? (key.comment || "agentbak"),
    idempotencyKey: opts.idempotencyKey,
    label: opts.label,
    waitMs: opts.wait ? parseDuration(opts.wait) : 0,
    incremental: opts.incremental,
    skipUnchanged: opts.skipIfUnchanged,
    statCache: opts.statCache,
    progress: opts.progress,
  });
}
