/** `agentbak export`: one snapshot as a self-contained bundle file (its chunks inlined, its chain rebuilt). */
import { resolve } from "node:path";
import { exportBundle, type ExportResult } from "../capture/export.js";
import { context, type GlobalOpts } from "./context.js";
import type { Progress } from "../progress.js";

export async function exportSnapshot(ref: string, opts: GlobalOpts & { out?: string; identity?: string; agent?: string; tenant?: string; progress?: Progress }): Promise<ExportResult> {
  const ctx = context(opts);
  const key = ctx.signingKey();
  const ids = ctx.identities(opts.identity);
  const b = await ctx.openRef(ref, ctx.agentFilter(opts));
  try {
    const id = b.snapshot?.snapshot_id ?? "export";
    return await exportBundle(b, resolve(opts.out ?? `${id}.agentbak`), { trust: ctx.trust, identities: ids, key, principal: key.comment || "agentbak", progress: opts.progress });
  } finally {
    b.release();
  }
}
