/**
 * Incremental chains: an incremental bundle names its parent by snapshot id
 * and manifest digest. Each link is verified once (signature, payload digest,
 * the digest its child signed); each link's payload is decrypted once, taking
 * only the database members still needed; deltas are applied in place from
 * the nearest whole copy upwards, and every rebuilt database must hash to the
 * digest the newest link signed.
 */
import { existsSync, mkdtempSync, readFileSync, renameSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import type { AgeIdentity } from "../crypto/age.js";
import type { Trust } from "../crypto/trust.js";
import { AgentbakError, Exit, ioErrno, ioError, verifyError } from "../errors.js";
import { applyDelta, filePagesRoot } from "../state/pages/index.js";
import { isDatabase, type Component } from "./manifest.js";
import { ensureDir, writeCacheFile } from "../fsutil.js";
import { checkPayload, readPayload, verifyHeader, type VerifiedBundle } from "./reader.js";
import { fileSha256 } from "./streams.js";
import { homePaths } from "../home.js";

/**
 * A local file holding the bundle of snapshot `id` of the same agent
 * (fetched if it lives elsewhere).
 * @throws AgentbakError(10) when there is none.
 */
export type LinkSource = (id: string) => Promise<string>;

/**
 * Payload digests this host already checked, by file identity (device, inode,
 * size, mtime in ns): a backup that builds on a chain does not read a large
 * full snapshot again at every incremental. verify, restore and drill always
 * read the payloads.
 */
export interface CheckedPayloads {
  has(path: string, sha256: string): boolean;
  add(path: string, sha256: string): void;
}

/** CheckedPayloads kept in AGENTBAK_HOME/cache; an unreadable file is an empty cache. */
export function checkedPayloads(home: string): CheckedPayloads & { save(): void } {
  const file = homePaths(home).cache.checkedPayloads;
  let entries: Record<string, string> = {};
  try {
    entries = JSON.parse(readFileSync(file, "utf8")) as Record<string, string>;
  } catch {
    /* none yet */
  }
  const identity = (p: string) => {
    const st = statSync(p, { bigint: true });
    return `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}`;
  };
  let changed = false;
  return {
    has: (p, sha) => entries[resolve(p)] === `${identity(p)}:${sha}`,
    add: (p, sha) => {
      entries[resolve(p)] = `${identity(p)}:${sha}`;
      changed = true;
    },
    save: () => {
      if (!changed) return;
      for (const k of Object.keys(entries)) if (!existsSync(k)) delete entries[k];
      try {
        ensureDir(dirname(file), 0o700);
        writeCacheFile(file, JSON.stringify(entries));
      } catch {
        /* a cache that can not be written only costs the next backup a read */
      }
    },
  };
}

/** verifyBundle (its header read and checked once), but a payload `checked` remembers for this very file is not read again; remembered once verified. */
export async function verifyRemembered(path: string, trust: Trust, checked?: CheckedPayloads, o: { decrypting?: boolean } = {}): Promise<VerifiedBundle> {
  const h = verifyHeader(path, trust);
  const v = checked?.has(path, h.manifest.payload.sha256) ? h : await checkPayload(h, undefined, o);
  if (!v.payloadUnchecked) checked?.add(path, v.manifest.payload.sha256);
  return v;
}

/**
 * The parents of `v`, nearest first, each verified once (a payload in
 * `checked` is not read again). `decrypting`: the caller rebuilds the
 * databases through them (rebuildDatabases), and a format-7 payload is
 * checked there, chunk by chunk as it is decrypted, instead of read twice.
 * @throws AgentbakError(13) naming the link that is missing or does not match.
 */
export async function verifyChain(v: VerifiedBundle, links: LinkSource, trust: Trust, checked?: CheckedPayloads, o: { decrypting?: boolean } = {}): Promise<VerifiedBundle[]> {
  const out: VerifiedBundle[] = [];
  for (let cur = v; cur.manifest.parent; ) {
    const p = cur.manifest.parent;
    const what = `chain: parent snapshot ${p.snapshot_id} of ${cur.manifest.snapshot_id}`;
    let path: string;
    try {
      path = await links(p.snapshot_id);
    } catch (e) {
      // a link the repository already found damaged is named like one found here
      if (e instanceof AgentbakError) throw e.code === Exit.notFound ? verifyError(`${what} is missing`) : new AgentbakError(e.code, `${what}: ${e.message}`);
      throw e;
    }
    let pv: VerifiedBundle;
    try {
      pv = await verifyRemembered(path, trust, checked, o);
    } catch (e) {
      throw e instanceof AgentbakError ? new AgentbakError(e.code, `${what}: ${e.message}`) : e;
    }
    const m = pv.manifest;
    // sequences strictly decrease down the chain, so it ends
    if (pv.manifestSha256 !== p.manifest_sha256 || m.agent_id !== v.manifest.agent_id || m.tenant !== v.manifest.tenant || m.sequence >= cur.manifest.sequence)
      throw verifyError(`${what} does not match the manifest digest ${cur.manifest.snapshot_id} recorded`);
    out.push(pv);
    cur = pv;
  }
  return out;
}

/**
 * A bundle and its whole chain verified (verifyChain), each link's payload digest read once on this host: remembered
 * by file identity in AGENTBAK_HOME's cache (checkedPayloads), so a large full snapshot is not read again at every
 * incremental built on it.
 * @returns the bundle's verification, and its chain's links
 * @throws what verifyChain throws
 */
export async function verifyChainRemembered(path: string, links: LinkSource, trust: Trust, home: string): Promise<{ head: VerifiedBundle; links: VerifiedBundle[] }> {
  const checked = checkedPayloads(home);
  const head = await verifyRemembered(path, trust, checked);
  const chain = await verifyChain(head, links, trust, checked);
  checked.save();
  return { head, links: chain };
}

/**
 * Rebuilds every database `v` holds as a page delta. `raw` already holds v's
 * own payload members (at their paths); `chain` is verifyChain's result.
 * @returns database name → the rebuilt file (under `work`).
 * @throws AgentbakError(13) when a link lacks the database or a rebuilt file does not match.
 */
export async function rebuildDatabases(v: VerifiedBundle, chain: VerifiedBundle[], raw: string, identities: AgeIdentity[], work: string): Promise<Map<string, string>> {
  const deltas = v.manifest.components.filter((c) => c.kind === "sqlite-delta");
  // per database: delta files, nearest first, and the whole copy they start from
  const stacks = new Map(deltas.map((c) => [c.name, [join(raw, c.path)]]));
  const bases = new Map<string, string>();
  let read = 0;
  for (const [i, link] of chain.entries()) {
    if (bases.size === stacks.size) break;
    read = i + 1;
    const want = link.manifest.components.filter((c) => isDatabase(c) && stacks.has(c.name) && !bases.has(c.name));
    for (const name of stacks.keys())
      if (!bases.has(name) && !want.some((c) => c.name === name)) throw verifyError(`chain: ${link.manifest.snapshot_id} has no database ${name}`);
    const dir = mkdtempSync(join(work, `link-${i}-`));
    await named(link, readPayload(link, identities, dir, new Set(want.map((c) => c.path))));
    for (const c of want) {
      if (c.kind === "sqlite") bases.set(c.name, join(dir, c.path));
      else stacks.get(c.name)!.push(join(dir, c.path));
    }
  }
  // a link below the whole copies is not decrypted: a payload verifyChain left to decryption is checked here
  for (const link of chain.slice(read)) if (link.payloadUnchecked) await named(link, checkPayload(link));
  const out = new Map<string, string>();
  for (const c of deltas) {
    const base = bases.get(c.name);
    if (!base) throw verifyError(`chain: no whole copy of database ${c.name} below ${v.manifest.snapshot_id}`);
    const file = join(work, `${c.name}.rebuilt.sqlite`);
    renameSync(base, file);
    for (const d of stacks.get(c.name)!.reverse()) {
      try {
        applyDelta(file, d);
      } catch (e) {
        if (ioErrno(e)) throw ioError(e, file);
        throw verifyError(`chain: ${v.manifest.snapshot_id} ${c.path}: ${(e as Error).message}`);
      }
    }
    if ((await rebuiltDigest(file, c)) !== (c.full_pages_sha256 ?? c.full_sha256)) throw verifyError(`database ${c.name}: rebuilt from the chain of ${v.manifest.snapshot_id} (${chain.length} link(s) below it), it does not match its recorded ${c.full_pages_sha256 ? "pages root" : "sha256"}: a link is damaged or missed a change; the next full snapshot (backup --no-incremental) starts a sound chain`);
    out.set(c.name, file);
  }
  return out;
}

/** A link's check, its failure naming the link. */
async function named(link: VerifiedBundle, p: Promise<unknown>): Promise<void> {
  try {
    await p;
  } catch (e) {
    throw e instanceof AgentbakError ? new AgentbakError(e.code, `chain: ${link.manifest.snapshot_id}: ${e.message}`) : e;
  }
}

/** The digest a delta's manifest entry records for the whole rebuilt database: its pages root (format 4 on), or its sha256. */
export async function rebuiltDigest(file: string, c: Pick<Component, "full_pages_sha256">): Promise<string> {
  return c.full_pages_sha256 ? filePagesRoot(file) : fileSha256(file);
}
