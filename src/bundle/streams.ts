/**
 * Small stream helpers shared by the bundle writer and reader: hashing taps and bounded decompression.
 */
import { createHash, type Hash } from "node:crypto";
import { closeSync, createReadStream, openSync, readSync } from "node:fs";
import { createRequire } from "node:module";
import { Readable, Transform, type TransformCallback } from "node:stream";
import { pipeline } from "node:stream/promises";
import { AgentbakError, Exit } from "../errors.js";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import type * as Binding from "zstd-napi/binding.js";

/**
 * The chunk size of the manifest's `payload.chunks`: each 4 MiB of payload.age
 * is hashed on its own, so a verifier can hash them on several cores.
 */
export const PAYLOAD_CHUNK = 4 << 20;

/**
 * A payload of this size or more lists each chunk's digest in its manifest
 * (`payload.chunks.digests`, format 7): restore then checks each chunk before
 * decrypting it as it reads, instead of hashing the whole payload in a pass of
 * its own first. A smaller payload keeps the format of before (its separate
 * pass costs a few milliseconds).
 */
export const LIST_FROM = 16 << 20;

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
  /** each chunk's digest, in order */
  readonly list: string[] = [];
  constructor(readonly size: number) {}
  update(b: Buffer): void {
    for (let off = 0; off < b.length; ) {
      const n = Math.min(this.size - this.filled, b.length - off);
      this.chunk.update(n === b.length ? b : b.subarray(off, off + n));
      this.filled += n;
      off += n;
      if (this.filled === this.size) this.close();
    }
  }
  private close(): void {
    const d = this.chunk.digest();
    this.list.push(d.toString("hex"));
    this.root.update(d);
    this.chunk = createHash("sha256");
    this.filled = 0;
  }
  digest(): string {
    if (this.filled > 0) this.close();
    return this.root.digest("hex");
  }
}

