/**
 * Exact nearest neighbours for recall parity (docs/drills.md, "Recall
 * parity"): the vectors of a sqlite-vec `vec0` table read from its shadow
 * tables (no extension loaded: the captured image is read as plain SQLite), a
 * seeded sample of probe ids, and brute-force top-k by L2 or cosine distance
 * with ties broken by id. What backup records per probe, and what the drill
 * compares the restored store's own answers with.
 */
import { createHash } from "node:crypto";
import type { DB } from "./open.js";
import { vec0Dimensions } from "./open.js";

export type Metric = "l2" | "cosine";
export type VectorId = string | number;
/** The neighbours recorded per probe. */
export const RECALL_K = 10;

/** One probe as the manifest records it: the neighbours exact search found at the snapshot instant. */
export interface RecallProbe {
  /** the probe's own id when sampled from the store (its vector is then read back from the restored store), else null */
  id: VectorId | null;
  vector_sha256: string;
  /** a probe given in the config: its vector (float32 little-endian, base64); sampled probes never carry one */
  vector?: string;
  /** the ids of the k nearest, nearest first (ties by id) */
  neighbours: VectorId[];
  /** the distance of the last of them: a restored answer at that distance is a tie, not a miss */
  kth_distance: number;
}

/** A vector store's recall record: where it is, how distance is measured, and its probes. */
export interface RecallRecord {
  store: string;
  kind: "sqlite-vec" | "lancedb";
  /** the database or source name */
  name: string;
  table: string;
  column: string;
  id_column: string;
  metric: Metric;
  dimension: number;
  vectors: number;
  /** rows of the spec's row table (sqlite) or of the table itself (lancedb) that have no vector; null: not counted */
  rows_without_vector: number | null;
  /** vectors whose row (in the spec's row table) is gone; null: not counted */
  vectors_without_row: number | null;
  /** the row table those two were counted against (sqlite) */
  rows?: { table: string; id: string };
  probes: RecallProbe[];
}

/** The distance between two vectors of one width: Euclidean (L2), or 1 - cosine similarity. */
export function distance(a: Float32Array, b: Float32Array, metric: Metric): number {
  let s = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    const x = a[i]!;
    const y = b[i]!;
    if (metric === "l2") s += (x - y) * (x - y);
    else {
      s += x * y;
      na += x * x;
      nb += y * y;
    }
  }
  if (metric === "l2") return Math.sqrt(s);
  return na === 0 || nb === 0 ? 1 : 1 - s / Math.sqrt(na * nb);
}

const byId = (a: VectorId, b: VectorId) => (typeof a === "number" && typeof b === "number" ? a - b : String(a) < String(b) ? -1 : String(a) > String(b) ? 1 : 0);

/** Orders (distance, id) pairs: nearer first, ties by id. */
const nearer = (a: { id: VectorId; distance: number }, b: { id: VectorId; distance: number }) => a.distance - b.distance || byId(a.id, b.id);

/**
 * The k nearest to each probe of the vectors `scan` visits, by exact search, nearest first, ties broken by id
 * (numbers before strings compare as text). One pass; only k candidates per probe are kept, never the vectors.
 * A vector at a distance that is not finite (a NaN or an infinity in either) is left out.
 */
export function exactTopKs(probes: Float32Array[], k: number, metric: Metric, scan: (visit: (id: VectorId, v: Float32Array) => void) => void): { id: VectorId; distance: number }[][] {
  const best = probes.map(() => [] as { id: VectorId; distance: number }[]);
  scan((id, v) => {
    for (let i = 0; i < probes.length; i++) {
      const b = best[i]!;
      const c = { id, distance: distance(probes[i]!, v, metric) };
      // a vector with a NaN or an infinity is no one's neighbour: its distance orders nothing (and JSON has no NaN)
      if (!Number.isFinite(c.distance)) continue;
      if (b.length === k && nearer(c, b[k - 1]!) >= 0) continue;
      let at = b.length;
      while (at > 0 && nearer(c, b[at - 1]!) < 0) at--;
      b.splice(at, 0, c);
      if (b.length > k) b.pop();
    }
  });
  return best;
}

/**
 * A seeded sample of `k` ids (all of them when fewer): the same seed and ids give the same sample.
 * The ids are sorted first, so the order they were read in does not matter.
 */
