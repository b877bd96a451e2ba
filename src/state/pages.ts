/**
 * Page-level incrementals for SQLite snapshots.
 *
 * A page index holds a keyed hash (SHA-256 of key ‖ page, first 16 bytes; pages
 * have a fixed length, so length extension does not apply) of every page
 * of a snapshot copy, so a later backup finds changed pages without the
 * parent's payload and without revealing page contents. A delta holds the
 * changed pages; applying it to the parent's database rebuilds the whole file,
 * whose sha256 the manifest records.
 */
import { createHash, hash, randomBytes } from "node:crypto";
import { closeSync, existsSync, fstatSync, ftruncateSync, openSync, readFileSync, readSync } from "node:fs";
import { join } from "node:path";
import { writeAll, writeFileAtomic } from "../fsutil.js";
import { BtreeCensus, type CensusPart } from "./btree.js";
import { blockSize, NextSums, sumBlocks, sumsPerPage, type ParentSums } from "./blocks.js";

const INDEX_MAGIC = Buffer.from("AGBKPIX1");
const DELTA_MAGIC = Buffer.from("AGBKDLT1");
const HASH_BYTES = 16;

/** The page-index key for this backup host (AGENTBAK_HOME/page-index-key), created on first use. */
export function pageIndexKey(home: string): Buffer {
  const p = join(home, "page-index-key");
  if (!existsSync(p)) writeFileAtomic(p, randomBytes(32).toString("hex") + "\n", 0o600);
  return Buffer.from(readFileSync(p, "utf8").trim(), "hex");
}

export interface PageIndex {
  pageSize: number;
  pageCount: number;
  hashes: Buffer;
}

/** Page size from a database file header (offset 16, big-endian; 1 means 65536). */
export function headerPageSize(fd: number): number {
  const h = Buffer.alloc(100);
  readSync(fd, h, 0, 100, 0);
  if (h.subarray(0, 16).toString("latin1") !== "SQLite format 3\0") throw new Error("not an SQLite database");
  const v = h.readUInt16BE(16);
  return v === 1 ? 65536 : v;
}

/** The keyed hash of one page at a time, into an index's hashes: one scratch buffer and the one-shot hash, no per-page objects. */
export class PageKeyedHash {
  private readonly scratch: Buffer;
  constructor(
    private readonly key: Buffer,
    readonly pageSize: number,
  ) {
    this.scratch = Buffer.alloc(key.length + pageSize);
    key.copy(this.scratch, 0);
  }

  /** Hashes the `i`th page of `buf` into entry `j` of `out`. */
  into(buf: Buffer, i: number, out: Buffer, j: number): void {
    buf.copy(this.scratch, this.key.length, i * this.pageSize, (i + 1) * this.pageSize);
    (hash("sha256", this.scratch, "buffer") as unknown as Buffer).copy(out, j * HASH_BYTES, 0, HASH_BYTES);
  }
}

/** Keyed hashes of whole pages, fed a run of pages at a time. */
export class PageHasher {
  private readonly parts: Buffer[] = [];
  private readonly one: PageKeyedHash;
  private pages = 0;
  constructor(
    key: Buffer,
    readonly pageSize: number,
  ) {
    this.one = new PageKeyedHash(key, pageSize);
  }

  /** Hashes the whole pages in `buf` (its length must be a multiple of the page size). @returns their hashes, in order. */
  update(buf: Buffer): Buffer {
    const n = buf.length / this.pageSize;
    if (!Number.isInteger(n)) throw new Error(`database file size is not a multiple of its page size (${this.pageSize})`);
    const hashes = Buffer.alloc(n * HASH_BYTES);
    // 300k Hmac objects per GiB held ~100 MiB of native memory until GC: one scratch buffer instead (PageKeyedHash)
    for (let i = 0; i < n; i++) this.one.into(buf, i, hashes, i);
    this.parts.push(hashes);
    this.pages += n;
    return hashes;
  }

  index(): PageIndex {
    return { pageSize: this.pageSize, pageCount: this.pages, hashes: Buffer.concat(this.parts) };
  }
}