/** A pass-through that hashes (sha256, and per chunk when given a chunk size) and counts what flows through it. */
export class HashTap extends Transform {
  readonly hash: Hash = createHash("sha256");
  readonly chunks: ChunkDigests | null;
  bytes = 0;
  /** `exact`: the stream must also not end short of `limit` (a file that shrank while it was read) */
  constructor(private readonly limit = Number.POSITIVE_INFINITY, private readonly what = "stream", chunkSize?: number, private readonly exact = false) {
    super();
    this.chunks = chunkSize ? new ChunkDigests(chunkSize) : null;
  }
  override _transform(chunk: Buffer, _e: BufferEncoding, cb: TransformCallback): void {
    this.bytes += chunk.length;
    if (this.bytes > this.limit) return cb(this.exact ? this.changed(`at least ${this.bytes}`) : Object.assign(new Error(`${this.what} exceeds its declared size of ${this.limit} bytes`), { code: "OVERSIZE" }));
    this.hash.update(chunk);
    this.chunks?.update(chunk);
    cb(null, chunk);
  }
  override _flush(cb: TransformCallback): void {
    cb(this.exact && this.bytes !== this.limit ? this.changed(String(this.bytes)) : null);
  }
  private changed(read: string): AgentbakError {
    return new AgentbakError(Exit.failure, `${this.what} changed size while being packed: ${this.limit} bytes when listed, ${read} read`);
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

/** A pass-through that only counts bytes, telling `onBytes` (a progress stage) of each chunk (and fails past `limit`, as HashTap does). */
export class ByteCounter extends Transform {
  bytes = 0;
  constructor(
    private readonly limit = Number.POSITIVE_INFINITY,
    private readonly what = "stream",
    private readonly onBytes?: (n: number) => void,
  ) {
    super();
  }
  override _transform(chunk: Buffer, _e: BufferEncoding, cb: TransformCallback): void {
    this.bytes += chunk.length;
    this.onBytes?.(chunk.length);
    if (this.bytes > this.limit) return cb(Object.assign(new Error(`${this.what} exceeds its declared size of ${this.limit} bytes`), { code: "OVERSIZE" }));
    cb(null, chunk);
  }
}

/**
 * Read buffers handed down a pipeline and given back by the stage that copies
 * them (zstd: its compressStream2 consumes the input before it returns), so a
 * stream's reads reuse a few buffers instead of a fresh one each. Fresh
 * memory is not free here: a new 1 MiB buffer costs 256 page faults (~3.5 ms
 * per MiB on this machine), and V8 frees spent ones only when its external
 * memory has grown ~64 MiB. Compressing a 37 MiB delta read through fresh
 * buffers: 14,400 faults, 320 ms; through one reused buffer: 5,100, 155 ms.
 * A buffer not given back (a pipeline that failed) is collected as usual.
 */
export class BufferPool {
  private readonly free: Buffer[] = [];
  private readonly mine = new WeakSet<ArrayBufferLike>();
  /** how many buffers it allocated */
  made = 0;
  /** @param keep how many spare buffers to hold at most */
  constructor(readonly size: number, private readonly keep = 8) {}
  take(): Buffer {
    const spare = this.free.pop();
    if (spare) return spare;
    this.made++;
    const b = Buffer.allocUnsafeSlow(this.size);
    this.mine.add(b.buffer);
    return b;
  }
  /** A chunk (or a part) of a buffer this pool gave out, no longer referenced by its holder: it may be taken again. */
  give(chunk: Buffer): void {
    if (!this.mine.has(chunk.buffer) || this.free.length >= this.keep || this.free.some((f) => f.buffer === chunk.buffer)) return;
    this.free.push(Buffer.from(chunk.buffer, 0, this.size));
  }
}

/** A file as a stream of chunks read into `pool`'s buffers (createReadStream allocates a new buffer for each read). */
export function pooledFileStream(path: string, pool: BufferPool): Readable {
  let fd: number | null = null;
  return new Readable({
    highWaterMark: pool.size,
    read() {
      try {
        fd ??= openSync(path, "r");
        const buf = pool.take();
        const n = readSync(fd, buf, 0, buf.length, null);
        if (n === 0) {
          pool.give(buf);
          return void this.push(null);
        }
        this.push(n === buf.length ? buf : buf.subarray(0, n));
      } catch (e) {
        this.destroy(e as Error);
      }
    },
    destroy(err, cb) {
      if (fd !== null) closeSync(fd);
      fd = null;
      cb(err);
    },
  });
}

/** V8's collector: `gc` when node runs with --expose-gc, else reached once through the flag set at run time; null when neither works. */
let collector: ((o: { type: "minor" }) => void) | null | undefined;

function findCollector(): ((o: { type: "minor" }) => void) | null {
  const own = (globalThis as { gc?: unknown }).gc;
  if (typeof own === "function") return own as (o: { type: "minor" }) => void;
  try {
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as unknown;
    return typeof gc === "function" ? (gc as (o: { type: "minor" }) => void) : null;
  } catch {
    return null; // a node where the flag does nothing at run time: memory is collected as usual
  } finally {
    setFlagsFromString("--no-expose-gc"); // contexts and worker threads made later get no global gc
  }
}

/**
 * Collects the young generation after every `every` bytes counted: the
 * payload's sealed chunks are new 64 KiB buffers (node's ciphers write into
 * no buffer of the caller's), spent once written, and V8 frees spent buffers
 * only after ~64 MiB of external growth. Full backup of the bench's 1194 MiB
 * database: peak RSS 156-160 MiB without, 142-144 MiB with one every 4 MiB
 * (wall time within the machine's noise: 8.7-10.0 s vs 8.7-9.5 s). Where the
 * collector can not be reached, nothing is collected early.
 */
export function youngCollector(every: number): (bytes: number) => void {
  if (collector === undefined) collector = findCollector();
  const gc = collector;
  if (!gc) return () => undefined;
  let since = 0;
  return (bytes) => {
    since += bytes;
    if (since < every) return;
    since = 0;
    gc({ type: "minor" });
  };
}

/** zstd's native binding, loaded on first use: listing and verifying never load it. */
let loaded: typeof Binding | undefined;
const zstdBinding = () => (loaded ??= createRequire(import.meta.url)("zstd-napi/binding") as typeof Binding);

/**
 * zstd compression as a pipeline stage that reuses its buffers: each input
 * chunk goes back to `input` once compressed (compressStream2 has copied what
 * it consumed by the time it returns), and the output is cut from `output`'s
 * buffers, given back by the stage that consumes them (AgeEncryptStream's
 * `spent`). One frame, with its checksum; `workers` threads of zstd's own.
 */
export class ZstdCompress extends Transform {
  private readonly cctx: Binding.CCtx;
  private readonly ends: typeof Binding.EndDirective;
  constructor(
    o: { level: number; workers: number; windowLog: number; jobSize: number },
    private readonly input: BufferPool,
    private readonly output: BufferPool,
  ) {
    super();
    const b = zstdBinding();
    this.ends = b.EndDirective;
    this.cctx = new b.CCtx();
    this.cctx.setParameter(b.CParameter.compressionLevel, o.level);
    this.cctx.setParameter(b.CParameter.windowLog, o.windowLog);
    this.cctx.setParameter(b.CParameter.checksumFlag, 1);
    this.cctx.setParameter(b.CParameter.nbWorkers, o.workers);
    if (o.workers) this.cctx.setParameter(b.CParameter.jobSize, o.jobSize);
  }

  private compress(chunk: Buffer, end: Binding.EndDirective): void {
    for (;;) {
      const out = this.output.take();
      const [left, produced, consumed] = this.cctx.compressStream2(out, chunk, end);
      if (produced > 0) this.push(out.subarray(0, produced));
      else this.output.give(out);
      chunk = chunk.subarray(consumed);
      // continuing: done once the input is taken in; ending: once nothing is left to flush
      if (chunk.length === 0 && (end === this.ends.continue || left === 0)) return;
    }
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    try {
      this.compress(chunk, this.ends.continue);
    } catch (e) {
      return done(e as Error);
    }
    this.input.give(chunk);
    done();
  }

  override _flush(done: TransformCallback): void {
    try {
      this.compress(Buffer.alloc(0), this.ends.end);
    } catch (e) {
      return done(e as Error);
    }
    done();
  }
}

/** zstd's output buffer size (a whole compressed block fits). */
export const zstdOutSize = () => zstdBinding().cStreamOutSize();

/**
 * zstd decompression as a pipeline stage that makes output only as fast as
 * the next stage takes it (one buffer of `outSize` bytes at a time) and never
 * more than `limit` bytes in all. zstd-napi's DecompressStream inflates each
 * whole input chunk at once, ignoring backpressure: a 40 KiB bomb reached
 * 1.1 GB before a cap downstream could stop it. Each output is a buffer of its
 * own (allocUnsafeSlow, filled before it is passed on; the last may be a
 * shorter view of one): the payload worker moves them to the reading thread
 * as they are, with no copy.
 * @throws Error (code OVERSIZE) past `limit`; Error for a corrupt or truncated frame or a window over 2^windowLogMax.
 */
export function boundedDecompress(limit: number, windowLogMax: number, what: string, outSize?: number, reuse?: () => Buffer | undefined) {
  return async function* decompress(source: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
    const binding = zstdBinding();
    const dctx = new binding.DCtx();
    dctx.setParameter(binding.DParameter.windowLogMax, windowLogMax);
    const size = outSize ?? binding.dStreamOutSize();
    // a buffer given back (of this size) is decompressed into again: a fresh one costs its page faults
    const fresh = () => {
      const b = reuse?.();
      return b && b.length === size ? b : Buffer.allocUnsafeSlow(size);
    };
    let dst = fresh();
    let filled = 0;
    let total = 0;
    let inFrame = false;
    for await (const chunk of source) {
      let src: Buffer = chunk;
      for (;;) {
        const room = size - filled;
        const [ret, produced, consumed] = dctx.decompressStream(dst.subarray(filled), src);
        src = src.subarray(consumed);
        filled += produced;
        total += produced;
        if (total > limit) throw Object.assign(new Error(`${what} exceeds its declared size of ${limit} bytes`), { code: "OVERSIZE" });
        if (filled === size) {
          yield dst;
          dst = fresh();
          filled = 0;
        }
        // the input taken in, and zstd flushed all it could of it (room was left) or the frame ended
        if (src.length === 0 && (produced < room || ret === 0)) {
          inFrame = ret !== 0;
          break;
        }
      }
    }
    if (filled > 0) yield dst.subarray(0, filled);
    if (inFrame) throw new Error("stream ended in the middle of a zstd frame");
  };
}
