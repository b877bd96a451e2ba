/** `agentbak forget`: retention rules; `--prune` also removes leftovers. */
import { usageError } from "../errors.js";
import { forget as runForget, type ForgetResult } from "../repository/forget.js";
import type { RetentionPolicy } from "../repository/retention.js";
import { parseDuration } from "./duration.js";
import { context, type GlobalOpts } from "./common.js";

export interface ForgetOptions extends GlobalOpts {
  agent?: string;
  keepLast?: string;
  keepHourly?: string;
  keepDaily?: string;
  keepWeekly?: string;
  keepMonthly?: string;
  keepYearly?: string;
  keepWithin?: string;
  dryRun?: boolean;
  prune?: boolean;
  wait?: string;
}

const count = (flag: string, v?: string) => {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < 1) throw usageError(`${flag}: not a positive whole number: ${v}`);
  return n;
};

export async function forget(opts: ForgetOptions): Promise<ForgetResult> {
  const ctx = context(opts);
  const agent = opts.agent ?? ctx.lc?.config.agent.id;
  if (!agent) throw usageError("which agent? pass --agent or a config");
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
  const anyFlag = Object.values(flags).some((v) => v !== undefined);
  const policy: RetentionPolicy = anyFlag
    ? flags
    : { last: r?.keepLast, hourly: r?.keepHourly, daily: r?.keepDaily, weekly: r?.keepWeekly, monthly: r?.keepMonthly, yearly: r?.keepYearly };
  if (ctx.remote) {
    const { openStore } = await import("../repository/store.js");
    const { remoteLock } = await import("../repository/remote.js");
    const { forgetRemote } = await import("../repository/remote-forget.js");
    const store = await openStore(ctx.repoPath);
    const rl = await remoteLock(store, `agent-${agent}`, opts.wait ? parseDuration(opts.wait) : 0);
    try {
      return await forgetRemote(store, ctx.trust, agent, policy, { dryRun: opts.dryRun, prune: opts.prune });
    } finally {
      await rl.release();
    }
  }
  const repo = ctx.repo();
  // the same lock as backup: forget --prune and backup never interleave
  const lock = await repo.lock(`agent-${agent}`, opts.wait ? parseDuration(opts.wait) : 0);
  try {
    return await runForget(repo, ctx.trust, agent, policy, { dryRun: opts.dryRun, prune: opts.prune });
  } finally {
    lock.release();
  }
}
