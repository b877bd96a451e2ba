/**
 * A live database's pages pinned at one instant (state/sqlite/livesnap.ts),
 * read in place: in WAL mode the committed frames are copied aside while the
 * write lock is held, so commits after the instant, and a checkpoint that
 * restarts the WAL, never reach the copy; the copy is a self-contained
 * rollback-journal file that SQLite opens and finds intact.
 */
import Database from "better-sqlite3";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LiveSnapshot, namedSource, pinnedSource, readPinned, selfContained } from "../../../../src/state/sqlite/livesnap.js";
import { integrityCheck, openDefensive } from "../../../../src/state/sqlite/open.js";
import { AgentbakError } from "../../../../src/errors.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-livesnap-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;

/** A live WAL database with rows in its WAL (no checkpoint), left open as the agent's writer. */
function live(mode: "wal" | "delete"): { path: string; writer: Database.Database } {
  const path = join(dir, `live${n++}.sqlite`);
  const writer = new Database(path);
  writer.pragma(`journal_mode = ${mode}`);
  writer.pragma("wal_autocheckpoint = 0");
  writer.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)");
  const ins = writer.prepare("INSERT INTO t (v) VALUES (?)");
  writer.transaction(() => { for (let i = 0; i < 300; i++) ins.run(`v${i} `.repeat(30)); })();
  return { path, writer };
}
/** Pins `path` as cut.ts does: write lock held (BEGIN IMMEDIATE) while the read snapshot is taken. */
function pin(path: string): { snap: LiveSnapshot; reader: Database.Database } {
  const lock = new Database(path);
  lock.exec("BEGIN IMMEDIATE");
  const reader = new Database(path, { readonly: true });
  reader.exec("BEGIN");
  reader.prepare("SELECT count(*) FROM sqlite_schema").get();
  const snap = new LiveSnapshot(path, reader, dir);
  lock.exec("ROLLBACK");
  lock.close();
  return { snap, reader };
}
const rows = (p: string) => { const d = openDefensive(p); try { return d.prepare("SELECT count(*) FROM t").pluck().get(); } finally { d.close(); } };

describe("LiveSnapshot", () => {
  for (const mode of ["wal", "delete"] as const)
    it(`copies the database as of the instant; later commits are not in it (${mode})`, async () => {
      const { path, writer } = live(mode);
      const { snap, reader } = pin(path);
      expect(snap.journal).toBe(mode === "wal" ? "wal" : "rollback");
      if (mode === "wal") {
        writer.prepare("INSERT INTO t (v) VALUES ('after the instant')").run(); // a WAL reader blocks no writer
        writer.pragma("wal_checkpoint(PASSIVE)"); // stops at the reader's mark
      }
      const out = join(dir, `copy${n++}.sqlite`);
      await snap.copyTo(out);
      snap.close();
      reader.exec("ROLLBACK");
      reader.close();
      writer.close();
      expect(rows(out)).toBe(300);
      const d = openDefensive(out);
      expect(integrityCheck(d)).toEqual(["ok"]);
      expect(d.pragma("journal_mode", { simple: true })).toBe("delete"); // self-contained: no WAL needed
      d.close();
      expect(readdirSync(dir).filter((f) => f.startsWith(".wal-overlay-"))).toEqual([]); // the overlay was unlinked at once
    });

  it("a checkpoint that restarts the WAL after the instant does not change what the snapshot reads", async () => {
    const { path, writer } = live("wal");
    const { snap, reader } = pin(path);
    const before = Buffer.alloc(snap.pageCount * snap.pageSize);
    snap.read(1, snap.pageCount, before);
    reader.exec("ROLLBACK"); // the reader's mark is gone: the checkpointer may now write and restart the log
    writer.exec("UPDATE t SET v = 'rewritten'");
    writer.pragma("wal_checkpoint(TRUNCATE)");
    writer.exec("UPDATE t SET v = 'again'");
    const after = Buffer.alloc(before.length);
    readPinned(snap.pinned(), 1, snap.pageCount, after);
    expect(after.equals(before)).toBe(true);
    const viaSource = Buffer.alloc(before.length);
    pinnedSource(snap.pinned()).read(1, snap.pageCount, viaSource);
    expect(viaSource.equals(before)).toBe(true);
    snap.close();
    reader.close();
    writer.close();
  });

  it("reads outside the snapshot are refused; namedSource names an I/O error's file, and passes others through", () => {
    const { path, writer } = live("wal");
    const { snap, reader } = pin(path);
    expect(() => snap.read(snap.pageCount, 2, Buffer.alloc(2 * snap.pageSize))).toThrow(`pages ${snap.pageCount}..${snap.pageCount + 1} outside 1..${snap.pageCount}`);
    const eio = namedSource({ pageSize: 4096, pageCount: 1, read: () => { throw Object.assign(new Error("i/o error"), { code: "EIO", syscall: "read" }); } }, "database main: reading /x.sqlite");
    let e: unknown;
    try { eio.read(1, 1, Buffer.alloc(4096)); } catch (x) { e = x; }
    expect(e).toBeInstanceOf(AgentbakError);
    expect((e as Error).message).toMatch(/^database main: reading \/x\.sqlite: /);
    const other = namedSource(snap, "x");
    expect(() => other.read(0, 1, Buffer.alloc(snap.pageSize))).toThrow(/outside/);
    snap.close();
    reader.close();
    writer.close();
  });
});

describe("selfContained", () => {
  it("page 1 says rollback journal (versions 1/1), the page count, and a valid-for matching the change counter", () => {
    const { path, writer } = live("wal");
    writer.close();
    const p1 = Buffer.from(readFileSync(path).subarray(0, 4096));
    p1[18] = 2;
    p1[19] = 2;
    p1.writeUInt32BE(7, 24);
    selfContained(p1, 123);
    expect([p1[18], p1[19], p1.readUInt32BE(28), p1.readUInt32BE(92)]).toEqual([1, 1, 123, 7]);
  });
});
