/**
 * The page index of a SQLite snapshot. With blocks.ts, the bottom of the page
 * engine (state/pages/): it imports no other file of it; delta.ts imports both.
 *
 * A page index holds the digest of every page of a snapshot (the first 16
 * bytes of the page's SHA-256), so a later backup finds changed pages without
 * the parent's payload. As stored in the repository each digest is encrypted
 * on its own (AES-128 of the one 16-byte block, under a key derived from this
 * host's page-index key): equal pages still compare equal, and nothing about
 * a page can be told or guessed from it without the key. A delta (delta.ts)
 * holds the changed pages; applying it to the parent's database rebuilds the
 * whole file. The manifest records that file's pages root (pagesRoot: SHA-256
 * over the page size, the page count and every page's digest): an incremental
 * keeps the parent's digests of the pages that did not change and digests only
 * the ones that did, rather than reading the whole database again for its sha256.
 */
import { createCipheriv, createDecipheriv, createHash, hash, randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { noKey } from "../../errors.js";
import { writeFileAtomic } from "../../fsutil.js";
import { readPages, withPages, type PageSource } from "../sqlite/pagefile.js";
import { homePaths } from "../../home.js";

/** A whole index, and an incremental's changes to its parent's (sealed digests; the keyed hashes of earlier builds were PIX1/PIX2) */
const INDEX_MAGIC = Buffer.from("AGBKPXW3");
/** Bytes of one page digest in an index. */
export const HASH_BYTES = 16;

/** The page-index key for this backup host (AGENTBAK_HOME/page-index-key), created on first use. */
export function pageIndexKey(home: string): Buffer {
  const p = homePaths(home).pageIndexKey;
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
 * A page source whose pages 1..`last` are digested as they are read (a payload streaming pinned pages hashes its
 * share on the way; another reader digests the rest): sealIndex joins them before the rest's.
 */
export class HeadHashed implements PageSource {
  readonly pageSize: number;
  readonly pageCount: number;
  private readonly hasher: PageHasher;
  constructor(
    private readonly src: PageSource,
    private readonly last: number,
  ) {
    this.pageSize = src.pageSize;
    this.pageCount = src.pageCount;
    this.hasher = new PageHasher(src.pageSize);
  }

  read(first: number, n: number, buf: Buffer): void {
    this.src.read(first, n, buf);
    const mine = Math.min(n, Math.max(0, this.last - first + 1));
    if (mine) this.hasher.update(buf.subarray(0, mine * this.pageSize));
  }

  /** The digests of the pages of the share read so far. */
  index(): PageIndex {
    return this.hasher.index();
  }
}

/**
 * A snapshot's whole page index as stored (encodeIndex, under `key`) and its pages root; `head`: its first pages,
 * digested apart (HeadHashed), whose digests come before `ix`'s.
 */
export function sealIndex(ix: PageIndex, key: Buffer, head?: HeadHashed | null): { stored: Buffer; root: string } {
  const h = head?.index();
  const whole = h ? { ...ix, pageCount: h.pageCount + ix.pageCount, hashes: Buffer.concat([h.hashes, ix.hashes]) } : ix;
  return { stored: encodeIndex(whole, key), root: pagesRoot(whole) };
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

/** Reads a database once (a file, or a pinned snapshot's pages): its page index and pages root. */
export function indexPages(from: string | PageSource): PageIndex & { root: string; size: number } {
  return withPages(from, (src) => {
    const hasher = new PageHasher(src.pageSize);
    readPages(src, (run) => void hasher.update(run));
    const ix = hasher.index();
    return { ...ix, root: pagesRoot(ix), size: ix.pageCount * ix.pageSize };
  });
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

/**
 * A stored whole index read under `key`, checked against the pages root `root` a manifest signed: the index when it
 * matches, null when it does not; sealed under another key (another host, or this host's key replaced) its digests
 * can not be read, so it is an index of page size 0, which matches no page (every page counts as changed).
 * @throws Error when malformed
 */
export function signedIndex(stored: Buffer, key: Buffer, root: string): PageIndex | null {
  const ix = decodeIndex(stored, key);
  if (!ix) return { pageSize: 0, pageCount: 0, hashes: Buffer.alloc(0) };
  return pagesRoot(ix) === root ? ix : null;
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

/**
 * A snapshot's page index as stored: an incremental's as the entries changed since its parent's (`since`: the pages
 * that changed, the parent's id and page size; whole when the page size changed), else whole.
 */
export function storedIndex(ix: PageIndex, key: Buffer, since?: { pages: number[]; parentId: string; parentPageSize: number }): Buffer {
  return since && since.parentPageSize === ix.pageSize ? encodeIndexChanges(ix, since.pages, since.parentId, key) : encodeIndex(ix, key);
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
