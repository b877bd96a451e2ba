/**
 * Backup into object storage: the bundle is made in a private local staging
 * repository exactly as for a local one, then uploaded streaming; the
 * sequence and idempotency records follow, and the commit object is written
 * last with a conditional write. The agent's lock is an object too.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import type { LoadedConfig } from "../config/load.js";
import { sha256hex } from "../bundle/manifest.js";
import { LocalRepository } from "../repository/local.js";
import { bundleKey, commitKey, downloadChain, indexFilesOf, remoteCatalog, remoteLock } from "../repository/remote.js";
import type { ObjectStore } from "../repository/store.js";
import { runBackup, type BackupOptions, type BackupReceipt } from "./backup.js";
import { onInterrupt } from "../cleanup.js";

/** Runs one backup into `store`. */
export async function runRemoteBackup(lc: LoadedConfig, store: ObjectStore, opts: Omit<BackupOptions, "repo">): Promise<BackupReceipt> {
  const agent = lc.config.agent.id;
  const lock = await remoteLock(store, `agent-${agent}`, opts.waitMs ?? 0);
  const local = mkdtempSync(join(tmpdir(), "agentbak-upload-"));
  const unregister = onInterrupt(() => rmSync(local, { recursive: true, force: true }));
  try {
    const idemKey = opts.idempotencyKey ? `idempotency/${agent}/backup-${sha256hex(opts.idempotencyKey)}.json` : undefined;
    if (idemKey) {
      const prior = await store.get(idemKey);
      if (prior) {
        const r = JSON.parse(String(prior)) as BackupReceipt;
        if (await store.head(commitKey(agent, r.snapshot_id))) return { ...r, repeated: true };
      }
    }
    const repo = new LocalRepository(local);
    repo.init();
    const seqKey = `state/sequence-${agent}.json`;
    const seq = await store.get(seqKey);
    if (seq) {
      mkdirSync(join(local, "state"), { recursive: true });
      writeFileSync(join(local, "state", `sequence-${agent}.json`), seq);
    }
    const incremental = opts.incremental ?? lc.config.incremental.enabled;
    if (incremental) {
      // the staging repository gets the latest chain (bundles and page indexes, never decrypted) so the
      // incremental is computed, and the chain verified, exactly as for a local repository
      const latest = (await remoteCatalog(store, opts.trust, agent)).filter((e) => e.status === "ok").sort((x, y) => x.sequence! - y.sequence!).at(-1);
      if (latest) await downloadChain(store, agent, latest.snapshot_id, repo.agentDir(agent), opts.trust);
    }
    const r = await runBackup(lc, { ...opts, repo: local, incremental, idempotencyKey: undefined });
    // data first
    const ol = lc.config.objectLock;
    await store.upload(bundleKey(agent, r.snapshot_id), r.path, ol ? { lockMode: ol.mode === "compliance" ? "COMPLIANCE" : "GOVERNANCE", retainUntil: new Date(Date.now() + ol.days * 86_400_000) } : {});
    for (const f of indexFilesOf(repo.agentDir(agent), r.snapshot_id)) await store.upload(`agents/${agent}/${f.split("/").at(-1)}`, f);
    await store.put(seqKey, readFileSync(join(local, "state", `sequence-${agent}.json`)));
    const receipt: BackupReceipt = { ...r, path: `${store.url}/${bundleKey(agent, r.snapshot_id)}` };
    if (idemKey) await store.put(idemKey, JSON.stringify(receipt));
    // the commit object makes it visible, last
    await store.put(commitKey(agent, r.snapshot_id), JSON.stringify({ snapshot_id: r.snapshot_id, manifest_sha256: r.manifest_sha256, committed_at: new Date().toISOString() }), { ifNoneMatch: true });
    await store.put(`audit/${new Date().toISOString()}-${randomBytes(4).toString("hex")}.json`, JSON.stringify({ event: "backup", agent_id: agent, snapshot_id: r.snapshot_id, sequence: r.sequence, manifest_sha256: r.manifest_sha256 }));
    return receipt;
  } finally {
    rmSync(local, { recursive: true, force: true });
    unregister();
    await lock.release();
  }
}
