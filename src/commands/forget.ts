/** `agentbak forget`: retention rules; `--prune` also removes leftovers. */
import { usageError } from "../errors.js";
import { forget as runForget, type ForgetResult } from "../repository/forget.js";
import type { RetentionPolicy } from "../repository/retention.js";
import { parseDuration } from "./duration.js";
import { agentOf, context, type GlobalOpts } from "./context.js";

export interface ForgetOptions extends GlobalOpts {
  agent?: string;
  tenant?: string;
  keepLast?: string;
  keepHourly?: string;
  keepDaily?: string;
  keepWeekly?: string;
  keepMonthly?: string;
  keepYearly?: string;
  keepWithin?: string;
  dryRun?: boolean;
  prune?: boolean;
  pruneGrace?: string;
  wait?: string;
}

const count = (flag: string, v?: string) => {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < 1) throw usageError(`${flag}: not a positive whole number: ${v}`);
  return n;
};

/** Applies retention to the agent's snapshots. @returns the result, with each snapshot retention refused to remove as a warning. */
export async function forget(opts: ForgetOptions): Promise<ForgetResult & { warnings: string[] }> {
  const ctx = context(opts);
  const r = ctx.lc?.config.retention;
  const flags: RetentionPolicy = {
    last: count("--keep-last", opts.keepLast),
    hourly: count("--keep-hourly", opts.keepHourly),
    daily: count("--keep-daily", opts.keepDaily),
    weekly: count("--keep-weekly", opts.keepWeekly),
    monthly: count("--keep-monthly", opts.keepMonthly),
    yearly: count("--keep-yearly", opts.keepYearly),
    within: opts.keepWithin ? parseDuration(opts.keepWithin) : undefined,
  };
  const policy: RetentionPolicy = Object.values(flags).some((v) => v !== undefined)
    ? flags
    : { last: r?.keepLast, hourly: r?.keepHourly, daily: r?.keepDaily, weekly: r?.keepWeekly, monthly: r?.keepMonthly, yearly: r?.keepYearly };
  const repo = await ctx.repository();
  const a = await agentOf(ctx, opts);
  // the same lock as backup: forget --prune and backup never interleave
  const lock = await repo.lock(a, "agent", opts.wait ? parseDuration(opts.wait) : 0);
  try {
    const graceMs = opts.pruneGrace !== undefined ? parseDuration(opts.pruneGrace) : undefined;
    const r = await runForget(repo, ctx.trust, a, policy, { dryRun: opts.dryRun, prune: opts.prune, graceMs, signingKey: ctx.maybeSigningKey() });
    const warnings = r.not_removed.map((n) => `not removed ${n.snapshot_id}: ${n.reason}`);
    if (r.chunks && "skipped" in r.chunks) warnings.push(`chunks not swept: ${r.chunks.skipped}`);
    return { ...r, warnings };
  } finally {
    await lock.release();
  }
}
