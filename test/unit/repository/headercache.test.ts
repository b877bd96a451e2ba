/**
 * The header cache's file: what it decodes to, and that a file not written
 * under this host's key, or cut short, decodes to nothing.
 */
import { describe, expect, it } from "vitest";
import { createHmac, randomBytes } from "node:crypto";
import { decodeCacheFile, encodeCacheFile, type CacheEntry } from "../../../src/repository/headercache.js";
import { FORMAT_VERSION } from "../../../src/bundle/manifest.js";

const entry = (i: number): CacheEntry => ({
  etag: `${1000 + i}-${4096 * i}-1764600000000`,
  manifest: Buffer.from(JSON.stringify({ snapshot_id: `s${i}`, label: "é\u0000\"" })),
  signature: "-----BEGIN SSH SIGNATURE-----\nU1NIU0lH\n-----END SSH SIGNATURE-----\n",
  signer: randomBytes(51),
  payloadOffset: 7168 + i,
  payloadSize: 2 ** 40 + i,
  fileSize: 2 ** 52 + i,
});

describe("header cache file", () => {
  const key = randomBytes(32);
  const entries = new Map([0, 1, 2].map((i) => [`tenants/acme/agents/a/snapshots/s${i}.agentbak`, entry(i)]));

  it("decodes to what was encoded, manifests byte for byte", () => {
    const d = decodeCacheFile(encodeCacheFile(key, "/srv/backups", "scope|x", entries), key)!;
    expect(d.url).toBe("/srv/backups");
    expect(d.scope).toBe("scope|x");
    expect([...d.entries.keys()]).toEqual([...entries.keys()]);
    for (const [k, e] of entries) expect({ ...d.entries.get(k)!, manifest: d.entries.get(k)!.manifest.toString("hex"), signer: d.entries.get(k)!.signer.toString("hex") }).toEqual({ ...e, manifest: e.manifest.toString("hex"), signer: e.signer.toString("hex") });
  });

  it("is nothing under another key, with one byte changed, or cut short even under a valid HMAC", () => {
    const file = encodeCacheFile(key, "/srv/backups", "", entries);
    expect(decodeCacheFile(file, randomBytes(32))).toBeNull();
    const flipped = Buffer.from(file);
    flipped[file.length - 30]! ^= 1;
    expect(decodeCacheFile(flipped, key)).toBeNull();
    // the body cut in the middle of an entry and signed again: malformed, not half a cache
    const head = Buffer.from("agentbak header cache 2\n").length;
    const body = file.subarray(head + 32, file.length - 40);
    const resigned = Buffer.concat([file.subarray(0, head), createHmac("sha256", key).update(`agentbak header cache, bundle format ${FORMAT_VERSION}\0`).update(body).digest(), body]);
    // (the same body signed in full is read: the HMAC above is the one agentbak makes)
    const whole = file.subarray(head + 32);
    expect(decodeCacheFile(Buffer.concat([file.subarray(0, head), createHmac("sha256", key).update(`agentbak header cache, bundle format ${FORMAT_VERSION}\0`).update(whole).digest(), whole]), key)).not.toBeNull();
    expect(decodeCacheFile(resigned, key)).toBeNull();
    expect(decodeCacheFile(Buffer.from("{}"), key)).toBeNull();
    // the same bytes signed as another bundle format's cache: not taken on that version's word
    const other = Buffer.concat([file.subarray(0, head), createHmac("sha256", key).update(`agentbak header cache, bundle format ${FORMAT_VERSION + 1}\0`).update(whole).digest(), whole]);
    expect(decodeCacheFile(other, key)).toBeNull();
  });
});
