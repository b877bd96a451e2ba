/**
 * Small stream helpers shared by the bundle writer and reader: hashing taps and bounded decompression.
 */
import { createHash, type Hash } from "node:crypto";
import { createReadStream } from "node:fs";
import { createRequire } from "node:module";
import { Transform, type TransformCallback } from "node:stream";
import { pipeline } from "node:stream/promises";
import type * as Binding from "zstd-napi/binding.js";

/**
 * The chunk size of the manifest's `payload.chunks`: each 4 MiB of payload.age
 * is hashed on its own, so a verifier can hash them on several cores.
 */
export const PAYLOAD_CHUNK = 4 << 20;

/**
 * sha256 of each `size` bytes of a stream (the last chunk may be shorter), and
 * their root: sha256 of the chunks' 32-byte digests in order. With stock tools:
 * `split -b 4M --filter 'sha256sum' payload.age`, then the sha256 of those
 * digests as bytes.
 */
export class ChunkDigests {
  private chunk: Hash = createHash("sha256");
  private filled = 0;
  private readonly root: Hash = createHash("sha256");
  constructor(readonly size: number) {}
  update(b: Buffer): void {
    for (let off = 0; off < b.length; ) {
      const n = Math.min(this.size - this.filled, b.length - off);
      this.chunk.update(n === b.length ? b : b.subarray(off, off + n));
      this.filled += n;
      off += n;
      if (this.filled === this.size) {
        this.root.update(this.chunk.digest());
        this.chunk = createHash("sha256");
        this.filled = 0;
      }
    }
  }
  digest(): string {
    if (this.filled > 0) this.root.update(this.chunk.digest());
    return this.root.digest("hex");
  }
}

/** A pass-through that hashes (sha256, and per chunk when given a chunk size) and counts what flows through it. */
export class HashTap extends Transform {
  readonly hash: Hash = createHash("sha256");
  readonly chunks: ChunkDigests | null;
  bytes = 0;
  constructor(private readonly limit = Number.POSITIVE_INFINITY, private readonly what = "stream", chunkSize?: number) {
    super();
    this.chunks = chunkSize ? new ChunkDigests(chunkSize) : null;
  }
  override _transform(chunk: Buffer, _e: BufferEncoding, cb: TransformCallback): void {
    this.bytes += chunk.length;
    if (this.bytes > this.limit) return cb(Object.assign(new Error(`${this.what} exceeds its declared size of ${this.limit} bytes`), { code: "OVERSIZE" }));
    this.hash.update(chunk);
    this.chunks?.update(chunk);
    cb(null, chunk);
  }
  digest(): string {
    return this.hash.digest("hex");
  }
}

/** The sha256 of a file, read as a stream. */
export async function fileSha256(path: string): Promise<string> {
  const h = createHash("sha256");
  await pipeline(createReadStream(path, { highWaterMark: 1 << 20 }), h);
  return h.digest("hex");
}

/** A pass-through that only counts bytes (and fails past `limit`, as HashTap does). */
export class ByteCounter extends Transform {
  bytes = 0;
  constructor(private readonly limit = Number.POSITIVE_INFINITY, private readonly what = "stream") {
    super();
  }
  override _transform(chunk: Buffer, _e: BufferEncoding, cb: TransformCallback): void {
    this.bytes += chunk.length;
    if (this.bytes > this.limit) return cb(Object.assign(new Error(`${this.what} exceeds its declared size of ${this.limit} bytes`), { code: "OVERSIZE" }));
    cb(null, chunk);
  }
}

/** zstd's native binding, loaded on first use: listing and verifying never load it. */
let loaded: typeof Binding | undefined;
const zstdBinding = () => (loaded ??= createRequire(import.meta.url)("zstd-napi/binding") as typeof Binding);

/** zstd-napi's compression stream, loaded on first use. */
export const zstdCompressStream = (): typeof import("zstd-napi").CompressStream => (createRequire(import.meta.url)("zstd-napi") as typeof import("zstd-napi")).CompressStream;

/**
 * zstd decompression as a pipeline stage that makes output only as fast as
 * the next stage takes it (one block of at most 128 KiB at a time) and never
 * more than `limit` bytes in all. zstd-napi's DecompressStream inflates each
 * whole input chunk at once, ignoring backpressure: a 40 KiB bomb reached
 * 1.1 GB before a cap downstream could stop it.
 * @throws Error (code OVERSIZE) past `limit`; Error for a corrupt or truncated frame or a window over 2^windowLogMax.
 */
export function boundedDecompress(limit: number, windowLogMax: number, what: string) {
  return async function* decompress(source: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
    const binding = zstdBinding();
    const dctx = new binding.DCtx();
    dctx.setParameter(binding.DParameter.windowLogMax, windowLogMax);
    const blockSize = binding.dStreamOutSize();
    let total = 0;
    let inFrame = false;
    for await (const chunk of source) {
      let src: Buffer = chunk;
      for (;;) {
        const dst = Buffer.allocUnsafe(blockSize);
        const [ret, produced, consumed] = dctx.decompressStream(dst, src);
        src = src.subarray(consumed);
        if (produced > 0) {
          total += produced;
          if (total > limit) throw Object.assign(new Error(`${what} exceeds its declared size of ${limit} bytes`), { code: "OVERSIZE" });
          yield dst.subarray(0, produced);
        }
        if (src.length === 0 && (produced < dst.length || ret === 0)) {
          inFrame = ret !== 0;
          break;
        }
      }
    }
    if (inFrame) throw new Error("stream ended in the middle of a zstd frame");
  };
}
