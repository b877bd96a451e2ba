/**
 * Page-level incrementals for SQLite snapshots.
 *
 * A page index holds the digest of every page of a snapshot (the first 16
 * bytes of the page's SHA-256), so a later backup finds changed pages without
 * the parent's payload. As stored in the repository each digest is encrypted
 * on its own (AES-128 of the one 16-byte block, under a key derived from this
 * host's page-index key): equal pages still compare equal, and nothing about
 * a page can be told or guessed from it without the key. A delta holds the
 * changed pages; applying it to the parent's database rebuilds the whole file.
 * The manifest records that file's pages root (pagesRoot: SHA-256 over the
 * page size, the page count and every page's digest): an incremental keeps the
 * parent's digests of the pages that did not change and digests only the ones
 * that did, rather than reading the whole database again for its sha256.
 */
import { createCipheriv, createDecipheriv, createHash, hash, randomBytes } from "node:crypto";
import { closeSync, existsSync, fstatSync, ftruncateSync, openSync, readFileSync, readSync } from "node:fs";
import { join } from "node:path";
import { noKey } from "../../errors.js";
import { writeAll, writeFileAtomic } from "../../fsutil.js";
import { BtreeCensus, type CensusPart } from "../sqlite/btree.js";
import { blockSize, NextSums, ParentSums, SumsDiff, sumsPerPage } from "./blocks.js";

/** A whole index, and an incremental's changes to its parent's (sealed digests; the keyed hashes of earlier builds were PIX1/PIX2) */
const INDEX_MAGIC = Buffer.from("AGBKPXW3");
const DELTA_MAGIC = Buffer.from("AGBKDLT1");
const HASH_BYTES = 16;
/** The sums of a delta written without a parent's (never read: no page of it is known) */
const NO_SUMS = Buffer.alloc(0);

