/**
 * The secret scan at page level: reads a snapshot file's b-tree pages
 * directly (SQLite file format, https://sqlite.org/fileformat2.html) and
 * checks every text and BLOB value for token formats, without decoding rows through
 * SQL. A page is parsed only when its raw bytes hold something token-like;
 * cells whose payload spills to overflow pages are reassembled by following
 * the chain (values over 4 MiB are scanned raw along it instead), so a value
 * split across pages is still seen whole.
 *
 * It says which pages hold a suspicious value, not which table or rowid:
 * scanDatabase names those, and runs only when this finds something.
 * Databases not encoded in UTF-8 are reported as unsupported (the caller
 * falls back to scanDatabase). nameSuspicious and changedPagesFindings turn
 * what it found into findings that name tables and rows.
 */
import { INDEX_INTERIOR, INDEX_LEAF, TABLE_INTERIOR, TABLE_LEAF } from "../sqlite/btree.js";
import { openDefensive, type DB } from "../sqlite/open.js";
import { readListedPages, readPages, withPages, type PageSource } from "../sqlite/pagefile.js";
import { detectSecret, RAW_PATTERN, scanDatabase, TOKEN_PATTERNS, type SecretFinding } from "./scan.js";

/** Cells with a larger payload are scanned raw along their chain instead of being reassembled in memory. */
const REASSEMBLE_MAX = 4 << 20;
/** Bytes carried from one overflow page to the next in a raw scan: longer than any token pattern needs to match. */
const CARRY = 256;

const BTREE = [TABLE_LEAF, INDEX_LEAF, INDEX_INTERIOR, TABLE_INTERIOR];
/** The b-tree pages that hold values of their own (page() parses these; table interiors hold only rowids). */
const VALUE_PAGES = [TABLE_LEAF, INDEX_LEAF, INDEX_INTERIOR];

export interface PageScanHeader {
  pageSize: number;
  usable: number;
  pageCount: number;
  utf8: boolean;
}

/** A varint at `off` in `b`: [value, bytes used]. Values beyond 2^53 lose precision, which only matters for rowids we do not need. */
function varint(b: Buffer, off: number, end: number): [number, number] {
  let v = 0;
  for (let i = 0; i < 8; i++) {
    if (off + i >= end) return [-1, 0];
    const c = b[off + i]!;
    v = v * 128 + (c & 0x7f);
    if (c < 0x80) return [v, i + 1];
  }
  if (off + 8 >= end) return [-1, 0];
  return [v * 256 + b[off + 8]!, 9];
}

/** Byte length of a record value of serial type `t`. */
function serialSize(t: number): number {
  if (t >= 12) return Math.floor((t - 12) / 2);
  return [0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0][t] ?? 0;
}

/** Every token format's literal prefix as bytes (ASCII: the same in UTF-8 and latin1). */
const PREFIXES = TOKEN_PATTERNS.map((p) => Buffer.from(p.prefix, "latin1"));

/** Whether `v` holds any token format's literal prefix: what detectSecret needs before it can match. */
const mayHoldToken = (v: Buffer): boolean => PREFIXES.some((p) => v.includes(p));

/** Whether any text or BLOB value of a record (`payload`) matches a token format. */
function recordHasSecret(payload: Buffer): boolean {
  const [hs, n] = varint(payload, 0, payload.length);
  if (hs < 1 || hs > payload.length) return false;
  let body = hs;
  for (let p = n; p < hs; ) {
    const [t, m] = varint(payload, p, hs);
    if (m === 0) return false;
    p += m;
    const len = serialSize(t);
    // text (odd types from 13) as UTF-8; BLOBs (even types from 12) as latin1, which keeps an ASCII token intact
    // a value none of whose bytes holds a format's literal prefix can not match (a native search, no string made)
    if (t >= 12 && body + len <= payload.length && mayHoldToken(payload.subarray(body, body + len)) && detectSecret(payload.toString(t % 2 ? "utf8" : "latin1", body, body + len))) return true;
    body += len;
  }
  return false;
}

/**
 * Scans pages one at a time. Call page() for every page (in any order), then
 * read `suspicious`. Overflow chains are read from the file itself.
 */
export class PageScanner {
  readonly header: PageScanHeader;
  /** 1-based page numbers holding a value that matches a token format */
  readonly suspicious: number[] = [];
  private readonly src: PageSource;
  private readonly maxLocalTable: number;
  private readonly maxLocalIndex: number;
  private readonly minLocal: number;
  private readonly scratch: Buffer;
  private chainBudget: number;