export function sampleIds(ids: VectorId[], k: number, seed: string): VectorId[] {
  const sorted = [...ids].sort(byId);
  const h = createHash("sha256").update(`agentbak recall sample\0${seed}`).digest();
  let s = h.readUInt32LE(0);
  const next = () => {
    // mulberry32
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  for (let i = sorted.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [sorted[i], sorted[j]] = [sorted[j]!, sorted[i]!];
  }
  return sorted.slice(0, k);
}

/** A vector's digest (float32 little-endian bytes). */
export const vectorDigest = (v: Float32Array): string => createHash("sha256").update(Buffer.from(v.buffer, v.byteOffset, v.byteLength)).digest("hex");
/** A vector as base64 of float32 little-endian, and back. */
export const vectorToBase64 = (v: Float32Array) => Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString("base64");
export const vectorFromBase64 = (s: string) => floatsOf(Buffer.from(s, "base64"));
/** A blob of float32 little-endian values as a vector of its own (copied: a Float32Array needs its offset aligned). */
export const floatsOf = (b: Buffer) => new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length));

/** What a probe set names, as the config's `recall` entry gives it. */
export interface ProbeSpec {
  /** how many probes to sample from the stored vectors (ignored when `vectors` is given) */
  probes: number;
  seed: string;
  vectors?: number[][];
  metric: Metric;
}

/** A store's vectors as recall reads them: every id, the vector of one id, and a pass over all of them. */
export interface VectorSource {
  ids: VectorId[];
  vectorOf(id: VectorId): Float32Array;
  scan(visit: (id: VectorId, v: Float32Array) => void): void;
  dimension: number;
}

/** Vectors held in memory as a VectorSource. */
export function inMemory(ids: VectorId[], vectors: Float32Array[], dimension: number): VectorSource {
  const at = new Map(ids.map((id, i) => [String(id), i]));
  return { ids, dimension, vectorOf: (id) => vectors[at.get(String(id))!]!, scan: (visit) => ids.forEach((id, i) => visit(id, vectors[i]!)) };
}

/**
 * The probes of one store, each with its exact top-k over the store's vectors (one pass for all probes): read from
 * the store, or held in memory (a captured table's vectors, as inMemory takes them).
 * @throws Error when a given probe's width is not the store's
 */
export function probeRecords(spec: ProbeSpec, from: VectorSource | { ids: VectorId[]; vectors: Float32Array[]; dimension: number }): RecallProbe[] {
  const src = "scan" in from ? from : inMemory(from.ids, from.vectors, from.dimension);
  const probes: { id: VectorId | null; v: Float32Array; given: boolean }[] = spec.vectors
    ? spec.vectors.map((v) => ({ id: null, v: Float32Array.from(v), given: true }))
    : sampleIds(src.ids, spec.probes, spec.seed).map((id) => ({ id, v: src.vectorOf(id), given: false }));
  probes.forEach((p, i) => {
    if (p.v.length !== src.dimension) throw new Error(`probe ${i + 1} has ${p.v.length} values, the store's vectors ${src.dimension}`);
  });
  const tops = exactTopKs(probes.map((p) => p.v), RECALL_K, spec.metric, (visit) => src.scan(visit));
  return probes.map((p, i) => {
    const top = tops[i]!;
    return { id: p.id, vector_sha256: vectorDigest(p.v), ...(p.given ? { vector: vectorToBase64(p.v) } : {}), neighbours: top.map((t) => t.id), kth_distance: top.at(-1)?.distance ?? 0 };
  });
}

// quoteIdent (timestamps.ts) spelled here: backup reads vec0 tables through this file, and each of its calls into
// another file is a step of the backup's walk (node dist/tools/walk.js: 9 more with the import, 390 against 381)
const q = (s: string) => `"${s.replace(/"/g, '""')}"`;

/**
 * The live vectors of a `vec0` table's float column, read from its shadow tables (`<t>_rowids`, `<t>_vector_chunksNN`)
 * as plain SQLite, row by row (never all at once): a row's id is its text primary key, else its rowid.
 * @throws Error when the table or column is not a vec0 float column (a vector of another width: when it is read)
 */
