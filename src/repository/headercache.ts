/**
 * A cache of verified bundle headers (the manifest and signature bytes, where
 * the payload is, and the key the signature verified with), kept in
 * AGENTBAK_HOME per repository and listing scope (the whole repository, or
 * one agent's folders) and keyed by each bundle's key and identity
 * (etag: inode, size and time for a folder; the object's ETag in a bucket),
 * so listing does not read, nor verify the signature of, every bundle again.
 *
 * Trust is still checked on every use (allowed_signers, revocation, validity
 * windows, the manifest's own checks); only the reading, the Ed25519
 * verification and the strict parse of bytes already found valid are
 * skipped. The file carries an HMAC-SHA256 of all its entries under a random
 * key kept beside the cache (0600), so a file not written by this host's
 * agentbak (a cache folder copied in, or edited by someone who can not read
 * the key) is ignored whole and its bundles verified afresh. Whoever can read
 * the key can also read AGENTBAK_HOME's signing key and sign a manifest
 * outright, so the cache adds no way to forge one.
 *
 * The file is binary (encodeCacheFile): the manifests lie in it as their
 * bytes, so loading 200 entries is one read, one HMAC and no decoding. As
 * JSON with base64 manifests and an HMAC per entry, the load and the lookups
 * of 200 entries took 55-70 ms of a 0.33 s `snapshots`.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { readFileSync, rmSync } from "node:fs";
import { dirname } from "node:path";
import type { BundleLayout } from "../bundle/outer.js";
import { FORMAT_VERSION, rememberValidManifest, sha256hex } from "../bundle/manifest.js";
import { createFileExclusive, ensureDir, writeCacheFile, writeFileAtomic } from "../fsutil.js";
import { homePaths } from "../home.js";

/** One cached header. */
export interface CacheEntry {
  etag: string;
  manifest: Buffer;
  signature: string;
  /** the public key (SSH wire form) the signature verified with */
  signer: Buffer;
  payloadOffset: number;
  payloadSize: number;
  fileSize: number;
}

const KEY_BYTES = 32;
const MAGIC = Buffer.from("agentbak header cache 2\n");
const MAC_BYTES = 32;
/** What the HMAC covers before the file's body: entries another bundle format's agentbak found valid are not taken on its word. */
const MAC_PREFIX = `agentbak header cache, bundle format ${FORMAT_VERSION}\0`;
const mac = (key: Buffer, body: Buffer) => createHmac("sha256", key).update(MAC_PREFIX).update(body).digest();

/**
 * The cache file's bytes: MAGIC, the HMAC-SHA256 under `key` of the bundle
 * format and everything after it, then the repository's url, the scope, and the entries, each
 * string or byte field as a 32-bit big-endian length and its bytes, and the
 * three offsets as 64-bit floats (exact below 2^53).
 */
export function encodeCacheFile(key: Buffer, url: string, scope: string, entries: Map<string, CacheEntry>): Buffer {
  const parts: Buffer[] = [];
  const field = (b: Buffer | string) => {
    const v = typeof b === "string" ? Buffer.from(b) : b;
    const n = Buffer.allocUnsafe(4);
    n.writeUInt32BE(v.length);
    parts.push(n, v);
  };
  field(url);
  field(scope);
  for (const [k, e] of entries) {
    field(k);
    field(e.etag);
    field(e.manifest);
    field(e.signature);
    field(e.signer);
    const nums = Buffer.allocUnsafe(24);
    nums.writeDoubleBE(e.payloadOffset, 0);
    nums.writeDoubleBE(e.payloadSize, 8);
    nums.writeDoubleBE(e.fileSize, 16);
    parts.push(nums);
  }
  const body = Buffer.concat(parts);
  return Buffer.concat([MAGIC, mac(key, body), body]);
}

/**
 * The url, scope and entries of a cache file written with `key`; null when it
 * is not one, was not written with that key, or is malformed.
 */
