/**
 * A repository in object storage (s3://BUCKET/PREFIX), same layout as a local
 * one. A snapshot is visible only once complete: the bundle (and its page
 * indexes) are uploaded first, then a small commit object
 * `agents/<agent>/<id>.commit` is created with a conditional write; listing
 * reads only committed snapshots, so an interrupted upload never shows up and
 * "latest" never moves to a half-written bundle. Reads download the chosen
 * bundle (and its chain) into a private temp mirror and run the local
 * verification unchanged: signature and payload digest before anything is
 * decrypted.
 */
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { verifyHeader as verifyHeaderOf, verifyLayout, type Trust, type VerifiedBundle } from "../bundle/reader.js";
import { parseLayout } from "../bundle/outer.js";
import { AgentbakError, lockedError, notFound, verifyError } from "../errors.js";
import { onInterrupt } from "../cleanup.js";
import type { CatalogEntry } from "./catalog.js";
import { describeEntry, pickLatest } from "./catalog.js";
import { LocalRepository, pidAlive } from "./local.js";
import type { ObjectStore } from "./store.js";

const STALE_LOCK_MS = 6 * 3_600_000;
const bundleKey = (agent: string, id: string) => `agents/${agent}/${id}.agentbak`;
const commitKey = (agent: string, id: string) => `agents/${agent}/${id}.commit`;

/** Committed snapshots (agent, id), oldest first. */
export async function listCommitted(store: ObjectStore, agent?: string): Promise<{ agentId: string; snapshotId: string }[]> {
  const keys = await store.list(agent ? `agents/${agent}/` : "agents/");
  return keys
    .map((k) => k.match(/^agents\/([^/]+)\/([^/]+)\.commit$/))
    .filter((m): m is RegExpMatchArray => Boolean(m))
    .map((m) => ({ agentId: m[1]!, snapshotId: m[2]! }));
}

/** Reads and verifies a remote bundle's header (manifest and signature) with two range reads. */
export async function verifyRemoteHeader(store: ObjectStore, agent: string, id: string, trust: Trust): Promise<VerifiedBundle> {
  const key = bundleKey(agent, id);
  const h = await store.head(key);
  if (!h) throw verifyError(`${key}: committed but the bundle object is missing`);
  const headLen = Math.min(h.size, 1024 * 1024 + 64 * 1024);
  const head = await store.getRange(key, 0, headLen - 1);
  const tailStart = Math.max(0, h.size - 64 * 1024);
  const tail = h.size > headLen ? await store.getRange(key, tailStart, h.size - 1) : Buffer.alloc(0);
  const layout = parseLayout(`s3:${key}`, h.size, (n, at) => {
    if (at + n <= head.length) return head.subarray(at, at + n);
    if (at >= tailStart && tail.length) return tail.subarray(at - tailStart, at - tailStart + n);
    throw verifyError(`${key}: bundle header is larger than expected`);
  });
  return verifyLayout(layout, trust);
}

/** The catalog of a remote repository (committed snapshots only). */
export async function remoteCatalog(store: ObjectStore, trust: Trust, agent?: string): Promise<CatalogEntry[]> {
  const committed = await listCommitted(store, agent);
  const ids = new Set(committed.map((c) => `${c.agentId}/${c.snapshotId}`));
  const out: CatalogEntry[] = [];
  for (const c of committed) {
    const size = (await store.head(bundleKey(c.agentId, c.snapshotId)))?.size ?? 0;
    let v: VerifiedBundle | AgentbakError;
    try {
      v = await verifyRemoteHeader(store, c.agentId, c.snapshotId, trust);
      const parent = v.manifest.parent?.snapshot_id;
      if (parent && !ids.has(`${c.agentId}/${parent}`)) v = verifyError(`chain broken: parent snapshot ${parent} is missing`);
    } catch (e) {
      if (!(e instanceof AgentbakError)) throw e;
      v = e;
    }
    out.push(describeEntry({ agentId: c.agentId, snapshotId: c.snapshotId, path: `${store.url}/${bundleKey(c.agentId, c.snapshotId)}`, size }, v));
  }
  return out;
}

/**
 * Downloads a snapshot (id or latest) and every link of its chain into a new
 * temp folder laid out as a local repository. The caller removes it (it is
 * also removed on interruption).
 */
