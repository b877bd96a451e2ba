/**
 * A cache of verified bundle headers (the manifest and signature bytes and
 * where the payload is), kept in AGENTBAK_HOME per repository and keyed by
 * each bundle's key and identity (etag: inode, size and time for a folder;
 * the object's ETag in a bucket), so listing does not read every bundle
 * again. Signatures and trust are still checked on every use; only the
 * reading and the strict parse of bytes already found valid are skipped.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { BundleLayout } from "../bundle/outer.js";
import { rememberValidManifest, sha256hex } from "../bundle/manifest.js";
import { writeCacheFile } from "../fsutil.js";

interface Entry {
  etag: string;
  manifest: string;
  signature: string;
  payloadOffset: number;
  payloadSize: number;
  fileSize: number;
}

export class HeaderCache {
  private entries: Record<string, Entry> = {};
  private changed = false;
  private readonly file: string | null;

  constructor(dir: string | undefined, private readonly url: string) {
    this.file = dir ? join(dir, `headers-${createHash("sha256").update(url).digest("hex").slice(0, 16)}.json`) : null;
    if (!this.file) return;
    try {
      const c = JSON.parse(readFileSync(this.file, "utf8")) as { url?: string; entries?: Record<string, Entry> };
      if (c.url === url && c.entries) this.entries = c.entries;
    } catch {
      /* no cache yet, or unreadable: start empty */
    }
  }

  /** The cached layout of `key` when its identity is still `etag`. */
  get(key: string, etag: string, path: string): BundleLayout | null {
    const e = this.entries[key];
    if (!e || e.etag !== etag) return null;
    const manifest = Buffer.from(e.manifest, "base64");
    rememberValidManifest(sha256hex(manifest));
    return { path, manifest, signature: e.signature, payloadOffset: e.payloadOffset, payloadSize: e.payloadSize, fileSize: e.fileSize };
  }

  /** Remembers a layout whose signature and manifest verified. */
  set(key: string, etag: string, l: BundleLayout): void {
    this.entries[key] = { etag, manifest: l.manifest.toString("base64"), signature: l.signature, payloadOffset: l.payloadOffset, payloadSize: l.payloadSize, fileSize: l.fileSize };
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
      writeCacheFile(this.file, JSON.stringify({ url: this.url, entries: this.entries }));
    } catch {
      /* a cache that can not be written only costs time */
    }
    this.changed = false;
  }
}
