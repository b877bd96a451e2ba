/**
 * The backup's integrity check in sequential reads. What integrity_check
 * establishes beyond quick_check is that every index holds exactly the
 * entries its table's rows make, and that no UNIQUE index holds two equal
 * keys; it learns the first by looking every row up in every index, which on
 * a database larger than the page cache is a random read per row and index
 * (a 300 MiB ledger with two indexes: 14 s of CPU, against quick_check's 0.7).
 * `index_digest` establishes the same in O(N): quick_check (every b-tree page,
 * record format, rowid order, NOT NULL and CHECK constraints), then for each
 * index a keyed multiset digest (count, and two 32-bit lanes of sums of a
 * keyed hash of each entry's values) read from the index alone (a covering
 * scan) equal to the same digest of the entries its table's rows make (a scan
 * of the table that uses no index), and for each UNIQUE index a scan in its
 * own order for two equal keys (NULLs apart, under the index's collations).
 * The key is random per check, so no stored value can be made to cancel out.
 * A schema this can not read that way — an expression or partial index, a
 * WITHOUT ROWID table with an index, a table whose rowid has no free name, a
 * plan that does not scan as required — runs integrity_check instead, and
 * the result says which check ran. So does a database with no index (there
 * quick_check is integrity_check's work) and one smaller than
 * INDEX_DIGEST_FROM, where integrity_check is as cheap (a ledger of two
 * indexes, CPU s, integrity_check vs this: 3.7 MiB 0.035/0.066, 7.5 MiB
 * 0.13/0.10, 15 MiB 0.59/0.24, 60 MiB 2.8/0.86): the index digest check is
 * attested as `index_digest_checked`, which makes a bundle format 8
 * (docs/bundle-format.md), so it is written only where it saves work.
 */
import { randomBytes } from "node:crypto";
import type { DB } from "./open.js";
import { integrityCheck } from "./open.js";

export type IntegrityMethod = "integrity_check" | "index_digest";

/** The database size (page_count × page_size) from which the index digests replace integrity_check: 8 MiB, about where they cost the same. */
export const INDEX_DIGEST_FROM = 8 * 1024 * 1024;

export interface IntegrityResult {
  /** ["ok"] when the database passed; else what failed, as integrity_check lists it */
  result: string[];
  method: IntegrityMethod;
}

const q = (s: string) => `"${s.replace(/"/g, '""')}"`;

interface IndexPlan {
  index: string;
  unique: boolean;
  /** the entry's values as SQL over the table: its columns, then the rowid */
  values: string[];
  /** the key columns with the index's collations (the UNIQUE check's GROUP BY) */
  keys: { column: string; coll: string }[];
}

/**
 * Each table's indexes as the digest reads them, or null when one of them can
 * not be read that way (integrity_check runs instead).
 */
function planIndexes(db: DB): Map<string, IndexPlan[]> | null {
  const tables = (db.pragma("table_list") as { schema: string; name: string; type: string; wr: number }[]).filter((t) => t.schema === "main" && t.type === "table");
  const plans = new Map<string, IndexPlan[]>();
  for (const t of tables) {
    const indexes = db.pragma(`index_list(${q(t.name)})`) as { name: string; unique: number; origin: string; partial: number }[];
    if (!indexes.length) continue;
    if (t.wr || indexes.some((i) => i.partial)) return null;
    const columns = new Set((db.pragma(`table_xinfo(${q(t.name)})`) as { name: string }[]).map((c) => c.name.toLowerCase()));
    const rowid = ["rowid", "_rowid_", "oid"].find((n) => !columns.has(n));
    if (!rowid) return null;
    const list: IndexPlan[] = [];
    for (const i of indexes) {
      const xinfo = db.pragma(`index_xinfo(${q(i.name)})`) as { cid: number; name: string | null; coll: string; key: number }[];
      if (xinfo.some((x) => x.cid === -2 || (x.cid >= 0 && x.name === null))) return null;
      list.push({
        index: i.name,
        unique: i.unique === 1,
        values: xinfo.map((x) => (x.cid === -1 ? rowid : q(x.name!))),
        keys: xinfo.filter((x) => x.key && x.cid >= 0).map((x) => ({ column: q(x.name!), coll: x.coll })),
      });
    }
    plans.set(t.name, list);
  }
  return plans;
}

/** Whether SQLite would run `sql` as wanted: every step of its plan passes `ok`. */
function planned(db: DB, sql: string, ok: (detail: string) => boolean): boolean {
  const steps = db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all() as { detail: string }[];
  return steps.length > 0 && steps.every((s) => ok(s.detail));
}

/**
 * The keyed entry hash, two lanes, over SQLite's values as better-sqlite3
 * hands them over (integers beyond 2^53 arrive as the nearest double: both
 * sides read them the same way). Numbers are hashed by value (an integer and
 * the equal real compare equal in an index too), text by UTF-16 code unit,
 * blobs by byte, each with its type and length.
 */