export async function mirrorSnapshot(store: ObjectStore, ref: string, trust: Trust, agent?: string): Promise<{ path: string; dir: string; cleanup(): void }> {
  const entries = (await remoteCatalog(store, trust, agent)).filter((e) => e.status !== "invalid" || e.snapshot_id === ref);
  const pick = ref === "latest" ? pickLatest(entries, store.url, agent) : entries.find((e) => e.snapshot_id === ref);
  if (!pick) throw notFound(`snapshot ${ref} not found in ${store.url}`);
  const dir = mkdtempSync(join(tmpdir(), "agentbak-mirror-"));
  const cleanup = () => rmSync(dir, { recursive: true, force: true });
  const unregister = onInterrupt(cleanup);
  try {
    const agentDir = join(dir, "agents", pick.agent_id);
    await downloadChain(store, pick.agent_id, pick.snapshot_id, agentDir, trust);
    new LocalRepository(dir).init();
    return { path: join(agentDir, `${pick.snapshot_id}.agentbak`), dir, cleanup: () => (cleanup(), unregister()) };
  } catch (e) {
    cleanup();
    unregister();
    throw e;
  }
}

/** A lock object (conditional write) with owner, host, time; stale when its owner is gone or it is older than 6 h. */
export async function remoteLock(store: ObjectStore, name: string, waitMs = 0): Promise<{ release(): Promise<void> }> {
  const key = `locks/${name}.lock`;
  const deadline = Date.now() + waitMs;
  const me = { pid: process.pid, host: hostname(), started_at: new Date().toISOString(), nonce: randomBytes(8).toString("hex") };
  for (;;) {
    if (await store.put(key, JSON.stringify(me), { ifNoneMatch: true })) {
      // read back: where conditional writes are not atomic (Ceph 16 ignores If-None-Match on versioned,
      // Object Lock buckets) the last writer's nonce wins and the others back off
      await new Promise((r) => setTimeout(r, 100));
      const back = await store.get(key);
      if (back && JSON.parse(String(back)).nonce === me.nonce) return { release: async () => void (await store.delete(key)) };
    }
    const held = await store.get(key);
    let holder: { pid?: number; host?: string; started_at?: string } = {};
    try {
      holder = JSON.parse(String(held ?? "{}"));
    } catch {
      /* unreadable: treat as held */
    }
    const age = holder.started_at ? Date.now() - new Date(holder.started_at).getTime() : 0;
    const gone = holder.host === hostname() && holder.pid !== undefined && !pidAlive(holder.pid);
    if (held && (gone || age > STALE_LOCK_MS)) {
      await store.delete(key);
      continue;
    }
    if (Date.now() >= deadline) throw lockedError(`repository ${store.url} locked (${name}) by pid ${holder.pid ?? "?"} on ${holder.host ?? "?"} since ${holder.started_at ?? "?"}; pass --wait to wait`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Page index files beside a local bundle. */
export function indexFilesOf(localRepoAgentDir: string, id: string): string[] {
  if (!existsSync(localRepoAgentDir)) return [];
  return readdirSync(localRepoAgentDir)
    .filter((f) => f.startsWith(`${id}.`) && f.endsWith(".pageindex"))
    .map((f) => join(localRepoAgentDir, f));
}

export { bundleKey, commitKey };

/**
 * Downloads the chain ending at snapshot `id` (bundles and page indexes) into
 * a local agent folder, newest first, stopping at a full snapshot or at a link
 * that is already there. Nothing is decrypted.
 */
export async function downloadChain(store: ObjectStore, agent: string, id: string, agentDir: string, trust: Trust): Promise<void> {
  mkdirSync(agentDir, { recursive: true });
  for (let cur: string | undefined = id; cur; ) {
    const local = join(agentDir, `${cur}.agentbak`);
    if (existsSync(local)) break;
    await store.download(bundleKey(agent, cur), local);
    for (const k of await store.list(`agents/${agent}/${cur}.`)) if (k.endsWith(".pageindex")) await store.download(k, join(agentDir, k.split("/").at(-1)!));
    cur = verifyHeaderOf(local, trust).manifest.parent?.snapshot_id;
  }
}
