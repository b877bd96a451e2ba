/**
 * The catalog: which bundles in a repository are restorable (signature and
 * manifest verify), and what `ID`, `latest` and `FILE` resolve to.
 */
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { verifyHeader, type Trust, type VerifiedBundle } from "../bundle/reader.js";
import { AgentbakError, notFound } from "../errors.js";
import type { LocalRepository } from "./local.js";

/** One listed bundle. `status` is "ok" only when its signature and manifest verify. */
export interface CatalogEntry {
  agent_id: string;
  snapshot_id: string;
  path: string;
  size: number;
  status: "ok" | "expired" | "invalid";
  problem: string | null;
  /** exit code of the problem, for invalid entries */
  problem_code: number | null;
  sequence: number | null;
  created_at: string | null;
  expires_at: string | null;
  tenant: string | null;
  label: string | null;
  signer: string | null;
  schema_version: number | null;
}

/** A catalog entry for a bundle, from its verified header or the error that stopped it. */
export function describeEntry(base: { agentId: string; snapshotId: string; path: string; size: number }, v: VerifiedBundle | AgentbakError, now = new Date()): CatalogEntry {
  const b = { agent_id: base.agentId, snapshot_id: base.snapshotId, path: base.path, size: base.size };
  if (v instanceof AgentbakError)
    return { ...b, status: "invalid", problem: v.message, problem_code: v.code, sequence: null, created_at: null, expires_at: null, tenant: null, label: null, signer: null, schema_version: null };
  const m = v.manifest;
  const expired = new Date(m.expires_at) <= now;
  const mismatch = m.agent_id !== base.agentId || m.snapshot_id !== base.snapshotId;
  return {
    ...b,
    status: mismatch ? "invalid" : expired ? "expired" : "ok",
    problem: mismatch ? "manifest names another snapshot" : expired ? `expired at ${m.expires_at}` : null,
    problem_code: mismatch ? 13 : expired ? 14 : null,
    sequence: m.sequence,
    created_at: m.created_at,
    expires_at: m.expires_at,
    tenant: m.tenant,
    label: m.label,
    signer: v.signer.principal,
    schema_version: m.schema_version,
  };
}

/** Lists bundles with their verification status, oldest first. */
export function catalog(repo: LocalRepository, trust: Trust, agentId?: string, now = new Date()): CatalogEntry[] {
  return repo.list(agentId).map((b) => {
    let v: VerifiedBundle | AgentbakError;
    try {
      v = verifyHeader(b.path, trust, now);
      if (v.manifest.parent && !existsSync(join(dirname(b.path), `${v.manifest.parent.snapshot_id}.agentbak`)))
        v = new AgentbakError(13, `chain broken: parent snapshot ${v.manifest.parent.snapshot_id} is missing`);
    } catch (e) {
      if (!(e instanceof AgentbakError)) throw e;
      v = e;
    }
    return describeEntry(b, v, now);
  });
}

/**
 * Resolves `ref` (a snapshot id, `latest`, or a bundle file path) to a bundle path.
 * `latest` is the verified, unexpired bundle with the highest sequence.
 * @throws AgentbakError(10) when nothing matches.
 */
export function resolveSnapshot(repo: LocalRepository | undefined, ref: string, trust: Trust, agentId?: string, before?: Date): string {
  if (ref.endsWith(".agentbak") || ref.includes("/")) {
    const p = resolve(ref);
    if (!existsSync(p)) throw notFound(`bundle file not found: ${p}`);
    return p;
  }
  if (!repo) throw notFound(`snapshot ${ref}: no repository given`);
  if (ref === "latest") {
    const all = catalog(repo, trust, agentId);
    const bad = all.filter((e) => e.status !== "ok").at(-1);
    if (!all.some((e) => e.status === "ok") && bad) throw new AgentbakError(bad.problem_code === 14 ? 14 : 13, `no restorable snapshot; newest ${bad.snapshot_id}: ${bad.problem}`);
    const best = pickLatest(all, repo.root, agentId, before);
    if (!best) throw notFound(`no verified snapshot${agentId ? ` of ${agentId}` : ""}${before ? ` before ${before.toISOString()}` : ""} in ${repo.root}`);
    return best.path;
  }
  const hit = repo.list(agentId).filter((b) => b.snapshotId === ref);
  if (hit.length === 0) throw notFound(`snapshot ${ref} not found in ${repo.root}`);
  return hit[0]!.path;
}

/**
 * "latest": the verified, unexpired entry with the highest sequence (created
 * before `before`, if given).
 * @throws AgentbakError(10) when entries of several agents match and none was named.
 */
export function pickLatest(entries: CatalogEntry[], where: string, agentId?: string, before?: Date): CatalogEntry | undefined {
  const ok = entries.filter((e) => e.status === "ok" && (!before || new Date(e.created_at!) < before));
  const agents = new Set(ok.map((e) => e.agent_id));
  if (!agentId && agents.size > 1) throw notFound(`"latest" is ambiguous: ${where} holds ${[...agents].join(", ")}; pass --agent or a config`);
  return ok.sort((a, b) => a.sequence! - b.sequence!).at(-1);
}

/** "random": a verified entry created within `withinMs` of now, chosen at random. */
export function pickRandom(entries: CatalogEntry[], withinMs: number): CatalogEntry | undefined {
  const since = Date.now() - withinMs;
  const pool = entries.filter((e) => e.status === "ok" && new Date(e.created_at!).getTime() >= since);
  return pool[Math.floor(Math.random() * pool.length)];
}
