// Vector stores through the real binary: a SQLite database holding a sqlite-vec `vec0` table (made with the real
// extension, which agentbak itself never loads) and an FTS5 table; a LanceDB folder captured at one table version
// while a writer keeps adding rows; the embedding model and dimension recorded, checked by the drill, and a
// changed model refused at restore and drill unless allowed and approved.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import * as sqliteVec from "sqlite-vec";
import { execa } from "execa";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, ROOT, type TestAgent } from "../helpers.js";
import { drillSpec, patchConfig } from "../sourcekit.js";
import { manifestOf } from "../craft.js";

let a: TestAgent;
let backup: any;
let spec: string;
const DIM = 8;
const MODEL = { model: "text-embedding-3-small", dimension: DIM };
const vec = (i: number) => new Float32Array(Array.from({ length: DIM }, (_, j) => Math.sin(i + j)));

/** A LanceDB writer in its own process: adds batches of 10 rows until killed. */
const WRITER = `
const lancedb = require(${JSON.stringify(join(ROOT, "node_modules/@lancedb/lancedb"))});
(async () => {
  const db = await lancedb.connect(process.argv[1]);
  const t = await db.openTable("memories");
  for (let b = 1; ; b++) {
    await t.add(Array.from({ length: 10 }, (_, i) => ({ id: 100000 + b * 10 + i, batch: b, text: "later", vector: Array.from({ length: ${DIM} }, () => Math.random()) })));
    if (b === 1) process.stdout.write("writing\\n");
  }
})();`;

beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
  // a vec0 table and an FTS5 table in the agent's own database, made with the real sqlite-vec extension
  const db = new Database(join(a.dir, "state/agent.sqlite"));
  sqliteVec.load(db);
  db.exec(`CREATE VIRTUAL TABLE memory_vectors USING vec0(embedding float[${DIM}]); CREATE VIRTUAL TABLE memory_text USING fts5(body);`);
  const ins = db.prepare("INSERT INTO memory_vectors(rowid, embedding) VALUES (?, ?)");
  for (let i = 1; i <= 300; i++) ins.run(BigInt(i), vec(i));
  db.prepare("INSERT INTO memory_text(body) VALUES (?)").run("the customer prefers email");
  db.close();
  // a LanceDB folder beside it
  const lancedb = await import("@lancedb/lancedb");
  const ldb = await lancedb.connect(join(a.dir, "memory/lance"));
  await ldb.createTable("memories", Array.from({ length: 500 }, (_, i) => ({ id: i, batch: 0, text: `memory ${i}`, vector: Array.from(vec(i)) })));
  await ldb.createTable("facts", Array.from({ length: 20 }, (_, i) => ({ id: i, fact: `fact ${i}` })));
  ldb.close();
  patchConfig(a, (c) => {
    c.databases[0].embedding = MODEL;
    c.sources = [{ name: "memory", kind: "lancedb", path: "memory/lance", embedding: MODEL }];
  });
  const writer = execa("node", ["-e", WRITER, join(a.dir, "memory/lance")], { reject: false, buffer: { stdout: false } });
  await new Promise<void>((ok, fail) => {
    writer.stdout!.once("data", () => ok());
    writer.then((w) => fail(new Error(`writer exited ${w.exitCode}: ${w.stderr}`)));
  });
  const r = await a.run(["backup", "--json"]);
  writer.kill("SIGKILL");
  await writer;
  expect(r.code, r.stderr).toBe(0);
  backup = json(r);
  backup.path = await a.file(backup.path);
  spec = drillSpec(a, "vectors", { memories_have_text: "-- database: state\nSELECT rowid FROM memory_text_content WHERE c0 IS NULL" });
}, 180_000);

afterAll(() => a?.cleanup());

describe("a SQLite database with vec0 and FTS5 virtual tables", () => {
  it("backs up: the vec0 table is not counted (module not loaded) and says so; its shadow tables and FTS5 are counted", () => {
    const m = manifestOf(backup.path);
    const c = m.components.find((x: any) => x.kind === "sqlite");
    expect(c.virtual_tables).toEqual(["memory_vectors: no such module: vec0"]);
    expect(c.records.memory_vectors).toBeUndefined();
    expect(c.records.memory_vectors_rowids).toBe(300);
    expect(c.records.memory_text).toBe(1);
    expect(c.embedding).toEqual(MODEL);
  });

  it("verifies, restores and drills, checking the stored vectors have the recorded dimension", async () => {
    const v = await a.run(["verify", backup.snapshot_id, "--identity", a.identity, "--json"]);
    expect(v.code, v.stderr).toBe(0);
    const target = join(a.tmp, "restored");
    const r = await a.run(["restore", backup.snapshot_id, "--target", target, "--yes", "--json"]);
    expect([0, 3], r.stderr).toContain(r.code);
    const db = new Database(join(target, "state/agent.sqlite"));
    sqliteVec.load(db);
    const near = db.prepare("SELECT rowid FROM memory_vectors WHERE embedding MATCH ? ORDER BY distance LIMIT 1").pluck().get(vec(42));
    db.close();
    expect(near).toBe(42);
    const d = await a.run(["drill", backup.snapshot_id, "--spec", spec, "--identity", a.identity, "--no-report", "--json"]);
    const dr = json(d);
    expect([0, 3], JSON.stringify(dr.checks.filter((c: any) => !c.ok))).toContain(d.code);
    expect(dr.ok).toBe(true);
    expect(dr.checks.find((c: any) => c.name === "vector_dimension:state.memory_vectors")).toMatchObject({ ok: true, detail: expect.stringContaining(`declares dimension ${DIM}`) });
    expect(dr.checks.find((c: any) => c.name === "invariant:memories_have_text")).toMatchObject({ ok: true });
  });
});