export function vec0Vectors(db: DB, table: string, column: string): VectorSource {
  const cols = vec0Dimensions(db).filter((c) => c.table === table);
  if (!cols.length) throw new Error(`no sqlite-vec vec0 table ${table}`);
  const i = cols.findIndex((c) => c.column === column);
  const col = cols[i];
  if (!col) throw new Error(`vec0 table ${table} has no vector column ${column} (it has ${cols.map((c) => c.column).join(", ")})`);
  const bytes = col.dimension * 4;
  const chunks = `${table}_vector_chunks${String(i).padStart(2, "0")}`;
  const rows = `${q(`${table}_rowids`)} r JOIN ${q(chunks)} v ON v.rowid = r.chunk_id`;
  const select = `SELECT coalesce(r.id, r.rowid) AS id, substr(v.vectors, r.chunk_offset * ? + 1, ?) AS vec FROM ${rows}`;
  const asId = (x: unknown): VectorId => (typeof x === "bigint" ? String(x) : (x as VectorId));
  const asVector = (id: VectorId, b: Buffer) => {
    if (b.length !== bytes) throw new Error(`vec0 table ${table}: the vector of ${id} has ${b.length} bytes, float[${col.dimension}] takes ${bytes}`);
    return floatsOf(b);
  };
  const one = db.prepare(`${select} WHERE coalesce(r.id, r.rowid) = ?`);
  return {
    ids: (db.prepare(`SELECT coalesce(id, rowid) FROM ${q(`${table}_rowids`)}`).pluck().all() as unknown[]).map(asId),
    dimension: col.dimension,
    vectorOf: (id) => asVector(id, (one.get(bytes, bytes, id) as { vec: Buffer }).vec),
    // each chunk's blob read once, the rows in chunk order: the join read it again per row (the rows of a crafted table
    // all in one large chunk made backup read rows × chunk bytes: 4,000 rows of a 16 MiB chunk, 33 s)
    scan(visit) {
      const blob = db.prepare(`SELECT vectors FROM ${q(chunks)} WHERE rowid = ?`).pluck();
      let at: unknown = undefined;
      let buf: Buffer | null | undefined;
      for (const r of db.prepare(`SELECT coalesce(id, rowid) AS id, chunk_id AS c, chunk_offset AS o FROM ${q(`${table}_rowids`)} ORDER BY chunk_id`).iterate() as Iterable<{ id: unknown; c: unknown; o: unknown }>) {
        if (r.c !== at) [at, buf] = [r.c, blob.get(r.c) as Buffer | null | undefined];
        if (!buf) continue; // no such chunk: not a vector (as the join left it out)
        const id = asId(r.id);
        const from = Number(r.o) * bytes;
        visit(id, asVector(id, Buffer.isBuffer(buf) && from >= 0 && Number.isSafeInteger(from) ? buf.subarray(from, from + bytes) : Buffer.alloc(0)));
      }
    },
  };
}

/**
 * Rows of `rows.table` with no vector in the vec0 table, and vectors whose row is gone, read from the shadow tables.
 * @throws Error (SQLite's) when the row table or its id column does not exist
 */
export function vec0RowGaps(db: DB, table: string, rows: { table: string; id: string }): { without: number; orphans: number } {
  const ids = `SELECT coalesce(id, rowid) FROM ${q(`${table}_rowids`)}`;
  const without = db.prepare(`SELECT count(*) FROM ${q(rows.table)} WHERE ${q(rows.id)} NOT IN (${ids})`).pluck().get() as number;
  const orphans = db.prepare(`SELECT count(*) FROM ${q(`${table}_rowids`)} WHERE coalesce(id, rowid) NOT IN (SELECT ${q(rows.id)} FROM ${q(rows.table)})`).pluck().get() as number;
  return { without, orphans };
}

/** A probe set as the config's `recall` entry names it (config/schema.ts). */
export interface RecallSpec extends ProbeSpec {
  store: string;
  table: string;
  column: string;
  id: string;
  rows?: { table: string; id: string };
}

/**
 * The recall record of a vec0 table in `db` (a connection to the snapshot's image): its vectors, the probes' exact
 * neighbours, and the row gaps when the spec names the row table.
 * @throws Error naming what is missing (table, column, row table) or a probe of another width
 */
export function vec0Recall(db: DB, spec: RecallSpec): RecallRecord {
  const src = vec0Vectors(db, spec.table, spec.column);
  // a vec0 table with a text primary key answers with it (the ids read are its values), else with rowid (or its alias)
  const sql = (db.prepare("SELECT sql FROM sqlite_schema WHERE name = ?").pluck().get(spec.table) as string | undefined) ?? "";
  const textKey = /([A-Za-z_][A-Za-z0-9_]*)\s+text\s+primary\s+key/i.exec(sql)?.[1];
  if (textKey && spec.id !== textKey) throw new Error(`vec0 table ${spec.table} answers with its text primary key ${textKey}: set "id": "${textKey}"`);
  const gaps = spec.rows ? vec0RowGaps(db, spec.table, spec.rows) : null;
  return {
    store: `${spec.store}.${spec.table}`,
    kind: "sqlite-vec",
    name: spec.store,
    table: spec.table,
    column: spec.column,
    id_column: spec.id,
    metric: spec.metric,
    dimension: src.dimension,
    vectors: src.ids.length,
    rows_without_vector: gaps?.without ?? null,
    vectors_without_row: gaps?.orphans ?? null,
    ...(spec.rows ? { rows: spec.rows } : {}),
    probes: probeRecords(spec, src),
  };
}
