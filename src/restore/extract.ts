/**
 * Decrypts a verified bundle into a private staging folder laid out as the
 * agent's root (databases, files and workspace at their recorded places) and
 * checks it: component digests, SQLite integrity, row counts and schema
 * versions, and the rebuilt workspace tree. Used by verify, restore and drill.
 */
import { createHash } from "node:crypto";
import { chmodSync, closeSync, createReadStream, existsSync, mkdirSync, mkdtempSync, openSync, readSync, renameSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { pipeline } from "node:stream/promises";
import { readPayload, verifyBundle, type Trust, type VerifiedBundle } from "../bundle/reader.js";
import { sha256hex, type Component } from "../bundle/manifest.js";
import { applyDelta } from "../snapshot/pages.js";
import type { AgeIdentity } from "../crypto/age.js";
import { verifyError } from "../errors.js";
import { integrityCheck, openDefensive, tableCounts, userVersion } from "../snapshot/sqlite.js";
import { rebuildWorkspace, treeDigest } from "../snapshot/workspace.js";

/** One named check and its outcome. */
export interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

/** Where each restored piece landed, relative to the staging root. */
export interface Extracted {
  root: string;
  databases: { name: string; path: string; schemaVersion: number | null }[];
  checks: Check[];
}

/**
 * Extracts and checks everything into `root` (created; must not exist).
 * @throws AgentbakError(13) at the first failed check, (12) when no identity matches.
 */
export async function extractAndCheck(v: VerifiedBundle, identities: AgeIdentity[], root: string, trust: Trust): Promise<Extracted> {
  const m = v.manifest;
  const raw = join(root, ".agentbak-raw");
  mkdirSync(raw, { recursive: true, mode: 0o700 });
  await readPayload(v, identities, raw);
  const checks: Check[] = [{ name: "components", ok: true, detail: `${m.components.length} components match their sha256 and size` }];
  const databases: Extracted["databases"] = [];
  for (const c of m.components) {
    let src = join(raw, c.path);
    if (c.kind === "sqlite-delta") {
      const work = mkdtempSync(join(raw, ".chain-"));
      const base = await materializeDb(await loadParent(v, trust), c.name, identities, work, trust);
      const rebuilt = join(work, "rebuilt.sqlite");
      rebuildChecked(base, src, rebuilt, c, m.snapshot_id);
      if ((await fileSha256(rebuilt)) !== c.full_sha256) throw verifyError(`database ${c.name}: rebuilt from the chain, it does not match its recorded sha256`);
      src = rebuilt;
    }
    if (c.kind === "sqlite" || c.kind === "sqlite-delta") {
      // a snapshot is one self-contained file: a header still in WAL mode (bytes 18-19 = 2) means frames may be missing
      const head = Buffer.alloc(20);
      const fd = openSync(src, "r");
      readSync(fd, head, 0, 20, 0);
      closeSync(fd);
      if (head[18] !== 1 || head[19] !== 1) throw verifyError(`database ${c.name}: the file is in WAL mode (header ${head[18]}/${head[19]}); a snapshot must be one self-contained file`);
      const db = openDefensive(src);
      try {
        const ic = integrityCheck(db);
        if (ic.length !== 1 || ic[0] !== "ok") throw verifyError(`database ${c.name}: integrity_check: ${ic.slice(0, 3).join("; ")}`);
        let counts: Record<string, number>;
        try {
          counts = tableCounts(db);
        } catch (e) {
          throw verifyError(`database ${c.name}: counting rows: ${(e as Error).message}`);
        }
        for (const [t, n] of Object.entries(c.records ?? {}))
          if (counts[t] !== n) throw verifyError(`database ${c.name}: table ${t} has ${counts[t] ?? 0} rows, manifest says ${n}`);
        const uv = userVersion(db);
        if (c.schema_version !== undefined && uv !== c.schema_version) throw verifyError(`database ${c.name}: user_version ${uv}, manifest says ${c.schema_version}`);
      } finally {
        db.close();
      }
      checks.push({ name: `integrity:${c.name}`, ok: true, detail: "integrity_check ok; row counts and user_version match the manifest" });
    }
    if (c.kind === "sqlite" || c.kind === "sqlite-delta" || c.kind === "file") {
      const dest = join(root, c.target ?? c.path);
      mkdirSync(dirname(dest), { recursive: true });
      chmodSync(src, 0o600);
      renameSync(src, dest);
      if (c.kind !== "file") databases.push({ name: c.name, path: dest, schemaVersion: c.schema_version ?? null });
    }
  }
  if (m.workspace) {
    const bundle = join(raw, "workspace/repo.bundle");
    const patch = m.components.some((c) => c.path === "workspace/changes.patch") ? join(raw, "workspace/changes.patch") : null;
    const dest = join(root, m.workspace.path);
    mkdirSync(dirname(dest), { recursive: true });
    try {
      await rebuildWorkspace(bundle, patch, m.workspace.commit, m.workspace.branch, dest);
    } catch (e) {
      throw verifyError(`workspace: cannot rebuild: ${(e as Error).message}`);
    }
    const d = await treeDigest(dest);
    if (d.sha256 !== m.workspace.tree_sha256) throw verifyError(`workspace: rebuilt tree does not match the manifest (${d.files} files, ${m.workspace.files} recorded)`);
    checks.push({ name: "workspace", ok: true, detail: `commit ${m.workspace.commit.slice(0, 12)}, ${d.files} files, tree digest matches` });
  }
  rmSync(raw, { recursive: true, force: true });
  return { root, databases, checks };
}

async function fileSha256(path: string): Promise<string> {
  const h = createHash("sha256");
  await pipeline(createReadStream(path, { highWaterMark: 1 << 20 }), h);
  return h.digest("hex");
}

function rebuildChecked(base: string, delta: string, out: string, c: Component, snapshotId: string): void {
  try {
    applyDelta(base, delta, out);
  } catch (e) {
    throw verifyError(`chain: ${snapshotId} ${c.path}: ${(e as Error).message}`);
  }
  rmSync(base, { force: true });
}

/**
 * The verified parent of an incremental bundle, from the same folder; the
 * parent's manifest must hash to the digest the child signed.
 * @throws AgentbakError(13) when the link is missing or does not match.
 */
export async function loadParent(v: VerifiedBundle, trust: Trust): Promise<VerifiedBundle> {
  const p = v.manifest.parent;
  if (!p) throw verifyError(`chain: ${v.manifest.snapshot_id} holds a delta but names no parent`);
  const path = join(dirname(v.layout.path), `${p.snapshot_id}.agentbak`);
  if (!existsSync(path)) throw verifyError(`chain: parent snapshot ${p.snapshot_id} of ${v.manifest.snapshot_id} is missing`);
  const pv = await verifyBundle(path, trust);
  if (sha256hex(pv.layout.manifest) !== p.manifest_sha256 || pv.manifest.agent_id !== v.manifest.agent_id || pv.manifest.sequence >= v.manifest.sequence)
    throw verifyError(`chain: parent snapshot ${p.snapshot_id} does not match the manifest digest ${v.manifest.snapshot_id} recorded`);
  return pv;
}

/**
 * Rebuilds database `name` as of bundle `v` into a file under `work`,
 * following the chain of deltas down to a full copy; every link and the
 * rebuilt file's sha256 are checked.
 */
export async function materializeDb(v: VerifiedBundle, name: string, identities: AgeIdentity[], work: string, trust: Trust): Promise<string> {
  const c = v.manifest.components.find((x) => x.name === name && (x.kind === "sqlite" || x.kind === "sqlite-delta"));
  if (!c) throw verifyError(`chain: ${v.manifest.snapshot_id} has no database ${name}`);
  const dir = mkdtempSync(join(work, "link-"));
  await readPayload(v, identities, dir, new Set([c.path]));
  const file = join(dir, c.path);
  if (c.kind === "sqlite") return file;
  const base = await materializeDb(await loadParent(v, trust), name, identities, work, trust);
  const out = join(dir, "rebuilt.sqlite");
  rebuildChecked(base, file, out, c, v.manifest.snapshot_id);
  if ((await fileSha256(out)) !== c.full_sha256) throw verifyError(`chain: database ${name} rebuilt for ${v.manifest.snapshot_id} does not match its recorded sha256`);
  return out;
}
