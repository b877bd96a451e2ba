/**
 * A consistent view of a live SQLite database's pages at one instant, read
 * in place instead of copied first. A read transaction pins the snapshot: in
 * rollback-journal mode its SHARED lock keeps the file as it is; in WAL mode
 * the checkpointer never writes past a reader's mark, and the frames the
 * snapshot needs are copied aside while the write lock is held for a moment,
 * so a later WAL restart can not overwrite them. Pages read from here form one
 * self-contained rollback-journal database file, as the online backup API
 * would have written it.
 */
import Database from "better-sqlite3";
import { closeSync, existsSync, openSync, readSync, rmSync, statSync, writeSync } from "node:fs";
import { join } from "node:path";
import { AgentbakError, Exit, wrap } from "../errors.js";
import { readWal } from "./wal.js";

export type DB = Database.Database;

/** Pages of a database as of one instant. */
export interface PageSource {
  readonly pageSize: number;
  readonly pageCount: number;
  /** Reads pages first..first+n-1 (1-based) into `buf` (n × pageSize bytes). */
  read(first: number, n: number, buf: Buffer): void;
}

/** What identifies a database's committed state cheaply, without reading its pages. */
export interface LiveIdentity {
  size: number;
  mtimeMs: number;
  ino: number;
  /** file change counter (header offset 24): moves with every commit in rollback-journal mode */
  changeCounter: number;
  /** in WAL mode: the log generation and its last commit frame */
  wal: { salt1: number; salt2: number; mxFrame: number } | null;
}

const busyError = (name: string, path: string) =>
  new AgentbakError(Exit.locked, `database ${name} (${path}) is locked by another connection; pass --wait to wait for it`);

/** A live database held at one instant; close() releases it. */
export class LiveSnapshot implements PageSource {
  readonly pageSize: number;
  readonly pageCount: number;
  readonly journal: "wal" | "rollback";
  readonly identity: LiveIdentity;
  private readonly fd: number;
  /** page number → slot in the overlay file (WAL frames of the snapshot) */
  private readonly overlay: Map<number, number>;
  private readonly overlayFd: number | null;

  private constructor(
    readonly name: string,
    readonly path: string,
    private readonly reader: DB,
    info: { pageSize: number; pageCount: number; journal: "wal" | "rollback"; identity: LiveIdentity; overlay: Map<number, number>; overlayFile: string | null },
  ) {
    this.pageSize = info.pageSize;
    this.pageCount = info.pageCount;
    this.journal = info.journal;
    this.identity = info.identity;
    this.overlay = info.overlay;
    this.fd = openSync(path, "r");
    this.overlayFd = info.overlayFile ? openSync(info.overlayFile, "r") : null;
    if (info.overlayFile) rmSync(info.overlayFile); // unlinked: nothing is left behind, whatever happens
  }