describe("a LanceDB source", () => {
  it("is captured at one table version while a writer adds rows: count, version and dimension recorded", () => {
    const m = manifestOf(backup.path);
    const mem = m.components.find((x: any) => x.kind === "lancedb" && x.path.endsWith("/memories.arrows"));
    const facts = m.components.find((x: any) => x.kind === "lancedb" && x.path.endsWith("/facts.arrows"));
    expect(mem).toMatchObject({ name: "memory", dimension: DIM, embedding: MODEL });
    expect(mem.table_version).toBeGreaterThan(1); // the writer had added batches before the capture
    expect(mem.records.memories).toBeGreaterThan(500);
    expect(mem.records.memories % 10).toBe(0); // whole batches only: one version, never half of an add
    expect(facts).toMatchObject({ records: { facts: 20 } });
    expect(facts.dimension).toBeUndefined();
    expect(m.capture_instant.sources[0]).toMatchObject({ name: "memory", kind: "lancedb", ref: null, path: "memory/lance" });
  });

  it("restores into the target folder with the same rows, and the drill checks the vector dimension", async () => {
    const m = manifestOf(backup.path);
    const rows = m.components.find((x: any) => x.path.endsWith("/memories.arrows")).records.memories;
    const target = join(a.tmp, "restored");
    const lancedb = await import("@lancedb/lancedb");
    const ldb = await lancedb.connect(join(target, "memory/lance"));
    expect((await ldb.tableNames()).sort()).toEqual(["facts", "memories"]);
    const t = await ldb.openTable("memories");
    expect(await t.countRows()).toBe(rows);
    expect(await t.countRows("batch > 0")).toBe(rows - 500);
    ldb.close();
    const d = await a.run(["drill", backup.snapshot_id, "--spec", spec, "--identity", a.identity, "--no-report", "--json"]);
    const dr = json(d);
    expect(dr.checks.find((c: any) => c.name === "vector_dimension:memory.memories")).toMatchObject({ ok: true, detail: `stored vectors have dimension ${DIM}; text-embedding-3-small is recorded with ${DIM}` });
    expect(dr.checks.find((c: any) => c.name === "source-restore:memory")).toMatchObject({ ok: true });
  });
});

describe("embedding compatibility", () => {
  it("refuses (14) to restore or drill vectors of another embedding model than the config's, unless allowed and approved", async () => {
    patchConfig(a, (c) => (c.sources[0].embedding = { model: "text-embedding-3-large", dimension: 3072 }));
    const target = join(a.tmp, "refused");
    const r = await a.run(["restore", backup.snapshot_id, "--target", target, "--yes"]);
    expect(r.code).toBe(14);
    expect(r.stderr).toContain("vector store memory: the snapshot's vectors are from text-embedding-3-small (dimension 8), the config here uses text-embedding-3-large (dimension 3072); pass --allow-embedding-change");
    expect(existsSync(target)).toBe(false);
    const d = await a.run(["drill", backup.snapshot_id, "--spec", spec, "--identity", a.identity, "--no-report"]);
    expect(d.code).toBe(14);
    expect(d.stderr).toContain("vector store memory");
    // allowed: it still needs approval (no TTY, no --yes: refused), then goes ahead with the change named
    const noYes = await a.run(["restore", backup.snapshot_id, "--target", target, "--allow-embedding-change"]);
    expect(noYes.code).toBe(2);
    expect(existsSync(target)).toBe(false);
    const ok = await a.run(["restore", backup.snapshot_id, "--target", target, "--allow-embedding-change", "--yes", "--json"]);
    expect([0, 3], ok.stderr).toContain(ok.code);
    expect(json(ok).warnings.join("\n")).toContain("text-embedding-3-large");
    expect(readdirSync(join(target, "memory/lance")).length).toBeGreaterThan(0);
  });
});
