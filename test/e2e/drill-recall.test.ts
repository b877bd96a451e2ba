// Recall parity through the real binary, on real stores: a sqlite-vec `vec0` table (made with the real extension)
// beside its rows table, and a LanceDB table. Backup records each probe's exact top-10 in the signed manifest; the
// drill asks the restored stores through their own query paths. A correct restore passes; each planted defect (the
// vec0 table left out, a vector column of another dimension, 5% of the vectors deleted with their rows kept, in
// either store) is caught, named, in JSON and JUnit. The passing drill runs with 20 different probe seeds: no false alarm.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import * as sqliteVec from "sqlite-vec";
import { execa } from "execa";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, type TestAgent } from "../helpers.js";
import { patchConfig } from "../sourcekit.js";
import { craft, manifestOf } from "../craft.js";

const DIM = 8;
const N = 300;
let a: TestAgent;
let good: { id: string; path: string; manifest: any };
let spec: string;

/** A deterministic pseudo-random vector per id (no two alike, so exact search has no ties). */
const vec = (i: number, dim = DIM) => new Float32Array(Array.from({ length: dim }, (_, j) => Math.sin(i * 12.9898 + j * 78.233) * 43758.5453 % 1));
const VEC_DB = () => join(a.dir, "state/agent.sqlite");

/** Runs `f` on the agent's database with sqlite-vec loaded. */
function withVec(f: (db: Database.Database) => void) {
  const db = new Database(VEC_DB());
  sqliteVec.load(db);
  try {
    f(db);
  } finally {
    db.close();
  }
}

async function backup(): Promise<{ id: string; path: string; manifest: any }> {
  const r = await a.run(["backup", "--json"]);
  expect(r.code, r.stderr).toBe(0);
  const path = await a.file(json(r).path);
  return { id: json(r).snapshot_id, path, manifest: manifestOf(path) };
}

/** The latest backup's payload with the good snapshot's recall record, signed with the agent's key: a restore that no longer answers as the snapshot did. */
async function planted(name: string): Promise<string> {
  const bad = await backup();
  const { stdout } = await execa("tar", ["xOf", bad.path, "payload.age"], { encoding: "buffer" });
  const out = join(a.tmp, `${name}.agentbak`);
  await craft({ baseManifest: bad.manifest, payloadAge: Buffer.from(stdout), keyFile: join(a.home, "signing-key"), out, patch: (m) => { m.recall = good.manifest.recall; m.format_version = Math.max(m.format_version, 7); } });
  return out;
}

const drill = (ref: string, extra: string[] = []) => a.run(["drill", ref, "--spec", spec, "--identity", a.identity, "--no-report", "--json", ...extra]);
const check = (r: any, name: string) => json(r).checks.find((c: any) => c.name === name);

beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
  withVec((db) => {
    db.exec(`CREATE TABLE notes_rows (id INTEGER PRIMARY KEY, body TEXT); CREATE VIRTUAL TABLE memory_vectors USING vec0(embedding float[${DIM}]);`);
    const row = db.prepare("INSERT INTO notes_rows (id, body) VALUES (?, ?)");
    const v = db.prepare("INSERT INTO memory_vectors (rowid, embedding) VALUES (?, ?)");
    for (let i = 1; i <= N; i++) {
      row.run(i, `memory ${i}`);
      v.run(BigInt(i), vec(i));
    }
  });
  const lancedb = await import("@lancedb/lancedb");
  const ldb = await lancedb.connect(join(a.dir, "memory/lance"));
  await ldb.createTable("notes", Array.from({ length: N }, (_, i) => ({ id: i, text: `note ${i}`, vector: Array.from(vec(1000 + i)) })));
  ldb.close();
  patchConfig(a, (c) => {
    c.sources = [{ name: "memory", kind: "lancedb", path: "memory/lance" }];
    c.recall = [
      { store: "state", table: "memory_vectors", rows: { table: "notes_rows", id: "id" }, probes: 20 },
      { store: "memory", table: "notes", id: "id", column: "vector", probes: 20 },
    ];
  });
  good = await backup();
  spec = join(a.tmp, "recall.json");
  writeFileSync(spec, JSON.stringify({ name: "recall", invariants: [], recall: {} }));
}, 120_000);

afterAll(() => a?.cleanup());

describe("backup", () => {
  it("records each probe's exact top-10 in the signed manifest, vectors of sampled probes left out", () => {
    const rs = good.manifest.recall;
    expect(rs.map((r: any) => r.store)).toEqual(["state.memory_vectors", "memory.notes"]);
    const [v, l] = rs;
    expect(v).toMatchObject({ kind: "sqlite-vec", metric: "l2", dimension: DIM, vectors: N, rows_without_vector: 0, vectors_without_row: 0 });
    expect(l).toMatchObject({ kind: "lancedb", dimension: DIM, vectors: N, rows_without_vector: 0, vectors_without_row: null });
    expect(v.probes).toHaveLength(20);
    // exact L2 search in the test itself agrees with the recorded neighbours of a probe (the probe is its own nearest)
    const p = v.probes[3];
    const d = (x: Float32Array, y: Float32Array) => Math.sqrt(x.reduce((s, xi, j) => s + (xi - y[j]!) ** 2, 0));
    const want = Array.from({ length: N }, (_, i) => i + 1).sort((x, y) => d(vec(p.id), vec(x)) - d(vec(p.id), vec(y)) || x - y).slice(0, 10);
    expect(p.neighbours).toEqual(want);
    expect(p.vector).toBeUndefined();
  });

  it("refuses (2) a probe set naming a table the store does not have, writing nothing", async () => {
    const before = readFileSync(a.config, "utf8");
    patchConfig(a, (c) => (c.recall[0].table = "no_such_vectors"));
    const r = await a.run(["backup", "--json"]);
    writeFileSync(a.config, before);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("recall[0] (state.no_such_vectors): no sqlite-vec vec0 table no_such_vectors");
  });
});

