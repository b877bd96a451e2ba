/**
 * The WAL reader (state/sqlite/wal.ts) against SQLite's own: the frames it
 * trusts are exactly the committed ones, each page's newest frame holds the
 * bytes SQLite's checkpoint writes for it, and a torn or corrupted tail,
 * an uncommitted transaction or a WAL of an earlier generation end the log
 * where SQLite's recovery would.
 */
import Database from "better-sqlite3";
import { closeSync, copyFileSync, mkdtempSync, openSync, readFileSync, readSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { readWal } from "../../../../src/state/sqlite/wal.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-wal-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;

/** A WAL database with no automatic checkpoint, `txns` committed transactions in its WAL; open until closed. */
function walDb(pageSize: number, txns: number): { db: Database.Database; path: string } {
  const path = join(dir, `w${n++}.sqlite`);
  const db = new Database(path);
  db.pragma(`page_size = ${pageSize}`);
  db.pragma("journal_mode = WAL");
  db.pragma("wal_autocheckpoint = 0");
  db.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)");
  const ins = db.prepare("INSERT INTO t (v) VALUES (randomblob(?))");
  for (let i = 0; i < txns; i++) db.transaction(() => { for (let j = 0; j < 20; j++) ins.run(300); })();
  return { db, path };
}

/** Copies db and WAL aside (as a backup finds them), then checkpoints the original: the pages SQLite makes of that WAL. */
function snapshotAndCheckpoint(db: Database.Database, path: string): { wal: string; checkpointed: Buffer } {
  const wal = join(dir, `copy${n++}-wal`);
  copyFileSync(`${path}-wal`, wal);
  db.pragma("wal_checkpoint(TRUNCATE)");
  return { wal, checkpointed: readFileSync(path) };
}

const pageAt = (file: string, off: number, ps: number) => {
  const b = Buffer.alloc(ps);
  const fd = openSync(file, "r");
  try { readSync(fd, b, 0, ps, off); } finally { closeSync(fd); }
  return b;
};

describe("readWal", () => {
  it("indexes every committed page at its newest frame: the bytes equal what SQLite's checkpoint writes", () => {
    for (const ps of [1024, 4096, 65536]) {
      const { db, path } = walDb(ps, 5);
      const { wal, checkpointed } = snapshotAndCheckpoint(db, path);
      const w = readWal(wal, ps);
      expect(w.mxFrame).toBeGreaterThan(0);
      expect(w.dbPages).toBe(checkpointed.length / ps);
      expect(w.pages.size).toBeGreaterThan(1);
      for (const [p, off] of w.pages) expect(pageAt(wal, off, ps).equals(checkpointed.subarray((p - 1) * ps, p * ps)), `page ${p} at ${ps}`).toBe(true);
      db.close();
    }
  });

  it("frames after the last commit frame are not trusted", () => {
    const { db, path } = walDb(4096, 3);
    const committed = readWal(`${path}-wal`, 4096);
    // a transaction whose frames reach the WAL (the cache spills) but whose commit frame never does
    db.pragma("cache_size = 2");
    db.exec("BEGIN");
    db.prepare("INSERT INTO t (v) VALUES (randomblob(200000))").run();
    const midway = readWal(`${path}-wal`, 4096);
    db.exec("ROLLBACK");
    expect(readFileSync(`${path}-wal`).length).toBeGreaterThan(32 + committed.mxFrame * (24 + 4096)); // frames were written
    expect(midway.mxFrame).toBe(committed.mxFrame);
    expect(midway.dbPages).toBe(committed.dbPages);
    expect([...midway.pages]).toEqual([...committed.pages]);
    db.close();
  });

  it("a torn last frame or a corrupted frame ends the log at the commit before it", () => {
    const { db, path } = walDb(4096, 4);
    const wal = join(dir, "torn-wal");
    copyFileSync(`${path}-wal`, wal);
    const full = readWal(wal, 4096);
    const frame = 24 + 4096;
    const size = readFileSync(wal).length;
    expect(size).toBe(32 + full.mxFrame * frame);
    truncateSync(wal, size - 100); // the last frame (the last commit) torn
    const torn = readWal(wal, 4096);
    expect(torn.mxFrame).toBeLessThan(full.mxFrame);
    expect(torn.mxFrame).toBeGreaterThan(0);
    // flip a byte in the data of frame 2: checksums fail from there on; frame 1 alone committed nothing
    const b = readFileSync(`${path}-wal`);
    b[32 + frame + 24 + 100]! ^= 0xff;
    writeFileSync(wal, b);
    const bad = readWal(wal, 4096);
    expect(bad.mxFrame).toBeLessThan(2);
    db.close();
  });

  it("a missing, empty, reset or foreign-salt WAL has nothing committed; a WAL of another page size is an error", () => {
    expect(readWal(join(dir, "none-wal"), 4096)).toMatchObject({ mxFrame: 0, dbPages: 0 });
    writeFileSync(join(dir, "empty-wal"), "");
    expect(readWal(join(dir, "empty-wal"), 4096).mxFrame).toBe(0);
    writeFileSync(join(dir, "zero-wal"), Buffer.alloc(32 + 4120));
    expect(readWal(join(dir, "zero-wal"), 4096).mxFrame).toBe(0);
    const { db, path } = walDb(4096, 2);
    const b = readFileSync(`${path}-wal`);
    expect(() => readWal(`${path}-wal`, 1024)).toThrow("WAL page size 4096 is not the database's 1024");
    // header checksum broken: not a WAL SQLite would recover
    const h = Buffer.from(b);
    h[16]! ^= 1;
    writeFileSync(join(dir, "hdr-wal"), h);
    expect(readWal(join(dir, "hdr-wal"), 4096).mxFrame).toBe(0);
    db.close();
  });

  it("after a checkpoint restarts the log, frames of the earlier generation past the new ones are ignored", () => {
    const { db, path } = walDb(4096, 6);
    const before = readWal(`${path}-wal`, 4096);
    db.pragma("wal_checkpoint(RESTART)");
    db.prepare("INSERT INTO t (v) VALUES (randomblob(10))").run(); // rewinds the WAL: new salts, one short transaction
    const after = readWal(`${path}-wal`, 4096);
    expect(readFileSync(`${path}-wal`).length).toBe(32 + before.mxFrame * (24 + 4096)); // the old frames are still in the file
    expect(after.salt1).not.toBe(before.salt1);
    expect(after.mxFrame).toBeGreaterThan(0);
    expect(after.mxFrame).toBeLessThan(before.mxFrame);
    db.close();
  });
});