export function decodeCacheFile(file: Buffer, key: Buffer): { url: string; scope: string; entries: Map<string, CacheEntry> } | null {
  const at = MAGIC.length + MAC_BYTES;
  if (file.length < at || !file.subarray(0, MAGIC.length).equals(MAGIC)) return null;
  const body = file.subarray(at);
  if (!timingSafeEqual(file.subarray(MAGIC.length, at), mac(key, body))) return null;
  let o = 0;
  const bytes = (): Buffer => {
    if (o + 4 > body.length) throw new RangeError("cut short");
    const n = body.readUInt32BE(o);
    if (o + 4 + n > body.length) throw new RangeError("cut short");
    o += 4 + n;
    return body.subarray(o - n, o);
  };
  const num = () => {
    if (o + 8 > body.length) throw new RangeError("cut short");
    o += 8;
    return body.readDoubleBE(o - 8);
  };
  try {
    const url = bytes().toString();
    const scope = bytes().toString();
    const entries = new Map<string, CacheEntry>();
    while (o < body.length) {
      const k = bytes().toString();
      entries.set(k, { etag: bytes().toString(), manifest: bytes(), signature: bytes().toString(), signer: bytes(), payloadOffset: num(), payloadSize: num(), fileSize: num() });
    }
    return { url, scope, entries };
  } catch {
    return null; // under a valid HMAC only a bug writes this: the cache starts empty
  }
}

/**
 * A new HMAC key, written durably and without overwriting: when another
 * process made one first, that one is used. An unusable key file (not 32
 * bytes) is replaced.
 */
export function makeKey(file: string): Buffer {
  const key = randomBytes(KEY_BYTES);
  try {
    createFileExclusive(file, key, 0o600);
    return key;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
  }
  const theirs = readFileSync(file);
  if (theirs.length === KEY_BYTES) return theirs;
  writeFileAtomic(file, key, 0o600);
  return key;
}

export class HeaderCache {
  private entries = new Map<string, CacheEntry>();
  private changed = false;
  private readonly file: string | null;
  private readonly keyFile: string | null;
  private key: Buffer | null = null;

  /** `scope`: "" for a listing of the whole repository, or the folders of the one agent listed (a file of its own) */
  constructor(home: string | undefined, private readonly url: string, private readonly scope = "") {
    // one cache per bundle format this tool reads: entries another version found valid are not taken on its word
    const name = createHash("sha256").update(`${url}\0${scope}\0format ${FORMAT_VERSION}`).digest("hex").slice(0, 16);
    this.file = home ? homePaths(home).cache.headers(name) : null;
    this.keyFile = home ? homePaths(home).cache.headersKey : null;
    if (!this.file) return;
    try {
      const key = readFileSync(this.keyFile!);
      // a key of any other length (a file cut short by a crash, or an empty one put there) is no key
      if (key.length !== KEY_BYTES) return;
      this.key = key;
      const c = decodeCacheFile(readFileSync(this.file), key);
      if (c && c.url === url && c.scope === scope) this.entries = c.entries;
    } catch {
      /* no cache yet, or unreadable: start empty */
    }
  }

  /** The cached layout of `key` when its identity is still `etag`. */
  get(key: string, etag: string, path: string): BundleLayout | null {
    const e = this.entries.get(key);
    if (!e || e.etag !== etag) return null;
    // hashed again rather than stored: what the chain's links and the valid-bytes memo compare is these bytes' own digest
    const manifestSha256 = sha256hex(e.manifest);
    rememberValidManifest(manifestSha256);
    return { path, manifest: e.manifest, manifestSha256, signature: e.signature, payloadOffset: e.payloadOffset, payloadSize: e.payloadSize, fileSize: e.fileSize, signedBy: e.signer };
  }

  /** Remembers a layout whose signature (by `signer`) and manifest verified. */
  set(key: string, etag: string, l: BundleLayout, signer: Buffer): void {
    this.entries.set(key, { etag, manifest: l.manifest, signature: l.signature, signer, payloadOffset: l.payloadOffset, payloadSize: l.payloadSize, fileSize: l.fileSize });
    this.changed = true;
  }

  /** Drops entries for keys not in `live`, and writes the cache if anything changed. */
  save(live: Set<string>): void {
    for (const k of this.entries.keys())
      if (!live.has(k)) {
        this.entries.delete(k);
        this.changed = true;
      }
    if (!this.file || !this.changed) return;
    try {
      // the cache folder is the owner's alone, as the rest of AGENTBAK_HOME, whichever cache makes it first
      ensureDir(dirname(this.file), 0o700);
      // the first cache of this home (or its key was unusable)
      this.key ??= makeKey(this.keyFile!);
      writeCacheFile(this.file, encodeCacheFile(this.key, this.url, this.scope, this.entries));
      // the JSON cache earlier builds wrote for the same repository and scope
      rmSync(this.file.replace(/\.bin$/, ".json"), { force: true });
    } catch {
      /* a cache that can not be written only costs time */
    }
    this.changed = false;
  }
}
