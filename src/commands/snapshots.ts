/** `agentbak snapshots`: what the repository holds and what is restorable. */
import { catalogEntry, type CatalogEntry } from "../repository/repository.js";
import { context, type GlobalOpts } from "./context.js";

export interface SnapshotsOptions extends GlobalOpts {
  agent?: string;
  tenant?: string;
}

export async function snapshots(opts: SnapshotsOptions): Promise<CatalogEntry[]> {
  const ctx = context(opts);
  return (await (await ctx.repository()).list(ctx.trust, ctx.agentFilter(opts))).map(catalogEntry);
}
