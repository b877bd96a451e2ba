/** `agentbak snapshots`: what the repository holds and what is restorable, and whether the newest is within the RPO. */
import { usageError } from "../errors.js";
import { selectEntries, type CatalogEntry } from "../repository/repository.js";
import { rpoWarning } from "../repository/retention.js";
import { checkIds, context, type GlobalOpts } from "./context.js";

export interface SnapshotsOptions extends GlobalOpts {
  all?: boolean;
  fresh?: boolean;
  agent?: string;
  tenant?: string;
  label?: string;
  latest?: string;
}

/**
 * Lists the snapshots of the agent (flags, then config), oldest first, and warns when the config's agent's newest
 * verified snapshot is older than its RPO; with --all every agent's (of --tenant's). @throws AgentbakError(2) for a bad
 * --latest or --all with --agent, (10) without a repository.
 */
export async function snapshots(opts: SnapshotsOptions): Promise<{ entries: CatalogEntry[]; warnings: string[] }> {
  const latest = opts.latest === undefined ? undefined : Number(opts.latest);
  if (latest !== undefined && (!Number.isSafeInteger(latest) || latest < 1)) throw usageError(`--latest: not a positive whole number: ${opts.latest}`);
  if (opts.all && opts.agent) throw usageError("--all lists every agent: pass --all or --agent, not both");
  const ctx = context(opts);
  if (opts.all) checkIds({ tenant: opts.tenant });
  const f = opts.all ? { tenant: opts.tenant } : ctx.agentFilter(opts);
  const all = await (await ctx.repository()).entries(ctx.trust, f, new Date(), { fresh: opts.fresh, signer: ctx.maybeSigningKey() });
  const cfg = ctx.lc?.config;
  const rpo = cfg?.objectives?.rpoMinutes;
  // the objective is the config's agent's, judged on all its snapshots whatever the filters show
  const mine = all.filter((e) => e.agent_id === cfg?.agent.id && e.tenant === cfg?.agent.tenant);
  const w = rpo !== undefined && f.agent === cfg?.agent.id ? rpoWarning(mine, `${cfg!.agent.tenant}/${cfg!.agent.id}`, rpo, new Date()) : null;
  return { entries: selectEntries(all, { label: opts.label, latest }), warnings: w ? [w] : [] };
}
