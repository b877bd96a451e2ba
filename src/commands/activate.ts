/** `agentbak activate` and `agentbak fence check`: lifting a restored agent's suspension, and fencing checks. */
import { usageError } from "../errors.js";
import { activate as lift, fenceCheck, type ActivateResult, type FenceResult } from "../restore/activate.js";
import type { TargetRecord } from "../restore/state.js";
import { context } from "./context.js";

export async function activate(opts: { target: string; repo?: string; yes?: boolean; confirm: (r: TargetRecord) => Promise<boolean> }): Promise<ActivateResult> {
  const ctx = context({});
  return lift(opts.target, opts.repo, ctx.maybeSigningKey(), async (rec) => opts.yes || opts.confirm(rec));
}

export async function fence(opts: { target: string; generation: string; repo?: string }): Promise<FenceResult> {
  const n = Number(opts.generation);
  if (!Number.isSafeInteger(n) || n < 0) throw usageError(`--generation: not a whole number: ${opts.generation}`);
  return fenceCheck(opts.target, n, opts.repo);
}
