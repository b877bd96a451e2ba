/** `agentbak compact`: rewrite an incremental as a full snapshot. */
import { compact as run, type CompactResult } from "../capture/compact.js";
import { pageIndexKey } from "../state/pages/index.js";
import { context, type GlobalOpts } from "./context.js";
import type { Progress } from "../progress.js";

export async function compact(ref: string, opts: GlobalOpts & { identity?: string; agent?: string; tenant?: string; progress?: Progress }): Promise<CompactResult> {
  const ctx = context(opts);
  const s = await ctx.resolve(ref, ctx.agentFilter(opts));
  const key = ctx.signingKey();
  return run(await ctx.repository(), s, ctx.trust, ctx.identities(opts.identity), key, key.comment || "agentbak", pageIndexKey(ctx.home), opts.progress);
}
