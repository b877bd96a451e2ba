/**
 * compact: rewrites an incremental snapshot as a full one (new id, signed,
 * linked to what it replaces) so that older links of its chain can be dropped.
 * Needs an identity: the chain must be decrypted to rebuild the database.
 */
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { readPayload, type Trust, type VerifiedBundle } from "../bundle/reader.js";
import { sha256hex, type Manifest } from "../bundle/manifest.js";
import { writeBundleFile, writePayload, type StagedComponent } from "../bundle/writer.js";
import type { AgeIdentity } from "../crypto/age.js";
import { fingerprint, type SigningKey } from "../crypto/sshsig.js";
import type { LocalRepository } from "../repository/local.js";
import { loadParent, materializeDb } from "../restore/extract.js";
import { applyDelta, indexFileName } from "./pages.js";
import { newSnapshotId } from "./backup.js";
import { verifyError } from "../errors.js";

export interface CompactResult {
  snapshot_id: string;
  replaces: string;
  path: string | null;
  already_full: boolean;
}

/** Rewrites `v` (an incremental in `repo`) as a full bundle. */
export async function compact(repo: LocalRepository, v: VerifiedBundle, trust: Trust, ids: AgeIdentity[], key: SigningKey, principal: string): Promise<CompactResult> {
  const m = v.manifest;
  if (!m.components.some((c) => c.kind === "sqlite-delta")) return { snapshot_id: m.snapshot_id, replaces: m.snapshot_id, path: null, already_full: true };
  const lock = await repo.lock(`agent-${m.agent_id}`);
  const staging = repo.tempDir(`compact-${m.agent_id}`);
  try {
    const raw = join(staging, "raw");
    mkdirSync(raw);
    await readPayload(v, ids, raw);
    const staged: StagedComponent[] = [];
    for (const c of m.components) {
      const { sha256: _s, size: _z, ...meta } = c;
      if (c.kind !== "sqlite-delta") {
        staged.push({ ...meta, file: join(raw, c.path) });
        continue;
      }
      const work = mkdtempSync(join(staging, "chain-"));
      const base = await materializeDb(await loadParent(v, trust), c.name, ids, work, trust);
      const full = join(staging, `${c.name}.sqlite`);
      applyDelta(base, join(raw, c.path), full);
      const { full_sha256, full_size: _f, page_size: _p, page_count: _c, changed_pages: _n, ...rest } = meta;
      const path = `db/${c.name}.sqlite`;
      staged.push({ ...rest, kind: "sqlite", path, file: full });
      if (!full_sha256) throw verifyError(`${m.snapshot_id}: delta ${c.path} has no recorded full digest`);
    }
    const payloadFile = join(staging, "payload.age");
    const written = await writePayload(staged, m.recipients, payloadFile);
    for (const c of m.components.filter((x) => x.kind === "sqlite-delta")) {
      const w = written.components.find((x) => x.name === c.name && x.kind === "sqlite")!;
      if (w.sha256 !== c.full_sha256) throw verifyError(`compact: database ${c.name} rebuilt for ${m.snapshot_id} does not match its recorded sha256`);
    }
    const id = newSnapshotId(new Date());
    const manifest: Manifest = {
      ...m,
      snapshot_id: id,
      parent: null,
      compacted_from: { snapshot_id: m.snapshot_id, manifest_sha256: v.manifestSha256 },
      signer: { fingerprint: fingerprint(key.publicKey), principal },
      components: written.components,
      payload: written.payload,
    };
    const tmp = join(staging, "bundle.agentbak");
    const mbytes = await writeBundleFile(manifest, key, payloadFile, tmp);
    for (const c of m.components.filter((x) => x.page_index_sha256)) {
      const from = join(repo.agentDir(m.agent_id), indexFileName(m.snapshot_id, c.name));
      if (existsSync(from)) copyFileSync(from, join(repo.agentDir(m.agent_id), indexFileName(id, c.name)));
    }
    const path = repo.publish(tmp, m.agent_id, id);
    repo.audit({ event: "compact", agent_id: m.agent_id, snapshot_id: id, replaces: m.snapshot_id, manifest_sha256: sha256hex(mbytes) });
    return { snapshot_id: id, replaces: m.snapshot_id, path, already_full: false };
  } finally {
    rmSync(staging, { recursive: true, force: true });
    lock.release();
  }
}