  /** `src`: a database file's pages (FilePages) or a pinned snapshot's, read in place. */
  constructor(src: PageSource) {
    this.src = src;
    const page1 = Buffer.allocUnsafe(src.pageSize);
    src.read(1, 1, page1);
    this.header = { pageSize: src.pageSize, usable: src.pageSize - page1[20]!, pageCount: src.pageCount, utf8: page1.readUInt32BE(56) <= 1 };
    const u = this.header.usable;
    this.maxLocalTable = u - 35;
    this.maxLocalIndex = Math.floor(((u - 12) * 64) / 255) - 23;
    this.minLocal = Math.floor(((u - 12) * 32) / 255) - 23;
    this.scratch = Buffer.alloc(this.header.pageSize);
    this.chainBudget = this.header.pageCount;
  }

  /** Reads page `pgno` into `buf`; false when it is not there. */
  readPage(pgno: number, buf: Buffer): boolean {
    if (pgno < 1 || pgno > this.header.pageCount) return false;
    this.src.read(pgno, 1, buf);
    return true;
  }

  /**
   * Scans a run of whole pages held in `buf` (the first is page `first`):
   * one regular-expression pass over the bytes of the pages that hold values
   * (leaf and index pages: what page() parses) picks the ones worth parsing;
   * every b-tree page is still walked for cells that spill to overflow pages,
   * whose values are checked whole (so overflow pages, most of a database of
   * large BLOBs, are not passed over by the expression as well).
   */
  pages(buf: Buffer, first: number): void {
    const ps = this.header.pageSize;
    const count = Math.floor(buf.length / ps);
    // 64 KiB strings: short-lived young-generation objects, where 4 MiB ones would pile up in the large-object space
    const per = Math.max(1, Math.floor(65536 / ps));
    const re = new RegExp(RAW_PATTERN.source, "g");
    const holdsValues = (i: number) => VALUE_PAGES.includes(buf[i * ps + (first + i === 1 ? 100 : 0)]!);
    for (let at = 0; at < count; ) {
      // a stretch of up to `per` pages that hold values, or of pages that do not (not passed over)
      const values = holdsValues(at);
      let n = 1;
      while (n < per && at + n < count && holdsValues(at + n) === values) n++;
      const candidates = new Set<number>();
      if (values) {
        const text = buf.toString("latin1", at * ps, (at + n) * ps);
        re.lastIndex = 0;
        for (let m = re.exec(text); m; m = re.exec(text)) {
          const i = Math.floor(m.index / ps);
          candidates.add(i);
          re.lastIndex = (i + 1) * ps; // one hit is enough for a page
        }
      }
      for (let i = 0; i < n; i++) this.page(buf.subarray((at + i) * ps, (at + i + 1) * ps), first + at + i, candidates.has(i));
      at += n;
    }
  }

  /** Scans one page; `parse` false checks only cells that spill to overflow pages. */
  page(p: Buffer, pgno: number, parse = true): void {
    const hdr = pgno === 1 ? 100 : 0;
    const type = p[hdr];
    if (type !== TABLE_LEAF && type !== INDEX_LEAF && type !== INDEX_INTERIOR) return; // table interiors, overflow, freelist: no values of their own
    const cells = p.readUInt16BE(hdr + 3);
    const ptrs = hdr + (type === INDEX_INTERIOR ? 12 : 8);
    const u = this.header.usable;
    const maxLocal = type === TABLE_LEAF ? this.maxLocalTable : this.maxLocalIndex;
    for (let c = 0; c < cells && ptrs + 2 * c + 2 <= u; c++) {
      let off = p.readUInt16BE(ptrs + 2 * c);
      if (off < ptrs || off >= u) continue;
      if (type === INDEX_INTERIOR) off += 4;
      const [size, n] = varint(p, off, u);
      if (n === 0 || size < 0) continue;
      off += n;
      if (type === TABLE_LEAF) {
        const [, r] = varint(p, off, u);
        if (r === 0) continue;
        off += r;
      }
      let local = size;
      if (size > maxLocal) {
        const k = this.minLocal + ((size - this.minLocal) % (u - 4));
        local = k <= maxLocal ? k : this.minLocal;
      }
      if (off + local > u) continue; // damaged cell: integrity_check reports it
      if (local === size) {
        if (parse && recordHasSecret(p.subarray(off, off + size))) return void this.suspicious.push(pgno);
        continue;
      }
      if (off + local + 4 > u) continue;
      const next = p.readUInt32BE(off + local);
      if (size > REASSEMBLE_MAX) {
        // a very large value is not held in memory: its chain is scanned raw, a run at a time, and a hit leaves it to SQL
        if (this.chainLooksSecret(p.subarray(off, off + local), next, size)) return void this.suspicious.push(pgno);
        continue;
      }
      const full = this.reassemble(p.subarray(off, off + local), next, size);
      if (full && recordHasSecret(full)) return void this.suspicious.push(pgno);
    }
  }

