// Exact neighbours for recall parity: L2 and cosine distance, ties broken by id, the seeded sample, and the vectors of
// a real vec0 table (made with the real sqlite-vec extension) read back from its shadow tables without it.
import { describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import * as sqliteVec from "sqlite-vec";
import { distance, exactTopK, probeRecords, sampleIds, vec0Vectors, vectorDigest } from "../../../../src/state/sqlite/neighbours.js";

const f = (...x: number[]) => Float32Array.from(x);

describe("exact neighbours", () => {
  it("measures L2 and cosine distance", () => {
    expect(distance(f(0, 0), f(3, 4), "l2")).toBe(5);
    expect(distance(f(1, 0), f(0, 2), "cosine")).toBeCloseTo(1);
    expect(distance(f(1, 1), f(2, 2), "cosine")).toBeCloseTo(0);
  });

  it("orders by distance, then by id", () => {
    const ids = [30, 10, 20, 5];
    const vs = [f(1, 0), f(1, 0), f(0, 1), f(5, 5)];
    expect(exactTopK(f(0, 0), ids, vs, 3, "l2").map((n) => n.id)).toEqual([10, 20, 30]);
  });

  it("samples the same ids for the same seed whatever the read order, others for another seed", () => {
    const ids = Array.from({ length: 100 }, (_, i) => i);
    const a = sampleIds(ids, 10, "s1");
    expect(sampleIds([...ids].reverse(), 10, "s1")).toEqual(a);
    expect(sampleIds(ids, 10, "s2")).not.toEqual(a);
    expect(new Set(a).size).toBe(10);
  });

  it("refuses a given probe of another width", () => {
    expect(() => probeRecords({ probes: 1, seed: "", metric: "l2", vectors: [[1, 2, 3]] }, [1], [f(1, 2)], 2)).toThrow("probe 1 has 3 values, the store's vectors 2");
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
    const a = vec0Vectors(db, "a", "embedding");
    expect(a.ids).toEqual([10, 30, 40, 50]);
    expect(a.vectors.map(vectorDigest)).toEqual([1, 3, 4, 5].map((i) => vectorDigest(f(i, 0, 1))));
    const b = vec0Vectors(db, "b", "embedding");
    expect(b).toMatchObject({ ids: ["m1", "m2", "m3", "m4", "m5"], dimension: 2 });
    expect(Array.from(b.vectors[2]!)).toEqual([3, -3]);
    expect(() => vec0Vectors(db, "a", "nope")).toThrow("vec0 table a has no vector column nope (it has embedding)");
    expect(() => vec0Vectors(db, "c", "embedding")).toThrow("no sqlite-vec vec0 table c");
    db.close();
  });
});
