/** `agentbak reconcile`: ask the outside world about a restored agent's open operations and record the outcomes. */
import { usageError } from "../errors.js";
import { reconcileTarget, type ReconcileResult } from "../restore/reconcile.js";
import { targetContext } from "./activate.js";

/**
 * A command probe runs as agentbak's user: it can read /proc/$PPID/environ, the environment agentbak was started
 * with, which no scrubbing of its own environment hides (docs/security.md).
 */
export const PROBE_SEES_IDENTITY =
  "AGENTBAK_IDENTITY is in agentbak's environment and a command probe ran as the same user: it can read it from /proc/<agentbak's pid>/environ; pass the identity by file (--identity, AGENTBAK_IDENTITY_FILE) instead, or run the probe as another user (docs/security.md)";

export async function reconcile(opts: { target: string; config?: string; repo?: string }): Promise<ReconcileResult & { warnings: string[] }> {
  const { ctx, target } = targetContext(opts.target, opts.config);
  if (!ctx.lc) throw usageError("reconcile needs the agent's config (its reconcile section): pass -c FILE");
  // its record is signed, or activate would not trust it: no key, no reconciliation (12)
  const r = await reconcileTarget(target, ctx.lc, opts.repo, ctx.signingKey());
  const exposed = r.probed > 0 && "command" in (ctx.lc.config.reconcile?.probe ?? {}) && process.env.AGENTBAK_IDENTITY !== undefined;
  return { ...r, warnings: exposed ? [PROBE_SEES_IDENTITY] : [] };
}
