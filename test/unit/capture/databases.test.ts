// The databases stage on real SQLite files: read at one instant (a busy write lock is exit 11, and nothing stays open),
// the fingerprint read while every lock is held, and a snapshot that fails integrity_check refused (exit 13).
import { afterAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { randomBytes } from "node:crypto";
import { mkdtempSync, openSync, rmSync, writeFileSync, writeSync, closeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { finishDatabases, readAtInstant, releasePinned } from "../../../src/capture/databases.js";
import type { DbPlan } from "../../../src/capture/plan.js";
import { databasesState } from "../../../src/capture/unchanged.js";
import { loadConfig } from "../../../src/config/load.js";
import { inspectSnapshot, type InspectResult } from "../../../src/state/inspect/inspect.js";
import { settleInspection, type Taken } from "../../../src/state/inspect/read.js";
import { decodeIndex, indexPages, pagesRoot } from "../../../src/state/pages/index.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-databases-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const key = randomBytes(32);
const copyPlan = { mode: "copy", key, parents: new Map(), bases: new Map() } as unknown as DbPlan;
let n = 0;
function agent(rows = 10) {
  const dir = mkdtempSync(join(tmp, `agent-${n++}-`));
  writeFileSync(join(dir, "agentbak.json"), JSON.stringify({ agent: { id: "a", tenant: "t" }, repository: "../repo", recipients: ["age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"], databases: [{ name: "state", path: "state.sqlite" }, { name: "ledger", path: "ledger.sqlite" }] }));
  for (const f of ["state.sqlite", "ledger.sqlite"]) {
    const db = new Database(join(dir, f));
    db.pragma("journal_mode = WAL");
    db.exec("CREATE TABLE t (x TEXT)");
    const ins = db.prepare("INSERT INTO t VALUES (?)");
    db.transaction(() => {
      for (let i = 0; i < rows; i++) ins.run(`row ${i} ${"x".repeat(200)}`);
    })();
    db.close();
  }
  const jobs = ["state", "ledger"].map((name) => ({ name, src: join(dir, `${name}.sqlite`), dest: join(dir, `copy-${name}.sqlite`), target: `${name}.sqlite` }));
  return { dir, lc: loadConfig(join(dir, "agentbak.json")), jobs };
}
const count = (f: string) => {
  const db = new Database(f, { readonly: true });
  try {
    return db.prepare("SELECT count(*) FROM t").pluck().get();
  } finally {
    db.close();
  }
};

describe("readAtInstant", () => {
  it("copies each database as of one instant into its job's dest, one record each, and reads the fingerprint under the locks", async () => {
    const a = agent();
    const r = await readAtInstant(copyPlan, a.jobs, 2000, true);
    expect(r.taken).toEqual({ kind: "copy" });
    expect(r.cut).toMatchObject({ method: "write-locks", databases: ["ledger", "state"] });
    expect(r.dbs.map((d) => [d.name, d.target, d.copy, d.delta, d.inspected])).toEqual(a.jobs.map((j) => [j.name, j.target, j.dest, null, null]));
    expect(count(a.jobs[0]!.dest)).toBe(10);
    expect(r.dbState).toBe(databasesState(a.lc));
    await releasePinned(r.taken);
    expect((await readAtInstant(copyPlan, a.jobs.map((j) => ({ ...j, dest: `${j.dest}.2` })), 2000, false)).dbState).toBeNull();
  });

  it("a write lock held past the wait is exit 11 naming the database; nothing is left open, so the agent writes on", async () => {
    const a = agent();
    const agentConn = new Database(a.jobs[0]!.src);
    agentConn.exec("BEGIN IMMEDIATE");
    const t0 = Date.now();
    await expect(readAtInstant(copyPlan, a.jobs, 300, false)).rejects.toMatchObject({ code: 11, message: expect.stringContaining("state") });
    expect(Date.now() - t0).toBeLessThan(5000);
    agentConn.exec("ROLLBACK");
    agentConn.close();
    // the other database's lock was released: a writer gets it at once
    const other = new Database(a.jobs[1]!.src, { timeout: 0 });
    other.prepare("INSERT INTO t VALUES ('after')").run();
    other.close();
    expect(count(a.jobs[1]!.src)).toBe(11);
  });
});

/** The copies' inspection settled as the stage settles it (settleInspection: the page indexes sealed under `key`). */
const settled = (taken: Taken, ins: InspectResult) => settleInspection({ key }, taken, { deltas: new Map(), heads: new Map(), inspection: Promise.resolve(ins) });

describe("finishDatabases", () => {
  it("takes each database's page index and integrity result from the inspection", async () => {
    const a = agent();
    const r = await readAtInstant(copyPlan, a.jobs, 2000, false);
    const ins = inspectSnapshot({ dbs: r.dbs.map((d) => ({ name: d.name, file: d.copy, indexKey: key })), cursors: {}, scan: "off" });
    const { sealed } = await settled(r.taken, ins);
    finishDatabases(r.dbs, ins, sealed);
    for (const d of r.dbs) {
      expect(d.inspected!.integrity).toEqual(["ok"]);
      expect(d.indexRoot).toBe(pagesRoot(indexPages(d.copy)));
      expect(decodeIndex(d.stored!, key).pageCount).toBe(indexPages(d.copy).pageCount);
    }
  });

  it("a snapshot that fails integrity_check is exit 13 naming the database and the first problems", async () => {
    const a = agent(400);
    const r = await readAtInstant(copyPlan, a.jobs, 2000, false);
    // damage the table's b-tree in the copy of "ledger": a page in the middle overwritten with noise
    const fd = openSync(r.dbs[1]!.copy, "r+");
    writeSync(fd, randomBytes(4096), 0, 4096, 4096 * 5);
    closeSync(fd);
    const ins = inspectSnapshot({ dbs: r.dbs.map((d) => ({ name: d.name, file: d.copy })), cursors: {}, scan: "off" });
    const { sealed } = await settled(r.taken, ins);
    expect(() => finishDatabases(r.dbs, ins, sealed)).toThrow(expect.objectContaining({ code: 13, message: expect.stringMatching(/^database ledger: snapshot failed integrity_check: ./) }));
  });
});
