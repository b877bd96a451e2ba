/**
 * SQLite connections to files agentbak did not write (state/sqlite/open.ts):
 * a hostile schema can not run code, damage is reported not thrown, row counts
 * skip a virtual table whose module is absent, sqlite-vec widths are read
 * without the extension, and SQLite's errors get their exit codes.
 */
import Database from "better-sqlite3";
import { mkdtempSync, rmSync, writeFileSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { foreignKeyCheck, integrityCheck, isVirtual, openDefensive, sqliteError, tableCounts, userVersion, vec0Dimensions } from "../../../../src/state/sqlite/open.js";
import { AgentbakError } from "../../../../src/errors.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-open-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
function make(setup: (d: Database.Database) => void): string {
  const p = join(dir, `d${n++}.sqlite`);
  const d = new Database(p);
  setup(d);
  d.close();
  return p;
}

describe("openDefensive", () => {
  it("is read-only by default, must find the file, and does not trust the schema", () => {
    const p = make((d) => d.exec("CREATE TABLE t (x); INSERT INTO t VALUES (1); CREATE VIEW v AS SELECT * FROM t"));
    const db = openDefensive(p);
    expect(() => db.exec("INSERT INTO t VALUES (2)")).toThrow(/readonly/);
    expect(db.pragma("trusted_schema", { simple: true })).toBe(0);
    expect(db.pragma("cell_size_check", { simple: true })).toBe(1);
    expect(db.pragma("mmap_size", { simple: true })).toBe(0);
    expect(db.pragma("cache_size", { simple: true })).toBe(-2000);
    db.close();
    expect(() => openDefensive(join(dir, "missing.sqlite"))).toThrow();
    const w = openDefensive(p, { readonly: false });
    w.exec("INSERT INTO t VALUES (2)");
    expect(w.prepare("SELECT count(*) FROM t").pluck().get()).toBe(2);
    w.close();
  });

  it("defensive mode: writable_schema can not be used to rewrite sqlite_schema", () => {
    const p = make((d) => d.exec("CREATE TABLE t (x)"));
    const db = openDefensive(p, { readonly: false });
    db.pragma("writable_schema = ON");
    expect(() => db.exec("UPDATE sqlite_schema SET sql = 'CREATE TABLE t (y)' WHERE name = 't'")).toThrow();
    db.close();
  });
});

describe("integrityCheck and foreignKeyCheck", () => {
  it("a healthy file is ['ok']; a damaged one lists its damage, never throws", () => {
    const p = make((d) => {
      d.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); CREATE INDEX tv ON t (v)");
      const ins = d.prepare("INSERT INTO t (v) VALUES (?)");
      for (let i = 0; i < 50; i++) ins.run(`zq${String(i).padStart(4, "0")}zq`);
    });
    let db = openDefensive(p);
    expect(integrityCheck(db)).toEqual(["ok"]);
    expect(integrityCheck(db, "quick_check")).toEqual(["ok"]);
    db.close();
    // change one value in the index only (its second copy in the file): the table and its index disagree
    const b = readFileSync(p);
    const mark = Buffer.from("zq0007zq");
    const second = b.indexOf(mark, b.indexOf(mark) + 1);
    expect(second).toBeGreaterThan(0);
    b[second + 5] = "9".charCodeAt(0);
    writeFileSync(p, b);
    db = openDefensive(p);
    expect(integrityCheck(db).join("\n")).toMatch(/index tv/);
    db.close();
    // a header that is not SQLite's: the error comes back as the result
    writeFileSync(p, Buffer.concat([Buffer.from("garbage"), b.subarray(7)]));
    db = openDefensive(p);
    expect(integrityCheck(db)).toEqual(["file is not a database"]);
    db.close();
  });

  it("foreign_key_check rows are said as child rowid → missing parent", () => {
    const p = make((d) => d.pragma("foreign_keys = OFF") && d.exec("CREATE TABLE p (id INTEGER PRIMARY KEY); CREATE TABLE c (id INTEGER PRIMARY KEY, pid REFERENCES p(id)); INSERT INTO p VALUES (1); INSERT INTO c VALUES (10, 1), (11, 7)"));
    const db = openDefensive(p);
    expect(foreignKeyCheck(db)).toEqual(["c rowid 11 references missing p"]);
    db.close();
  });
});

