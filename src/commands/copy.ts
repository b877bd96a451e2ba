/** `agentbak copy`: replicate signed bundles between repositories, verifying each before it is sent and on arrival. */
import { resolve } from "node:path";
import { isInside } from "../fsutil.js";
import { placeError, usageError } from "../errors.js";
import { Repository } from "../repository/repository.js";
import { replicate, type CopyResult } from "../repository/replicate.js";
import { isUrl } from "../storage/open.js";
import { checkIds, context } from "./context.js";
import type { Progress } from "../progress.js";

export async function copy(opts: { from: string; to: string; snapshots: string[]; agent?: string; tenant?: string; progress?: Progress }): Promise<CopyResult> {
  checkIds(opts);
  const ctx = context({});
  const loc = (p: string) => (isUrl(p) ? p : resolve(p));
  const from = loc(opts.from);
  const to = loc(opts.to);
  // a copy inside its own source would be read back by the next listing of it
  if (!isUrl(from) && !isUrl(to) && isInside(to, from)) throw usageError(`copy --to ${to} is inside the source repository ${from}`);
  const src = await Repository.open(from);
  const { repo: dst } = await Repository.init(to).catch((e) => {
    throw placeError(e, `copy --to ${to}`);
  });
  return replicate(src, dst, ctx.trust, { ids: opts.snapshots, tenant: opts.tenant, agent: opts.agent, signingKey: ctx.maybeSigningKey(), linkGenerations: true, progress: opts.progress });
}
