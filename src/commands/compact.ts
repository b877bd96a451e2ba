/** `agentbak compact`: rewrite an incremental as a full snapshot. */
import { verifyBundle } from "../bundle/reader.js";
import { loadIdentities, loadSigningKey } from "../crypto/keys.js";
import { resolveSnapshot } from "../repository/catalog.js";
import { compact as run, type CompactResult } from "../snapshot/compact.js";
import { context, type GlobalOpts } from "./common.js";

export async function compact(ref: string, opts: GlobalOpts & { identity?: string }): Promise<CompactResult> {
  const ctx = context(opts);
  const repo = ctx.repo();
  const v = await verifyBundle(resolveSnapshot(repo, ref, ctx.trust, ctx.lc?.config.agent.id), ctx.trust);
  const key = loadSigningKey(ctx.lc?.config.signing.key ? ctx.lc.resolve(ctx.lc.config.signing.key) : undefined);
  return run(repo, v, ctx.trust, loadIdentities(opts.identity), key, key.comment || "agentbak");
}
