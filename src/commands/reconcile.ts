/** `agentbak reconcile`: ask the outside world about a restored agent's open operations and record the outcomes. */
import { usageError } from "../errors.js";
import { reconcileTarget, type ReconcileResult } from "../restore/reconcile.js";
import { targetContext } from "./activate.js";

export async function reconcile(opts: { target: string; config?: string; repo?: string }): Promise<ReconcileResult> {
  const ctx = targetContext(opts.target, opts.config);
  if (!ctx.lc) throw usageError("reconcile needs the agent's config (its reconcile section): pass -c FILE");
  return reconcileTarget(opts.target, ctx.lc, opts.repo, ctx.maybeSigningKey());
}
