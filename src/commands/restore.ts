/** `agentbak restore`: verified, policy-checked, approved restore into an empty folder. */

import { loadIdentities, loadSigningKey } from "../crypto/keys.js";
import { runRestore, type RestoreResult } from "../restore/apply.js";
import type { RestorePlan } from "../restore/plan.js";
import { openRepository } from "../repository/local.js";
import { openRecords } from "../repository/records.js";
import { usageError } from "../errors.js";
import { context, localRef, type GlobalOpts } from "./common.js";

export interface RestoreCmdOptions extends GlobalOpts {
  target: string;
  identity?: string;
  dryRun?: boolean;
  yes?: boolean;
  allowRollback?: boolean;
  allowOtherAgent?: boolean;
  agent?: string;
  tenant?: string;
  requestId?: string;
  before?: string;
  confirm: (plan: RestorePlan) => Promise<boolean>;
}

export async function restore(ref: string, opts: RestoreCmdOptions): Promise<RestoreResult> {
  const isFile = ref.endsWith(".agentbak") || ref.includes("/");
  const ctx = context(opts, !isFile || Boolean(opts.repo || process.env.AGENTBAK_REPOSITORY || opts.config));
  let before: Date | undefined;
  if (opts.before) {
    before = new Date(opts.before);
    if (Number.isNaN(before.getTime())) throw usageError(`--before: not a timestamp: ${opts.before}`);
  }
  const l = await localRef(ctx, ref, opts.agent ?? ctx.lc?.config.agent.id);
  try {
    return await runRestore({
    ref: l.ref,
    target: opts.target,
    repo: ctx.repoPath && !ctx.remote ? openRepository(ctx.repoPath) : undefined,
    records: ctx.repoPath ? await openRecords(ctx.repoPath) : undefined,
    lc: ctx.lc,
    trust: ctx.trust,
    identities: () => loadIdentities(opts.identity),
    signingKey: () => {
      try {
        return loadSigningKey(ctx.lc?.config.signing.key ? ctx.lc.resolve(ctx.lc.config.signing.key) : undefined);
      } catch {
        return null;
      }
    },
    dryRun: opts.dryRun,
    approve: async (plan) => (opts.yes ? true : opts.confirm(plan)),
    allowRollback: opts.allowRollback,
    allowOtherAgent: opts.allowOtherAgent,
    expectAgent: opts.agent,
    expectTenant: opts.tenant,
    requestId: opts.requestId,
    before,
  });
  } finally {
    l.done();
  }
}
