/** `agentbak reconcile`: ask the outside world about a restored agent's open operations and record the outcomes. */
import { usageError } from "../errors.js";
import { reconcileTarget, type ReconcileResult } from "../restore/reconcile.js";
import { targetContext } from "./activate.js";

export async function reconcile(opts: { target: string; config?: string; repo?: string }): Promise<ReconcileResult> {
  const { ctx, target } = targetContext(opts.target, opts.config);
  if (!ctx.lc) throw usageError("reconcile needs the agent's config (its reconcile section): pass -c FILE");
  // its record is signed, or activate would not trust it: no key, no reconciliation (12)
  return reconcileTarget(target, ctx.lc, opts.repo, ctx.signingKey());
}
