/**
 * One chunk as stored: its plaintext compressed as one zstd frame (content
 * size in its header), then encrypted as a standard age file to the agent's
 * recipients, so `age -d -i KEY chunk | zstd -d` gives the plaintext back
 * with stock tools. Named by a keyed hash of the plaintext (chunkId): equal
 * chunks get the same name and are stored once, and the name tells nothing
 * about the content to anyone without the key.
 */
import { createHmac, hkdfSync } from "node:crypto";
import { createRequire } from "node:module";
import type { Transform } from "node:stream";
import type * as Binding from "zstd-napi/binding.js";
import { AgeDecryptStream, AgeEncryptStream, type AgeIdentity } from "../crypto/age.js";

/** zstd level for chunks: the bundle payload's (bundle/writer.ts) */
const LEVEL = 3;

let zstd: typeof Binding | undefined;
/** zstd's native binding, loaded on first use (listing and verifying without keys never load it). */
const binding = () => (zstd ??= createRequire(import.meta.url)("zstd-napi/binding") as typeof Binding);
let cctx: Binding.CCtx | undefined;
let dctx: Binding.DCtx | undefined;

/**
 * The key chunk ids of one agent are made with on this host: derived from the
 * host's chunk key (AGENTBAK_HOME/chunk-key), the tenant and agent, and the
 * recipients (sorted, deduplicated). A change of recipients gives new ids,
 * so no chunk encrypted to the old recipients is reused for a snapshot that
 * names the new ones.
 */
export function agentChunkKey(hostKey: Buffer, scope: { tenant: string; agent: string }, recipients: string[]): Buffer {
  const info = ["agentbak chunk id v1", scope.tenant, scope.agent, ...[...new Set(recipients)].sort()].join("\0");
  return Buffer.from(hkdfSync("sha256", hostKey, Buffer.alloc(0), info, 32));
}

/** A chunk's id: HMAC-SHA256 of its plaintext under the agent's chunk key, lowercase hex. */
export const chunkId = (key: Buffer, plain: Uint8Array): string => createHmac("sha256", key).update(plain).digest("hex");

/** Compresses a chunk (one zstd frame, its content size in the header; age authenticates, so no zstd checksum). */
export function compressChunk(plain: Uint8Array): Buffer {
  const b = binding();
  if (!cctx) {
    cctx = new b.CCtx();
    cctx.setParameter(b.CParameter.compressionLevel, LEVEL);
    cctx.setParameter(b.CParameter.contentSizeFlag, 1);
  }
  const out = Buffer.allocUnsafe(b.compressBound(plain.length));
  return out.subarray(0, cctx.compress2(out, plain));
}

/**
 * Decompresses a chunk into exactly `length` bytes: one frame that says it
 * holds `length` bytes and fills them. Memory is the length the caller
 * expects (the signed manifest's), never what the frame claims.
 * @throws Error (not a frame, another size, trailing bytes)
 */
export function decompressChunk(frame: Buffer, length: number): Buffer {
  const b = binding();
  let size: number | null;
  let frameBytes: number;
  try {
    size = b.getFrameContentSize(frame);
    frameBytes = b.findFrameCompressedSize(frame);
  } catch (e) {
    throw new Error(`not a zstd frame: ${(e as Error).message}`);
  }
  if (size !== length) throw new Error(`zstd frame holds ${size ?? "an unknown number of"} bytes, expected ${length}`);
  if (frameBytes !== frame.length) throw new Error(`${frame.length - frameBytes} bytes after the zstd frame`);
  dctx ??= new b.DCtx();
  const out = Buffer.allocUnsafe(length);
  const n = dctx.decompress(out, frame);
  if (n !== length) throw new Error(`zstd frame decompressed to ${n} bytes, expected ${length}`);
  return out;
}

/** Runs one buffer through a Transform and collects what comes out. */
function through(t: Transform, input: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    t.on("data", (b: Buffer) => parts.push(b));
    t.once("error", reject);
    t.once("end", () => resolve(Buffer.concat(parts)));
    t.end(input);
  });
}

/** Encrypts a compressed chunk as an age file to `recipients`. @throws Error when a recipient does not parse */
export const encryptChunk = (compressed: Buffer, recipients: string[]): Promise<Buffer> => through(new AgeEncryptStream(recipients), compressed);

/**
 * Decrypts a stored chunk with `identities`.
 * @throws Error from age: code NO_IDENTITY when none of them is a recipient; any other error is damage
 */
export const decryptChunk = (sealed: Buffer, identities: AgeIdentity[]): Promise<Buffer> => through(new AgeDecryptStream(identities), sealed);
