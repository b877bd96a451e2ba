// Hand-crafted bundles for hostile-input tests: any payload members, any
// manifest, signed with any key. Uses the project's own writer primitives.
import { readFileSync, writeFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createWriteStream } from "node:fs";
import * as tar from "tar-stream";
import { compress } from "zstd-napi";
import { createHash } from "node:crypto";
import { AgeEncryptStream } from "../dist/crypto/age.js";
import { NS, parsePrivateKey, signMessage } from "../dist/crypto/sshsig.js";
import { tarEnd, tarHeader, tarPadding } from "../dist/bundle/outer.js";
import canonicalize from "canonicalize";

export interface Member {
  name: string;
  data?: Buffer;
  type?: "file" | "symlink" | "link" | "directory" | "fifo" | "character-device";
  linkname?: string;
  size?: number;
}

const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");

/** The root of payload.chunks: the sha256 of each chunk's sha256, written out here rather than taken from agentbak. */
export function chunksRoot(b: Buffer, size: number): string {
  const root = createHash("sha256");
  for (let off = 0; off < b.length; off += size) root.update(createHash("sha256").update(b.subarray(off, off + size)).digest());
  return root.digest("hex");
}

/** A tar of `members` (headers as given: hostile names and types allowed). */
export async function makeTar(members: Member[]): Promise<Buffer> {
  const pack = tar.pack();
  const chunks: Buffer[] = [];
  const done = pipeline(pack, async function* (src) {
    for await (const c of src) chunks.push(c as Buffer);
  });
  for (const m of members) {
    const type = m.type ?? "file";
    if (type === "file") pack.entry({ name: m.name, size: m.data!.length, type }, m.data!);
    else pack.entry({ name: m.name, type, linkname: m.linkname, size: 0 });
  }
  pack.finalize();
  await done;
  return Buffer.concat(chunks);
}

/** age-encrypts `plain` to `recipients`. */
export async function ageEncrypt(plain: Buffer, recipients: string[]): Promise<Buffer> {
  const out: Buffer[] = [];
  await pipeline(Readable.from([plain]), new AgeEncryptStream(recipients), async function* (src) {
    for await (const c of src) out.push(c as Buffer);
  });
  return Buffer.concat(out);
}

/**
 * Writes a bundle at `out` from a base manifest (taken from a real bundle),
 * the given payload (encrypted age bytes), and a manifest patch; signs with
 * the key in `keyFile`.
 */
export async function craft(opts: { baseManifest: any; payloadAge: Buffer; tarSize?: number; patch?: (m: any) => void; keyFile: string; out: string }): Promise<void> {
  const m = structuredClone(opts.baseManifest);
  m.payload = { ...m.payload, sha256: sha(opts.payloadAge), size: opts.payloadAge.length, tar_size: opts.tarSize ?? m.payload.tar_size };
  if (m.payload.chunks) m.payload.chunks = { size: m.payload.chunks.size, sha256: chunksRoot(opts.payloadAge, m.payload.chunks.size) };
  const key = parsePrivateKey(readFileSync(opts.keyFile, "utf8"));
  const { fingerprint } = await import("../dist/crypto/sshsig.js");
  m.signer = { ...m.signer, fingerprint: fingerprint(key.publicKey) };
  opts.patch?.(m);
  // the manifest exactly as patched (agentbak's writer stamps its own format version and pads)
  const mbytes = Buffer.from(canonicalize(m)!);
  const sig = Buffer.from(signMessage(key, NS.manifest, mbytes));
  const mtime = new Date(m.created_at);
  const p = opts.payloadAge;
  rmSync(opts.out, { force: true });
  writeFileSync(
    opts.out,
    Buffer.concat([tarHeader("manifest.json", mbytes.length, mtime), mbytes, tarPadding(mbytes.length), tarHeader("manifest.sig", sig.length, mtime), sig, tarPadding(sig.length), tarHeader("payload.age", p.length, mtime), p, tarPadding(p.length), tarEnd()]),
  );
}

/** A payload built from members, with manifest components describing the regular files among `listed`. */
export async function payloadFrom(members: Member[], recipients: string[], listed: Member[] = members.filter((x) => (x.type ?? "file") === "file")) {
  const t = await makeTar(members);
  const components = listed.map((x) => ({ path: x.name, kind: "file", name: x.name, sha256: sha(x.data ?? Buffer.alloc(0)), size: x.size ?? (x.data ?? Buffer.alloc(0)).length, target: x.name.replace(/^files\//, "") }));
  return { age: await ageEncrypt(compress(t), recipients), tarSize: t.length, components };
}

/** The manifest of a bundle file. */
export function manifestOf(bundle: string): any {
  const b = readFileSync(bundle);
  const size = parseInt(b.subarray(124, 136).toString().replace(/\0.*$/, "").trim(), 8);
  return JSON.parse(b.subarray(512, 512 + size).toString());
}

export { sha, join };
