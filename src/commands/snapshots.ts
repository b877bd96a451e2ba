/** `agentbak snapshots`: what the repository holds and what is restorable. */
import { usageError } from "../errors.js";
import { catalogEntry, selectEntries, type CatalogEntry } from "../repository/repository.js";
import { context, type GlobalOpts } from "./context.js";

export interface SnapshotsOptions extends GlobalOpts {
  agent?: string;
  tenant?: string;
  label?: string;
  latest?: string;
}

/** Lists the snapshots of the agent (flags, then config), oldest first. @throws AgentbakError(2) for a bad --latest, (10) without a repository. */
export async function snapshots(opts: SnapshotsOptions): Promise<CatalogEntry[]> {
  const latest = opts.latest === undefined ? undefined : Number(opts.latest);
  if (latest !== undefined && (!Number.isSafeInteger(latest) || latest < 1)) throw usageError(`--latest: not a positive whole number: ${opts.latest}`);
  const ctx = context(opts);
  const list = (await (await ctx.repository()).list(ctx.trust, ctx.agentFilter(opts))).map(catalogEntry);
  return selectEntries(list, { label: opts.label, latest });
}
