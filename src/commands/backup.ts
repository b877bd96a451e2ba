/** `agentbak backup`: one signed, encrypted snapshot of the configured agent. */
import { runBackup, type BackupReceipt } from "../capture/backup.js";
import { usageError } from "../errors.js";
import { hostWatermark, raiseBackupWatermark } from "../restore/state.js";
import { parseDuration } from "./duration.js";
import { context, type GlobalOpts } from "./context.js";

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
  const key = ctx.signingKey();
  const a = { tenant: ctx.lc.config.agent.tenant, agent: ctx.lc.config.agent.id };
  const receipt = await runBackup(ctx.lc, {
    repo: await ctx.repository(),
    trust: ctx.trust,
    home: ctx.home,
    signingKey: key,
    principal: opts.principal ?? (key.comment || "agentbak"),
    idempotencyKey: opts.idempotencyKey,
    label: opts.label,
    waitMs: opts.wait ? parseDuration(opts.wait) : 0,
    incremental: opts.incremental,
    progress: opts.progress,
    sequenceFloor: hostWatermark(a),
  });
  raiseBackupWatermark(a, receipt.sequence);
  return receipt;
}