describe("the drill", () => {
  it("passes a correct restore: recall@10 is 1 in both stores, asked through sqlite-vec's MATCH and LanceDB's search; JUnit names each check", async () => {
    const junit = join(a.tmp, "recall.xml");
    const r = await drill(good.id, ["--junit", junit]);
    expect([0, 3], r.stderr + r.stdout).toContain(r.code);
    const j = json(r);
    expect(j.recall.map((s: any) => [s.store, s.mean_recall, s.ok])).toEqual([
      ["state.memory_vectors", 1, true],
      ["memory.notes", 1, true],
    ]);
    expect(check(r, "vector_rows:state.memory_vectors")).toMatchObject({ ok: true });
    const xml = readFileSync(junit, "utf8");
    for (const n of ["recall:state.memory_vectors", "recall:memory.notes", "vector_rows:state.memory_vectors", "vector_rows:memory.notes"]) expect(xml).toContain(`name="restore / checks / ${n}"`);
  });

  it("fails (15) when 5% of the vec0 vectors are gone and their rows remain: recall below 0.99, the worst probes and the rows without a vector named", async () => {
    withVec((db) => db.prepare("DELETE FROM memory_vectors WHERE rowid % 20 = 7").run());
    const f = await planted("vec-deleted");
    const r = await drill(f);
    expect(r.code, r.stderr).toBe(15);
    const c = check(r, "recall:state.memory_vectors");
    expect(c.ok).toBe(false);
    const s = json(r).recall.find((x: any) => x.store === "state.memory_vectors");
    expect(s.mean_recall).toBeLessThan(0.99);
    expect(s.mean_recall).toBeGreaterThan(0.5);
    expect(c.detail).toMatch(/worst: rowid \d+ 0\.\d\d \((missed \d+|its vector is not in the restored store)/);
    expect(c.detail).toContain("(missed ");
    expect(check(r, "vector_rows:state.memory_vectors")).toMatchObject({ ok: false, detail: "rows without a vector: 15 (snapshot 0); vectors without a row: 0 (snapshot 0)" });
    expect(check(r, "recall:memory.notes").ok).toBe(true);
  });

  it("fails (15) when the vec0 table is left out, naming the store", async () => {
    withVec((db) => db.exec("DROP TABLE memory_vectors"));
    // the config must stop naming it, or backup refuses (2): the snapshot's payload without the table
    const before = readFileSync(a.config, "utf8");
    patchConfig(a, (c) => c.recall.splice(0, 1));
    const f = await planted("vec-dropped").finally(() => writeFileSync(a.config, before));
    const r = await drill(f);
    expect(r.code).toBe(15);
    expect(check(r, "recall:state.memory_vectors")).toMatchObject({ ok: false, detail: expect.stringContaining("could not be asked: no such table: memory_vectors") });
  });

  it("fails (15) when the vector column has another dimension (vectors truncated to 4)", async () => {
    withVec((db) => {
      db.exec("CREATE VIRTUAL TABLE memory_vectors USING vec0(embedding float[4])");
      const v = db.prepare("INSERT INTO memory_vectors (rowid, embedding) VALUES (?, ?)");
      for (let i = 1; i <= N; i++) v.run(BigInt(i), vec(i).slice(0, 4));
    });
    const r = await drill(await planted("vec-dim"));
    expect(r.code).toBe(15);
    const c = check(r, "recall:state.memory_vectors");
    expect(c.ok).toBe(false);
    expect(c.detail).toContain("recall@10 0.0000");
    expect(c.detail).toContain("its vector differs from the snapshot's (4 values)");
  });

  it("fails (15) when 5% of a LanceDB table's rows are gone", async () => {
    // the vec0 table as it was, so only the LanceDB store differs
    withVec((db) => {
      db.exec(`DROP TABLE memory_vectors; CREATE VIRTUAL TABLE memory_vectors USING vec0(embedding float[${DIM}])`);
      const v = db.prepare("INSERT INTO memory_vectors (rowid, embedding) VALUES (?, ?)");
      for (let i = 1; i <= N; i++) v.run(BigInt(i), vec(i));
    });
    const lancedb = await import("@lancedb/lancedb");
    const ldb = await lancedb.connect(join(a.dir, "memory/lance"));
    const t = await ldb.openTable("notes");
    await t.delete("id % 20 = 7");
    ldb.close();
    const r = await drill(await planted("lance-deleted"));
    expect(r.code).toBe(15);
    expect(check(r, "recall:state.memory_vectors").ok).toBe(true);
    const c = check(r, "recall:memory.notes");
    expect(c.ok).toBe(false);
    expect(json(r).recall.find((x: any) => x.store === "memory.notes").mean_recall).toBeLessThan(0.99);
  });
});

describe("false alarms", () => {
  it("none across 20 runs of the passing drill, each with other probes (20 seeds: a backup and a drill each)", async () => {
    const failures: string[] = [];
    const means: number[] = [];
    for (let i = 0; i < 20; i++) {
      patchConfig(a, (c) => c.recall.forEach((r: any) => (r.seed = `run-${i}`)));
      const b = await backup();
      const r = await drill(b.id);
      if (![0, 3].includes(r.code)) failures.push(`seed run-${i}: exit ${r.code}: ${JSON.stringify(json(r).checks.filter((c: any) => !c.ok))}`);
      means.push(...json(r).recall.map((s: any) => s.mean_recall));
    }
    expect(failures).toEqual([]);
    expect(means).toHaveLength(40);
    expect(means.every((m) => m === 1)).toBe(true);
  }, 300_000);
});
