/**
 * Content-defined chunking: FastCDC (Xia et al., "FastCDC: a Fast and
 * Efficient Content-Defined Chunking Approach for Data Deduplication", USENIX
 * ATC 2016, and the 2020 TPDS paper): a gear hash rolled one byte at a time,
 * no hashing below the minimum size (cut-point skipping), and normalized
 * chunking — a stricter mask before the average size and a looser one after
 * it, so chunk sizes gather around the average. A cut is made where the hash's
 * masked bits are all zero, so a boundary depends only on the bytes just
 * before it: an insertion or deletion moves the boundaries near it and no
 * others (equal content after it cuts the same way, and dedupes).
 *
 * The hash is 32 bits (V8 keeps it a small integer: the loop runs on int32
 * arithmetic over a Uint8Array), so its window is 32 bytes; the masks take
 * its top bits, those with the widest window. The gear table is fixed,
 * derived from GEAR_SEED: changing it changes every boundary (no stored data
 * becomes unreadable, but nothing dedupes against chunks cut before).
 */
import { createHash } from "node:crypto";
import type { FileHandle } from "node:fs/promises";

/** Minimum, average (a power of two: it sets the masks) and maximum chunk size in bytes. */
export interface ChunkParams {
  min: number;
  avg: number;
  max: number;
}

/**
 * The sizes for large agent state (model adapters, LanceDB tables,
 * PostgreSQL dumps): 512 KiB / 1 MiB / 8 MiB, restic's bounds. Each chunk is
 * one object in the repository (a PUT, a HEAD or GET, an age header of ~200
 * bytes, a manifest entry of ~150 bytes), so smaller chunks would multiply
 * requests: a 500 MB file is ~400 objects; a change still costs about 1 MiB
 * of upload, and the largest chunk bounds what a writer or reader holds in
 * memory (8 MiB plus its compressed copy).
 */
export const LARGE_STATE: ChunkParams = { min: 512 * 1024, avg: 1024 * 1024, max: 8 * 1024 * 1024 };

/** The seed the gear table is derived from (SHA-256 of the seed and the byte value, first 4 bytes). */
export const GEAR_SEED = "agentbak fastcdc gear v1";

/** 256 pseudo-random 32-bit values, one per byte value, derived from `seed`. */
export function gearTable(seed = GEAR_SEED): Int32Array {
  const g = new Int32Array(256);
  for (let b = 0; b < 256; b++) g[b] = createHash("sha256").update(seed).update(Uint8Array.of(b)).digest().readInt32BE(0);
  return g;
}

/** The `n` top bits of a 32-bit word, as an int32 mask. */
const topBits = (n: number) => (n >= 32 ? -1 : ~(-1 >>> n)) | 0;

/**
 * Checks chunk sizes: 64 <= min < avg < max <= 64 MiB, avg a power of two.
 * @throws Error naming the bad value
 */
export function checkParams(p: ChunkParams): void {
  const int = (v: number) => Number.isSafeInteger(v) && v > 0;
  if (![p.min, p.avg, p.max].every(int)) throw new Error(`chunk sizes must be positive integers (min ${p.min}, avg ${p.avg}, max ${p.max})`);
  if (p.min < 64) throw new Error(`minimum chunk size ${p.min} is below 64 bytes`);
  if (p.max > 64 * 1024 * 1024) throw new Error(`maximum chunk size ${p.max} is above 64 MiB`);
  if (!(p.min < p.avg && p.avg < p.max)) throw new Error(`chunk sizes must grow: min ${p.min} < avg ${p.avg} < max ${p.max}`);
  if ((p.avg & (p.avg - 1)) !== 0 || p.avg < 256) throw new Error(`average chunk size ${p.avg} is not a power of two of at least 256`);
}

/**
 * Finds cut points in a stream of bytes given in pieces of any size: the
 * state (bytes into the current chunk, the rolling hash) carries over from
 * one piece to the next, so the cuts never depend on how the stream was split.
 */
export class Cutter {
  private readonly gear: Int32Array;
  private readonly min: number;
  private readonly avg: number;
  private readonly max: number;
  /** stricter before the average size (2 more bits than log2(avg)), looser after it (2 fewer): normalized chunking, level 2 */
  private readonly maskS: number;
  private readonly maskL: number;
  /** bytes of the current chunk seen so far */
  private pos = 0;
  private hash = 0;

  /** @throws Error when the sizes are not valid (checkParams) */
  constructor(params: ChunkParams = LARGE_STATE, gear: Int32Array = defaultGear()) {
    checkParams(params);
    this.gear = gear;
    this.min = params.min;
    this.avg = params.avg;
    this.max = params.max;
    const bits = Math.log2(params.avg);
    this.maskS = topBits(bits + 2);
    this.maskL = topBits(bits - 2);
  }

  /** Bytes of the current chunk seen and not yet cut. */
  get pending(): number {
    return this.pos;
  }

