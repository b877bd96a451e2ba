/**
 * Inspection of snapshot copies (state/inspect/inspect.ts) on real SQLite
 * files, on this thread (databases under the worker threshold): integrity,
 * row counts, schema version, cursors, open operations, timer warnings and
 * the secret scan, the page index and block sums from the same read; bad
 * cursor or open-operation SQL is 2 naming the config key; a damaged copy is
 * reported, its rows not counted.
 */
import Database from "better-sqlite3";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { inspectInWorker, inspectSnapshot, integrityCheckInWorker, openOperationRows, type InspectInput } from "../../../../src/state/inspect/inspect.js";
import { indexPages } from "../../../../src/state/pages/pageindex.js";
import { BlockSummer, blockSeed } from "../../../../src/state/pages/blocks.js";
import { readPages, withPages } from "../../../../src/state/sqlite/pagefile.js";
import { AgentbakError } from "../../../../src/errors.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-inspect-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const TOKEN = "ghp_" + "Q".repeat(36);
let n = 0;

/** An agent database: messages, a cursor table, open operations, a timer column of epoch seconds. */
function agentDb(o: { token?: boolean } = {}): string {
  const p = join(dir, `agent${n++}.sqlite`);
  const d = new Database(p);
  d.exec(`CREATE TABLE messages (id INTEGER PRIMARY KEY, body TEXT);
    CREATE TABLE cursor (pos INTEGER);
    CREATE TABLE ops (id INTEGER PRIMARY KEY, key TEXT, kind TEXT, done INTEGER);
    CREATE TABLE timers (due INTEGER);
    PRAGMA user_version = 7;`);
  const ins = d.prepare("INSERT INTO messages (body) VALUES (?)");
  d.transaction(() => { for (let i = 0; i < 250; i++) ins.run(`message ${i} `.repeat(10)); })();
  if (o.token) ins.run(`here is my key ${TOKEN} ok`);
  d.exec("INSERT INTO cursor VALUES (4242); INSERT INTO ops (key, kind, done) VALUES ('pay-1', 'payment', 0), ('mail-2', NULL, 0), ('old', 'x', 1)");
  d.exec("INSERT INTO timers VALUES (1767225600), (1767225660)");
  d.close();
  return p;
}
const base = (file: string, extra: Partial<InspectInput> = {}): InspectInput => ({ dbs: [{ name: "main", file }], cursors: {}, scan: "warn", ...extra });
const fails = (f: () => unknown): AgentbakError => {
  try { f(); } catch (e) { expect(e).toBeInstanceOf(AgentbakError); return e as AgentbakError; }
  throw new Error("did not throw");
};

