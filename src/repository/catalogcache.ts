/**
 * The catalog records this host has checked, kept in AGENTBAK_HOME per
 * repository and keyed by each record's key and identity (the ETag and time
 * one LIST of a tenant's catalog folder gives): a fleet's listing reads and
 * checks again only the records whose identity changed since (catalog.ts).
 *
 * An entry is a record whose signature verified and which agreed with a LIST
 * of its agent's snapshots folder when it was read; the signer's trust is
 * judged again at every use (trusts), so a revocation applies at once. The
 * file carries an HMAC-SHA256 under the header cache's key (headercache.ts):
 * a file this host's agentbak did not write is ignored whole, and every record
 * read and checked afresh. Whoever can read that key can read AGENTBAK_HOME's
 * signing key too.
 */
import { createHash, createHmac, timingSafeEqual, type Hmac } from "node:crypto";
import { readFileSync } from "node:fs";
import { writeCacheFileInSlices } from "../fsutil.js";
import { homePaths } from "../home.js";
import { makeKey } from "./headercache.js";
import type { CatalogRecord } from "./catalog.js";

/** One checked record: its identity when checked, its signed body (without the signature), and its signer's key (base64 SSH wire form). */
export interface CheckedRecord {
  tag: string;
  record: CatalogRecord;
  signer: string;
}

const MAC_PREFIX = "agentbak catalog cache 1\0";
/** the length of the MAC line's hex digest (HMAC-SHA256) */
const MAC_HEX = 64;
const mac = (key: Buffer, body: string | Buffer) => createHmac("sha256", key).update(MAC_PREFIX).update(body).digest("hex");

/** Each of `parts`, added to the MAC `h` as it is passed on. */
function* macced(h: Hmac, parts: Iterable<string>): Iterable<string> {
  for (const p of parts) {
    h.update(p);
    yield p;
  }
}

export class CatalogCache {
  private entries = new Map<string, CheckedRecord>();
  /** per status record key, the newest signing time (`at`) this host has read of it: kept when the key is gone */
  private marks = new Map<string, string>();
  private changed = false;
  private readonly file: string | null;
  private readonly keyFile: string | null;
  private key: Buffer | null = null;

  constructor(home: string | undefined, private readonly url: string) {
    const name = createHash("sha256").update(url).digest("hex").slice(0, 16);
    this.file = home ? homePaths(home).cache.catalogs(name) : null;
    this.keyFile = home ? homePaths(home).cache.headersKey : null;
    if (!this.file) return;
    try {
      const key = readFileSync(this.keyFile!);
      if (key.length !== 32) return;
      this.key = key;
      // read and MACed as bytes, decoded once: the file is some 10 MB at 1,000 agents
      const raw = readFileSync(this.file);
      const nl = raw.indexOf(0x0a);
      const got = raw.subarray(0, Math.max(0, nl));
      const body = raw.subarray(nl + 1);
      const want = Buffer.from(mac(key, body));
      if (nl < 0 || got.length !== want.length || !timingSafeEqual(got, want)) return;
      const c = JSON.parse(body.toString("utf8")) as { url: string; entries: [string, CheckedRecord][]; marks?: [string, string][] };
      if (c.url === url) [this.entries, this.marks] = [new Map(c.entries), new Map(c.marks ?? [])];
    } catch {
      /* no cache yet, or unreadable: every record is read and checked */
    }
  }

  /** The checked record at `key` when its identity is still `tag`. */
  get(key: string, tag: string): CheckedRecord | null {
    const e = this.entries.get(key);
    return e && e.tag === tag ? e : null;
  }

  /** the keys of the records this process read and checked itself (not taken from a summary) */
  private read = new Set<string>();

  /** Remembers a record that verified and agreed with its agent's objects (`read`: checked by this process, not taken from a summary). */
  set(key: string, e: CheckedRecord, read = true): void {
    this.entries.set(key, e);
    this.changed = true;
    if (read) this.read.add(key);
  }

  /** How many records under `prefix` (a tenant's catalog folder) this process read and checked itself. */
  readUnder(prefix: string): number {
    return [...this.read].filter((k) => k.startsWith(prefix)).length;
  }

  /** The checked records under `prefix` whose identity is the one `tags` gives now, by key (the order reads finished in is not stable). */
  checked(prefix: string, tags: Map<string, string>): [string, CheckedRecord][] {
    return [...this.entries].filter(([k, e]) => k.startsWith(prefix) && tags.get(k) === e.tag).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  }

  /**
   * Whether a record of `key` signed at `at` is older than one this host read before (a genuine older record put
   * back in place of the newer one, or of its deletion); when not, `at` becomes the newest seen. A record with no
   * time is older.
   */
  older(key: string, at: unknown): boolean {
    const m = this.marks.get(key);
    if (typeof at !== "string" || (m !== undefined && at < m)) return true;
    if (at !== m) {
      this.marks.set(key, at);
      this.changed = true;
    }
    return false;
  }

  /** Forgets a record: it did not agree with the objects (or is gone). */
  drop(key: string): void {
    this.changed = this.entries.delete(key) || this.changed;
  }

  /** The cache file's body in pieces: the text of JSON.stringify({ url, entries, marks }), one entry at a time. */
  private *parts(): Iterable<string> {
    yield `{"url":${JSON.stringify(this.url)},"entries":[`;
    let i = 0;
    for (const e of this.entries) yield (i++ ? "," : "") + JSON.stringify(e);
    yield '],"marks":[';
    i = 0;
    for (const m of this.marks) yield (i++ ? "," : "") + JSON.stringify(m);
    yield "]}";
  }

  /** Drops the entries of the tenants listed (`listed`) whose keys are not in `live`, and writes the cache if anything changed. */
  save(live: Set<string>, listed: (key: string) => boolean): void {
    for (const k of this.entries.keys()) if (listed(k) && !live.has(k)) this.drop(k);
    if (!this.file || !this.changed) return;
    try {
      this.key ??= makeKey(this.keyFile!);
      // written in slices, an entry's JSON at a time, the MAC over them filled in last: the whole JSON (and its bytes,
      // or a joined copy) held at once set a new host's peak RSS at 1,000 agents (docs/performance.md, Fleet). The
      // bytes are JSON.stringify's of { url, entries, marks }, as the constructor reads them.
      const h = createHmac("sha256", this.key).update(MAC_PREFIX);
      writeCacheFileInSlices(this.file, MAC_HEX + 1, macced(h, this.parts()), () => `${h.digest("hex")}\n`);
    } catch {
      /* a cache that can not be written only costs time */
    }
    this.changed = false;
  }
}
