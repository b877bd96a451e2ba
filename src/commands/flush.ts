/** `agentbak flush`: upload the bundles spooled while a repository was unreachable. */
import { Repository } from "../repository/repository.js";
import { allSpools, flushSpool, openSpool, spools, type FlushResult } from "../repository/spool.js";
export { markReported } from "../repository/spool.js";
import { context, type GlobalOpts } from "./context.js";

/**
 * Flushes the spool of the repository named (flag, environment or config), or every spool in AGENTBAK_HOME.
 * @throws UnreachableError while a repository is still down (what was flushed stays flushed).
 */
export async function flush(opts: GlobalOpts): Promise<FlushResult[]> {
  const ctx = context(opts);
  const named = ctx.repoLocation && spools(ctx.repoLocation) ? [{ remote: ctx.repoLocation, spool: await openSpool(ctx.home, ctx.repoLocation) }] : null;
  const out: FlushResult[] = [];
  for (const { remote, spool } of named ?? (await allSpools(ctx.home))) {
    out.push(await flushSpool(spool, await Repository.open(remote), ctx.trust, { signingKey: ctx.maybeSigningKey() }));
  }
  return out;
}