/** A new index's hashes for `pageCount` pages, starting as a copy of the parent's (pages past its end are zero: to be hashed). */
export function hashesFrom(parent: PageIndex, pageCount: number): Buffer {
  const out = Buffer.alloc(pageCount * HASH_BYTES);
  parent.hashes.copy(out, 0, 0, Math.min(parent.pageCount, pageCount) * HASH_BYTES);
  return out;
}

/** Pages of a database as of one instant: a pinned live snapshot (state/livesnap.ts) read in place. */
export interface PageSource {
  readonly pageSize: number;
  readonly pageCount: number;
  /** Reads pages first..first+n-1 (1-based) into `buf` (n × pageSize bytes). */
  read(first: number, n: number, buf: Buffer): void;
}

/** A database file's pages (a copy SQLite or agentbak wrote): one PageSource for files and pinned snapshots. close() when done. */
export class FilePages implements PageSource {
  readonly pageSize: number;
  readonly pageCount: number;
  private readonly fd: number;

  constructor(readonly path: string) {
    this.fd = openSync(path, "r");
    try {
      this.pageSize = headerPageSize(this.fd);
      const size = fstatSync(this.fd).size;
      if (size % this.pageSize) throw new Error(`database file size is not a multiple of its page size (${this.pageSize})`);
      this.pageCount = size / this.pageSize;
    } catch (e) {
      closeSync(this.fd);
      throw e;
    }
  }

  read(first: number, n: number, buf: Buffer): void {
    const want = n * this.pageSize;
    if (first < 1 || first + n - 1 > this.pageCount || readSync(this.fd, buf, 0, want, (first - 1) * this.pageSize) !== want)
      throw new Error(`short read of pages ${first}..${first + n - 1} of ${this.path}`);
  }

  close(): void {
    closeSync(this.fd);
  }
}

/** Runs `f` on the pages of `from`: a file's are opened for it, and closed after. */
export function withPages<T>(from: string | PageSource, f: (src: PageSource) => T): T {
  if (typeof from !== "string") return f(from);
  const pages = new FilePages(from);
  try {
    return f(pages);
  } finally {
    pages.close();
  }
}

/** Pages in a run of readPages: about 4 MiB, at least one page. */
const readRunPages = (pageSize: number) => Math.max(1, Math.floor((4 << 20) / pageSize));

/**
 * Reads pages 1..`last` (default all) in runs of whole pages (about 4 MiB
 * each), calling `each` with each run and its first page's number.
 */
export function readPages(src: PageSource, each: (run: Buffer, first: number, pageSize: number) => void, last = src.pageCount): void {
  const ps = src.pageSize;
  const buf = Buffer.allocUnsafe(readRunPages(ps) * ps);
  for (const [p, n] of pageRuns(ps, Math.min(last, src.pageCount), 4 << 20)) {
    src.read(p, n, buf);
    each(buf.subarray(0, n * ps), p, ps);
  }
}

/** Runs of whole pages of about `bytes` each covering pages 1..`last`: [first page, page count]. */
export function* pageRuns(pageSize: number, last: number, bytes: number): Generator<[number, number]> {
  const per = Math.max(1, Math.floor(bytes / pageSize));
  for (let p = 1; p <= last; p += per) yield [p, Math.min(per, last - p + 1)];
}

/** Reads a database once (a file, or a pinned snapshot's pages): keyed page hashes and the whole file's sha256. */
export function indexPages(from: string | PageSource, key: Buffer): PageIndex & { sha256: string; size: number } {
  return withPages(from, (src) => {
    const hasher = new PageHasher(key, src.pageSize);
    const h = createHash("sha256");
    let size = 0;
    readPages(src, (run) => {
      hasher.update(run);
      h.update(run);
      size += run.length;
    });
    return { ...hasher.index(), sha256: h.digest("hex"), size };
  });
}

/**
 * The whole sha256 of a pinned snapshot's pages, and the keyed hashes of its
 * pages after `from` (the caller hashes the ones before, in another thread),
 * with the census of those pages (to merge into the caller's).
 */