describe("tableCounts", () => {
  it("counts every user table, quoting odd names; a virtual table whose module is absent is skipped with the reason", () => {
    const p = make((d) => {
      d.exec(`CREATE TABLE "we""ird name" (x); INSERT INTO "we""ird name" VALUES (1),(2),(3); CREATE TABLE empty (x)`);
      d.exec("CREATE VIRTUAL TABLE docs USING fts5(body); INSERT INTO docs VALUES ('a'), ('b')");
    });
    // make docs' module unknown to the reader: rename the module in the schema (as a vec0 table is without sqlite-vec)
    const w = new Database(p);
    w.unsafeMode(true);
    w.pragma("writable_schema = ON");
    w.prepare("UPDATE sqlite_schema SET sql = replace(sql, 'fts5', 'nosuchmodule') WHERE name = 'docs'").run();
    w.close();
    const db = openDefensive(p);
    const { counts, skipped } = tableCounts(db);
    expect(counts['we"ird name']).toBe(3);
    expect(counts.empty).toBe(0);
    expect(counts.docs).toBeUndefined();
    expect(counts.docs_content).toBe(2); // shadow tables are ordinary tables
    expect(skipped).toHaveLength(1);
    expect(skipped[0]).toMatch(/^docs: .*nosuchmodule/);
    db.close();
  });

  it("isVirtual reads the CREATE statement", () => {
    expect(isVirtual("  create virtual table x using fts5(a)")).toBe(true);
    expect(isVirtual("CREATE TABLE virtual (x)")).toBe(false);
    expect(isVirtual(null)).toBe(false);
  });
});

describe("vec0Dimensions", () => {
  it("reads each vector column's width from the CREATE statement and counts chunks of another width, without the extension", () => {
    const p = make((d) => {
      d.exec("CREATE TABLE t (x)"); // the vec0 rows are written by hand below, as sqlite-vec lays them out
    });
    const w = new Database(p);
    w.unsafeMode(true);
    w.pragma("writable_schema = ON");
    w.prepare("INSERT INTO sqlite_schema (type, name, tbl_name, rootpage, sql) VALUES ('table', 'mem', 'mem', 0, 'CREATE VIRTUAL TABLE mem USING vec0(embedding float[4], tags int8[3], flags bit[9])')").run();
    w.pragma("writable_schema = OFF");
    w.close();
    const w2 = new Database(p);
    w2.exec("CREATE TABLE mem_chunks (chunk_id INTEGER PRIMARY KEY, size INTEGER); CREATE TABLE mem_vector_chunks00 (rowid INTEGER PRIMARY KEY, vectors BLOB); CREATE TABLE mem_vector_chunks01 (rowid INTEGER PRIMARY KEY, vectors BLOB)");
    w2.exec("INSERT INTO mem_chunks VALUES (1, 2), (2, 2)");
    w2.prepare("INSERT INTO mem_vector_chunks00 VALUES (1, ?), (2, ?)").run(Buffer.alloc(2 * 16), Buffer.alloc(2 * 12)); // chunk 2 holds 3-float vectors
    w2.prepare("INSERT INTO mem_vector_chunks01 VALUES (1, ?)").run(Buffer.alloc(2 * 3));
    w2.close();
    const db = openDefensive(p);
    expect(vec0Dimensions(db)).toEqual([
      { table: "mem", column: "embedding", dimension: 4, badChunks: 1 },
      { table: "mem", column: "tags", dimension: 3, badChunks: 0 },
      { table: "mem", column: "flags", dimension: 9, badChunks: -1 }, // no chunks table for it: unknown
    ]);
    expect(userVersion(db)).toBe(0);
    db.close();
  });
});

describe("sqliteError", () => {
  const err = (code: string, message: string) => Object.assign(new Error(message), { code });
  it("busy or locked is 11 naming the wait and --wait", () => {
    const e = sqliteError(err("SQLITE_BUSY", "database is locked"), "main", "/a/b.db", 5400);
    expect(e).toBeInstanceOf(AgentbakError);
    expect(e.code).toBe(11);
    expect(e.message).toBe("database main (/a/b.db) is locked by another process (database is locked; waited 5s); pass --wait to wait longer");
  });
  it("a full or failing disk is 1 naming the path and errno; not a database or corrupt is 13", () => {
    const full = sqliteError(err("SQLITE_FULL", "database or disk is full"), "main", "/a/b.db");
    expect([full.code, full.message]).toEqual([1, expect.stringMatching(/^database main: \/a\/b\.db: /)]);
    const real = new Database(make(() => undefined));
    writeFileSync(join(dir, "junk.sqlite"), "not a database at all, just text padding padding padding padding padding padding padding padding padding");
    let thrown: unknown;
    try { openDefensive(join(dir, "junk.sqlite")).prepare("SELECT * FROM sqlite_schema").all(); } catch (e) { thrown = e; }
    real.close();
    const nadb = sqliteError(thrown, "main", "junk.sqlite");
    expect(nadb.code).toBe(13);
    expect(nadb.message).toBe("database main (junk.sqlite): file is not a database");
  });
});
