/** `agentbak backup`: one signed, encrypted snapshot of the configured agent. */
import { usageError } from "../errors.js";
import { loadSigningKey } from "../crypto/keys.js";
import { runBackup, type BackupReceipt } from "../snapshot/backup.js";
import { parseDuration } from "./duration.js";
import { context, type GlobalOpts } from "./common.js";

export interface BackupCmdOptions extends GlobalOpts {
  idempotencyKey?: string;
  label?: string;
  wait?: string;
  incremental?: boolean;
  principal?: string;
  progress?: (phase: string) => void;
}

export async function backup(opts: BackupCmdOptions): Promise<BackupReceipt> {
  const ctx = context(opts);
  if (!ctx.lc) throw usageError("backup needs a config: pass -c FILE or create ./agentbak.json (agentbak init)");
  const key = loadSigningKey(ctx.lc.config.signing.key ? ctx.lc.resolve(ctx.lc.config.signing.key) : undefined);
  const run = {
    trust: ctx.trust,
    signingKey: key,
    principal: opts.principal ?? (key.comment || "agentbak"),
    idempotencyKey: opts.idempotencyKey,
    label: opts.label,
    waitMs: opts.wait ? parseDuration(opts.wait) : 0,
    incremental: opts.incremental,
    progress: opts.progress,
  };
  if (ctx.remote) {
    const { openStore } = await import("../repository/store.js");
    const { runRemoteBackup } = await import("../snapshot/remote-backup.js");
    return runRemoteBackup(ctx.lc, await openStore(ctx.repoPath), run);
  }
  return runBackup(ctx.lc, { ...run, repo: ctx.repoPath });
}
