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
 * skipped. Each entry carries an HMAC-SHA256 under a random key kept beside
 * the cache (0600), so an entry not written by this host's agentbak (a cache
 * folder copied in, or written by someone who can not read the key) is
 * ignored and its bundle verified afresh. Whoever can read the key can also
 * read AGENTBAK_HOME's signing key and sign a manifest outright, so the cache
 * adds no way to forge one.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { BundleLayout } from "../bundle/outer.js";
import { FORMAT_VERSION, rememberValidManifest, sha256hex } from "../bundle/manifest.js";
import { createFileExclusive, writeCacheFile, writeFileAtomic } from "../fsutil.js";

interface Entry {
  etag: string;
  manifest: string;
  signature: string;
  /** the public key (base64 SSH wire form) the signature verified with */
  signer: string;
  payloadOffset: number;
  payloadSize: number;
  fileSize: number;
  mac: string;
}

const KEY_BYTES = 32;

/**
 * A new HMAC key, written durably and without overwriting: when another
 * process made one first, that one is used. An unusable key file (not 32
 * bytes) is replaced.
 */
function makeKey(file: string): Buffer {
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
  private entries: Record<string, Entry> = {};
  private changed = false;
  private readonly file: string | null;
  private readonly keyFile: string | null;
  private key: Buffer | null = null;

  /** `scope`: "" for a listing of the whole repository, or the folders of the one agent listed (a file of its own) */
  constructor(dir: string | undefined, private readonly url: string, private readonly scope = "") {
    // one cache per bundle format this tool reads: entries another version found valid are not taken on its word
    const name = createHash("sha256").update(`${url}\0${scope}\0format ${FORMAT_VERSION}`).digest("hex").slice(0, 16);
    this.file = dir ? join(dir, `headers-${name}.json`) : null;
    this.keyFile = dir ? join(dir, "headers.key") : null;
    if (!this.file) return;
    try {
      const key = readFileSync(this.keyFile!);
      // a key of any other length (a file cut short by a crash, or an empty one put there) is no key
      if (key.length !== KEY_BYTES) return;
      this.key = key;
      const c = JSON.parse(readFileSync(this.file, "utf8")) as { url?: string; scope?: string; entries?: Record<string, Entry> };
      if (c.url === url && (c.scope ?? "") === scope && c.entries) this.entries = c.entries;
    } catch {
      /* no cache yet, or unreadable: start empty */
    }
  }

  private mac(key: Buffer, k: string, e: Omit<Entry, "mac">): string {
    const fields = [this.url, this.scope, k, e.etag, e.manifest, e.signature, e.signer, e.payloadOffset, e.payloadSize, e.fileSize];
    return createHmac("sha256", key).update(fields.join("\0")).digest("base64");
  }

  /** The cached layout of `key` when its identity is still `etag` and its entry is this host's. */
  get(key: string, etag: string, path: string): BundleLayout | null {
    const e = this.entries[key];
    if (!e || e.etag !== etag || !this.key || typeof e.mac !== "string") return null;
    const want = Buffer.from(this.mac(this.key, key, e), "base64");
    const got = Buffer.from(e.mac, "base64");
    if (got.length !== want.length || !timingSafeEqual(got, want)) return null;
    const manifest = Buffer.from(e.manifest, "base64");
    const manifestSha256 = sha256hex(manifest);
    rememberValidManifest(manifestSha256);
    return { path, manifest, manifestSha256, signature: e.signature, payloadOffset: e.payloadOffset, payloadSize: e.payloadSize, fileSize: e.fileSize, signedBy: Buffer.from(e.signer, "base64") };
  }

  /** Remembers a layout whose signature (by `signer`) and manifest verified. */
  set(key: string, etag: string, l: BundleLayout, signer: Buffer): void {
    const e = { etag, manifest: l.manifest.toString("base64"), signature: l.signature, signer: signer.toString("base64"), payloadOffset: l.payloadOffset, payloadSize: l.payloadSize, fileSize: l.fileSize };
    this.entries[key] = { ...e, mac: this.key ? this.mac(this.key, key, e) : "" };
    this.changed = true;
  }

  /** Drops entries for keys not in `live`, and writes the cache if anything changed. */
  save(live: Set<string>): void {
    for (const k of Object.keys(this.entries))
      if (!live.has(k)) {
        delete this.entries[k];
        this.changed = true;
      }
    if (!this.file || !this.changed) return;
    try {
      if (!this.key) {
        // the first cache of this home (or its key was unusable): entries made before the key existed are signed with it now
        this.key = makeKey(this.keyFile!);
        for (const [k, e] of Object.entries(this.entries)) e.mac = this.mac(this.key, k, e);
      }
      writeCacheFile(this.file, JSON.stringify({ url: this.url, scope: this.scope, entries: this.entries }));
    } catch {
      /* a cache that can not be written only costs time */
    }
    this.changed = false;
  }
}
