// Copying a live SQLite database's pages in place at one instant (the capture path): against a
// real writer process that keeps committing (and checkpointing, and
// restarting its WAL) while the pages are read, the pages form one committed
// state that passes integrity_check, in WAL and in rollback-journal mode.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa, type ResultPromise } from "execa";
import Database from "better-sqlite3";
import { mkdtempSync, rmSync, readdirSync, existsSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { json, makeAgent, ROOT, SNAPS } from "../helpers.js";
import { openInstant, snapshotDatabases } from "../../dist/state/sqlite/cut.js";
import { readWal } from "../../dist/state/sqlite/wal.js";
// @ts-expect-error plain JS fixture
import { transfers } from "../../fixtures/agent/writer.js";
// @ts-expect-error plain JS fixture
import { generateDatabase } from "../../fixtures/agent/generate.js";

let tmp: string;
beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), "agentbak-livesnap-"));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** Copies `db` at one instant through the capture path (write lock, read snapshot, WAL frames pinned, pages in place). */
const copyOf = (db: string, out: string, waitMs = 5000) => snapshotDatabases([{ name: "state", src: db, dest: out }], waitMs);

/** The invariants of the writer fixture, and its state replayed from the transfer count. */
function checkConsistent(file: string): number {
  const db = new Database(file, { readonly: true });
  try {
    expect(db.pragma("integrity_check", { simple: true })).toBe("ok");
    expect(db.pragma("journal_mode", { simple: true })).toBe("delete");
    const bal = Object.fromEntries((db.prepare("SELECT account, balance FROM budget").all() as any[]).map((r) => [r.account, r.balance]));
    const n = Number(db.prepare("SELECT value FROM agent_state WHERE key = 'transfers'").pluck().get() ?? 0);
    expect(db.prepare("SELECT count(*) FROM events WHERE type = 'transfer'").pluck().get()).toBe(n);
    const expected: Record<string, number> = { tokens: 1_000_000, reserve: 0, spent: 0 };
    let i = 0;
    for (const t of transfers(11)) {
      if (i++ === n) break;
      expected[t.from]! -= t.amount;
      expected[t.to]! += t.amount;
    }
    expect(bal).toEqual(expected);
    return n;
  } finally {
    db.close();
  }
}

async function withWriter<T>(db: string, fn: (w: ResultPromise) => Promise<T>, extra: string[] = []): Promise<T> {
  const w = execa("node", [join(ROOT, "fixtures/agent/writer.js"), db, "11", ...extra], { reject: false });
  try {
    await new Promise<void>((res) => w.stdout!.once("data", () => res()));
    return await fn(w);
  } finally {
    w.kill("SIGKILL");
    await w;
  }
}

