/**
 * Incremental chains: an incremental bundle names its parent by snapshot id
 * and manifest digest. Each link is verified once (signature, payload digest,
 * the digest its child signed); each link's payload is decrypted once, taking
 * only the database members still needed; deltas are applied in place from
 * the nearest whole copy upwards, and every rebuilt database must hash to the
 * digest the newest link signed.
 */
import { mkdtempSync, renameSync } from "node:fs";
import { join } from "node:path";
import type { AgeIdentity } from "../crypto/age.js";
import type { Trust } from "../crypto/trust.js";
import { AgentbakError, Exit, ioErrno, ioError, verifyError } from "../errors.js";
import { applyDelta } from "../state/pages.js";
import { isDatabase } from "./manifest.js";
import { readPayload, verifyBundle, type VerifiedBundle } from "./reader.js";
import { fileSha256 } from "./streams.js";

/**
 * A local file holding the bundle of snapshot `id` of the same agent
 * (fetched if it lives elsewhere).
 * @throws AgentbakError(10) when there is none.
 */
export type LinkSource = (id: string) => Promise<string>;

/**
 * The parents of `v`, nearest first, each verified once.
 * @throws AgentbakError(13) naming the link that is missing or does not match.
 */
export async function verifyChain(v: VerifiedBundle, links: LinkSource, trust: Trust): Promise<VerifiedBundle[]> {
  const out: VerifiedBundle[] = [];
  for (let cur = v; cur.manifest.parent; ) {
    const p = cur.manifest.parent;
    const what = `chain: parent snapshot ${p.snapshot_id} of ${cur.manifest.snapshot_id}`;
    let path: string;
    try {
      path = await links(p.snapshot_id);
    } catch (e) {
      if (e instanceof AgentbakError && e.code === Exit.notFound) throw verifyError(`${what} is missing`);
      throw e;
    }
    let pv: VerifiedBundle;
    try {
      pv = await verifyBundle(path, trust);
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
  for (const [i, link] of chain.entries()) {
    if (bases.size === stacks.size) break;
    const want = link.manifest.components.filter((c) => isDatabase(c) && stacks.has(c.name) && !bases.has(c.name));
    for (const name of stacks.keys())
      if (!bases.has(name) && !want.some((c) => c.name === name)) throw verifyError(`chain: ${link.manifest.snapshot_id} has no database ${name}`);
    const dir = mkdtempSync(join(work, `link-${i}-`));
    await readPayload(link, identities, dir, new Set(want.map((c) => c.path)));
    for (const c of want) {
      if (c.kind === "sqlite") bases.set(c.name, join(dir, c.path));
      else stacks.get(c.name)!.push(join(dir, c.path));
    }
  }
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
    if ((await fileSha256(file)) !== c.full_sha256) throw verifyError(`database ${c.name}: rebuilt from the chain, it does not match its recorded sha256`);
    out.set(c.name, file);
  }
  return out;
}
