/**
 * Block sums: a 64-bit checksum of every 1 KiB block of a database's pages,
 * kept on the backup host (AGENTBAK_HOME/cache) beside the snapshot they
 * describe, so an incremental writes only the blocks of a changed page that
 * changed. The sums are a cache: when they can not be read or written the
 * backup goes on with whole pages. An update to one row of a 4 KiB page usually rewrites its header,
 * its cell pointers and the row's own cell and leaves most of the page as it
 * was: the bench's 1%-of-rows update touches 68% of the bytes of the pages it
 * changes.
 *
 * The sums never leave this host (the live database is here too), so they are
 * a fast non-cryptographic hash rather than the page index's SHA-256
 * (4.4 GB/s on one core here, against ~0.85 GB/s for the page digests):
 * two 32-bit lanes, each fed every word (a change to one word always changes
 * both lanes), seeded from the host's page-index key. They decide which
 * pages changed: a sum that wrongly matched keeps the parent's bytes of that
 * block in the chain, and the pages root the manifest signs (made from the
 * parent's digests of the pages found unchanged) can not see it (docs/bundle-format.md,
 * "Incremental snapshots").
 * The sums of a snapshot are used only by an incremental whose parent is
 * that very snapshot with those very database bytes; anything else (another
 * host, a lost cache, a compacted parent) writes whole changed pages.
 * In the page engine (state/pages/) it is the bottom with pageindex.ts: it
 * imports no other file of the engine.
 */
import { createHash } from "node:crypto";
import { closeSync, copyFileSync, fstatSync, ftruncateSync, openSync, readdirSync, readSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { ensureDir, writeAll } from "../../fsutil.js";
import { homePaths } from "../../home.js";

const SUM_BYTES = 8;
/** Bytes of a sums file read or written at a time (the sums of 128 MiB of 4 KiB pages). */
const WINDOW = 1 << 20;

/** The delta's unit for a database of `pageSize`: 1 KiB, or the page when it is smaller. */
export const blockSize = (pageSize: number) => Math.min(pageSize, 1024);

/** Two 32-bit seeds from the page-index key. */
export const blockSeed = (key: Buffer): [number, number] => {
  const d = createHash("sha256").update("agentbak block sums\0").update(key).digest();
  return [d.readInt32LE(0), d.readInt32LE(4)];
};

/** Sums of the blocks of `buf` (whole pages, 4-byte aligned) into `out` at `at` (SUM_BYTES per block). */
export function sumBlocks(buf: Buffer, unit: number, seed: [number, number], out: Buffer, at: number): void {
  let src = buf;
  if (buf.byteOffset % 4) src = Buffer.from(buf); // a fresh copy is aligned
  const w = new Int32Array(src.buffer, src.byteOffset, src.length >> 2);
  const o = new Int32Array(out.buffer, out.byteOffset + at, (src.length / unit) * 2);
  const words = unit >> 2;
  for (let b = 0, i = 0; i < w.length; b++) {
    let x = seed[0];
    let y = seed[1];
    // words in pairs: each lane takes one word of the pair through a multiply and rotate and adds the other,
    // so every word reaches both lanes through a step that is one-to-one in it
    for (const end = i + words; i < end; i += 2) {
      const k = w[i]!;
      const l = w[i + 1]!;
      x = Math.imul(x ^ k, 0x9e3779b1);
      x = (((x << 13) | (x >>> 19)) + l) | 0;
      y = Math.imul(y ^ l, 0x85ebca77);
      y = (((y << 17) | (y >>> 15)) + k) | 0;
    }
    // finalise: mix each lane with the other (murmur3's fmix32 constants)
    x ^= y >>> 15;
    x = Math.imul(x, 0x85ebca6b);
    x ^= x >>> 13;
    y ^= x;
    y = Math.imul(y, 0xc2b2ae35);
    y ^= y >>> 16;
    o[2 * b] = x;
    o[2 * b + 1] = y;
  }
}

/** The parent's block sums an in-place scan compares pages with: this host's file of them, and their seed. */
export interface SumsRef {
  file: string;
  seed: [number, number];
}

/** Bytes of sums per page. */
export const sumsPerPage = (pageSize: number) => (pageSize / blockSize(pageSize)) * SUM_BYTES;

/** A sums file being written. A cache: the first failure drops it, and the backup goes on without it. */
class SumsWriter {
  private fd: number | null = null;
  constructor(
    private readonly file: string,
    open: () => number,
  ) {
    try {
      this.fd = open();
    } catch {
      this.drop();
    }
  }
  get live(): boolean {
    return this.fd !== null;
  }
  /** Reads `length` bytes at `position` into `buf`; false (and the file dropped) when they can not be read. */
  read(buf: Buffer, length: number, position: number): boolean {
    if (this.fd === null) return false;
    try {
      if (readSync(this.fd, buf, 0, length, position) === length) return true;
    } catch {
      /* dropped below */
    }
    this.drop();
    return false;
  }
  write(buf: Buffer, length: number, position: number | null): void {
    if (this.fd === null) return;
    try {
      writeAll(this.fd, buf, 0, length, position);
    } catch {
      this.drop();
    }
  }
  private drop(): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
    rmSync(this.file, { force: true });
  }
  /** @returns whether the file was written whole. */
  close(): boolean {
    if (this.fd === null) return false;
    closeSync(this.fd);
    this.fd = null;
    return true;
  }
}

