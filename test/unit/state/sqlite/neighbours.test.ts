// Exact neighbours for recall parity: L2 and cosine distance, ties broken by id, the seeded sample, and the vectors of
// a real vec0 table (made with the real sqlite-vec extension) read back from its shadow tables without it.
import { describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import * as sqliteVec from "sqlite-vec";
import { distance, exactTopKs, floatsOf, inMemory, probeRecords, sampleIds, vec0Recall, vec0Vectors, vectorDigest, type VectorSource } from "../../../../src/state/sqlite/neighbours.js";

const f = (...x: number[]) => Float32Array.from(x);
/** The k nearest of `vectors` to one probe, as backup finds them (exactTopKs over a pass of an in-memory store). */
const topK = (probe: Float32Array, ids: number[], vectors: Float32Array[], k: number) => exactTopKs([probe], k, "l2", inMemory(ids, vectors, probe.length).scan)[0]!;

describe("exact neighbours", () => {
  it("measures L2 and cosine distance", () => {
    expect(distance(f(0, 0), f(3, 4), "l2")).toBe(5);
    expect(distance(f(1, 0), f(0, 2), "cosine")).toBeCloseTo(1);
    expect(distance(f(1, 1), f(2, 2), "cosine")).toBeCloseTo(0);
  });

  it("reads a vector out of a blob at an unaligned offset, as a copy of its own", () => {
    const blob = Buffer.alloc(1 + 8);
    blob.writeFloatLE(1.5, 1);
    blob.writeFloatLE(-2, 5);
    const v = floatsOf(blob.subarray(1));
    expect([...v]).toEqual([1.5, -2]);
    blob.writeFloatLE(7, 1);
    expect(v[0]).toBe(1.5);
  });

  it("orders by distance, then by id", () => {
    const ids = [30, 10, 20, 5];
    const vs = [f(1, 0), f(1, 0), f(0, 1), f(5, 5)];
    expect(topK(f(0, 0), ids, vs, 3).map((n) => n.id)).toEqual([10, 20, 30]);
  });

  it("samples the same ids for the same seed whatever the read order, others for another seed", () => {
    const ids = Array.from({ length: 100 }, (_, i) => i);
    const a = sampleIds(ids, 10, "s1");
    expect(sampleIds([...ids].reverse(), 10, "s1")).toEqual(a);
    expect(sampleIds(ids, 10, "s2")).not.toEqual(a);
    expect(new Set(a).size).toBe(10);
  });

  it("keeps the k nearest per probe in one pass, as a sort of all of them would", () => {
    const ids = Array.from({ length: 200 }, (_, i) => i);
    const vs = ids.map((i) => f(Math.sin(i), Math.cos(i * 3)));
    const p = f(0.1, 0.2);
    const sorted = ids.map((id) => ({ id, distance: distance(p, vs[id]!, "l2") })).sort((a, b) => a.distance - b.distance || a.id - b.id).slice(0, 10);
    expect(topK(p, ids, vs, 10)).toEqual(sorted);
    const recs = probeRecords({ probes: 3, seed: "x", metric: "l2" }, inMemory(ids, vs, 2));
    expect(recs).toHaveLength(3);
    for (const r of recs) expect(r.neighbours[0]).toBe(r.id); // a sampled probe is its own nearest
    // a captured table's vectors, given as they are held (no VectorSource made by the caller): the same records
    expect(probeRecords({ probes: 3, seed: "x", metric: "l2" }, { ids, vectors: vs, dimension: 2 })).toEqual(recs);
  });

  it("refuses a given probe of another width", () => {
    expect(() => probeRecords({ probes: 1, seed: "", metric: "l2", vectors: [[1, 2, 3]] }, inMemory([1], [f(1, 2)], 2))).toThrow("probe 1 has 3 values, the store's vectors 2");
  });
});

describe("vec0Vectors", () => {
  it("reads the live vectors of a real vec0 table from its shadow tables, deleted rows left out, text keys as ids", () => {
    const db = new Database(":memory:");
    sqliteVec.load(db);
    db.exec("CREATE VIRTUAL TABLE a USING vec0(embedding float[3]); CREATE VIRTUAL TABLE b USING vec0(mid text primary key, embedding float[2])");
    for (let i = 1; i <= 5; i++) {
      db.prepare("INSERT INTO a(rowid, embedding) VALUES (?, ?)").run(BigInt(i * 10), f(i, 0, 1));
      db.prepare("INSERT INTO b(mid, embedding) VALUES (?, ?)").run(`m${i}`, f(i, -i));
    }
    db.prepare("DELETE FROM a WHERE rowid = 20").run();
    const all = (s: VectorSource) => {
      const out: [unknown, number[]][] = [];
      s.scan((id, v) => out.push([id, Array.from(v)]));
      return out;
    };
    const a = vec0Vectors(db, "a", "embedding");
    expect(a.ids).toEqual([10, 30, 40, 50]);
    expect(all(a).map(([id, v]) => [id, vectorDigest(f(...v))])).toEqual([1, 3, 4, 5].map((i) => [i * 10, vectorDigest(f(i, 0, 1))]));
    expect(Array.from(a.vectorOf(40))).toEqual([4, 0, 1]);
    const b = vec0Vectors(db, "b", "embedding");
    expect(b).toMatchObject({ ids: ["m1", "m2", "m3", "m4", "m5"], dimension: 2 });
    expect(all(b)[2]).toEqual(["m3", [3, -3]]);
    expect(Array.from(b.vectorOf("m3"))).toEqual([3, -3]);
    const spec = { store: "state", table: "b", column: "embedding", probes: 2, seed: "s", metric: "l2" as const };
    expect(() => vec0Recall(db, { ...spec, id: "rowid" })).toThrow('vec0 table b answers with its text primary key mid: set "id": "mid"');
    const rec = vec0Recall(db, { ...spec, id: "mid" });
    expect(rec).toMatchObject({ store: "state.b", kind: "sqlite-vec", id_column: "mid", dimension: 2, vectors: 5 });
    expect(rec.probes.map((p) => p.neighbours[0])).toEqual(rec.probes.map((p) => p.id));
    expect(rec.probes[0]!.neighbours.every((n) => typeof n === "string")).toBe(true);
    expect(() => vec0Vectors(db, "a", "nope")).toThrow("vec0 table a has no vector column nope (it has embedding)");
    expect(() => vec0Vectors(db, "c", "embedding")).toThrow("no sqlite-vec vec0 table c");
    db.close();
  });
});