export function hashTail(src: PageSource, key: Buffer, from: number): { sha256: string; hashes: Buffer; census: CensusPart } {
  const h = createHash("sha256");
  const hasher = new PageHasher(key, src.pageSize);
  const census = new BtreeCensus(src.pageSize, src.pageCount);
  readPages(src, (run, first, ps) => {
    h.update(run);
    const skip = Math.max(0, from - first + 1);
    if (skip * ps < run.length) {
      hasher.update(run.subarray(skip * ps));
      census.pages(run.subarray(skip * ps), first + skip);
    }
  });
  return { sha256: h.digest("hex"), hashes: hasher.index().hashes, census: census.part(from + 1, src.pageCount) };
}

/** Where an in-place index splits its keyed hashing between two threads: a run boundary about `share` into the file. */
export function splitPage(pageCount: number, pageSize: number, share: number): number {
  const per = readRunPages(pageSize);
  return Math.min(pageCount, Math.round((pageCount * share) / per) * per);
}

/** Serialises a page index. */
export function encodeIndex(ix: PageIndex): Buffer {
  const h = Buffer.alloc(16);
  INDEX_MAGIC.copy(h, 0);
  h.writeUInt32BE(ix.pageSize, 8);
  h.writeUInt32BE(ix.pageCount, 12);
  return Buffer.concat([h, ix.hashes]);
}

/** Parses a page index. @throws Error when malformed. */
export function decodeIndex(b: Buffer): PageIndex {
  if (b.length < 16 || !b.subarray(0, 8).equals(INDEX_MAGIC)) throw new Error("not a page index");
  const pageSize = b.readUInt32BE(8);
  const pageCount = b.readUInt32BE(12);
  if (b.length !== 16 + pageCount * HASH_BYTES) throw new Error("page index length does not match its page count");
  return { pageSize, pageCount, hashes: b.subarray(16) };
}

const CHANGES_MAGIC = Buffer.from("AGBKPIX2");

/**
 * An incremental's page index as stored: the entries that changed since its
 * parent's index (header: magic, page size, page count, entry count; the
 * parent snapshot's id, u16 length and bytes; then u32 page number and hash
 * per entry), about 20 bytes per changed page instead of 16 per page. The
 * manifest signs the whole index (encodeIndex) rebuilt from it.
 */
export function encodeIndexChanges(ix: PageIndex, pages: number[], parentId: string): Buffer {
  const id = Buffer.from(parentId);
  const h = Buffer.alloc(20 + 2 + id.length);
  CHANGES_MAGIC.copy(h, 0);
  h.writeUInt32BE(ix.pageSize, 8);
  h.writeUInt32BE(ix.pageCount, 12);
  h.writeUInt32BE(pages.length, 16);
  h.writeUInt16BE(id.length, 20);
  id.copy(h, 22);
  const body = Buffer.alloc(pages.length * (4 + HASH_BYTES));
  pages.forEach((p, i) => {
    body.writeUInt32BE(p, i * (4 + HASH_BYTES));
    ix.hashes.copy(body, i * (4 + HASH_BYTES) + 4, (p - 1) * HASH_BYTES, p * HASH_BYTES);
  });
  return Buffer.concat([h, body]);
}

/** The parent snapshot an index's changes apply to; null for a whole index. @throws Error when it is neither. */
export function indexParent(b: Buffer): string | null {
  if (b.length >= 16 && b.subarray(0, 8).equals(INDEX_MAGIC)) return null;
  if (b.length < 22 || !b.subarray(0, 8).equals(CHANGES_MAGIC) || b.length < 22 + b.readUInt16BE(20)) throw new Error("not a page index");
  return b.subarray(22, 22 + b.readUInt16BE(20)).toString();
}

/**
 * A whole index (encodeIndex) with stored changes (encodeIndexChanges)
 * applied, oldest first: the whole index of the newest snapshot of the chain.
 * One buffer for the chain: `whole` itself (the caller's own; changed in
 * place) when no link has more pages, else one of the largest page count (a
 * fresh buffer per link, and a Buffer.copy per 16-byte entry, were 108 of
 * 128 ms rebuilding a 6-link chain's index of 1194 MiB).
 * @throws Error when malformed.
 */