/** Block sums of a database's pages, fed a run of whole pages at a time, in page order, written to `file` as they are made. */
export class BlockSummer {
  private readonly unit: number;
  private scratch = Buffer.alloc(0);
  private readonly out: SumsWriter;
  constructor(
    pageSize: number,
    private readonly seed: [number, number],
    file: string,
  ) {
    this.unit = blockSize(pageSize);
    this.out = new SumsWriter(file, () => openSync(file, "w", 0o600));
  }
  update(run: Buffer): void {
    if (!this.out.live) return;
    const n = (run.length / this.unit) * SUM_BYTES;
    if (this.scratch.length < n) this.scratch = Buffer.alloc(n);
    sumBlocks(run, this.unit, this.seed, this.scratch, 0);
    this.out.write(this.scratch, n, null);
  }
  /** @returns whether the sums were written whole. */
  close(): boolean {
    return this.out.close();
  }
}

/** The sums of one page (its blocks', in order). */
export function pageSums(page: Buffer, seed: [number, number]): Buffer {
  const unit = blockSize(page.length);
  const out = Buffer.alloc((page.length / unit) * SUM_BYTES);
  sumBlocks(page, unit, seed, out, 0);
  return out;
}

/** A parent snapshot's sums, read a page at a time. close() when done. */
export class ParentSums {
  readonly pageCount: number;
  private readonly spp: number;
  /** the window of the file last read: pages winFirst..winFirst+winPages-1 */
  private win: Buffer | null = null;
  private winFirst = 0;
  private winPages = 0;
  constructor(
    readonly file: string,
    private readonly fd: number,
    readonly pageSize: number,
  ) {
    this.spp = sumsPerPage(pageSize);
    this.pageCount = fstatSync(fd).size / this.spp;
  }
  /** The sums in `file` for pages of `pageSize`, or null when it can not be opened or read (a cache: then not used). */
  static open(file: string, pageSize: number): ParentSums | null {
    let fd: number;
    try {
      fd = openSync(file, "r");
    } catch {
      return null;
    }
    try {
      return new ParentSums(file, fd, pageSize);
    } catch {
      closeSync(fd);
      return null;
    }
  }
  /**
   * The sums of pages first..first+n-1 (1-based) into `out`.
   * @returns how many of those pages, from `first` on, have sums here (0 when they can not be read: the pages'
   *   blocks are then all taken)
   */
  readRun(first: number, n: number, out: Buffer): number {
    const have = Math.min(n, this.pageCount - first + 1);
    if (have <= 0) return 0;
    // runs come in ascending order and are mostly a page or two: the file is read a window at a time
    if (first < this.winFirst || first + have > this.winFirst + this.winPages) {
      if (!this.win || this.win.length < n * this.spp) this.win = Buffer.allocUnsafe(Math.max(WINDOW, n * this.spp));
      try {
        this.winPages = Math.floor(readSync(this.fd, this.win, 0, Math.min(this.win.length, (this.pageCount - first + 1) * this.spp), (first - 1) * this.spp) / this.spp);
      } catch {
        this.winPages = 0;
      }
      this.winFirst = first;
    }
    const got = Math.max(0, Math.min(have, this.winFirst + this.winPages - first));
    this.win!.copy(out, 0, (first - this.winFirst) * this.spp, (first - this.winFirst + got) * this.spp);
    return got;
  }
  close(): void {
    closeSync(this.fd);
  }
}

/**
 * A run of pages (whole pages, in ascending order) against a parent's block
 * sums: the run's sums into `fresh`, the parent's of the same pages into
 * `old` (both grown to the longest run), and which pages differ. Used by the
 * delta's writer and by the worker that scans the last part of a database.
 */
