/** `agentbak snapshots`: what the repository holds and what is restorable, and whether the newest is within the RPO. */
import { catalogEntry, type CatalogEntry } from "../repository/repository.js";
import { rpoWarning } from "../repository/retention.js";
import { context, type GlobalOpts } from "./context.js";

export interface SnapshotsOptions extends GlobalOpts {
  agent?: string;
  tenant?: string;
}

export async function snapshots(opts: SnapshotsOptions): Promise<{ entries: CatalogEntry[]; warnings: string[] }> {
  const ctx = context(opts);
  const f = ctx.agentFilter(opts);
  const entries = (await (await ctx.repository()).list(ctx.trust, f)).map(catalogEntry);
  const cfg = ctx.lc?.config;
  const rpo = cfg?.objectives?.rpoMinutes;
  // the objective is the config's agent's
  const mine = entries.filter((e) => e.agent_id === cfg?.agent.id && e.tenant === cfg?.agent.tenant);
  const w = rpo !== undefined && f.agent === cfg?.agent.id ? rpoWarning(mine, `${cfg!.agent.tenant}/${cfg!.agent.id}`, rpo, new Date()) : null;
  return { entries, warnings: w ? [w] : [] };
}