  /**
   * Opens `path` at its current committed state. The write lock is held only
   * while the snapshot is pinned (milliseconds, plus copying the WAL frames it
   * needs); a writer holding it longer makes this wait up to `waitMs`.
   * `tempDir` receives the WAL overlay, unlinked at once.
   * @throws AgentbakError(10) when the file is missing, (11) when the database stays locked.
   */
  static open(name: string, path: string, opts: { waitMs: number; tempDir: string }): LiveSnapshot {
    if (!existsSync(path)) throw wrap(Object.assign(new Error("missing"), { code: "ENOENT", path }), `database ${name}`);
    const reader = new Database(path, { readonly: true, fileMustExist: true });
    let writer: DB | null = null;
    try {
      reader.pragma(`busy_timeout = ${Math.max(0, opts.waitMs)}`);
      const journal = reader.pragma("journal_mode", { simple: true }) === "wal" ? "wal" : "rollback";
      // hold the write lock while the snapshot is pinned, so what is read below is exactly one commit
      writer = new Database(path, { fileMustExist: true });
      writer.pragma(`busy_timeout = ${Math.max(0, opts.waitMs)}`);
      writer.exec("BEGIN IMMEDIATE");
      reader.exec("BEGIN");
      reader.prepare("SELECT count(*) FROM sqlite_schema").get(); // the first read pins the snapshot
      const pageCount = reader.pragma("page_count", { simple: true }) as number;
      const pageSize = reader.pragma("page_size", { simple: true }) as number;
      const st = statSync(path);
      const head = Buffer.alloc(100);
      const hfd = openSync(path, "r");
      try {
        readSync(hfd, head, 0, 100, 0);
      } finally {
        closeSync(hfd);
      }
      let overlay = new Map<number, number>();
      let overlayFile: string | null = null;
      let wal: LiveIdentity["wal"] = null;
      if (journal === "wal") {
        const w = readWal(`${path}-wal`, pageSize);
        wal = { salt1: w.salt1, salt2: w.salt2, mxFrame: w.mxFrame };
        if (w.pages.size) {
          overlayFile = join(opts.tempDir, `wal-overlay-${process.pid}-${Date.now()}`);
          overlay = copyFrames(`${path}-wal`, w.pages, pageCount, pageSize, overlayFile);
        }
      }
      writer.exec("ROLLBACK");
      return new LiveSnapshot(name, path, reader, {
        pageSize,
        pageCount,
        journal,
        identity: { size: st.size, mtimeMs: st.mtimeMs, ino: st.ino, changeCounter: head.readUInt32BE(24), wal },
        overlay,
        overlayFile,
      });
    } catch (e) {
      reader.close();
      const code = (e as { code?: string }).code ?? "";
      if (code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED")) throw busyError(name, path);
      if (e instanceof AgentbakError) throw e;
      throw wrap(e, `database ${name} (${path})`);
    } finally {
      writer?.close();
    }
  }

  read(first: number, n: number, buf: Buffer): void {
    const ps = this.pageSize;
    if (first < 1 || first + n - 1 > this.pageCount) throw new Error(`pages ${first}..${first + n - 1} outside 1..${this.pageCount}`);
    const got = readSync(this.fd, buf, 0, n * ps, (first - 1) * ps);
    if (got < n * ps) buf.fill(0, got, n * ps); // pages beyond the file's end come from the WAL below
    if (this.overlayFd !== null)
      for (let p = first; p < first + n; p++) {
        const slot = this.overlay.get(p);
        if (slot !== undefined && readSync(this.overlayFd, buf, (p - first) * ps, ps, slot * ps) !== ps) throw new Error(`short read of WAL page ${p}`);
      }
    if (first === 1) selfContained(buf, this.pageCount);
  }

  /** Ends the read transaction: writers and checkpoints may move on. */
  close(): void {
    try {
      this.reader.exec("ROLLBACK");
    } catch {
      /* no transaction left */
    }
    this.reader.close();
    closeSync(this.fd);
    if (this.overlayFd !== null) closeSync(this.overlayFd);
  }
}

/** Copies the newest frame of each page (within the database's size) into `out`. @returns page → slot. */
function copyFrames(walFile: string, pages: Map<number, number>, pageCount: number, pageSize: number, out: string): Map<number, number> {
  const slots = new Map<number, number>();
  const src = openSync(walFile, "r");
  const dst = openSync(out, "wx", 0o600);
  const buf = Buffer.alloc(pageSize);
  try {
    for (const [p, off] of pages) {
      if (p > pageCount) continue; // truncated away by a later commit
      if (readSync(src, buf, 0, pageSize, off) !== pageSize) throw new Error(`short read of WAL frame for page ${p}`);
      writeSync(dst, buf, 0, pageSize, slots.size * pageSize);
      slots.set(p, slots.size);
    }
  } finally {
    closeSync(src);
    closeSync(dst);
  }
  return slots;
}

/**
 * Makes page 1 describe a self-contained rollback-journal file: file format
 * versions 1/1 (not WAL), the in-header page count, valid for this change
 * counter — what the online backup API and `journal_mode = DELETE` leave.
 */
export function selfContained(page1: Buffer, pageCount: number): void {
  page1[18] = 1;
  page1[19] = 1;
  page1.writeUInt32BE(pageCount, 28);
  page1.copy(page1, 92, 24, 28);
}
