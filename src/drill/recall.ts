/**
 * Recall parity (docs/drills.md): the restored vector stores asked again, each
 * through its own query path (sqlite-vec's `MATCH … AND k = 10`, LanceDB's
 * vector search), for the neighbours of the probes whose exact top-10 backup
 * recorded in the signed manifest. recall@10 per store (mean over its probes,
 * the worst named), and the rows without a vector / vectors without a row
 * compared with the snapshot's counts; each a check in the log.
 */
import type { Manifest } from "../bundle/manifest.js";
import { loadOptional } from "../optional.js";
import { openLanceTable } from "../state/sources/lancedb.js";
import { distance, floatsOf, RECALL_K, vec0RowGaps, vectorDigest, vectorFromBase64, type RecallRecord, type VectorId } from "../state/sqlite/neighbours.js";
import { openDefensive, type DB } from "../state/sqlite/open.js";
import { quoteIdent as q } from "../state/sqlite/timestamps.js";
import type { CheckLog } from "./checklog.js";

/** The spec's `recall` section (spec.ts). */
export interface RecallSection {
  /** the mean recall@10 a store must reach */
  threshold: number;
  /** the stores (`name.table`) to check; absent: every store the snapshot records */
  stores?: string[];
}

/** One probe's outcome on the restored store. */
export interface ProbeOutcome {
  probe: string;
  recall: number;
  /** why it scored less: the probe's vector missing or changed, the neighbours missed */
  note?: string;
}

/** What the drill found for one store. */
export interface StoreRecall {
  store: string;
  kind: RecallRecord["kind"];
  probes: number;
  mean_recall: number;
  threshold: number;
  ok: boolean;
  /** up to five probes, worst first */
  worst: ProbeOutcome[];
  rows_without_vector: { snapshot: number | null; restored: number | null };
  vectors_without_row: { snapshot: number | null; restored: number | null };
  error?: string;
}

/** A store's query path: the probe's vector by id, and the store's own k nearest (ids and vectors). */
interface Asker {
  vectorOf(id: VectorId): Promise<Float32Array | null>;
  nearest(v: Float32Array, k: number): Promise<{ id: VectorId; vector: Float32Array | null }[]>;
  gaps(): Promise<{ without: number | null; orphans: number | null }>;
  close(): void;
}

const asVector = (b: unknown) => (Buffer.isBuffer(b) ? floatsOf(b) : null);
const asId = (x: unknown): VectorId => (typeof x === "bigint" ? Number(x) : typeof x === "number" ? x : String(x));

/** sqlite-vec's own query path on a restored database (the extension loaded into a read-only, defensive connection). */
async function vec0Asker(path: string, r: RecallRecord): Promise<Asker> {
  const sv = await loadOptional("a recall drill of a vec0 table", ["sqlite-vec"], () => import("sqlite-vec"));
  const db: DB = openDefensive(path);
  try {
    sv.load(db);
  } catch (e) {
    db.close();
    throw e;
  }
  const t = q(r.table);
  const byId = db.prepare(`SELECT ${q(r.column)} FROM ${t} WHERE ${q(r.id_column)} = ?`).pluck();
  const knn = db.prepare(`SELECT ${q(r.id_column)} AS id, ${q(r.column)} AS v FROM ${t} WHERE ${q(r.column)} MATCH ? AND k = ?`).raw();
  return {
    vectorOf: async (id) => asVector(byId.get(typeof id === "number" ? BigInt(id) : id)),
    nearest: async (v, k) => (knn.all(Buffer.from(v.buffer, v.byteOffset, v.byteLength), k) as unknown[][]).map(([id, vec]) => ({ id: asId(id), vector: asVector(vec) })),
    gaps: async () => {
      if (!r.rows) return { without: null, orphans: null };
      const g = vec0RowGaps(db, r.table, r.rows);
      return { without: g.without, orphans: g.orphans };
    },
    close: () => db.close(),
  };
}

/** LanceDB's own query path on a restored folder. */
async function lanceAsker(folder: string, r: RecallRecord): Promise<Asker> {
  const t = await openLanceTable(folder, r.table, r.column, r.id_column);
  return {
    vectorOf: (id) => t.vectorOf(id),
    nearest: (v, k) => t.search(v, k, r.metric),
    gaps: async () => ({ without: await t.nulls(), orphans: null }),
    close: () => t.close(),
  };
}

/**
 * The store's k nearest with a finite vector: a vector holding a NaN or an infinity (left out of the neighbours backup
 * recorded, neighbours.ts) may come back among the store's answers and push a real neighbour out, so the store is
 * asked again for as many more as it returned of them (up to sqlite-vec's k limit, 4096).
 */
async function finiteNearest(ask: Asker, v: Float32Array): Promise<{ id: VectorId; vector: Float32Array | null }[]> {
  const finite = (g: { vector: Float32Array | null }) => !g.vector || g.vector.every(Number.isFinite);
  for (let k = RECALL_K; ; ) {
    const got = await ask.nearest(v, k);
    const kept = got.filter(finite);
    if (kept.length >= RECALL_K || got.length < k || k >= 4096) return kept.slice(0, RECALL_K);
    k = Math.min(4096, k + got.length - kept.length);
  }
}

/**
 * One probe's recall@10 on the restored store: the share of its recorded neighbours the store returned. A returned
 * id not recorded but as near as the recorded 10th (recomputed here) is a tie and counts.
 */
