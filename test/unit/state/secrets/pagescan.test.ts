/**
 * The page-level secret scan against real SQLite files: every place a text
 * value can live (a plain cell, a cell spilling over a chain of overflow
 * pages, an index, a WITHOUT ROWID table) is found; values that only look
 * like a token when neighbouring bytes run together are not.
 */
import Database from "better-sqlite3";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { scanFilePages } from "../../../../src/state/secrets/pagescan.js";
import { inspectSnapshot } from "../../../../src/state/inspect/inspect.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-pagescan-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const token = "ghp_" + "Z".repeat(36);
let n = 0;
/** A database with filler rows and whatever `setup` adds; returns its path. */
function db(setup: (d: Database.Database) => void, opts: { encoding?: string } = {}): string {
  const p = join(dir, `t${n++}.sqlite`);
  const d = new Database(p);
  if (opts.encoding) d.pragma(`encoding = '${opts.encoding}'`);
  d.exec("CREATE TABLE notes (id INTEGER PRIMARY KEY, a TEXT, b TEXT, body BLOB)");
  const ins = d.prepare("INSERT INTO notes (a, b, body) VALUES (?, ?, ?)");
  // neighbouring values that run together into something token-shaped in the raw page bytes: "...task-" + "0000123..."
  d.transaction(() => {
    for (let i = 0; i < 3000; i++) ins.run(`task-`, `${String(i).padStart(7, "0")}abcdefghijklmnopqrstuvwxyz`, Buffer.alloc(64, i % 256));
  })();
  setup(d);
  d.close();
  return p;
}
const scan = (p: string, only?: number[]) => scanFilePages(p, only);

describe("page-level secret scan", () => {
  it("finds nothing in values that only look like a token when run together", () => {
    expect(scan(db(() => undefined))).toEqual([]);
  });

  it("finds a token in a plain cell", () => {
    const p = db((d) => d.prepare("INSERT INTO notes (a, b) VALUES ('x', ?)").run(`the key is ${token} ok`));
    expect(scan(p)!.length).toBe(1);
  });

  it("finds a token split across overflow pages, wherever the split falls", () => {
    // a value longer than several pages; the token straddles the local part / first overflow page and later page boundaries
    for (const at of [3000, 4056, 4090, 8150, 12_250]) {
      const p = db((d) => d.prepare("INSERT INTO notes (a) VALUES (?)").run("w".repeat(at) + " " + token + " " + "v".repeat(20_000 - at)));
      expect(scan(p), `token at ${at}`).not.toEqual([]);
    }
  });

  it("scans a value too large to hold in memory along its chain, a page at a time", () => {
    const big = (tail: string) => db((d) => d.prepare("INSERT INTO notes (b) VALUES (?)").run("w ".repeat(3_000_000) + tail));
    expect(scan(big("end"))).toEqual([]);
    const p = big(token);
    expect(scan(p)!.length).toBe(1);
    const r = inspectSnapshot({ dbs: [{ name: "big", file: p }], cursors: {}, scan: "refuse" });
    expect(r.findings).toEqual([{ where: "database big: notes.b rowid 3001", kind: "GitHub token" }]);
  });

  it("finds a token in an index and in a WITHOUT ROWID table", () => {
    const p = db((d) => {
      d.exec("CREATE TABLE kv (k TEXT PRIMARY KEY, v INTEGER) WITHOUT ROWID");
      d.prepare("INSERT INTO kv VALUES (?, 1)").run(token);
    });
    expect(scan(p)!.length).toBeGreaterThan(0);
  });

  it("checks only the changed pages it is given, unless one of them is not a b-tree page", () => {
    const p = db((d) => d.prepare("INSERT INTO notes (a) VALUES (?)").run(token));
    const found = scan(p)!;
    expect(found.length).toBe(1);
    expect(scan(p, found)).toEqual(found);
    expect(scan(p, [1])).toEqual([]); // page 1 (the schema) holds no token
    // an overflow page among the changed pages: its owning cell can not be found from it, so everything is scanned
    const q = db((d) => d.prepare("INSERT INTO notes (b) VALUES (?)").run("x".repeat(9000) + " " + token));
    const bytes = readFileSync(q);
    const overflow = Array.from({ length: bytes.length / 4096 }, (_, i) => i + 1).find((pg) => pg > 1 && ![2, 5, 10, 13].includes(bytes[(pg - 1) * 4096]!))!;
    expect(overflow).toBeGreaterThan(1);
    expect(scan(q, [overflow])).toEqual(scan(q));
    expect(scan(q)!.length).toBe(1);
  });

  it("reports a UTF-16 database as unsupported, so rows are scanned instead", () => {
    const p = db((d) => d.prepare("INSERT INTO notes (a) VALUES (?)").run(token), { encoding: "UTF-16le" });
    expect(scan(p)).toBeNull();
    const r = inspectSnapshot({ dbs: [{ name: "u16", file: p }], cursors: {}, scan: "refuse" });
    expect(r.findings.map((f) => f.where)).toEqual(["database u16: notes.a rowid 3001"]);
  });

  it("names table, column and rowid when a page is suspicious", () => {
    const p = db((d) => d.prepare("INSERT INTO notes (b) VALUES (?)").run("x".repeat(9000) + " " + token));
    const r = inspectSnapshot({ dbs: [{ name: "s", file: p, indexKey: new Uint8Array(32) }], cursors: {}, scan: "refuse" });
    expect(r.findings).toEqual([{ where: "database s: notes.b rowid 3001", kind: "GitHub token" }]);
    expect(r.dbs[0]!.index!.pageCount).toBe(statSync(p).size / 4096);
  });
});
