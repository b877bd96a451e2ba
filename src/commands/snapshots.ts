/** `agentbak snapshots`: what the repository holds and what is restorable. */
import { catalog, type CatalogEntry } from "../repository/catalog.js";
import { context, type GlobalOpts } from "./common.js";

export interface SnapshotsOptions extends GlobalOpts {
  agent?: string;
}

export async function snapshots(opts: SnapshotsOptions): Promise<CatalogEntry[]> {
  const ctx = context(opts);
  const agent = opts.agent ?? ctx.lc?.config.agent.id;
  if (ctx.remote) {
    const { openStore } = await import("../repository/store.js");
    const { remoteCatalog } = await import("../repository/remote.js");
    return remoteCatalog(await openStore(ctx.repoPath), ctx.trust, agent);
  }
  return catalog(ctx.repo(), ctx.trust, agent);
}