export function applyIndexChain(whole: Buffer, changes: Buffer[]): Buffer {
  const base = decodeIndex(whole);
  let count = base.pageCount;
  for (const c of changes) {
    if (c.length < 22 || c.length !== 22 + c.readUInt16BE(20) + c.readUInt32BE(16) * (4 + HASH_BYTES)) throw new Error("page index changes length does not match their count");
    if (c.readUInt32BE(8) !== base.pageSize) throw new Error("page index changes are for another page size");
  }
  const most = Math.max(count, ...changes.map((c) => c.readUInt32BE(12)));
  let out = whole;
  if (most > count) {
    out = Buffer.alloc(16 + most * HASH_BYTES);
    whole.copy(out, 0, 0, 16 + count * HASH_BYTES);
  }
  const hashes = out.subarray(16);
  for (const c of changes) {
    const pageCount = c.readUInt32BE(12);
    // pages past the end are gone: zero, as a page that comes back is until a change names it
    if (pageCount < count) hashes.fill(0, pageCount * HASH_BYTES, count * HASH_BYTES);
    count = pageCount;
    const n = c.readUInt32BE(16);
    for (let i = 0, o = 22 + c.readUInt16BE(20); i < n; i++, o += 4 + HASH_BYTES) {
      const p = c.readUInt32BE(o);
      if (p < 1 || p > pageCount) throw new Error(`page index changes name page ${p} outside 1..${pageCount}`);
      // byte by byte: a call per 16-byte entry costs more than its copy
      for (let k = 0, d = (p - 1) * HASH_BYTES; k < HASH_BYTES; k++) hashes[d + k] = c[o + 4 + k]!;
    }
  }
  out.writeUInt32BE(count, 12);
  return out.subarray(0, 16 + count * HASH_BYTES);
}

/** Of the pages whose keyed hashes are `hashes` (of `pageSize`, the first page `first`), the numbers of those that differ from (or are missing in) `base`. */
export function changedIn(base: PageIndex, pageSize: number, hashes: Buffer, first: number): number[] {
  const n = hashes.length / HASH_BYTES;
  if (base.pageSize !== pageSize) return Array.from({ length: n }, (_, i) => first + i);
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const p = first + i;
    const at = (p - 1) * HASH_BYTES;
    if (p > base.pageCount || hashes.compare(base.hashes, at, at + HASH_BYTES, i * HASH_BYTES, (i + 1) * HASH_BYTES) !== 0) out.push(p);
  }
  return out;
}

/** A parent's block sums on this host (state/blocks.ts), their seed, and where the new snapshot's go. */
export interface DeltaBase {
  sums: ParentSums;
  seed: [number, number];
  out: string;
}

/** `base` when its sums are of pages of `pageSize` (a database whose page size changed has none it can use). */
export const usableBase = (base: DeltaBase | null | undefined, pageSize: number): DeltaBase | null => (base && base.sums.pageSize === pageSize ? base : null);

/**
 * A delta file being written: header (magic, unit, unit count, n) then (u32
 * unit number, unit bytes) per changed unit. The unit is the page, or — given
 * the parent's block sums — the 1 KiB block, and only the changed blocks of
 * the changed pages are written; the new snapshot's sums (the parent's, with
 * the changed pages' made afresh) are then written to `base.out`. The sums are
 * a cache: if they can not be read, a page's blocks are all written; if the
 * new ones can not be written, there are none. Runs of changed pages are added
 * in ascending page order, from wherever the caller holds them (a read of the
 * listed pages, or the run an in-place read is hashing).
 */
export class DeltaWriter {
  private readonly b: DeltaBase | null;
  private readonly unit: number;
  private readonly per: number;
  private readonly spp: number;
  private readonly next: NextSums | null;
  /** a run's sums and the parent's sums of its pages (grown to the longest run) */
  private fresh = Buffer.alloc(0);
  private old = Buffer.alloc(0);
  private readonly recs: Buffer;
  private readonly head = Buffer.alloc(20);
  private dst: number | null = null;
  private filled = 0;
  private n = 0;