async function probeRecall(ask: Asker, r: RecallRecord, p: RecallRecord["probes"][number], i: number): Promise<ProbeOutcome> {
  const name = p.id === null ? `given probe ${i + 1}` : `${r.id_column} ${p.id}`;
  const v = p.vector ? vectorFromBase64(p.vector) : await ask.vectorOf(p.id!);
  if (!v) return { probe: name, recall: 0, note: "its vector is not in the restored store" };
  if (vectorDigest(v) !== p.vector_sha256) return { probe: name, recall: 0, note: `its vector differs from the snapshot's (${v.length} values)` };
  if (!p.neighbours.length) return { probe: name, recall: 1 };
  const want = new Set(p.neighbours.map(String));
  const got = await finiteNearest(ask, v);
  const tie = p.kth_distance * (1 + 1e-5) + 1e-6;
  const hits = got.filter((g) => want.has(String(g.id)) || (g.vector?.length === v.length && distance(v, g.vector, r.metric) <= tie)).length;
  const recall = Math.min(hits, want.size) / want.size;
  const missed = p.neighbours.filter((n) => !got.some((g) => String(g.id) === String(n)));
  return { probe: name, recall, ...(recall < 1 ? { note: `missed ${missed.slice(0, 5).join(", ")}${missed.length > 5 ? ", …" : ""}` } : {}) };
}

/** Asks one store every probe and counts its row gaps; a store that can not be asked scores 0 with the reason. */
async function storeRecall(r: RecallRecord, threshold: number, where: string | undefined): Promise<StoreRecall> {
  const out: StoreRecall = {
    store: r.store,
    kind: r.kind,
    probes: r.probes.length,
    mean_recall: 0,
    threshold,
    ok: false,
    worst: [],
    rows_without_vector: { snapshot: r.rows_without_vector, restored: null },
    vectors_without_row: { snapshot: r.vectors_without_row, restored: null },
  };
  if (!where) return { ...out, error: `${r.kind === "lancedb" ? "source" : "database"} ${r.name} was not restored` };
  let ask: Asker | undefined;
  try {
    ask = r.kind === "lancedb" ? await lanceAsker(where, r) : await vec0Asker(where, r);
    const outcomes: ProbeOutcome[] = [];
    for (const [i, p] of r.probes.entries()) outcomes.push(await probeRecall(ask, r, p, i));
    const g = await ask.gaps();
    out.rows_without_vector.restored = g.without;
    out.vectors_without_row.restored = g.orphans;
    out.mean_recall = outcomes.length ? Math.round((outcomes.reduce((s, o) => s + o.recall, 0) / outcomes.length) * 10000) / 10000 : 1;
    out.worst = outcomes.filter((o) => o.recall < 1).sort((a, b) => a.recall - b.recall).slice(0, 5);
    out.ok = out.mean_recall >= threshold;
    return out;
  } catch (e) {
    return { ...out, error: (e as Error).message };
  } finally {
    ask?.close();
  }
}

/**
 * The recall checks of a drill whose spec has a `recall` section: per store the snapshot records (or the spec
 * names), `recall:<store>` (mean recall@10 against the threshold, the worst probes named) and `vector_rows:<store>`
 * (rows without a vector and vectors without a row, as the snapshot counted them). A store the spec names that the
 * snapshot does not record, or a snapshot with no record at all, fails.
 * @param dbs restored databases by name; `sources`: where each restored source is (a lancedb folder)
 */
export async function recallChecks(m: Manifest, section: RecallSection, dbs: Map<string, string>, sources: Map<string, string>, log: CheckLog): Promise<StoreRecall[]> {
  const records = (m.recall ?? []).filter((r) => !section.stores || section.stores.includes(r.store));
  for (const s of section.stores ?? []) if (!records.some((r) => r.store === s)) log.add({ scenario: "restore", name: `recall:${s}`, ok: false, severity: "error", detail: `the snapshot records no probes for ${s} (the config's recall section names it at backup)` });
  if (!section.stores && !records.length) log.add({ scenario: "restore", name: "recall", ok: false, severity: "error", detail: "the snapshot records no recall probes: the agent's config had no recall section when it was taken" });
  const out: StoreRecall[] = [];
  for (const r of records) {
    const s = await storeRecall(r, section.threshold, r.kind === "lancedb" ? sources.get(r.name) : dbs.get(r.name));
    out.push(s);
    const worst = s.worst.map((w) => `${w.probe} ${w.recall.toFixed(2)}${w.note ? ` (${w.note})` : ""}`).join("; ");
    const detail = s.error
      ? `could not be asked: ${s.error}`
      : `recall@${RECALL_K} ${s.mean_recall.toFixed(4)} over ${s.probes} probe(s), threshold ${s.threshold}${worst ? `; worst: ${worst}` : ""}`;
    log.add({ scenario: "restore", name: `recall:${r.store}`, ok: s.ok, severity: "error", detail });
    if (s.error) continue;
    const same = s.rows_without_vector.restored === s.rows_without_vector.snapshot && s.vectors_without_row.restored === s.vectors_without_row.snapshot;
    const n = (x: number | null) => (x === null ? "not counted" : String(x));
    log.add({ scenario: "restore", name: `vector_rows:${r.store}`, ok: same, severity: "error", detail: `rows without a vector: ${n(s.rows_without_vector.restored)} (snapshot ${n(s.rows_without_vector.snapshot)}); vectors without a row: ${n(s.vectors_without_row.restored)} (snapshot ${n(s.vectors_without_row.snapshot)})` });
  }
  return out;
}