  /**
   * Reads `data[from, to)`, the bytes that follow those seen before.
   * @returns the index in `data` just past the next cut (the current chunk
   *   ends there; the next one starts there), or -1 when there is no cut
   *   before `to` (the bytes are taken into the current chunk).
   */
  next(data: Uint8Array, from: number, to: number): number {
    // where the current chunk began, in data's coordinates (before `from` when it began in an earlier piece)
    const start = from - this.pos;
    const G = this.gear;
    const mS = this.maskS;
    const mL = this.maskL;
    let h = this.hash;
    let i = Math.max(from, start + this.min);
    const stopS = Math.min(to, start + this.avg);
    for (; i < stopS; i++) {
      h = ((h << 1) + G[data[i]!]!) | 0;
      if ((h & mS) === 0) return this.cut(i + 1);
    }
    const stopL = Math.min(to, start + this.max);
    for (; i < stopL; i++) {
      h = ((h << 1) + G[data[i]!]!) | 0;
      if ((h & mL) === 0) return this.cut(i + 1);
    }
    if (start + this.max <= to) return this.cut(start + this.max);
    this.hash = h;
    this.pos = to - start;
    return -1;
  }

  private cut(at: number): number {
    this.pos = 0;
    this.hash = 0;
    return at;
  }
}

let gear0: Int32Array | undefined;
const defaultGear = () => (gear0 ??= gearTable());

/** The lengths of the chunks a whole buffer is cut into (the last one is what remains). */
export function chunkLengths(data: Uint8Array, params: ChunkParams = LARGE_STATE): number[] {
  const c = new Cutter(params);
  const out: number[] = [];
  let from = 0;
  for (let at; (at = c.next(data, from, data.length)) >= 0; from = at) out.push(at - from);
  if (from < data.length) out.push(data.length - from);
  return out;
}

/** Reads up to `length` bytes into `buf` at `offset`; 0 at the end. */
export type ReadInto = (buf: Buffer, offset: number, length: number) => Promise<number>;

/** Bytes read at a time beyond the largest chunk: a chunk buffer is max + READ_BLOCK bytes. */
export const READ_BLOCK = 4 * 1024 * 1024;

/** A buffer for readerChunks: the largest chunk plus `block` bytes of room to read into. */
export const chunkBuffer = (params: ChunkParams = LARGE_STATE, block = READ_BLOCK) => Buffer.allocUnsafe(params.max + block);

/**
 * The chunks of what `read` returns, through one buffer (`buf`, more than
 * `max` bytes: chunkBuffer; the input is never held whole). Each chunk is a
 * view into that buffer, valid until the iteration resumes: copy it, or
 * finish with it first. Empty input has no chunks.
 * @throws what `read` throws; Error when `buf` is not larger than `max`
 */
export async function* readerChunks(read: ReadInto, params: ChunkParams = LARGE_STATE, buf: Buffer = chunkBuffer(params)): AsyncGenerator<Buffer> {
  if (buf.length <= params.max) throw new Error(`a chunk buffer of ${buf.length} bytes is not larger than the largest chunk (${params.max})`);
  const cutter = new Cutter(params);
  let start = 0; // the current chunk's first byte in buf
  let filled = 0;
  for (;;) {
    const n = await read(buf, filled, buf.length - filled);
    let scanned = filled;
    filled += n;
    while (scanned < filled) {
      const at = cutter.next(buf, scanned, filled);
      if (at < 0) break;
      yield buf.subarray(start, at);
      start = scanned = at;
    }
    if (n === 0) {
      if (filled > start) yield buf.subarray(start, filled);
      return;
    }
    // what is left of the current chunk (less than max bytes: a cut is forced there) moves to the front
    buf.copy(buf, 0, start, filled);
    filled -= start;
    start = 0;
  }
}

/** The chunks of an open file from its current position (readerChunks). */
export const handleChunks = (fh: FileHandle, params: ChunkParams = LARGE_STATE, buf?: Buffer) =>
  readerChunks(async (b, o, l) => (await fh.read(b, o, l, null)).bytesRead, params, buf);

/**
 * The chunks of a stream of pieces of any size (readerChunks): each piece is
 * copied into the chunker's buffer, so the source may reuse its buffers.
 */
export function streamChunks(source: AsyncIterable<Uint8Array>, params: ChunkParams = LARGE_STATE, buf?: Buffer): AsyncGenerator<Buffer> {
  const it = source[Symbol.asyncIterator]();
  let piece: Uint8Array = new Uint8Array(0);
  let done = false;
  return readerChunks(
    async (b, o, l) => {
      let n = 0;
      while (n < l && !done) {
        if (piece.length === 0) {
          const r = await it.next();
          if (r.done) done = true;
          else piece = r.value;
          continue;
        }
        const take = Math.min(piece.length, l - n);
        b.set(piece.subarray(0, take), o + n);
        piece = piece.subarray(take);
        n += take;
      }
      return n;
    },
    params,
    buf,
  );
}
