/**
 * Replication between repositories (any store to any store): signed bundles
 * and their page indexes, parents first, each verified before it is sent and
 * read back in full on arrival before it is committed; idempotent. A copy
 * also carries each agent's generation record and links the two repositories
 * (generation.ts), so fencing generations stay the agent's.
 */
import { createHash } from "node:crypto";
import { copyFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { verifyBundle } from "../bundle/reader.js";
import { chunkRefs, isDatabase, type Manifest } from "../bundle/manifest.js";
import type { AgentRef } from "../facts.js";
import type { SigningKey } from "../crypto/sshsig.js";
import type { Trust } from "../crypto/trust.js";
import { removeOnInterrupt, removeTree } from "../cleanup.js";
import { linkReplica } from "./generation.js";
import { ordinal, type Repository, type Snapshot } from "./repository.js";
import { AgentbakError, Exit, notFound, verifyError } from "../errors.js";
import type { Progress } from "../progress.js";

export interface CopyResult {
  from: string;
  to: string;
  copied: string[];
  skipped: string[];
  /** what the operator must know: a source that could not record the link to the copy */
  warnings: string[];
}

/** Copies the verified snapshots of `src` (all, or the ids given) into `dst`. */
export async function replicate(
  src: Repository,
  dst: Repository,
  trust: Trust,
  o: {
    ids: string[];
    tenant?: string;
    agent?: string;
    signingKey: SigningKey | null;
    /** carry each snapshot's idempotency record along, so its key answers with it in `dst` too */
    idempotency?: boolean;
    /** how long to wait for an agent's lock in `dst` (default a minute) */
    waitMs?: number;
    /** carry each agent's generation record and link the repositories (a copy; a spool's flush does not: the spool is not a replica) */
    linkGenerations?: boolean;
    /** where long work reports how far it has got (src/progress.ts) */
    progress?: Progress;
    /**
     * Where a snapshot of `src` that does not verify goes (a spool's quarantine), with the reason: it and the
     * snapshots built on it are handed over instead of ending the run, and the others are still copied.
     * Without it, a bundle that fails verification ends the run (13).
     */
    setAside?: (e: Snapshot, problem: string) => Promise<void>;
  },
): Promise<CopyResult> {
  const listed = await src.list(trust, { tenant: o.tenant, agent: o.agent });
  const aside = new Set<string>();
  const putAside = async (e: Snapshot, problem: string) => (aside.add(e.snapshot_id), o.setAside!(e, problem));
  if (o.setAside) for (const e of listed.filter((x) => x.status === "invalid" && x.tenant !== null)) await putAside(e, e.problem ?? "does not verify");
  const picked = listed
    .filter((e) => e.status === "ok" && e.header && (o.ids.length === 0 || o.ids.includes(e.snapshot_id)))
    .sort((x, y) => ordinal(x.tenant!, y.tenant!) || ordinal(x.agent_id, y.agent_id) || x.sequence! - y.sequence!);
  // a snapshot named that is not among the verified ones is an error, not "copied 0"
  const missing = o.ids.filter((id) => !picked.some((e) => e.snapshot_id === id));
  if (missing.length) throw notFound(`snapshot ${missing[0]!.slice(0, 80)} not found among the verified snapshots in ${src.location}${o.tenant || o.agent ? ` (tenant ${o.tenant ?? "any"}, agent ${o.agent ?? "any"})` : ""}`);
  const res: CopyResult = { from: src.location, to: dst.location, copied: [], skipped: [], warnings: [] };
  /** each agent's chunk ids in `dst`, listed once per run and kept up to date as chunks are sent */
  const present = new Map<string, Set<string>>();
  for (const e of picked) {
    const a = { tenant: e.tenant!, agent: e.agent_id };
    const parent = e.header!.manifest.parent?.snapshot_id;
    if (parent && aside.has(parent)) {
      await putAside(e, `parent ${parent} was set aside`);
      continue;
    }
    if (await dst.committed(a, e.snapshot_id)) {
      res.skipped.push(e.snapshot_id);
      continue;
    }
    const lock = await dst.lock(a, "agent", o.waitMs ?? 60_000);
    // another run copied it while this one waited for the lock: never sent twice
    if (await dst.committed(a, e.snapshot_id)) {
      await lock.release();
      res.skipped.push(e.snapshot_id);
      continue;
    }
    const opened = await src.open(e, trust);
    const tmp = dst.store.tempDir("copy");
    const unregister = removeOnInterrupt(tmp);
    try {
      try {
        await verifyBundle(opened.path, trust, undefined, o.progress); // before it is sent
      } catch (err) {
        if (!o.setAside || !(err instanceof AgentbakError) || (err.code !== Exit.verify && err.code !== Exit.policy)) throw err;
        await putAside(e, err.message);
        continue;
      }
      const file = join(tmp, `${e.snapshot_id}.agentbak`);
      copyFileSync(opened.path, file); // publishing may consume the file it is given
      // publishing sends and re-verifies the bundle in one call: counted when it has arrived
      const size = statSync(file).size;
      const sent = o.progress?.stage("sending bundle", size);
      const indexes: [string, Buffer][] = [];
      for (const c of e.header!.manifest.components.filter((x) => isDatabase(x) && x.page_index_sha256)) {
        const ix = await src.pageIndex(e, c.name);
        if (ix) indexes.push([c.name, ix]);
      }
      // the chunks it lists go first (the commit marker is still written last): a snapshot is visible only whole
      await copyChunks(src, dst, a, e.header!.manifest, present);
      const key = o.idempotency ? e.header!.manifest.idempotency_key : null;
      const prior = key ? await src.idempotent<Record<string, unknown> & { snapshot_id: string }>(a, key, trust) : undefined;
      const idempotency = key && prior ? { key, receipt: prior } : undefined;
      await dst.publish(a, { snapshotId: e.snapshot_id, file, sequence: e.sequence!, indexes, idempotency, trust, verifyFully: true, audit: { event: "copy", from: src.location }, signingKey: o.signingKey });
      sent?.(size);
      res.copied.push(e.snapshot_id);
    } finally {
      removeTree(tmp);
      unregister();
      opened.release();
      await lock.release();
    }
  }
  // after the snapshots: a restore from `dst` then continues above what `src` issued, and writes its generation back
  if (o.linkGenerations)
    for (const key of new Set(picked.map((e) => `${e.tenant}/${e.agent_id}`))) {
      const [tenant, agent] = key.split("/") as [string, string];
      res.warnings.push(...(await linkReplica(src, dst, { tenant, agent }, { trust, key: o.signingKey })));
    }
  return res;
}

const sha256hex = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

/**
 * Sends the chunks a snapshot lists that `dst` lacks, as they are (same ids, same ciphertext: no key is needed), each
 * checked against its signed size and digest before it is sent and read back after it arrived. A chunk `dst` holds
 * already must be the same object.
 * @throws AgentbakError(13) naming the chunk: missing or damaged in `src`, damaged on arrival, or another object in `dst`
 */
async function copyChunks(src: Repository, dst: Repository, a: AgentRef, m: Manifest, present: Map<string, Set<string>>): Promise<void> {
  const refs = new Map(m.components.flatMap((c) => chunkRefs(c) ?? []).map((r) => [r.id, r]));
  if (!refs.size) return;
  const [from, to] = [src.chunks(a), dst.chunks(a)];
  const agentKey = `${a.tenant}/${a.agent}`;
  let there = present.get(agentKey);
  if (!there) present.set(agentKey, (there = await to.listIds()));
  const what = (id: string) => `snapshot ${m.snapshot_id}: chunk ${id}`;
  for (const r of refs.values()) {
    const matches = (b: Buffer | null) => b !== null && b.length === r.size && sha256hex(b) === r.sha256;
    if (there.has(r.id)) {
      if (!matches(await dst.store.get(to.key(r.id)))) throw verifyError(`${what(r.id)}: ${dst.location} holds another object under that name (not the one the manifest signed)`);
      continue;
    }
    const b = await src.store.get(from.key(r.id));
    if (!b) throw verifyError(`${what(r.id)} is missing from ${src.location}`);
    if (!matches(b)) throw verifyError(`${what(r.id)} in ${src.location} does not match its digest in the manifest`);
    if (!(await dst.store.put(to.key(r.id), b, { ifNoneMatch: true }))) {
      if (!matches(await dst.store.get(to.key(r.id)))) throw verifyError(`${what(r.id)}: ${dst.location} holds another object under that name (not the one the manifest signed)`);
    } else if (!matches(await dst.store.get(to.key(r.id)))) throw verifyError(`${what(r.id)} does not match its digest after it arrived in ${dst.location}`);
    there.add(r.id);
  }
}
