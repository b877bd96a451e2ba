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
import { closeSync, copyFileSync, existsSync, ftruncateSync, openSync, readFileSync, readSync, writeSync } from "node:fs";
import { join } from "node:path";
import { writeFileAtomic } from "../fsutil.js";

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
function headerPageSize(fd: number): number {
  const h = Buffer.alloc(100);
  readSync(fd, h, 0, 100, 0);
  if (h.subarray(0, 16).toString("latin1") !== "SQLite format 3\0") throw new Error("not an SQLite database");
  const v = h.readUInt16BE(16);
  return v === 1 ? 65536 : v;
}

/**
 * Reads a database file once: keyed page hashes and the whole file's sha256.
 */
export function indexPages(file: string, key: Buffer): PageIndex & { sha256: string; size: number } {
  const fd = openSync(file, "r");
  try {
    const pageSize = headerPageSize(fd);
    const whole = createHash("sha256");
    const chunkPages = Math.max(1, Math.floor((4 << 20) / pageSize));
    const buf = Buffer.alloc(chunkPages * pageSize);
    const parts: Buffer[] = [];
    // one scratch buffer and the one-shot hash: no per-page objects (300k Hmac objects per GiB held ~100 MiB of native memory until GC)
    const scratch = Buffer.alloc(key.length + pageSize);
    key.copy(scratch, 0);
    let size = 0;
    for (;;) {
      const n = readSync(fd, buf, 0, buf.length, size);
      if (n <= 0) break;
      if (n % pageSize !== 0) throw new Error(`database file size is not a multiple of its page size (${pageSize})`);
      whole.update(buf.subarray(0, n));
      const hashes = Buffer.alloc((n / pageSize) * HASH_BYTES);
      for (let i = 0; i < n / pageSize; i++) {
        buf.copy(scratch, key.length, i * pageSize, (i + 1) * pageSize);
        (hash("sha256", scratch, "buffer") as unknown as Buffer).copy(hashes, i * HASH_BYTES, 0, HASH_BYTES);
      }
      parts.push(hashes);
      size += n;
    }
    return { pageSize, pageCount: size / pageSize, hashes: Buffer.concat(parts), sha256: whole.digest("hex"), size };
  } finally {
    closeSync(fd);
  }
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

/** 1-based numbers of the pages of `cur` that differ from (or are missing in) `base`. */
export function changedPages(base: PageIndex, cur: PageIndex): number[] {
  if (base.pageSize !== cur.pageSize) return Array.from({ length: cur.pageCount }, (_, i) => i + 1);
  const out: number[] = [];
  for (let i = 0; i < cur.pageCount; i++) {
    const a = i < base.pageCount ? base.hashes.subarray(i * HASH_BYTES, (i + 1) * HASH_BYTES) : null;
    if (!a || !a.equals(cur.hashes.subarray(i * HASH_BYTES, (i + 1) * HASH_BYTES))) out.push(i + 1);
  }
  return out;
}

/** Writes a delta file: header (magic, page size, page count, n) then (u32 page number, page bytes) per changed page. */
export function writeDelta(dbFile: string, pages: number[], ix: PageIndex, out: string): void {
  const src = openSync(dbFile, "r");
  const dst = openSync(out, "wx", 0o600);
  try {
    const h = Buffer.alloc(20);
    DELTA_MAGIC.copy(h, 0);
    h.writeUInt32BE(ix.pageSize, 8);
    h.writeUInt32BE(ix.pageCount, 12);
    h.writeUInt32BE(pages.length, 16);
    writeSync(dst, h);
    const rec = Buffer.alloc(4 + ix.pageSize);
    for (const p of pages) {
      rec.writeUInt32BE(p, 0);
      if (readSync(src, rec, 4, ix.pageSize, (p - 1) * ix.pageSize) !== ix.pageSize) throw new Error(`short read of page ${p}`);
      writeSync(dst, rec);
    }
  } finally {
    closeSync(src);
    closeSync(dst);
  }
}

/**
 * Rebuilds a database: copies `baseFile` to `out`, writes the delta's pages,
 * truncates to the delta's page count.
 * @throws Error when the delta is malformed.
 */
export function applyDelta(baseFile: string, deltaFile: string, out: string): void {
  copyFileSync(baseFile, out);
  const d = openSync(deltaFile, "r");
  const o = openSync(out, "r+");
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
      writeSync(o, rec, 4, pageSize, (p - 1) * pageSize);
    }
    ftruncateSync(o, pageCount * pageSize);
  } finally {
    closeSync(d);
    closeSync(o);
  }
}

/** Where a snapshot's page index lives in the repository. */
export const indexFileName = (snapshotId: string, db: string) => `${snapshotId}.${db}.pageindex`;
