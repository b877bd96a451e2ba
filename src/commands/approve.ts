/** `agentbak approve` and `agentbak deny`: an operator's decision on a restore request an agent made. */
import { approveRequest, denyRequest, listRequests, localActor, type RequestStatus } from "../restore/request.js";
import type { RestoreResult } from "../restore/apply.js";
import type { RestorePlan } from "../restore/plan.js";
import { usageError } from "../errors.js";
import { agentOf, context, type GlobalOpts } from "./context.js";

export interface DecisionOptions extends GlobalOpts {
  agent?: string;
  tenant?: string;
  yes?: boolean;
}

export interface ApproveOptions extends DecisionOptions {
  target?: string;
  identity?: string;
  allowRollback?: boolean;
  /** shows the plan and asks on a TTY (the cli's prompt; never called with --yes) */
  confirm: (plan: RestorePlan, r: RequestStatus) => Promise<boolean>;
}

/**
 * Approves a request and runs the restore it asks for.
 * @throws AgentbakError(12) without a signing key: the decision and the outcome are signed records.
 */
export async function approve(id: string, opts: ApproveOptions): Promise<{ request: RequestStatus; restore: RestoreResult }> {
  const ctx = context(opts);
  const repo = await ctx.repository();
  return approveRequest(repo, await agentOf(ctx, opts), id, {
    target: opts.target,
    lc: ctx.lc,
    trust: ctx.trust,
    identities: () => ctx.identities(opts.identity),
    signingKey: ctx.signingKey(),
    by: localActor(),
    allowRollback: opts.allowRollback,
    confirm: async (plan, r) => opts.yes || opts.confirm(plan, r),
  });
}

/** Denies a request; the agent sees the reason. @throws AgentbakError(12) without a signing key (the decision is signed). */
export async function deny(id: string, opts: DecisionOptions & { reason?: string; confirm: (r: RequestStatus) => Promise<boolean> }): Promise<{ request: RequestStatus; repeated: boolean }> {
  if (!opts.reason?.trim()) throw usageError("deny needs --reason TEXT (the agent is told why)");
  const ctx = context(opts);
  const repo = await ctx.repository();
  return denyRequest(repo, await agentOf(ctx, opts), id, { reason: opts.reason, by: localActor(), trust: ctx.trust, signingKey: ctx.signingKey(), confirm: async (r) => opts.yes || opts.confirm(r) });
}

/** The agent's restore requests, oldest first (for an operator looking for what is pending). */
export async function requests(opts: DecisionOptions & { all?: boolean }): Promise<RequestStatus[]> {
  const ctx = context(opts);
  const all = await listRequests(await ctx.repository(), ctx.trust, await agentOf(ctx, opts));
  return opts.all ? all : all.filter((r) => r.status === "pending" || r.status === "approved" || r.status === "failed");
}
