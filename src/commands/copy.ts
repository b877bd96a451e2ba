/**
 * `agentbak copy`: replicates signed bundles between repositories (local or
 * object storage), parents first, verifying each before it is sent and again
 * on arrival; idempotent when repeated.
 */
import { copyFileSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { verifyBundle } from "../bundle/reader.js";
import { agentbakHome } from "../crypto/keys.js";
import { loadTrust } from "../crypto/trust.js";
import { verifyError } from "../errors.js";
import { catalog, type CatalogEntry } from "../repository/catalog.js";
import { LocalRepository, openRepository } from "../repository/local.js";
import { bundleKey, commitKey, indexFilesOf, remoteCatalog } from "../repository/remote.js";
import { openStore } from "../repository/store.js";
import { onInterrupt } from "../cleanup.js";

export interface CopyResult {
  from: string;
  to: string;
  copied: string[];
  skipped: string[];
}

const loc = (p: string) => (p.startsWith("s3://") ? p : resolve(p));

export async function copy(opts: { from: string; to: string; snapshots: string[]; agent?: string }): Promise<CopyResult> {
  const trust = loadTrust(agentbakHome());
  const from = loc(opts.from);
  const to = loc(opts.to);
  const src = from.startsWith("s3://") ? await openStore(from) : null;
  const entries: CatalogEntry[] = src ? await remoteCatalog(src, trust, opts.agent) : catalog(openRepository(from), trust, opts.agent);
  const pick = entries
    .filter((e) => e.status === "ok" && (opts.snapshots.length === 0 || opts.snapshots.includes(e.snapshot_id)))
    .sort((a, b) => a.sequence! - b.sequence! || (a.snapshot_id < b.snapshot_id ? -1 : 1));
  const dst = to.startsWith("s3://") ? await openStore(to) : null;
  const dstLocal = dst ? null : new LocalRepository(to);
  dstLocal?.init();
  const tmp = mkdtempSync(join(tmpdir(), "agentbak-copy-"));
  const unregister = onInterrupt(() => rmSync(tmp, { recursive: true, force: true }));
  const res: CopyResult = { from, to, copied: [], skipped: [] };
  try {
    for (const e of pick) {
      const already = dst ? Boolean(await dst.head(commitKey(e.agent_id, e.snapshot_id))) : existsSync(dstLocal!.bundlePath(e.agent_id, e.snapshot_id));
      if (already) {
        res.skipped.push(e.snapshot_id);
        continue;
      }
      const local = join(tmp, `${e.snapshot_id}.agentbak`);
      if (src) await src.download(bundleKey(e.agent_id, e.snapshot_id), local);
      else copyFileSync(e.path, local);
      await verifyBundle(local, trust); // before it is sent
      const srcIndexes = src ? [] : indexFilesOf(join(from, "agents", e.agent_id), e.snapshot_id);
      if (dst) {
        await dst.upload(bundleKey(e.agent_id, e.snapshot_id), local);
        for (const f of srcIndexes) await dst.upload(`agents/${e.agent_id}/${f.split("/").at(-1)}`, f);
        // on arrival: read it back from the destination and verify again before committing
        const back = join(tmp, `${e.snapshot_id}.arrived.agentbak`);
        await dst.download(bundleKey(e.agent_id, e.snapshot_id), back);
        try {
          await verifyBundle(back, trust);
        } catch (err) {
          await dst.delete(bundleKey(e.agent_id, e.snapshot_id));
          throw verifyError(`copy of ${e.snapshot_id} failed verification on arrival: ${(err as Error).message}`);
        }
        rmSync(back);
        await dst.put(commitKey(e.agent_id, e.snapshot_id), JSON.stringify({ snapshot_id: e.snapshot_id, copied_from: from, committed_at: new Date().toISOString() }), { ifNoneMatch: true });
      } else {
        for (const f of srcIndexes) copyFileSync(f, join(dstLocal!.agentDir(e.agent_id), f.split("/").at(-1)!));
        const path = dstLocal!.publish(local, e.agent_id, e.snapshot_id);
        await verifyBundle(path, trust); // on arrival
        dstLocal!.audit({ event: "copy", agent_id: e.agent_id, snapshot_id: e.snapshot_id, from });
      }
      rmSync(local, { force: true });
      res.copied.push(e.snapshot_id);
    }
    return res;
  } finally {
    rmSync(tmp, { recursive: true, force: true });
    unregister();
  }
}
