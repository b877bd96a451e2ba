/**
 * compact: rewrites an incremental snapshot as a full one (same state and
 * sequence, new id, signed, `compacted_from` linking what it replaces) so
 * older links of its chain can be forgotten. Needs an identity: the chain is
 * decrypted to rebuild the databases.
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { rebuildDatabases, verifyChain, type LinkSource } from "../bundle/chain.js";
import { extractChunked, type ChunkSource } from "../bundle/chunked.js";
import { isDatabase, type Component, type Manifest } from "../bundle/manifest.js";
import { readPayload, verifyBundle, type VerifiedBundle } from "../bundle/reader.js";
import { writeBundleFile, writeComponents, type StagedComponent } from "../bundle/writer.js";
import type { AgeIdentity } from "../crypto/age.js";
import type { SigningKey } from "../crypto/sshsig.js";
import type { Trust } from "../crypto/trust.js";
import { removeOnInterrupt, removeTree } from "../cleanup.js";
import { verifyError } from "../errors.js";
import type { Repository, Snapshot } from "../repository/repository.js";
import { encodeIndex, indexPages, type PageIndex } from "../state/pages/index.js";
import { newSnapshotId } from "../facts.js";
import type { Progress } from "../progress.js";

export interface CompactResult {
  snapshot_id: string;
  replaces: string;
  path: string | null;
  already_full: boolean;
}

/**
 * A verified snapshot's components decrypted into `staging` as a full snapshot's: each database rebuilt through its
 * chain, and, when `inline`, each chunked component read back from `from.chunks` (every chunk checked) so it goes
 * into the payload; else a chunked component is left out of `staged` (it stays where it is).
 * @returns the staged components and the manifest entries they come from, in the same order
 * @throws AgentbakError(13) for any failed check, (12) when no identity matches, (10) inlining without a chunk store
 */
export async function stageWhole(v: VerifiedBundle, from: { links: LinkSource; chunks?: ChunkSource | null }, ids: AgeIdentity[], x: { staging: string; trust: Trust; inline: boolean; progress?: Progress }): Promise<{ staged: StagedComponent[]; inPayload: Component[] }> {
  const { staging, trust, progress } = x;
  const m = v.manifest;
  const chain = await verifyChain(v, from.links, trust);
  const raw = join(staging, "raw");
  const work = join(staging, "chain");
  mkdirSync(raw);
  mkdirSync(work);
  await readPayload(v, ids, raw, undefined, progress);
  if (x.inline) await extractChunked(m, from.chunks, ids, raw);
  const rebuilt = await rebuildDatabases(v, chain, raw, ids, work);
  const inPayload = m.components.filter((c) => x.inline || !c.chunks);
  const staged: StagedComponent[] = inPayload.map((c) => {
    const { sha256: _s, size: _z, full_sha256: _f, full_pages_sha256: _r, full_size: _fs, page_size: _p, page_count: _c, changed_pages: _n, chunks: _k, chunk_skip: _ks, ...meta } = c;
    return c.kind === "sqlite-delta" ? { ...meta, kind: "sqlite", path: `db/${c.name}.sqlite`, file: rebuilt.get(c.name)! } : { ...meta, file: join(raw, c.path) };
  });
  return { staged, inPayload };
}

/** Rewrites snapshot `s` (an incremental) as a full bundle in the same repository. */
export async function compact(repo: Repository, s: Snapshot, trust: Trust, ids: AgeIdentity[], key: SigningKey, principal: string, indexKey: Buffer, progress?: Progress): Promise<CompactResult> {
  const a = { tenant: s.tenant!, agent: s.agent_id };
  if (s.kind !== "incremental") return { snapshot_id: s.snapshot_id, replaces: s.snapshot_id, path: null, already_full: true };
  const lock = await repo.lock(a, "agent");
  const opened = await repo.open(s, trust);
  const staging = repo.store.tempDir(`compact-${a.agent}`);
  const unregister = removeOnInterrupt(staging);
  try {
    const v = await verifyBundle(opened.path, trust, undefined, progress);
    const m = v.manifest;
    // a chunked component stays where it is (the chunk store): listed again as it was, after the payload's
    const { staged, inPayload } = await stageWhole(v, opened, ids, { staging, trust, inline: false, progress });
    // an earlier format's page index holds keyed hashes, which no incremental builds on now: the databases' indexes are
    // made afresh from the rebuilt files (one read of each), so the next incremental builds on the compacted snapshot
    const fresh = new Map<string, PageIndex & { root: string }>();
    if (m.format_version < 4)
      for (const c of staged)
        if (c.kind === "sqlite" && "file" in c && c.file) {
          const ix = indexPages(c.file);
          fresh.set(c.name!, ix);
          c.page_index_sha256 = ix.root;
        }
    const id = newSnapshotId(new Date());
    const { bundle: plan, written } = await writeComponents(join(staging, `${id}.agentbak`), key, staged, m.recipients, { prior: m, progress });
    // rebuildDatabases checked each rebuilt file against its recorded digest; a sha256 (formats 1-3) is checked again
    // against the bytes just written, for free (a pages root would be a second read of the file)
    for (const [i, c] of inPayload.entries())
      if (c.kind === "sqlite-delta" && c.full_sha256 && written.components[i]!.sha256 !== c.full_sha256)
        throw verifyError(`compact: database ${c.name} rebuilt for ${m.snapshot_id} does not match its recorded sha256`);
    const manifest: Manifest = {
      ...m,
      snapshot_id: id,
      parent: null,
      compacted_from: { snapshot_id: m.snapshot_id, manifest_sha256: v.manifestSha256 },
      signer: { fingerprint: key.fingerprint, principal },
      components: [...written.components, ...m.components.filter((c) => c.chunks)],
      payload: written.payload,
    };
    const file = plan.path;
    const signed = await writeBundleFile(manifest, key, plan);
    // the page indexes describe the same pages: the next incremental builds on the compacted snapshot
    const indexes: [string, Buffer][] = [...fresh].map(([name, ix]) => [name, encodeIndex(ix, indexKey)]);
    for (const c of m.format_version < 4 ? [] : m.components.filter((x) => isDatabase(x) && x.page_index_sha256)) {
      const ix = await repo.pageIndex(s, c.name);
      if (ix) indexes.push([c.name, ix]);
    }
    const published = await repo.publish(a, { snapshotId: id, file, sequence: m.sequence, indexes, trust, audit: { event: "compact", replaces: m.snapshot_id, manifest_sha256: signed.sha256 }, signingKey: key });
    return { snapshot_id: id, replaces: m.snapshot_id, path: published.path, already_full: false };
  } finally {
    removeTree(staging);
    unregister();
    opened.release();
    await lock.release();
  }
}