function digester(key: Buffer) {
  const k = [key.readInt32LE(0), key.readInt32LE(4), key.readInt32LE(8), key.readInt32LE(12)];
  const f64 = new Float64Array(1);
  const i32 = new Int32Array(f64.buffer);
  let a = 0;
  let b = 0;
  const mix = (x: number) => {
    a = Math.imul(a ^ x, 0x01000193) ^ k[2]!;
    a = Math.imul(a ^ (a >>> 15), 0x2c1b3c6d);
    b = Math.imul(b ^ x, 0x5bd1e995) ^ k[3]!;
    b = Math.imul(b ^ (b >>> 13), 0x297a2d39);
  };
  const fmix = (h: number) => {
    h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
    h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
    return (h ^ (h >>> 16)) >>> 0;
  };
  return (s: { n: number; a: number; b: number }, ...values: unknown[]) => {
    a = k[0]!;
    b = k[1]!;
    for (const v of values) {
      if (v === null) mix(1);
      else if (typeof v === "number") {
        f64[0] = v === 0 ? 0 : v;
        mix(2);
        mix(i32[0]!);
        mix(i32[1]!);
      } else if (typeof v === "string") {
        mix(3);
        mix(v.length);
        for (let i = 0; i < v.length; i++) mix(v.charCodeAt(i));
      } else if (typeof v === "bigint") {
        mix(4);
        mix(Number(BigInt.asIntN(32, v)));
        mix(Number(BigInt.asIntN(32, v >> 32n)));
      } else {
        const u = v as Uint8Array;
        mix(5);
        mix(u.length);
        for (let i = 0; i < u.length; i++) mix(u[i]!);
      }
    }
    s.n++;
    s.a = (s.a + fmix(a)) >>> 0;
    s.b = (s.b + fmix(b)) >>> 0;
    return s;
  };
}

/**
 * quick_check, then each index's digest from the index against its table's,
 * and each UNIQUE index checked for duplicate keys; integrity_check instead
 * where the schema does not allow that, the database has no index or is
 * smaller than `from` bytes (see the file's comment). Never throws for a
 * damaged file: SQLite's error is the result.
 */
export function backupIntegrityCheck(db: DB, from = INDEX_DIGEST_FROM): IntegrityResult {
  const fn = `agentbak_index_digest_${randomBytes(6).toString("hex")}`;
  let plans: Map<string, IndexPlan[]> | null;
  try {
    const bytes = (db.pragma("page_count", { simple: true }) as number) * (db.pragma("page_size", { simple: true }) as number);
    db.aggregate(fn, { varargs: true, directOnly: true, deterministic: false, start: () => ({ n: 0, a: 0, b: 0 }), step: digester(randomBytes(16)), result: (s) => `${s.n}:${s.a}:${s.b}` });
    plans = bytes < from ? null : planIndexes(db);
    if (plans?.size === 0) plans = null; // no index: integrity_check is quick_check's work
    // each table read by a scan that uses no index, each index by a covering scan of itself alone
    for (const [table, list] of plans ?? [])
      if (!planned(db, fromTable(fn, table, list), (d) => !d.includes(" USING ")) || !list.every((p) => planned(db, fromIndex(fn, table, p), (d) => d.endsWith(` USING COVERING INDEX ${p.index}`)))) plans = null;
  } catch {
    plans = null; // a schema SQLite can not read: integrity_check says what is wrong
  }
  const first = integrityCheck(db, plans ? "quick_check" : "integrity_check");
  if (!plans || first.length !== 1 || first[0] !== "ok") return { result: first, method: plans ? "index_digest" : "integrity_check" };
  const errors: string[] = [];
  try {
    for (const [table, list] of plans) {
      const want = db.prepare(fromTable(fn, table, list)).raw().get() as string[];
      list.forEach((p, i) => {
        const got = db.prepare(fromIndex(fn, table, p)).pluck().get() as string;
        if (got === want[i]) return;
        const [n, m] = [Number(got.split(":")[0]), Number(want[i]!.split(":")[0])];
        errors.push(n !== m ? `wrong # of entries in index ${p.index}: ${n}, table ${table} has ${m} rows` : `index ${p.index} does not hold the entries of table ${table}'s rows (their digests differ)`);
      });
      for (const p of list.filter((x) => x.unique && x.keys.length)) {
        const dup = `SELECT 1 FROM ${q(table)} INDEXED BY ${q(p.index)} WHERE ${p.keys.map((k) => `${k.column} IS NOT NULL`).join(" AND ")} GROUP BY ${p.keys.map((k) => `${k.column} COLLATE ${q(k.coll)}`).join(", ")} HAVING count(*) > 1 LIMIT 1`;
        if (db.prepare(dup).pluck().get() !== undefined) errors.push(`non-unique entry in index ${p.index}`);
      }
    }
  } catch (e) {
    errors.push((e as Error).message);
  }
  return { result: errors.length ? errors : ["ok"], method: "index_digest" };
}

/** One scan of `table` that uses no index, each of its indexes' digests of the entries its rows make. */
const fromTable = (fn: string, table: string, list: IndexPlan[]) => `SELECT ${list.map((p) => `${fn}(${p.values.join(", ")})`).join(", ")} FROM ${q(table)} NOT INDEXED`;
/** The digest of index `p`'s entries, read from the index alone. */
const fromIndex = (fn: string, table: string, p: IndexPlan) => `SELECT ${fn}(${p.values.join(", ")}) FROM ${q(table)} INDEXED BY ${q(p.index)}`;