  /** Follows an overflow chain, calling `each` with each page's share of the payload; false when the chain is broken. */
  private walkChain(next: number, remaining: number, each: (part: Buffer) => boolean | void): boolean {
    const u = this.header.usable;
    while (remaining > 0) {
      // in a sound file every overflow page belongs to one cell, so all chains together are at most pageCount long;
      // beyond that the file is damaged (integrity_check says so) and chains are no longer followed
      if (next < 1 || next > this.header.pageCount || this.chainBudget-- <= 0) return false;
      if (!this.readPage(next, this.scratch)) return false;
      const take = Math.min(remaining, u - 4);
      if (each(this.scratch.subarray(4, 4 + take)) === true) return true;
      remaining -= take;
      next = this.scratch.readUInt32BE(0);
    }
    return true;
  }

  /** Whether the raw bytes of a large cell (local part and chain) hold anything token-like, with no more than a page in memory. */
  private chainLooksSecret(localPart: Buffer, next: number, size: number): boolean {
    const re = new RegExp(RAW_PATTERN.source);
    let carry = localPart.toString("latin1");
    if (re.test(carry)) return true;
    let hit = false;
    this.walkChain(next, size - localPart.length, (part) => {
      const text = carry + part.toString("latin1");
      if (re.test(text)) return (hit = true);
      carry = text.slice(-CARRY);
    });
    return hit;
  }

  /** A cell's whole payload: the local part, then the overflow chain from page `next`. Null when the chain is broken. */
  private reassemble(localPart: Buffer, next: number, size: number): Buffer | null {
    const out = Buffer.allocUnsafe(size);
    localPart.copy(out, 0);
    let got = localPart.length;
    const ok = this.walkChain(next, size - got, (part) => {
      part.copy(out, got);
      got += part.length;
    });
    return ok ? out : null;
  }
}

/**
 * The scan of an incremental's changed pages, fed each run of consecutive
 * changed pages as the delta reads it (one read of each page for both).
 * A changed page that is not a b-tree page may be an overflow page rewritten
 * in place under an unchanged cell (an update to a value of the same length),
 * whose owner can not be found from here: then the whole database is scanned
 * at the end instead.
 */
export class ChangedPagesScan {
  private readonly s: PageScanner;
  private whole = false;

  constructor(private readonly src: PageSource) {
    this.s = new PageScanner(src);
  }

  /** Scans the whole pages in `run`, the first of them page `first`. */
  run(run: Buffer, first: number): void {
    if (this.whole || !this.s.header.utf8) return;
    const ps = this.s.header.pageSize;
    for (let i = 0; i < run.length / ps; i++)
      if (!BTREE.includes(run[i * ps + (first + i === 1 ? 100 : 0)]!)) {
        this.whole = true;
        return;
      }
    this.s.pages(run, first);
  }

  /** The suspicious pages, or null for a database not in UTF-8 (the caller falls back to scanDatabase). */
  finish(): number[] | null {
    if (!this.s.header.utf8) return null;
    if (!this.whole) return this.s.suspicious;
    // a fresh scanner, with a fresh budget for overflow chains
    const all = new PageScanner(this.src);
    readPages(this.src, (run, first) => all.pages(run, first));
    return all.suspicious;
  }
}

/**
 * Scans a database file (or a pinned snapshot's pages), or with `only` (1-based,
 * ascending) just those pages, as ChangedPagesScan does.
 * @returns the suspicious pages, or null for a database not in UTF-8.
 */
export function scanFilePages(from: string | PageSource, only?: number[]): number[] | null {
  return withPages(from, (src) => {
    if (!only) {
      const s = new PageScanner(src);
      if (!s.header.utf8) return null;
      readPages(src, (run, first) => s.pages(run, first));
      return s.suspicious;
    }
    const c = new ChangedPagesScan(src);
    readListedPages(src, only, (run, first) => c.run(run, first));
    return c.finish();
  });
}

/**
 * Findings for the pages the page scan found suspicious: rows are read through
 * SQL only to name where a value is (or for databases not in UTF-8, `null`).
 */
export function nameSuspicious(db: DB, name: string, suspicious: number[] | null): SecretFinding[] {
  if (suspicious !== null && !suspicious.length) return [];
  const named = scanDatabase(db, name);
  return named.length ? named : (suspicious ?? []).slice(0, 20).map((p) => ({ where: `database ${name}: page ${p}`, kind: "token format" }));
}

/**
 * The findings of an incremental's secret scan, given what the scan of its
 * changed pages (ChangedPagesScan) found suspicious in `from`.
 */
export function changedPagesFindings(from: string | PageSource, name: string, suspicious: number[] | null, pinned?: DB): SecretFinding[] {
  if (suspicious !== null && !suspicious.length) return [];
  if (pinned) return nameSuspicious(pinned, name, suspicious);
  const db = openDefensive(from as string);
  try {
    return nameSuspicious(db, name, suspicious);
  } finally {
    db.close();
  }
}