  constructor(
    private readonly ix: Pick<PageIndex, "pageSize" | "pageCount">,
    out: string,
    base?: DeltaBase | null,
    private readonly onRun?: (run: Buffer, first: number) => void,
  ) {
    this.b = usableBase(base, ix.pageSize);
    const ps = ix.pageSize;
    this.unit = this.b ? blockSize(ps) : ps;
    this.per = ps / this.unit;
    this.spp = sumsPerPage(ps);
    this.next = this.b && new NextSums(this.b.sums, this.b.out, ix.pageCount);
    try {
      this.dst = openSync(out, "wx", 0o600);
      DELTA_MAGIC.copy(this.head, 0);
      this.head.writeUInt32BE(this.unit, 8);
      this.head.writeUInt32BE(ix.pageCount * this.per, 12);
      writeAll(this.dst, this.head); // the record count is filled in at the end
    } catch (e) {
      this.abandon();
      throw e;
    }
    // records gathered into about 1 MiB per write
    this.recs = Buffer.alloc(Math.max(1, Math.floor((1 << 20) / (4 + this.unit))) * (4 + this.unit));
  }

  /** Adds a run of changed pages (whole pages), the first of which is page `first`. */
  add(pagesRead: Buffer, first: number): void {
    this.put(pagesRead, first, this.sum(pagesRead, first), 0);
  }

  /**
   * A run of pages read in order (whole pages, the first page `first`), given
   * the parent's block sums: the pages whose sums differ from, or are missing
   * in, the parent's go in from it (their changed blocks), found by the same
   * sums that pick those blocks. A page is the same when each of its blocks'
   * sums is: a sum that wrongly matched keeps a changed page out, as it would a
   * changed block, and the rebuilt file's signed sha256 then fails at restore,
   * verify and drill. 4.3 GB/s on one core here, where the keyed hashes of
   * every page ran at ~0.8 GB/s.
   * @returns the numbers of the pages that went in.
   */
  addChanged(run: Buffer, first: number): number[] {
    const { spp } = this;
    const ps = this.ix.pageSize;
    const count = run.length / ps;
    const known = this.sum(run, first); // (may grow fresh and old: read through this below)
    const changed: number[] = [];
    for (let i = 0; i < count; i++) if (i >= known || this.fresh.compare(this.old, i * spp, (i + 1) * spp, i * spp, (i + 1) * spp) !== 0) changed.push(first + i);
    for (const [p, k] of consecutiveRuns(changed, count)) this.put(run.subarray((p - first) * ps, (p - first + k) * ps), p, Math.max(0, known - (p - first)), (p - first) * spp);
    return changed;
  }

  /** The sums of a run and the parent's of its pages, into fresh and old. @returns how many of its pages the parent has sums for. */
  private sum(run: Buffer, first: number): number {
    const { b, spp } = this;
    if (!b) return 0;
    const count = run.length / this.ix.pageSize;
    if (this.fresh.length < count * spp) {
      this.fresh = Buffer.alloc(count * spp);
      this.old = Buffer.alloc(count * spp);
    }
    sumBlocks(run, this.unit, b.seed, this.fresh, 0);
    return b.sums.readRun(first, count, this.old);
  }

  /** Writes the changed units of `pagesRead` (its first page `first`, its sums at `at` in fresh and old; the parent has sums for its first `known` pages). */
  private put(pagesRead: Buffer, first: number, known: number, at: number): void {
    const { b, per, unit, spp, fresh, old, recs } = this;
    const ps = this.ix.pageSize;
    const count = pagesRead.length / ps;
    this.onRun?.(pagesRead, first);
    for (let i = 0; i < count; i++)
      for (let j = 0; j < per; j++) {
        const o = at + i * spp + j * (spp / per);
        if (i < known && fresh.compare(old, o, o + spp / per, o, o + spp / per) === 0) continue;
        if (this.filled === recs.length) {
          writeAll(this.dst!, recs);
          this.filled = 0;
        }
        recs.writeUInt32BE((first + i - 1) * per + j + 1, this.filled);
        pagesRead.copy(recs, this.filled + 4, i * ps + j * unit, i * ps + (j + 1) * unit);
        this.filled += 4 + unit;
        this.n++;
      }
    if (b) this.next!.setRun(first, fresh.subarray(at), count);
  }

