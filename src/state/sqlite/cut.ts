/**
 * The cut: the live databases of one snapshot held at one instant (every
 * write lock taken, the read snapshots opened, the locks released), then
 * copied, read in place, or handed over pinned; and the connections that
 * join that instant from another thread.
 */
import Database from "better-sqlite3";
import { accessSync, constants, statSync } from "node:fs";
import { dirname } from "node:path";
import { LiveSnapshot } from "./livesnap.js";
import { smallCache, openDefensive, sqliteError, type DB } from "./open.js";
import { ioErrno, ioError, usageError, verifyError, wrap } from "../../errors.js";

/** How long a snapshot waits for a writer's lock on a live database when --wait does not say. */
export const DEFAULT_BUSY_MS = 5000;

/** How the databases of one snapshot were captured at one instant (recorded in the manifest as `cut`). */
export interface Cut {
  /** when the read snapshots were opened: the instant the snapshot holds */
  at: string;
  /**
   * "write-locks": every database's write lock was taken (in `databases` order),
   * the read snapshots opened, the locks released; "read-transaction": one
   * database, whose read transaction alone is the instant.
   */
  method: "write-locks" | "read-transaction";
  databases: string[];
  /** time spent waiting for the write locks */
  wait_ms: number;
  /** time the write locks were held (writers waited this long at most) */
  hold_ms: number;
}

/** Each database's pinned snapshot, its connection (in the snapshot's read transaction) and its live file, by name. */
export type InPlaceViews = Map<string, { snap: LiveSnapshot; db: DB; src: string }>;

/** One database to copy: its config name, the live file, the copy to write. */
export interface CopyJob {
  name: string;
  src: string;
  dest: string;
}

/**
 * The live databases held at one instant: every write lock held (when this process can take it) and a read
 * snapshot of each opened and pinned. Its owner decides, in this order, what to do with it:
 * - `keep()` (only when `pinnable`): a full snapshot read in place takes the snapshots over while the write locks
 *   are still held, so a connection opened meanwhile (the inspection worker's) joins the same instant; they stay
 *   open after `close()`, until the release `keep` returns is called (no copy is written). Offered only when every
 *   database is in WAL mode and locked here: there a held read transaction blocks no writer (in rollback-journal
 *   mode its SHARED lock would stall the agent's commits for the whole backup);
 * - `releaseLocks()`: writers go on; the read transactions still hold the instant;
 * - `views()` (when `readable`: every database pinned) to read the pages in place (an incremental), or `copy()` to
 *   copy each into its job's `dest`;
 * - `close()` whatever happened, and `cut()` for the manifest.
 */
export interface Instant {
  /** every write lock is held: nothing could commit at the instant (capture/unchanged.ts reads the files then) */
  allLocked: boolean;
  /** keep() may be called */
  pinnable: boolean;
  /** every database is pinned: views() may be called */
  readable: boolean;
  views(): InPlaceViews;
  keep(): () => void;
  releaseLocks(): void;
  copy(): Promise<void>;
  cut(): Cut;
  close(): void;
}

/**
 * Opens the instant of `jobs` (see Instant). It takes the write lock of each (BEGIN IMMEDIATE, in name order, so
 * two agentbak runs never deadlock), opens a read snapshot of each and pins it (in WAL mode, the frames it needs are
 * copied aside): writers wait only while the snapshots open, and no commit can fall between two databases'
 * snapshots. A copy is made in place from the snapshot (state/sqlite/livesnap.ts), a sequential read and write
 * instead of the online backup API's page-by-page copy; a database this process may only read is copied with the
 * online backup API inside its read transaction. Integrity is checked by inspectSnapshot before anything is published.
 * @throws AgentbakError(11) naming the database whose write lock stayed busy for `waitMs`; AgentbakError naming the
 *   database when one is missing or unreadable. Nothing is left open when it throws.
 */
export async function openInstant(jobs: CopyJob[], waitMs: number): Promise<Instant> {
  const ordered = [...jobs].sort((x, y) => (x.name < y.name ? -1 : 1));
  for (const j of ordered) checkSource(j);
  const locks = new Map<string, DB>();
  const readers: { job: CopyJob; db: DB; snap: LiveSnapshot | null }[] = [];
  const t0 = Date.now();
  const left = () => Math.max(0, Math.round(waitMs - (Date.now() - t0)));
  let kept = false;
  let heldMs = 0;
  const close = () => {
    for (const l of locks.values()) closeQuietly(l);
    locks.clear();
    // snapshots kept are the keeper's to release
    if (!kept) readers.forEach(closeReader);
  };
  try {
    for (const j of ordered) await takeWriteLock(j, locks, left, waitMs);
    const locked = Date.now();
    for (const j of ordered) readers.push(await openReader(j, locks.has(j.name), left, waitMs));
    const at = new Date();
    const all = locks.size === ordered.length;
    return {
      allLocked: all,
      pinnable: all && readers.every((r) => r.snap?.journal === "wal"),
      readable: readers.every((r) => r.snap),
      views() {
        for (const r of readers) {
          r.db.pragma("trusted_schema = OFF");
          r.db.pragma("cell_size_check = ON");
          smallCache(r.db); // their counts walk whole tables
        }
        return new Map(readers.map((r) => [r.job.name, { snap: r.snap!, db: r.db, src: r.job.src }]));
      },
      keep() {
        kept = true;
        const mine = [...readers];
        let released = false;
        return () => void (released || ((released = true), mine.forEach(closeReader)));
      },
      releaseLocks() {
        if (!locks.size) return;
        for (const l of locks.values()) closeQuietly(l);
        locks.clear();
        heldMs = Date.now() - locked;
      },
      async copy() {
        for (const r of readers) await copyReader(r, waitMs);
      },
      cut: () => ({ at: at.toISOString(), method: all ? "write-locks" : "read-transaction", databases: ordered.map((j) => j.name), wait_ms: locked - t0, hold_ms: heldMs }),
      close,
    };
  } catch (e) {
    close();
    throw e;
  }
}

