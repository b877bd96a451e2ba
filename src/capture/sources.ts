/** The state sources stage: PostgreSQL, Redis, vector tables and the like, each captured by its driver. */
import { join } from "node:path";
import type { Component, Manifest } from "../bundle/manifest.js";
import type { StagedFile } from "../bundle/writer.js";
import type { LoadedConfig } from "../config/load.js";
import { ensureDirIn } from "../fsutil.js";
import { usageError } from "../errors.js";
import { captureSource } from "../state/sources/index.js";
import { arrowVectors } from "../state/sources/lancedb.js";
import { probeRecords, type RecallRecord } from "../state/sqlite/neighbours.js";

/**
 * Captures every state source (side by side, each at its own single instant)
 * into `staging/sources/<name>/`; connections come from credential references
 * resolved only now; `targets`: where each source with a path lands in a restored root (scope.ts: restoreTargets).
 */
export async function captureSources(lc: LoadedConfig, staging: string, warnings: string[], targets: Map<string, string | null>, prior: PriorSources | null): Promise<CapturedSources> {
  const started = new Date();
  const caps = await Promise.all(
    lc.config.sources.map(async (s) => {
      const dir = join(staging, "sources", s.name);
      ensureDirIn(staging, dir);
      const fingerprints = new Map([...(prior?.values() ?? [])].filter((c) => c.name === s.name && c.kind === s.kind).map((c) => [c.path, c.fingerprint!]));
      return { s, cap: await captureSource(s, lc.dir, dir, fingerprints) };
    }),
  );
  const staged: StagedFile[] = [];
  const reused: Component[] = [];
  for (const { s, cap } of caps) {
    if (cap.noFingerprint) warnings.push(`source ${s.name}: ${cap.noFingerprint}`);
    for (const f of cap.files) {
      // unchanged since the snapshot that stored it: that snapshot's entry (chunks, digest, counts), at this instant
      const before = f.unchanged ? prior?.get(f.path) : undefined;
      if (before) {
        const { embedding: _e, ...entry } = before;
        reused.push({ ...entry, ...(s.embedding && entry.dimension !== undefined ? { embedding: s.embedding } : {}) });
        continue;
      }
      if (s.embedding && f.dimension !== undefined && f.dimension !== s.embedding.dimension)
        warnings.push(`source ${s.name}: ${f.path} holds vectors of dimension ${f.dimension}, the config's embedding ${s.embedding.model} has ${s.embedding.dimension}`);
      const { file, path, records, table_version, dimension, fingerprint } = f;
      // the model is recorded on the tables that hold vectors
      staged.push({ path, kind: s.kind, name: s.name, file, records, table_version, dimension, fingerprint, ...(s.embedding && dimension !== undefined ? { embedding: s.embedding } : {}) });
    }
  }
  const instant = {
    started_at: started.toISOString(),
    finished_at: new Date().toISOString(),
    sources: caps.map(({ s, cap }) => ({
      name: s.name,
      kind: s.kind,
      ref: s.url ?? null,
      path: targets.get(s.name) ?? null,
      snapshot_at: cap.snapshotAt.toISOString(),
      server_version: cap.serverVersion,
    })),
  };
  return { staged, instant, reused, recall: await lanceRecall(lc, staged, reused, warnings) };
}

/**
 * The recall records of the config's lancedb probe sets, by exact search over each table's captured Arrow stream.
 * A table reused unchanged from an earlier snapshot was not read again: its probes are not recomputed (a warning).
 * @throws AgentbakError(2) naming the probe set whose table or columns the capture does not hold
 */
async function lanceRecall(lc: LoadedConfig, staged: StagedFile[], reused: Component[], warnings: string[]): Promise<RecallRecord[]> {
  const out: RecallRecord[] = [];
  for (const [i, r] of lc.config.recall.entries()) {
    const src = lc.config.sources.find((s) => s.name === r.store && s.kind === "lancedb");
    if (!src) continue;
    const path = `sources/${r.store}/${r.table}.arrows`;
    const f = staged.find((x) => x.path === path);
    if (!f) {
      if (reused.some((x) => x.path === path)) warnings.push(`recall[${i}] (${r.store}.${r.table}): the table is unchanged since an earlier snapshot and was not read again; no recall record this time`);
      else throw usageError(`recall[${i}] (${r.store}.${r.table}): source ${r.store} has no table ${r.table}`);
      continue;
    }
    try {
      const v = await arrowVectors(f.file, r.column, r.id);
      out.push({ store: `${r.store}.${r.table}`, kind: "lancedb", name: r.store, table: r.table, column: r.column, id_column: r.id, metric: r.metric, dimension: v.dimension, vectors: v.ids.length, rows_without_vector: v.nulls, vectors_without_row: null, probes: probeRecords(r, v) });
    } catch (e) {
      throw usageError(`recall[${i}] (${r.store}.${r.table}): ${(e as Error).message}`);
    }
  }
  return out;
}

/** What the sources stage captured: files for the payload or the chunk store, the instant, and entries reused whole. */
export interface CapturedSources {
  staged: StagedFile[];
  instant: Manifest["capture_instant"];
  /** entries of the prior snapshot whose fingerprint the source still had: not captured again */
  reused: Component[];
  /** the recall records of lancedb probe sets (recall parity) */
  recall: RecallRecord[];
}

/** A prior snapshot's chunked source entries that carry a fingerprint, by payload path: what a capture may reuse (Repository.beginBackup). */
export type PriorSources = ReadonlyMap<string, Component>;