  /** Writes what is gathered and the record count, and closes the file. @returns whether the new snapshot's sums were written whole. */
  finish(): boolean {
    try {
      writeAll(this.dst!, this.recs, 0, this.filled);
      this.head.writeUInt32BE(this.n, 16);
      writeAll(this.dst!, this.head, 0, 20, 0);
    } catch (e) {
      this.abandon();
      throw e;
    }
    const fd = this.dst!;
    this.dst = null; // closed once, even when the close fails
    closeSync(fd);
    return this.next?.close() ?? false;
  }

  /** Closes the file and the sums unfinished (the caller removes them). */
  abandon(): void {
    const fd = this.dst;
    this.dst = null;
    try {
      if (fd !== null) closeSync(fd);
    } catch {
      // an error is already on its way; this one would hide it
    }
    this.next?.close();
  }
}

/** Pages of the longest run readListedPages reads at once (and DeltaWriter.add takes): about 1 MiB, at least one page. */
export const listedRunPages = (pageSize: number) => Math.max(1, Math.floor((1 << 20) / pageSize));

/**
 * Reads the listed pages (1-based, ascending) in runs of consecutive pages of
 * about 1 MiB, calling `each` with each run and its first page's number: one
 * read per run, not per page.
 */
export function readListedPages(src: PageSource, pages: number[], each: (run: Buffer, first: number) => void): void {
  const ps = src.pageSize;
  const most = listedRunPages(ps);
  const buf = Buffer.allocUnsafe(most * ps);
  for (const [first, n] of consecutiveRuns(pages, most)) {
    const run = buf.subarray(0, n * ps);
    src.read(first, n, run);
    each(run, first);
  }
}

/** Runs of consecutive page numbers in `pages` (ascending), at most `most` long: [first page, page count]. */
export function* consecutiveRuns(pages: number[], most: number): Generator<[number, number]> {
  for (let i = 0; i < pages.length; ) {
    let n = 1;
    while (n < most && i + n < pages.length && pages[i + n] === pages[i]! + n) n++;
    yield [pages[i]!, n];
    i += n;
  }
}

/**
 * Applies a delta to a database file in place: writes the delta's pages and
 * truncates to its page count.
 * @throws Error when the delta is malformed.
 */
export function applyDelta(file: string, deltaFile: string): void {
  const d = openSync(deltaFile, "r");
  const o = openSync(file, "r+");
  try {
    const h = Buffer.alloc(20);
    if (readSync(d, h, 0, 20, 0) !== 20 || !h.subarray(0, 8).equals(DELTA_MAGIC)) throw new Error("not a page delta");
    const pageSize = h.readUInt32BE(8);
    const pageCount = h.readUInt32BE(12);
    const n = h.readUInt32BE(16);
    if (pageSize < 512 || pageSize > 65536 || (pageSize & (pageSize - 1)) !== 0) throw new Error("page delta has an invalid page size");
    const rec = Buffer.alloc(4 + pageSize);
    let pos = 20;
    for (let i = 0; i < n; i++) {
      if (readSync(d, rec, 0, rec.length, pos) !== rec.length) throw new Error("page delta truncated");
      pos += rec.length;
      const p = rec.readUInt32BE(0);
      if (p < 1 || p > pageCount) throw new Error(`page delta names page ${p} outside 1..${pageCount}`);
      writeAll(o, rec, 4, pageSize, (p - 1) * pageSize);
    }
    ftruncateSync(o, pageCount * pageSize);
  } finally {
    closeSync(d);
    closeSync(o);
  }
}