/**
 * Copies live databases as of one instant into self-contained rollback-journal files (see openInstant).
 * @throws as openInstant, and AgentbakError naming the database whose copy failed.
 */
export async function snapshotDatabases(jobs: CopyJob[], waitMs: number): Promise<Cut> {
  const inst = await openInstant(jobs, waitMs);
  try {
    inst.releaseLocks();
    await inst.copy();
    return inst.cut();
  } finally {
    inst.close();
  }
}

/** @throws AgentbakError naming the database when its live file is missing, a folder, not a regular file or empty. */
function checkSource(j: CopyJob): void {
  let st;
  try {
    st = statSync(j.src);
  } catch (e) {
    throw wrap(e, `database ${j.name}: ${j.src}`);
  }
  if (st.isDirectory()) throw usageError(`database ${j.name}: ${j.src} is a folder, not an SQLite database file`);
  // a FIFO would block, a device never ends
  if (!st.isFile()) throw usageError(`database ${j.name}: ${j.src} is ${st.isFIFO() ? "a FIFO" : st.isSocket() ? "a socket" : "a device"}, not an SQLite database file`);
  // SQLite would treat an empty file as a new, empty database: a backup of nothing is not what was configured
  if (st.size === 0) throw verifyError(`database ${j.name}: ${j.src} is empty (0 bytes), not an SQLite database`);
}

/** Takes `j`'s write lock into `locks`, unless this process may only read it. */
async function takeWriteLock(j: CopyJob, locks: Map<string, DB>, left: () => number, waitMs: number): Promise<void> {
  const db = openWriter(j);
  if (!db) return; // read-only for us: its read transaction alone holds it (see openReader)
  locks.set(j.name, db);
  let real: boolean;
  try {
    await whileBusy(db, left, () => db.exec("BEGIN IMMEDIATE"));
    real = holdsWriteLock(db, j.src);
  } catch (e) {
    throw sqliteError(e, j.name, j.src, waitMs);
  }
  if (!real) {
    // opened read-write but silently read-only (a file or WAL index this process may not write): its
    // BEGIN IMMEDIATE took no lock, and writers go on; it is treated as read-only for us
    closeQuietly(db);
    locks.delete(j.name);
  }
}

/** Opens `j`'s read snapshot, pinned when this process holds its write lock or it is not in WAL mode. */
async function openReader(j: CopyJob, locked: boolean, left: () => number, waitMs: number): Promise<{ job: CopyJob; db: DB; snap: LiveSnapshot | null }> {
  const db = openSource(j, true);
  try {
    // a writer holding an exclusive lock (rollback journal) is met here, as busy
    db.exec("BEGIN");
    await whileBusy(db, left, () => db.prepare("SELECT count(*) FROM sqlite_schema").get()); // the read snapshot starts at the first read
  } catch (e) {
    closeQuietly(db);
    throw sqliteError(e, j.name, j.src, waitMs);
  }
  // pinning a WAL database's frames needs its write lock held; without it, the online backup API copies it
  if (!locked && db.pragma("journal_mode", { simple: true }) === "wal") return { job: j, db, snap: null };
  try {
    return { job: j, db, snap: new LiveSnapshot(j.src, db, dirname(j.dest)) };
  } catch (e) {
    closeQuietly(db);
    throw ioErrno(e) ? ioError(e, `database ${j.name}: ${j.src}`) : sqliteError(e, j.name, j.src);
  }
}

