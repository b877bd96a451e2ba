/**
 * The cut (state/sqlite/cut.ts) on real live databases: several databases are
 * copied as of one instant taken under all their write locks; a writer that
 * keeps a lock past --wait is 11 naming the database and nothing stays open;
 * one that lets go in time is waited for; a source that is missing, a folder,
 * a FIFO or empty is refused naming the database; joinInstant reads the
 * instant from another connection.
 */
import Database from "better-sqlite3";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { joinInstant, openInstant, releaseAll, snapshotDatabases } from "../../../../src/state/sqlite/cut.js";
import { AgentbakError } from "../../../../src/errors.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-cut-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
const f = (name: string) => join(dir, `${name}${n++}`);

function live(mode: "wal" | "delete" = "wal"): string {
  const p = f("live") + ".sqlite";
  const d = new Database(p);
  d.pragma(`journal_mode = ${mode}`);
  d.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t (v) VALUES ('a'), ('b')");
  d.close();
  return p;
}
const count = (p: string) => { const d = new Database(p, { readonly: true }); try { return d.prepare("SELECT count(*) FROM t").pluck().get(); } finally { d.close(); } };
async function failure(p: Promise<unknown>): Promise<AgentbakError> {
  const e = await p.then(() => null, (x: unknown) => x);
  expect(e).toBeInstanceOf(AgentbakError);
  return e as AgentbakError;
}

describe("snapshotDatabases", () => {
  it("copies every database as of one instant, under write locks taken in name order; the copies are rollback-journal files", async () => {
    const a = live("wal");
    const b = live("delete");
    const jobs = [{ name: "zeta", src: a, dest: f("za") }, { name: "alpha", src: b, dest: f("al") }];
    const cut = await snapshotDatabases(jobs, 1000);
    expect(cut).toMatchObject({ method: "write-locks", databases: ["alpha", "zeta"] });
    expect(cut.hold_ms).toBeGreaterThanOrEqual(0);
    for (const j of jobs) {
      expect(count(j.dest)).toBe(2);
      const d = new Database(j.dest, { readonly: true });
      expect(d.pragma("journal_mode", { simple: true })).toBe("delete");
      d.close();
    }
    // nothing stays open: the live databases take a write at once
    const w = new Database(a);
    w.pragma("busy_timeout = 0");
    w.exec("INSERT INTO t (v) VALUES ('c')");
    w.close();
  });

  it("commits after the instant are not in the copies, though writers went on (WAL)", async () => {
    const a = live("wal");
    const b = live("wal");
    const [da, db] = [f("a"), f("b")];
    const inst = await openInstant([{ name: "a", src: a, dest: da }, { name: "b", src: b, dest: db }], 1000);
    expect([inst.allLocked, inst.pinnable, inst.readable]).toEqual([true, true, true]);
    inst.releaseLocks();
    for (const p of [a, b]) { const w = new Database(p); w.pragma("busy_timeout = 0"); w.exec("INSERT INTO t (v) VALUES ('later')"); w.close(); }
    await inst.copy();
    const cut = inst.cut();
    inst.close();
    expect(count(da)).toBe(2);
    expect(count(db)).toBe(2);
    expect(count(a)).toBe(3);
    expect(cut.method).toBe("write-locks");
  });

  it("a rollback-journal database can not be pinned (a held read would stall its writer)", async () => {
    const inst = await openInstant([{ name: "r", src: live("delete"), dest: f("r") }], 1000);
    expect(inst.pinnable).toBe(false);
    expect(inst.readable).toBe(true);
    inst.close();
  });

  it("keep() hands the pinned reads over: they outlive close() until released", async () => {
    const a = live("wal");
    const inst = await openInstant([{ name: "a", src: a, dest: f("a") }], 1000);
    const views = inst.views();
    const release = inst.keep();
    inst.close();
    const v = views.get("a")!;
    expect(v.db.prepare("SELECT count(*) FROM t").pluck().get()).toBe(2);
    expect(v.snap.pageCount).toBeGreaterThan(0);
    release();
    release(); // once only
    expect(v.db.open).toBe(false);
  });

  it("a writer holding the lock past the wait is 11 naming the database and --wait; nothing is left open", async () => {
    const a = live("wal");
    const b = live("wal");
    const holder = new Database(b);
    holder.exec("BEGIN IMMEDIATE");
    const t0 = Date.now();
    const e = await failure(snapshotDatabases([{ name: "a", src: a, dest: f("a") }, { name: "b", src: b, dest: f("b") }], 300));
    expect(Date.now() - t0).toBeGreaterThanOrEqual(250);
    expect(e.code).toBe(11);
    expect(e.message).toMatch(new RegExp(`^database b \\(${b}\\) is locked by another process .*pass --wait to wait longer$`));
    holder.exec("ROLLBACK");
    holder.close();
    const w = new Database(a); // a's lock was let go too
    w.pragma("busy_timeout = 0");
    w.exec("INSERT INTO t (v) VALUES ('c')");
    w.close();
  });

  it("a writer that lets go within the wait is waited for", async () => {
    const a = live("wal");
    const holder = new Database(a);
    holder.exec("BEGIN IMMEDIATE");
    holder.exec("INSERT INTO t (v) VALUES ('in flight')");
    setTimeout(() => { holder.exec("COMMIT"); holder.close(); }, 150);
    const dest = f("a");
    await snapshotDatabases([{ name: "a", src: a, dest }], 3000);
    expect(count(dest)).toBe(3);
  });

  it("a source that is missing (10), a folder or a FIFO (2), or empty (13) is refused naming the database", async () => {
    const folder = f("folder");
    mkdirSync(folder);
    const fifo = f("fifo");
    execFileSync("mkfifo", [fifo]);
    const empty = f("empty");
    writeFileSync(empty, "");
    const cases: [string, number, string][] = [
      [f("missing"), 10, "database main: "],
      [folder, 2, `database main: ${folder} is a folder, not an SQLite database file`],
      [fifo, 2, `database main: ${fifo} is a FIFO, not an SQLite database file`],
      [empty, 13, `database main: ${empty} is empty (0 bytes), not an SQLite database`],
    ];
    for (const [src, code, msg] of cases) {
      const e = await failure(snapshotDatabases([{ name: "main", src, dest: f("d") }], 100));
      expect(e.code, src).toBe(code);
      expect(e.message.startsWith(msg)).toBe(true);
    }
    const junk = f("junk");
    writeFileSync(junk, "this is not a database, it is a text file of some length........................................................");
    expect((await failure(snapshotDatabases([{ name: "main", src: junk, dest: f("d") }], 100))).code).toBe(13);
  });
});

describe("joinInstant", () => {
  it("another connection joins the instant while the locks are held, and sees what the pinned reads see", async () => {
    const a = live("wal");
    const inst = await openInstant([{ name: "a", src: a, dest: f("a") }], 1000);
    const joined = joinInstant([{ name: "a", file: a }]);
    inst.releaseLocks();
    const w = new Database(a);
    w.exec("INSERT INTO t (v) VALUES ('later')");
    w.close();
    expect(joined.get("a")!.prepare("SELECT count(*) FROM t").pluck().get()).toBe(2);
    releaseAll(joined);
    expect(joined.size).toBe(0);
    inst.close();
    expect(() => joinInstant([{ name: "gone", file: f("none") }])).toThrow(AgentbakError);
  });
});
