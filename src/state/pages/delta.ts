/**
 * The page delta of an incremental snapshot against its parent (changed
 * blocks of the changed pages when this host kept the parent's block sums):
 * its file format (DeltaWriter writes one, applyDelta rebuilds a database
 * from one) and the tail read that finds the changed pages of an in-place
 * read's second thread (hashTail). The top of the page engine
 * (state/pages/): it imports pageindex.ts and blocks.ts, and neither of them
 * imports it.
 */
import { closeSync, ftruncateSync, openSync, readSync } from "node:fs";
import { writeAll } from "../../fsutil.js";
import { BtreeCensus, type CensusPart } from "../sqlite/btree.js";
import { consecutiveRuns, readPages, type PageSource } from "../sqlite/pagefile.js";
import { blockSize, NextSums, ParentSums, SumsDiff, sumsPerPage, type SumsRef } from "./blocks.js";
import { HASH_BYTES, PageDigest, PageHasher, type PageIndex } from "./pageindex.js";

const DELTA_MAGIC = Buffer.from("AGBKDLT1");
/** The sums of a delta written without a parent's (never read: no page of it is known) */
const NO_SUMS = Buffer.alloc(0);

/** What sees each run of pages a DeltaWriter writes (the secret scan of an incremental's changed pages). */
export interface RunScan {
  run(run: Buffer, first: number): void;
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
    /** the secret scan of the changed pages: each run written is scanned from the same read */
    private readonly scan?: RunScan | null,
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
   * changed block (the sums decide; docs/bundle-format.md, "Incremental snapshots"). 4.3 GB/s on one
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
    this.scan?.run(pagesRead, first);
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