/** The page-index key for this backup host (AGENTBAK_HOME/page-index-key), created on first use. */
export function pageIndexKey(home: string): Buffer {
  const p = join(home, "page-index-key");
  if (!existsSync(p)) writeFileAtomic(p, randomBytes(32).toString("hex") + "\n", 0o600);
  const text = readFileSync(p, "utf8").trim();
  // Buffer.from(…, "hex") stops at the first character that is not hex: a damaged file would be a short, even empty, key
  if (!/^[0-9a-f]{64}$/i.test(text)) throw noKey(`${p} is not a page-index key (64 hex digits); restore it from a copy of AGENTBAK_HOME, or remove it to start a new one (the next incremental then holds every page)`);
  return Buffer.from(text, "hex");
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

/** The digest of one page at a time, into an index's hashes: the one-shot hash, no per-page objects. */
export class PageDigest {
  constructor(readonly pageSize: number) {}

  /** The digest of the `i`th page of `buf` into entry `j` of `out`. */
  into(buf: Buffer, i: number, out: Buffer, j: number): void {
    (hash("sha256", buf.subarray(i * this.pageSize, (i + 1) * this.pageSize), "buffer") as unknown as Buffer).copy(out, j * HASH_BYTES, 0, HASH_BYTES);
  }
}

/** Digests of whole pages, fed a run of pages at a time. */
export class PageHasher {
  private readonly parts: Buffer[] = [];
  private readonly one: PageDigest;
  private pages = 0;
  constructor(readonly pageSize: number) {
    this.one = new PageDigest(pageSize);
  }

  /** Digests the whole pages in `buf` (its length must be a multiple of the page size). @returns their digests, in order. */
  update(buf: Buffer): Buffer {
    const n = buf.length / this.pageSize;
    if (!Number.isInteger(n)) throw new Error(`database file size is not a multiple of its page size (${this.pageSize})`);
    const hashes = Buffer.alloc(n * HASH_BYTES);
    for (let i = 0; i < n; i++) this.one.into(buf, i, hashes, i);
    this.parts.push(hashes);
    this.pages += n;
    return hashes;
  }

  index(): PageIndex {
    return { pageSize: this.pageSize, pageCount: this.pages, hashes: Buffer.concat(this.parts) };
  }
}

/**
 * The digest the manifest records for a database rebuilt from a delta: SHA-256
 * over a label, the page size and page count (32-bit big-endian) and every
 * page's digest in page order.
 */
export function pagesRoot(ix: PageIndex): string {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(ix.pageSize, 0);
  head.writeUInt32BE(ix.pageCount, 4);
  return createHash("sha256").update("agentbak database pages 1\0").update(head).update(ix.hashes.subarray(0, ix.pageCount * HASH_BYTES)).digest("hex");
}

/** The pages root of a database file (read whole). */
export function filePagesRoot(path: string): string {
  return withPages(path, (src) => {
    const hasher = new PageHasher(src.pageSize);
    readPages(src, (run) => void hasher.update(run));
    return pagesRoot(hasher.index());
  });
}

/** A new index's hashes for `pageCount` pages, starting as a copy of the parent's (pages past its end are zero: to be hashed). */
export function hashesFrom(parent: PageIndex, pageCount: number): Buffer {
  const out = Buffer.alloc(pageCount * HASH_BYTES);
  parent.hashes.copy(out, 0, 0, Math.min(parent.pageCount, pageCount) * HASH_BYTES);
  return out;
}

/** Puts the digests of `pages` (`hashes`, in that order) into an index's `into`. */
export function setHashes(into: Buffer, pages: ArrayLike<number>, hashes: Buffer): void {
  for (let i = 0; i < pages.length; i++) hashes.copy(into, (pages[i]! - 1) * HASH_BYTES, i * HASH_BYTES, (i + 1) * HASH_BYTES);
}

/** Pages of a database as of one instant: a pinned live snapshot (state/sqlite/livesnap.ts) read in place. */
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
 * Reads pages `start`..`last` (default all) in runs of whole pages (about 4 MiB
 * each), calling `each` with each run and its first page's number.
 */
export function readPages(src: PageSource, each: (run: Buffer, first: number, pageSize: number) => void, last = src.pageCount, start = 1): void {
  const ps = src.pageSize;
  const buf = Buffer.allocUnsafe(readRunPages(ps) * ps);
  for (const [p, n] of pageRuns(ps, Math.min(last, src.pageCount), 4 << 20, start)) {
    src.read(p, n, buf);
    each(buf.subarray(0, n * ps), p, ps);
  }
}

/** Runs of whole pages of about `bytes` each covering pages `start`..`last`: [first page, page count]. */
export function* pageRuns(pageSize: number, last: number, bytes: number, start = 1): Generator<[number, number]> {
  const per = Math.max(1, Math.floor(bytes / pageSize));
  for (let p = start; p <= last; p += per) yield [p, Math.min(per, last - p + 1)];
}

/** Reads a database once (a file, or a pinned snapshot's pages): its page index and pages root. */
export function indexPages(from: string | PageSource): PageIndex & { root: string; size: number } {
  return withPages(from, (src) => {
    const hasher = new PageHasher(src.pageSize);
    readPages(src, (run) => void hasher.update(run));
    const ix = hasher.index();
    return { ...ix, root: pagesRoot(ix), size: ix.pageCount * ix.pageSize };
  });
}

/** The parent's block sums an in-place scan compares pages with: this host's file of them, and their seed. */
export interface SumsRef {
  file: string;
  seed: [number, number];
}

/** Of the pages a tail read finds changed by their sums: their numbers (ascending) and digests (in that order). */
export interface TailPart {
  changed: Uint32Array;
  hashes: Buffer;
}

/** Bytes of pages a tail read covers between the parts it hands over (the caller takes each in while the read goes on). */
const PART_BYTES = 32 << 20;

/**
 * Of a pinned snapshot's pages after `from` (the caller reads the ones
 * before, in another thread), the census (to merge into the caller's) and the
 * digests: of every one (`hashes`), or — given the parent's block sums — of
 * those whose sums differ, handed to `onPart` as the read goes (about every
 * PART_BYTES of pages, in page order; the others keep the parent's digests).
 * Sums that can not be read find every page changed.
 */
export function hashTail(src: PageSource, from: number, sums?: SumsRef, onPart?: (p: TailPart) => void): { hashes: Buffer; census: CensusPart } {
  const ps = src.pageSize;
  const hasher = new PageHasher(ps);
  const census = new BtreeCensus(ps, src.pageCount);
  const diff = sums ? new SumsDiff(ParentSums.open(sums.file, ps), sums.seed, ps) : null;
  const one = new PageDigest(ps);
  let changed: number[] = [];
  let parts: Buffer[] = [];
  let read = 0;
  const hand = () => {
    if (changed.length) onPart!({ changed: Uint32Array.from(changed), hashes: Buffer.concat(parts) });
    changed = [];
    parts = [];
    read = 0;
  };
  try {
    readPages(
      src,
      (run, first) => {
        census.pages(run, first);
        if (!diff) return void hasher.update(run);
        const { pages } = diff.changed(run, first);
        const out = Buffer.allocUnsafe(pages.length * HASH_BYTES);
        pages.forEach((p, i) => one.into(run, p - first, out, i));
        parts.push(out);
        for (const p of pages) changed.push(p);
        if ((read += run.length) >= PART_BYTES) hand();
      },
      src.pageCount,
      from + 1,
    );
    if (diff) hand();
  } finally {
    diff?.close();
  }
  return { hashes: hasher.index().hashes, census: census.part(from + 1, src.pageCount) };
}

/** Where an in-place read splits its pages between two threads: a run boundary about `share` into the file. */
export function splitPage(pageCount: number, pageSize: number, share: number): number {
  const per = readRunPages(pageSize);
  return Math.min(pageCount, Math.round((pageCount * share) / per) * per);
}

/** The key the stored digests are encrypted under, from this host's page-index key. */
const indexCipherKey = (key: Buffer) => createHash("sha256").update("agentbak page index digests\0").update(key).digest().subarray(0, 16);

/** Each 16-byte digest of `digests` encrypted (or decrypted) on its own: AES-128 of one block each (ECB, no padding). */
function sealDigests(key: Buffer, digests: Buffer, open = false): Buffer {
  if (!digests.length) return Buffer.alloc(0);
  const c = (open ? createDecipheriv : createCipheriv)("aes-128-ecb", indexCipherKey(key), null).setAutoPadding(false);
  const out = c.update(digests);
  c.final(); // nothing more: whole blocks, no padding
  return out;
}

/** Bytes of a whole index's header: magic, page size, page count, and which key sealed it (keyCheck). */
const WHOLE_HEAD = 24;

/** 8 bytes that tell whether an index was sealed under `key` (a digest of it; the key can not be had from them). */
const keyCheck = (key: Buffer) => createHash("sha256").update("agentbak page index key\0").update(key).digest().subarray(0, 8);

/** Serialises a page index as stored (its digests encrypted under `key`, this host's page-index key). */
export function encodeIndex(ix: PageIndex, key: Buffer): Buffer {
  const h = Buffer.alloc(WHOLE_HEAD);
  INDEX_MAGIC.copy(h, 0);
  h.writeUInt32BE(ix.pageSize, 8);
  h.writeUInt32BE(ix.pageCount, 12);
  keyCheck(key).copy(h, 16);
  return Buffer.concat([h, sealDigests(key, ix.hashes.subarray(0, ix.pageCount * HASH_BYTES))]);
}

/** A stored whole index's page size and count. @throws Error when malformed. */
function indexHead(b: Buffer): Omit<PageIndex, "hashes"> {
  if (b.length < WHOLE_HEAD || !b.subarray(0, 8).equals(INDEX_MAGIC)) throw new Error("not a page index");
  const pageSize = b.readUInt32BE(8);
  const pageCount = b.readUInt32BE(12);
  if (b.length !== WHOLE_HEAD + pageCount * HASH_BYTES) throw new Error("page index length does not match its page count");
  return { pageSize, pageCount };
}

/**
 * Parses a stored page index, its digests decrypted under `key`, or null
 * when another key sealed it (another host, or this host's key replaced):
 * its digests can not be read here.
 * @throws Error when malformed.
 */
export function decodeIndex(b: Buffer, key: Buffer): PageIndex | null {
  const head = indexHead(b);
  return b.subarray(16, WHOLE_HEAD).equals(keyCheck(key)) ? { ...head, hashes: sealDigests(key, b.subarray(WHOLE_HEAD), true) } : null;
}

const CHANGES_MAGIC = Buffer.from("AGBKPXC3");

/**
 * An incremental's page index as stored: the entries that changed since its
 * parent's index (header: magic, page size, page count, entry count; the
 * parent snapshot's id, u16 length and bytes; then u32 page number and
 * encrypted digest per entry), about 20 bytes per changed page instead of 16
 * per page. The manifest signs the whole index (encodeIndex) rebuilt from it.
 */
export function encodeIndexChanges(ix: PageIndex, pages: number[], parentId: string, key: Buffer): Buffer {
  const id = Buffer.from(parentId);
  const h = Buffer.alloc(20 + 2 + id.length);
  CHANGES_MAGIC.copy(h, 0);
  h.writeUInt32BE(ix.pageSize, 8);
  h.writeUInt32BE(ix.pageCount, 12);
  h.writeUInt32BE(pages.length, 16);
  h.writeUInt16BE(id.length, 20);
  id.copy(h, 22);
  const mine = Buffer.alloc(pages.length * HASH_BYTES);
  pages.forEach((p, i) => ix.hashes.copy(mine, i * HASH_BYTES, (p - 1) * HASH_BYTES, p * HASH_BYTES));
  const sealed = sealDigests(key, mine);
  const body = Buffer.alloc(pages.length * (4 + HASH_BYTES));
  pages.forEach((p, i) => {
    body.writeUInt32BE(p, i * (4 + HASH_BYTES));
    sealed.copy(body, i * (4 + HASH_BYTES) + 4, i * HASH_BYTES, (i + 1) * HASH_BYTES);
  });
  return Buffer.concat([h, body]);
}

/** The parent snapshot an index's changes apply to; null for a whole index. @throws Error when it is neither. */
export function indexParent(b: Buffer): string | null {
  if (b.length >= WHOLE_HEAD && b.subarray(0, 8).equals(INDEX_MAGIC)) return null;
  if (b.length < 22 || !b.subarray(0, 8).equals(CHANGES_MAGIC) || b.length < 22 + b.readUInt16BE(20)) throw new Error("not a page index");
  return b.subarray(22, 22 + b.readUInt16BE(20)).toString();
}

/**
 * A whole index (encodeIndex) with stored changes (encodeIndexChanges)
 * applied (as stored: the digests stay encrypted, each on its own), oldest first: the whole index of the newest snapshot of the chain.
 * One buffer for the chain: `whole` itself (the caller's own; changed in
 * place) when no link has more pages, else one of the largest page count (a
 * fresh buffer per link, and a Buffer.copy per 16-byte entry, were 108 of
 * 128 ms rebuilding a 6-link chain's index of 1194 MiB).
 * @throws Error when malformed.
 */
export function applyIndexChain(whole: Buffer, changes: Buffer[]): Buffer {
  const base = indexHead(whole);
  let count = base.pageCount;
  for (const c of changes) {
    if (c.length < 22 || c.length !== 22 + c.readUInt16BE(20) + c.readUInt32BE(16) * (4 + HASH_BYTES)) throw new Error("page index changes length does not match their count");
    if (c.readUInt32BE(8) !== base.pageSize) throw new Error("page index changes are for another page size");
  }
  const most = Math.max(count, ...changes.map((c) => c.readUInt32BE(12)));
  let out = whole;
  if (most > count) {
    out = Buffer.alloc(WHOLE_HEAD + most * HASH_BYTES);
    whole.copy(out, 0, 0, WHOLE_HEAD + count * HASH_BYTES);
  }
  const hashes = out.subarray(WHOLE_HEAD);
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
  return out.subarray(0, WHOLE_HEAD + count * HASH_BYTES);
}

/** Of the pages whose digests are `hashes` (of `pageSize`, the first page `first`), the numbers of those that differ from (or are missing in) `base`. */
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

/** A parent's block sums on this host (state/pages/blocks.ts), their seed, and where the new snapshot's go. */
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
  /** a run's sums and the parent's sums of its pages */
  private readonly diff: SumsDiff | null;
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
    this.diff = this.b && new SumsDiff(this.b.sums, this.b.seed, ps);
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
   * changed block (the sums decide; README, "Incremental"). 4.3 GB/s on one
   * core here, where digesting every page ran at ~0.85 GB/s.
   * @returns the numbers of the pages that went in.
   */
  addChanged(run: Buffer, first: number): number[] {
    const { spp } = this;
    const ps = this.ix.pageSize;
    const { pages: changed, known } = this.diff ? this.diff.changed(run, first) : { pages: Array.from({ length: run.length / ps }, (_, i) => first + i), known: 0 };
    for (const [p, k] of consecutiveRuns(changed, run.length / ps)) this.put(run.subarray((p - first) * ps, (p - first + k) * ps), p, Math.max(0, known - (p - first)), (p - first) * spp);
    return changed;
  }

  /** The sums of a run and the parent's of its pages, into the diff's fresh and old. @returns how many of its pages the parent has sums for. */
  private sum(run: Buffer, first: number): number {
    return this.diff ? this.diff.sum(run, first) : 0;
  }

  /** Writes the changed units of `pagesRead` (its first page `first`, its sums at `at` in fresh and old; the parent has sums for its first `known` pages). */
  private put(pagesRead: Buffer, first: number, known: number, at: number): void {
    const { b, per, unit, spp, recs } = this;
    const fresh = this.diff?.fresh ?? NO_SUMS;
    const old = this.diff?.old ?? NO_SUMS;
    const ps = this.ix.pageSize;
    const count = pagesRead.length / ps;
    this.onRun?.(pagesRead, first);
    const blocks: number[] = [];
    for (let i = 0; i < count; i++) {
      blocks.length = 0;
      for (let j = 0; j < per; j++) {
        const o = at + i * spp + j * (spp / per);
        if (i >= known || fresh.compare(old, o, o + spp / per, o, o + spp / per) !== 0) blocks.push(j);
      }
      // a page given as changed whose every block's sum matches (its digest differed: the sums collided) goes in whole
      if (!blocks.length) for (let j = 0; j < per; j++) blocks.push(j);
      for (const j of blocks) {
        if (this.filled === recs.length) {
          writeAll(this.dst!, recs);
          this.filled = 0;
        }
        recs.writeUInt32BE((first + i - 1) * per + j + 1, this.filled);
        pagesRead.copy(recs, this.filled + 4, i * ps + j * unit, i * ps + (j + 1) * unit);
        this.filled += 4 + unit;
        this.n++;
      }
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