export class SumsDiff {
  fresh = Buffer.alloc(0);
  old = Buffer.alloc(0);
  readonly spp: number;
  private readonly unit: number;
  constructor(
    private readonly parent: ParentSums | null,
    private readonly seed: [number, number],
    private readonly pageSize: number,
  ) {
    this.unit = blockSize(pageSize);
    this.spp = sumsPerPage(pageSize);
  }
  /** Sums `run` (its first page `first`) into fresh and the parent's into old. @returns how many of its pages the parent has sums for. */
  sum(run: Buffer, first: number): number {
    const count = run.length / this.pageSize;
    if (this.fresh.length < count * this.spp) {
      this.fresh = Buffer.alloc(count * this.spp);
      this.old = Buffer.alloc(count * this.spp);
    }
    sumBlocks(run, this.unit, this.seed, this.fresh, 0);
    return this.parent ? this.parent.readRun(first, count, this.old) : 0;
  }
  /**
   * The numbers of the pages of `run` whose sums differ from, or are missing
   * in, the parent's (fresh and old then hold the run's). A page is the same
   * when each of its blocks' sums is.
   * @returns them and how many of the run's pages the parent has sums for
   */
  changed(run: Buffer, first: number): { pages: number[]; known: number } {
    const { spp } = this;
    const count = run.length / this.pageSize;
    const known = this.sum(run, first);
    const pages: number[] = [];
    for (let i = 0; i < count; i++) if (i >= known || this.fresh.compare(this.old, i * spp, (i + 1) * spp, i * spp, (i + 1) * spp) !== 0) pages.push(first + i);
    return { pages, known };
  }
  /** Closes the parent's sums. */
  close(): void {
    this.parent?.close();
  }
}

/** A new snapshot's sums made from its parent's: a copy, resized to `pageCount` pages, with the changed pages' set afresh. */
export class NextSums {
  private readonly spp: number;
  private readonly out: SumsWriter;
  /** the window of the file being filled: pages winFirst..winFirst+winPages-1 */
  private win = Buffer.alloc(0);
  private winFirst = 0;
  private winPages = 0;
  private dirty = false;
  constructor(parent: ParentSums, file: string, private readonly pageCount: number) {
    this.spp = sumsPerPage(parent.pageSize);
    this.out = new SumsWriter(file, () => {
      copyFileSync(parent.file, file);
      const fd = openSync(file, "r+");
      try {
        ftruncateSync(fd, pageCount * this.spp);
      } catch (e) {
        closeSync(fd);
        throw e;
      }
      return fd;
    });
  }
  /**
   * The sums of pages first..first+n-1 (pageSums of each, in order, at the
   * start of `sums`). Runs come in ascending order and are mostly a page or
   * two: they are gathered into a window of the file, read and written whole.
   */
  setRun(first: number, sums: Buffer, n: number): void {
    if (first < this.winFirst || first + n > this.winFirst + this.winPages) {
      this.flush();
      this.winFirst = first;
      this.winPages = Math.min(Math.max(Math.floor(WINDOW / this.spp), n), this.pageCount - first + 1);
      if (this.win.length < this.winPages * this.spp) this.win = Buffer.allocUnsafe(this.winPages * this.spp);
      if (!this.out.read(this.win, this.winPages * this.spp, (first - 1) * this.spp)) {
        this.winPages = 0; // the file was dropped: nothing more is written
        return;
      }
    }
    sums.copy(this.win, (first - this.winFirst) * this.spp, 0, n * this.spp);
    this.dirty = true;
  }
  private flush(): void {
    if (this.dirty) this.out.write(this.win, this.winPages * this.spp, (this.winFirst - 1) * this.spp);
    this.dirty = false;
  }
  /** @returns whether the sums were written whole. */
  close(): boolean {
    this.flush();
    return this.out.close();
  }
}

/**
 * One agent database's block sums on this host: a folder in AGENTBAK_HOME/cache
 * holding the file of its newest snapshot, named by the snapshot, the
 * database's sha256 and its page size (a file that is not there, or whose size
 * is not a whole number of pages' sums, is not used).
 */
export class BlockSumsStore {
  readonly dir: string;
  constructor(home: string, repo: string, tenant: string, agent: string, db: string) {
    this.dir = homePaths(home).cache.blockSums(createHash("sha256").update(`${repo}\0${tenant}\0${agent}\0${db}`).digest("hex").slice(0, 16));
  }
  private name = (snapshotId: string, sha256: string, pageSize: number) => join(this.dir, `${snapshotId}-${sha256.slice(0, 16)}-${pageSize}.sums`);

  /** The sums of `snapshotId`'s database of `sha256` with `pageCount` pages of `pageSize`, if this host kept them. */
  open(snapshotId: string, sha256: string, pageSize: number, pageCount: number): ParentSums | null {
    const s = ParentSums.open(this.name(snapshotId, sha256, pageSize), pageSize);
    if (s?.pageCount === pageCount) return s;
    s?.close();
    return null;
  }