/** Copies one database from its read snapshot into its job's `dest`, a rollback-journal file. */
async function copyReader({ job, db, snap }: { job: CopyJob; db: DB; snap: LiveSnapshot | null }, waitMs: number): Promise<void> {
  try {
    if (snap) await snap.copyTo(job.dest);
    // one read transaction is open on this connection, so every step copies the same committed state
    else await db.backup(job.dest, { progress: ({ totalPages }) => Math.max(totalPages, 100) });
  } catch (e) {
    throw ioErrno(e) ? ioError(e, `database ${job.name}: ${(e as NodeJS.ErrnoException).syscall === "read" ? `reading ${job.src}` : `copying to ${job.dest}`}`) : sqliteError(e, job.name, job.src, waitMs);
  }
  // read-write, so SQLite parses the schema defensively: an unsafe function in it is refused here (13)
  let copy: DB | undefined;
  try {
    copy = new Database(job.dest);
    copy.pragma("journal_mode = DELETE");
  } catch (e) {
    // the copy holds the live database's schema: name the live file
    throw ioErrno(e) ? ioError(e, `database ${job.name}: ${job.dest}`) : sqliteError(e, job.name, job.src);
  } finally {
    copy?.close();
  }
}

/**
 * Opens a read transaction on each live database, for a connection that joins
 * the instant another one pinned while its write locks are held (a full
 * snapshot inspected in place, in the inspection worker).
 * @throws what snapshotDatabases would throw for the database (a schema that
 *   SQLite refuses to parse: 13 naming it).
 */
export function joinInstant(dbs: { name: string; file: string }[]): Map<string, DB> {
  const out = new Map<string, DB>();
  try {
    for (const d of dbs) {
      let db: DB | undefined;
      try {
        db = openDefensive(d.file);
        db.pragma("busy_timeout = 5000"); // a checkpoint that is running (WAL) answers busy for a moment
        db.exec("BEGIN");
        db.prepare("SELECT count(*) FROM sqlite_schema").get(); // the read snapshot starts at the first read
      } catch (e) {
        db?.close();
        throw sqliteError(e, d.name, d.file);
      }
      out.set(d.name, db);
    }
  } catch (e) {
    releaseAll(out);
    throw e;
  }
  return out;
}

/** Ends the read transactions of joinInstant's connections and closes them. */
export function releaseAll(dbs: Map<string, DB>): void {
  for (const db of dbs.values()) closeQuietly(db);
  dbs.clear();
}

function closeReader(r: { db: DB; snap: LiveSnapshot | null }): void {
  r.snap?.close();
  closeQuietly(r.db);
}

/**
 * Runs `step` until SQLite stops answering busy or `left()` runs out, waiting
 * in SQLite at most 200 ms at a time and yielding in between: a wait of
 * minutes (backup --wait) still lets Ctrl-C and SIGTERM through at once.
 * @throws the last busy error when the time is up, or any other error at once.
 */
async function whileBusy(db: DB, left: () => number, step: () => unknown): Promise<void> {
  for (;;) {
    db.pragma(`busy_timeout = ${Math.min(left(), 200)}`);
    try {
      step();
      db.pragma(`busy_timeout = ${left()}`); // what follows on this connection waits as long as the whole budget allows
      return;
    } catch (e) {
      if (!/^SQLITE_BUSY/.test(String((e as { code?: unknown }).code)) || left() <= 0) throw e;
    }
    await new Promise((r) => setTimeout(r, 5));
  }
}

/**
 * Whether `db`, in BEGIN IMMEDIATE, really holds the write lock of `path`.
 * SQLite opens a file this process may not write read-only without saying
 * so, and BEGIN IMMEDIATE then succeeds without locking anything: writers
 * commit meanwhile (seen as a process that could only read a root-owned
 * database). In WAL mode (where the WAL index may be the read-only part)
 * writing user_version's own value answers SQLITE_READONLY there; otherwise
 * it stays in the page cache (nothing is written before a commit) and is
 * rolled back with the lock. In rollback-journal mode the same write would
 * create a journal beside the database, so the file's own writability is
 * asked instead: SQLite falls back to read-only exactly when it can not open
 * it for writing.
 */
function holdsWriteLock(db: DB, path: string): boolean {
  if (db.pragma("journal_mode", { simple: true }) !== "wal") {
    try {
      accessSync(path, constants.W_OK);
      return true;
    } catch {
      return false;
    }
  }
  try {
    db.pragma(`user_version = ${Number(db.pragma("user_version", { simple: true }))}`);
    return true;
  } catch (e) {
    if (/^SQLITE_READONLY/.test(String((e as { code?: unknown }).code))) return false;
    throw e;
  }
}

/** A read-write connection to take a database's write lock, or null when this process may only read it. */
function openWriter(j: CopyJob): DB | null {
  try {
    return new Database(j.src, { fileMustExist: true });
  } catch (e) {
    const code = String((e as { code?: unknown }).code ?? "");
    if (/^(SQLITE_READONLY|SQLITE_CANTOPEN|EACCES|EPERM|EROFS)/.test(code)) return null;
    throw sqliteError(e, j.name, j.src);
  }
}

function openSource(j: CopyJob, readonly: boolean): DB {
  try {
    return new Database(j.src, { readonly, fileMustExist: true });
  } catch (e) {
    throw sqliteError(e, j.name, j.src);
  }
}

/** Closes a connection, rolling back whatever it holds. */
function closeQuietly(db: DB): void {
  try {
    if (db.inTransaction) db.exec("ROLLBACK");
  } catch {
    /* closing rolls back anyway */
  }
  db.close();
}