describe("inspectSnapshot", () => {
  it("integrity, counts, schema version, cursors, open operations; a clean file has no findings", () => {
    const file = agentDb();
    const r = inspectSnapshot(base(file, {
      cursors: { pos: { database: "main", sql: "SELECT pos FROM cursor" }, none: { database: "main", sql: "SELECT pos FROM cursor WHERE 0" }, text: { database: "main", sql: "SELECT 'abc'" } },
      openOperations: { database: "main", sql: "SELECT id, key AS idempotency_key, kind FROM ops WHERE done = 0 ORDER BY id" },
    }));
    expect(r.dbs[0]).toMatchObject({ name: "main", schemaVersion: 7, integrity: ["ok"], records: { messages: 250, cursor: 1, ops: 3, timers: 2 }, virtualTables: [] });
    expect(r.dbs[0]!.index).toBeUndefined();
    expect(r.cursors).toEqual({ pos: 4242, none: null, text: "abc" });
    expect(r.openOperations).toEqual([{ id: 1, idempotency_key: "pay-1", kind: "payment" }, { id: 2, idempotency_key: "mail-2", kind: null }]);
    expect(r.findings).toEqual([]);
    expect(r.timerWarnings).toEqual([]);
  });

  it("a token in a row is found and named by table, never by value; scan off finds nothing", () => {
    const file = agentDb({ token: true });
    const r = inspectSnapshot(base(file));
    expect(r.findings.length).toBeGreaterThan(0);
    expect(JSON.stringify(r.findings)).toContain("messages");
    expect(JSON.stringify(r.findings)).not.toContain(TOKEN);
    expect(inspectSnapshot(base(file, { scan: "off" })).findings).toEqual([]);
    expect(inspectSnapshot({ ...base(file), dbs: [{ name: "main", file, scan: false }] }).findings).toEqual([]);
  });

  it("with an index key: the page index of the same read equals indexPages, the block sums equal a BlockSummer's; indexAfter leaves the first pages out", () => {
    const file = agentDb({ token: true });
    const key = new Uint8Array(32).fill(3);
    const sumsFile = join(dir, `sums${n++}`);
    const r = inspectSnapshot({ ...base(file), dbs: [{ name: "main", file, indexKey: key, sumsFile }] });
    const ix = indexPages(file);
    expect(r.dbs[0]!.index!.hashes.equals(ix.hashes)).toBe(true);
    expect(r.dbs[0]!.sumsWritten).toBe(true);
    const fresh = join(dir, `fresh${n++}`);
    withPages(file, (src) => { const s = new BlockSummer(src.pageSize, blockSeed(Buffer.from(key)), fresh); readPages(src, (run) => s.update(run)); s.close(); });
    expect(readFileSync(sumsFile).equals(readFileSync(fresh))).toBe(true);
    expect(r.findings.length).toBeGreaterThan(0); // the scan rode the same read
    const tail = inspectSnapshot({ ...base(file), dbs: [{ name: "main", file, indexKey: key, indexAfter: 3 }] });
    expect(tail.dbs[0]!.index!.hashes.equals(ix.hashes.subarray(3 * 16))).toBe(true);
  });

  it("a timer column of another format is a warning naming the format to set; a missing column says a restore refuses", () => {
    const file = agentDb();
    const r = inspectSnapshot(base(file, { timers: [{ database: "main", table: "timers", column: "due", format: "epoch_ms" }, { database: "main", table: "timers", column: "nope", format: "epoch_s" }] }));
    expect(r.timerWarnings).toHaveLength(2);
    expect(r.timerWarnings[0]).toMatch(/^timers\[0\] \(main\.timers\.due\): 2 stored value\(s\) are epoch_s timestamps .*set "format": "epoch_s"$/);
    expect(r.timerWarnings[1]).toMatch(/^timers\[1\] \(main\.timers\.nope\): .*a restore with this config refuses \(exit 2\)$/);
  });

  it("bad cursor or open-operation SQL, or an unknown database name, is 2 naming the config key", () => {
    const file = agentDb();
    expect(fails(() => inspectSnapshot(base(file, { cursors: { pos: { database: "main", sql: "SELECT nope FROM cursor" } } }))).message).toMatch(/^cursors\.pos: no such column: nope/);
    expect(fails(() => inspectSnapshot(base(file, { cursors: { pos: { database: "other", sql: "SELECT 1" } } }))).message).toBe('cursors.pos: no database named "other"');
    const e = fails(() => inspectSnapshot(base(file, { openOperations: { database: "main", sql: "SELECT * FROM missing" } })));
    expect([e.code, e.message]).toEqual([2, "openOperations: no such table: missing"]);
  });

  it("a damaged copy: integrity lists the damage and no rows are counted; integrity off says skipped", () => {
    const file = agentDb();
    const b = readFileSync(file);
    const mark = Buffer.from("message 7 ");
    // overwrite a cell's record header area near the first message: break one b-tree page
    const at = b.indexOf(mark);
    const page = Math.floor(at / 4096);
    b.fill(0xff, page * 4096 + 8, page * 4096 + 40);
    const bad = join(dir, `bad${n++}.sqlite`);
    writeFileSync(bad, b);
    const r = inspectSnapshot(base(bad));
    expect(r.dbs[0]!.integrity).not.toEqual(["ok"]);
    expect(r.dbs[0]!.records).toEqual({});
    const s = inspectSnapshot({ ...base(file), dbs: [{ name: "main", file, integrity: false }] });
    expect(s.dbs[0]!.integrity).toEqual(["skipped"]);
    expect(s.dbs[0]!.records.messages).toBe(250);
  });
});

describe("openOperationRows and the small-database paths", () => {
  it("ids: safe non-negative integers stay numbers, others become text; kind only when selected", () => {
    const d = new Database(":memory:");
    expect(openOperationRows(d, "SELECT 5 AS id, 'k' AS idempotency_key")).toEqual([{ id: 5, idempotency_key: "k" }]);
    expect(openOperationRows(d, "SELECT -1 AS id, 'k' AS idempotency_key, 3 AS kind")).toEqual([{ id: "-1", idempotency_key: "k", kind: "3" }]);
    expect(openOperationRows(d, "SELECT NULL AS id, NULL AS idempotency_key")).toEqual([{ id: null, idempotency_key: "" }]);
    expect(openOperationRows(d, "SELECT 'abc' AS id, 'k' AS idempotency_key")).toEqual([{ id: "abc", idempotency_key: "k" }]);
    d.close();
  });

  it("inspectInWorker and integrityCheckInWorker run a small database on this thread with the same answer", async () => {
    const file = agentDb();
    const copy = join(dir, `copy${n++}.sqlite`);
    copyFileSync(file, copy);
    expect(statSync(copy).size).toBeLessThan(32 << 20);
    expect((await inspectInWorker(base(copy))).dbs[0]!.records.messages).toBe(250);
    expect(await integrityCheckInWorker(copy, "quick_check")).toEqual(["ok"]);
  });
});
