/** `agentbak activate` and `agentbak fence check`: lifting a restored agent's suspension, and fencing checks. */
import { usageError } from "../errors.js";
import { activate as lift, fenceCheck, type ActivateResult, type ActivationCheck, type FenceResult } from "../restore/activate.js";
import { readTargetRecord } from "../restore/state.js";
import { context } from "./context.js";

/**
 * The context of a command about a restored target: its config is the one
 * named (-c, AGENTBAK_CONFIG), else the one the restore ran with.
 */
export const targetContext = (target: string, config?: string) => context({ config: config ?? process.env.AGENTBAK_CONFIG ?? readTargetRecord(target).config ?? undefined });

export interface ActivateCmdOptions {
  target: string;
  config?: string;
  repo?: string;
  yes?: boolean;
  acceptUnresolved?: boolean;
  reason?: string;
  isolated?: boolean;
  confirm: (c: ActivationCheck) => Promise<boolean>;
}

export async function activate(opts: ActivateCmdOptions): Promise<ActivateResult> {
  if (opts.reason !== undefined && !opts.acceptUnresolved) throw usageError("--reason goes with --accept-unresolved");
  if (opts.acceptUnresolved && !opts.reason?.trim()) throw usageError("--accept-unresolved needs --reason TEXT: why the unresolved operations are accepted");
  const ctx = targetContext(opts.target, opts.config);
  return lift(opts.target, {
    repo: opts.repo,
    signingKey: ctx.maybeSigningKey(),
    lc: ctx.lc,
    acceptUnresolved: opts.acceptUnresolved ? opts.reason : undefined,
    isolated: opts.isolated,
    confirm: async (c) => opts.yes || opts.confirm(c),
  });
}

export async function fence(opts: { target: string; generation: string; repo?: string }): Promise<FenceResult> {
  const n = Number(opts.generation);
  if (!Number.isSafeInteger(n) || n < 0) throw usageError(`--generation: not a whole number: ${opts.generation}`);
  return fenceCheck(opts.target, n, opts.repo);
}
