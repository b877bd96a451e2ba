/** `agentbak snapshots`: what the repository holds and what is restorable. */
import { catalog, type CatalogEntry } from "../repository/catalog.js";
import { context, type GlobalOpts } from "./common.js";

export interface SnapshotsOptions extends GlobalOpts {
  agent?: string;
}

export async function snapshots(opts: SnapshotsOptions): Promise<CatalogEntry[]> {
  const ctx = context(opts);
  return catalog(ctx.repo(), ctx.trust, opts.agent ?? ctx.lc?.config.agent.id);
}
