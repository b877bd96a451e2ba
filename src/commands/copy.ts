/** `agentbak copy`: replicate signed bundles between repositories, verifying each before it is sent and on arrival. */
import { resolve } from "node:path";
import { Repository } from "../repository/repository.js";
import { replicate, type CopyResult } from "../repository/replicate.js";
import { isUrl } from "../storage/open.js";
import { context } from "./context.js";

export async function copy(opts: { from: string; to: string; snapshots: string[]; agent?: string; tenant?: string }): Promise<CopyResult> {
  const ctx = context({});
  const loc = (p: string) => (isUrl(p) ? p : resolve(p));
  const src = await Repository.open(loc(opts.from));
  const { repo: dst } = await Repository.init(loc(opts.to));
  return replicate(src, dst, ctx.trust, { ids: opts.snapshots, tenant: opts.tenant, agent: opts.agent, signingKey: ctx.maybeSigningKey() });
}
