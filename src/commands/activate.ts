/** `agentbak activate` and `agentbak fence check`: lifting a restored agent's suspension, and fencing checks. */
import { loadTrust } from "../crypto/trust.js";
import { usageError, wrap } from "../errors.js";
import { activate as lift, fenceCheck, type ActivateResult, type ActivationCheck, type FenceResult } from "../restore/activate.js";
import { openTarget, type Target } from "../restore/state.js";
import { context, type Context } from "./context.js";
import { agentbakHome } from "../home.js";

/**
 * A restored target and the context of a command about it. Its restore record
 * must be signed by a trusted key: the signers of the config named (-c,
 * AGENTBAK_CONFIG), else AGENTBAK_HOME's allowed_signers — never a config the
 * record itself names, which is believed only once the signature holds. The
 * config is the one named, else the one the restore ran with.
 * @throws AgentbakError(10) not a restored target, (13) its record unsigned, edited or signed by a key not trusted.
 */
export function targetContext(dir: string, config?: string): { ctx: Context; target: Target } {
  const named = config ?? process.env.AGENTBAK_CONFIG;
  const first = named ? context({ config: named }) : undefined;
  const target = openTarget(dir, first?.trust ?? homeTrust());
  return { ctx: first ?? context({ config: target.record.config ?? undefined }), target };
}

function homeTrust() {
  try {
    return loadTrust(agentbakHome());
  } catch (e) {
    throw wrap(e, "allowed_signers");
  }
}

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
  const { ctx, target } = targetContext(opts.target, opts.config);
  return lift(target, {
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
  return fenceCheck(opts.target, n, homeTrust(), opts.repo);
}
