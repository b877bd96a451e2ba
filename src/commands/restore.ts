/** `agentbak restore`: verified, policy-checked, approved restore into an empty folder. */
import type { IntegrityPolicy } from "../bundle/extract.js";
import { usageError } from "../errors.js";
import { runRestore, type RestoreResult } from "../restore/apply.js";
import type { RestorePlan } from "../restore/plan.js";
import { context, type GlobalOpts } from "./context.js";
import { parseDuration } from "./duration.js";
import type { Progress } from "../progress.js";

export interface RestoreCmdOptions extends GlobalOpts {
  target: string;
  identity?: string;
  dryRun?: boolean;
  yes?: boolean;
  allowRollback?: boolean;
  allowOtherAgent?: boolean;
  allowRuntimeChange?: boolean;
  agent?: string;
  tenant?: string;
  requestId?: string;
  before?: string;
  source?: string[];
  allowNonemptySource?: string[];
  allowEmbeddingChange?: boolean;
  wait?: string;
  integrity?: IntegrityPolicy;
  confirm: (plan: RestorePlan) => Promise<boolean>;
  progress?: Progress;
}

/** Parses --before. @throws AgentbakError(2) when it is not a time. */
export function parseBefore(s: string | undefined): Date | undefined {
  if (s === undefined) return undefined;
  const d = new Date(s);
  if (Number.isNaN(d.getTime())) throw usageError(`--before: not a timestamp: ${s}`);
  return d;
}

export async function restore(ref: string, opts: RestoreCmdOptions): Promise<RestoreResult> {
  const ctx = context(opts);
  const f = ctx.agentFilter(opts);
  const bundle = await ctx.openRef(ref, { ...f, before: parseBefore(opts.before), allowRollback: opts.allowRollback });
  try {
    return await runRestore({
      bundle,
      target: opts.target,
      // the repository keeps generations, request ids, the lock and the receipt, wherever the bundle came from
      repo: await ctx.maybeRepository(),
      lc: ctx.lc,
      trust: ctx.trust,
      identities: () => ctx.identities(opts.identity),
      signingKey: () => ctx.maybeSigningKey(),
      dryRun: opts.dryRun,
      approve: async (plan) => (opts.yes ? true : opts.confirm(plan)),
      allowRollback: opts.allowRollback,
      allowOtherAgent: opts.allowOtherAgent,
      allowRuntimeChange: opts.allowRuntimeChange,
      expectAgent: f.agent,
      expectTenant: f.tenant,
      requestId: opts.requestId,
      sources: opts.source,
      allowNonEmptySource: opts.allowNonemptySource,
      allowEmbeddingChange: opts.allowEmbeddingChange,
      waitMs: opts.wait ? parseDuration(opts.wait) : 0,
      integrity: opts.integrity,
      progress: opts.progress,
    });
  } finally {
    bundle.release();
  }
}
