/**
 * Decrypts a verified bundle into a private staging folder laid out as the
 * agent's root (databases, files and workspace at their recorded places) and
 * checks it: component digests, SQLite integrity, row counts and schema
 * versions, and the rebuilt workspace tree. Used by verify, restore and drill.
 */
import { chmodSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { readPayload, type VerifiedBundle } from "../bundle/reader.js";
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
export async function extractAndCheck(v: VerifiedBundle, identities: AgeIdentity[], root: string): Promise<Extracted> {
  const m = v.manifest;
  const raw = join(root, ".agentbak-raw");
  mkdirSync(raw, { recursive: true, mode: 0o700 });
  await readPayload(v, identities, raw);
  const checks: Check[] = [{ name: "components", ok: true, detail: `${m.components.length} components match their sha256 and size` }];
  const databases: Extracted["databases"] = [];
  for (const c of m.components) {
    const src = join(raw, c.path);
    if (c.kind === "sqlite") {
      const db = openDefensive(src);
      try {
        let ic: string[];
        try {
          ic = integrityCheck(db);
        } catch (e) {
          ic = [(e as Error).message];
        }
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
    if (c.kind === "sqlite" || c.kind === "file") {
      const dest = join(root, c.target ?? c.path);
      mkdirSync(dirname(dest), { recursive: true });
      chmodSync(src, 0o600);
      renameSync(src, dest);
      if (c.kind === "sqlite") databases.push({ name: c.name, path: dest, schemaVersion: c.schema_version ?? null });
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