  /**
   * What a delta of `snapshotId` builds on: the sums this host kept of its parent's database (`parent`: see open), the
   * seed of `key` (this host's page-index key), and where `snapshotId`'s own sums are written (partial); null when it
   * kept none of the parent's, or can not write new ones.
   */
  base(parent: { snapshotId: string; sha256: string; pageSize: number; pageCount: number }, snapshotId: string, key: Buffer): { sums: ParentSums; seed: [number, number]; out: string } | null {
    const sums = this.open(parent.snapshotId, parent.sha256, parent.pageSize, parent.pageCount);
    const out = sums && this.partial(snapshotId);
    if (sums && out) return { sums, seed: blockSeed(key), out };
    sums?.close();
    return null;
  }

  /** Where the sums of a snapshot being made are written (renamed by commit once it is published); null when the folder can not be made. */
  partial(snapshotId: string): string | null {
    try {
      ensureDir(this.dir, 0o700); // as the rest of AGENTBAK_HOME: the sums describe the database
    } catch {
      return null; // a cache that can not be written only costs bytes next time
    }
    return join(this.dir, `${snapshotId}.partial`);
  }

  /** Keeps the partial sums as `snapshotId`'s (its database's sha256 and page size) and drops every other file. Best effort. */
  commit(snapshotId: string, sha256: string, pageSize: number): void {
    const keep = this.name(snapshotId, sha256, pageSize);
    try {
      renameSync(join(this.dir, `${snapshotId}.partial`), keep);
      for (const f of readdirSync(this.dir)) if (join(this.dir, f) !== keep) rmSync(join(this.dir, f), { force: true });
    } catch {
      /* a cache that can not be kept only costs bytes next time */
    }
  }

  /** Removes the partial sums of a snapshot that was not published. Best effort. */
  discard(snapshotId: string): void {
    try {
      rmSync(join(this.dir, `${snapshotId}.partial`), { force: true });
    } catch {
      /* nothing to remove, or not removable: never used (not named for a snapshot) */
    }
  }
}

/** A delta's base in the parent's block sums (BlockSumsStore.base). */
type SumsBase = NonNullable<ReturnType<BlockSumsStore["base"]>>;

/**
 * A snapshot's block sums of each of an agent's databases (a BlockSumsStore each): the sums this host kept of the
 * parent's databases, opened as the deltas' bases; where this snapshot's are written (partial), kept once it is
 * published (commit); close, whatever happened, closes the parent's and removes what was not kept; finish does both.
 */
export class SnapshotSums {
  private readonly stores: Map<string, BlockSumsStore>;
  /** the parent's sums of each database that has them (and whose new sums can be written) */
  readonly bases = new Map<string, SumsBase>();
  /**
   * `parent`: the parent's snapshot id and, of each database with a usable page index, its digest and shape; `key`:
   * this host's page-index key (the sums' seed).
   */
  constructor(
    at: { home: string; repo: string; tenant: string; agent: string },
    dbs: string[],
    private readonly snapshotId: string,
    parent: { snapshotId: string; dbs: Map<string, { sha256: string; pageSize: number; pageCount: number }> } | null,
    key: Buffer,
  ) {
    this.stores = new Map(dbs.map((db) => [db, new BlockSumsStore(at.home, at.repo, at.tenant, at.agent, db)]));
    for (const [db, p] of parent?.dbs ?? []) {
      const base = this.stores.get(db)!.base({ snapshotId: parent!.snapshotId, ...p }, snapshotId, key);
      if (base) this.bases.set(db, base);
    }
  }

  /** Where this snapshot's sums of `db` are written (undefined when their folder can not be made). */
  partial(db: string): string | undefined {
    return this.stores.get(db)!.partial(this.snapshotId) ?? undefined;
  }

  /** Keeps this snapshot's sums of `db` (its database's digest and page size) for the next incremental. Best effort. */
  commit(db: string, sha256: string, pageSize: number): void {
    this.stores.get(db)!.commit(this.snapshotId, sha256, pageSize);
  }

  /**
   * Ends this snapshot's block sums, whatever happened: `kept` (once the snapshot is published: each database whose
   * sums were written, with its digest and page size) are kept for the next incremental (commit), then the parent's
   * are closed and the rest removed (close).
   */
  finish(kept: { db: string; sha256: string; pageSize: number }[] | null): void {
    try {
      for (const k of kept ?? []) this.commit(k.db, k.sha256, k.pageSize);
    } finally {
      this.close();
    }
  }

  /** Closes the parent's sums and removes this snapshot's that were not kept. */
  close(): void {
    try {
      this.bases.forEach((b) => b.sums.close());
    } finally {
      this.stores.forEach((st) => st.discard(this.snapshotId));
    }
  }
}
