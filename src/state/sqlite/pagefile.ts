/**
 * A SQLite database's pages, read in runs (https://sqlite.org/fileformat2.html):
 * one PageSource for a file (a copy SQLite or agentbak wrote) and a pinned
 * live snapshot (livesnap.ts), and the run arithmetic every page reader shares
 * (the page index, the delta, the page-level secret scan, the payload writer).
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";

/** The first 16 bytes of every SQLite database file. */
export const SQLITE_MAGIC = Buffer.from("SQLite format 3\0", "latin1");

/** Page size from a database file header (offset 16, big-endian; 1 means 65536). */
export function headerPageSize(fd: number): number {
  const h = Buffer.alloc(100);
  readSync(fd, h, 0, 100, 0);
  if (!h.subarray(0, 16).equals(SQLITE_MAGIC)) throw new Error("not an SQLite database");
  const v = h.readUInt16BE(16);
  return v === 1 ? 65536 : v;
}

/** Pages of a database as of one instant: a pinned live snapshot (livesnap.ts) read in place. */
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

/** Where an in-place read splits its pages between two threads: a run boundary about `share` into the file. */
export function splitPage(pageCount: number, pageSize: number, share: number): number {
  const per = readRunPages(pageSize);
  return Math.min(pageCount, Math.round((pageCount * share) / per) * per);
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