describe("LiveSnapshot", () => {
  it("WAL mode: pages read in place while a writer commits and checkpoints form one committed state", async () => {
    const db = join(tmp, "wal.sqlite");
    generateDatabase(db, { sizeMb: 6, seed: 3 });
    const counts: number[] = [];
    await withWriter(db, async () => {
      // a second connection keeps checkpointing (and restarting the WAL when it can) during the copies
      const ck = new Database(db);
      ck.pragma("busy_timeout = 50");
      const timer = setInterval(() => {
        try {
          ck.pragma("wal_checkpoint(PASSIVE)");
        } catch {
          /* busy: fine */
        }
      }, 5);
      try {
        for (let round = 0; round < 3; round++) {
          const out = join(tmp, `wal-${round}.sqlite`);
          const cut = await copyOf(db, out);
          expect(cut.method).toBe("write-locks");
          counts.push(checkConsistent(out));
        }
      } finally {
        clearInterval(timer);
        ck.close();
      }
    });
    expect(counts[0]).toBeGreaterThan(0);
    expect(new Set(counts).size).toBe(counts.length); // the writer moved on between rounds
    expect(readdirSync(tmp).filter((f) => f.includes("wal-overlay"))).toEqual([]); // the overlay is unlinked at once
  });

  it("a full snapshot held in place: the inspection worker's own read transaction joins the same instant while a writer commits", async () => {
    const db = join(tmp, "held.sqlite");
    generateDatabase(db, { sizeMb: 40, seed: 5 }); // over 32 MiB: inspected in the worker thread, through its own connection
    const { inspectPinned } = await import("../../dist/state/inspect/inspect.js");
    const seen: number[] = [];
    await withWriter(db, async () => {
      for (let round = 0; round < 3; round++) {
        let live: any;
        let release!: () => void;
        let snap: any;
        const unused = join(tmp, `held-unused-${round}.sqlite`);
        const inst = await openInstant([{ name: "state", src: db, dest: unused }], 5000);
        try {
          expect(inst.pinnable).toBe(true);
          const v = inst.views().get("state")!;
          live = await inspectPinned(
            { dbs: [{ name: "state", file: db, pages: v.snap.pinned() }], cursors: { transfers: { database: "state", sql: "SELECT value FROM agent_state WHERE key = 'transfers'" } }, scan: "off" },
            new Map([["state", v.db]]),
          );
          snap = v.snap;
          release = inst.keep();
          inst.releaseLocks();
        } finally {
          inst.close();
        }
        expect(existsSync(unused)).toBe(false); // nothing was copied
        await new Promise((r) => setTimeout(r, 100)); // the writer commits meanwhile
        const out = join(tmp, `held-${round}.sqlite`);
        let ins: any;
        try {
          ins = await live.start();
          await snap.copyTo(out); // the pages as the payload reads them, still at the instant
        } finally {
          await live.settled();
          release();
        }
        const n = checkConsistent(out);
        // the worker's counts and cursor are those of the same committed state as the pages
        expect(Number(ins.cursors.transfers)).toBe(n);
        expect(ins.dbs[0].integrity).toEqual(["ok"]);
        const c = new Database(out, { readonly: true });
        expect(ins.dbs[0].records.events).toBe(c.prepare("SELECT count(*) FROM events").pluck().get());
        c.close();
        seen.push(n);
      }
    });
    expect(new Set(seen).size).toBe(seen.length); // the writer moved on between rounds
  }, 120_000);

  it("a full backup read in place stores the page index of the very pages it stored (digested by two threads)", async () => {
    // 40 MiB: the worker thread hashes the last pages of the index, the payload's thread the first ones
    const a = await makeAgent({ sizeMb: 40, seed: 7 });
    try {
      const r = json(await a.run(["backup", "--json"]));
      expect(r).toMatchObject({ kind: "full", databases_read: "in-place" });
      const { decodeIndex, indexPages, pageIndexKey } = await import("../../dist/state/pages/pageindex.js");
      const stored = decodeIndex(await (await a.store()).get(`${SNAPS}/${r.snapshot_id}.state.pageindex`), pageIndexKey(a.home))!;
      const target = join(a.tmp, "restored-ix");
      expect([0, 3]).toContain((await a.run(["restore", r.snapshot_id, "--target", target, "--yes", "--allow-rollback", "--integrity", "digest"])).code);
      const restored = indexPages(join(target, "state/agent.sqlite"));
      expect(stored.pageCount).toBe(restored.pageCount);
      expect(stored.pageCount).toBeGreaterThan(2048); // both threads had pages to hash
      expect(Buffer.compare(stored.hashes, restored.hashes)).toBe(0);
    } finally {
      a.cleanup();
    }
  }, 180_000);

  it("a WAL database this process may only read (its BEGIN IMMEDIATE locks nothing) is copied, not read in place, and restores consistent", async (ctx) => {
    if (process.getuid?.() !== 0 || (await execa("sh", ["-c", "command -v setpriv"], { reject: false })).exitCode !== 0) return ctx.skip();
    const a = await makeAgent({ sizeMb: 4, seed: 9 });
    try {
      const db = join(a.dir, "state/agent.sqlite");
      await execa("chown", ["-R", "nobody", a.tmp]);
      // root's writer keeps committing; the database, its WAL and WAL index stay root's, read-only to the backup
      await withWriter(db, async () => {
        await execa("chown", ["root", db, `${db}-wal`, `${db}-shm`]);
        await execa("chmod", ["444", db]);
        const r = await execa("setpriv", ["--reuid=nobody", "--regid=nogroup", "--clear-groups", "node", join(ROOT, "bin/agentbak.js"), "backup", "--json"], { cwd: a.dir, env: { ...process.env, ...a.env, NO_COLOR: "1" }, reject: false, timeout: 60_000 });
        expect(r.exitCode, r.stderr).toBe(0);
        // before: "in-place", with writers committing under a lock that was never taken (restores failed integrity_check)
        expect(JSON.parse(r.stdout).databases_read).toBe("copy");
      });
      await execa("chmod", ["644", db]);
      const target = join(a.tmp, "restored-ro");
      expect([0, 3]).toContain((await a.run(["restore", "latest", "--target", target, "--yes", "--allow-rollback"])).code);
      checkConsistent(join(target, "state/agent.sqlite"));
    } finally {
      a.cleanup();
    }
  }, 180_000);

  it("rollback-journal mode: the copy equals the committed state, and writers wait only for the copy", async () => {
    const db = join(tmp, "rollback.sqlite");
    generateDatabase(db, { sizeMb: 3, seed: 4 });
    const c = new Database(db);
    c.pragma("journal_mode = DELETE");
    c.close();
    const out = join(tmp, "rollback-copy.sqlite");
    await copyOf(db, out);
    const dump = async (p: string) => (await execa("sqlite3", [p, ".dump"])).stdout;
    expect(await dump(out)).toBe(await dump(db));
    const w = new Database(db);
    w.prepare("UPDATE budget SET balance = balance + 0 WHERE account = 'tokens'").run(); // released again
    w.close();
  });

  it("pages that exist only in the WAL (the database grew) are read from it; the WAL index ends at the last commit", async () => {
    const db = join(tmp, "grow.sqlite");
    const w = new Database(db);
    w.pragma("journal_mode = WAL");
    w.pragma("wal_autocheckpoint = 0");
    w.exec("CREATE TABLE t (x BLOB)");
    const ins = w.prepare("INSERT INTO t VALUES (randomblob(3000))");
    w.transaction(() => {
      for (let i = 0; i < 500; i++) ins.run();
    })();
    const idx = readWal(`${db}-wal`, 4096);
    expect(idx.mxFrame).toBeGreaterThan(0);
    expect(idx.dbPages).toBeGreaterThan(statSync(db).size / 4096); // most pages exist only in the WAL
    const out = join(tmp, "grow-copy.sqlite");
    await copyOf(db, out);
    w.close();
    const c = new Database(out, { readonly: true });
    expect(c.pragma("integrity_check", { simple: true })).toBe("ok");
    expect(c.prepare("SELECT count(*) FROM t").pluck().get()).toBe(500);
    expect(statSync(out).size).toBe(idx.dbPages * 4096);
    c.close();
  });

  it("a WAL snapshot that can not copy its frames aside fails whole: no descriptor stays open, no overlay file is left", async () => {
    const { LiveSnapshot } = await import("../../dist/state/sqlite/livesnap.js");
    const db = join(tmp, "overlay-fail.sqlite");
    const w = new Database(db);
    w.pragma("journal_mode = WAL");
    w.pragma("wal_autocheckpoint = 0");
    w.exec("CREATE TABLE t (x BLOB)");
    w.prepare("INSERT INTO t VALUES (randomblob(5000))").run();
    const r = new Database(db, { readonly: true });
    r.exec("BEGIN");
    r.prepare("SELECT count(*) FROM t").get();
    const fds = () => readdirSync("/proc/self/fd").length;
    const before = fds();
    // the overlay goes into a folder that does not exist: its open fails after the database and the WAL were opened
    expect(() => new LiveSnapshot(db, r, join(tmp, "no-such-folder"))).toThrow(/ENOENT/);
    expect(fds()).toBe(before);
    const ok = new LiveSnapshot(db, r, tmp);
    expect(fds()).toBe(before + 2); // the database and its overlay
    ok.close();
    expect(fds()).toBe(before);
    expect(readdirSync(tmp).filter((f) => f.includes("wal-overlay"))).toEqual([]);
    r.exec("COMMIT");
    r.close();
    w.close();
  });

  it("a database whose write lock another writer holds past the wait is a locked error naming it (11), not a hang", async () => {
    const db = join(tmp, "busy.sqlite");
    const w = new Database(db);
    w.exec("CREATE TABLE t (x)");
    w.exec("BEGIN IMMEDIATE");
    const t0 = Date.now();
    await expect(copyOf(db, join(tmp, "busy-copy.sqlite"), 200)).rejects.toMatchObject({ code: 11, message: expect.stringMatching(/database state \(\S+\) is locked by another process/) });
    expect(Date.now() - t0).toBeLessThan(10_000);
    w.exec("ROLLBACK");
    w.close();
    expect(existsSync(join(tmp, "busy-copy.sqlite"))).toBe(false);
  });
});
