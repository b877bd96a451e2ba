/**
 * The one loop both threads run over a payload's chunks (bundle/chunks.ts on
 * the calling thread, digest-worker.ts beside it): take the next chunk from
 * the shared counter, read it, write its sha256 into the shared table. Only
 * the read differs (async here, synchronous in the worker), so it is passed
 * in. It imports only Node's modules: the worker's start stays Node's own.
 */
import { createHash } from "node:crypto";

export interface ChunkJob {
  path: string;
  /** where payload.age starts in the file, and its size */
  start: number;
  size: number;
  chunkSize: number;
  /** an Int32 counter: the next chunk to take */
  next: SharedArrayBuffer;
  /** 32 bytes per chunk, in order */
  table: SharedArrayBuffer;
}

/**
 * Reads `len` bytes at file offset `at` into `buf` from 0; returns how many
 * it got (0 at the end of the file).
 */
export type ReadAt<R> = (buf: Buffer, got: number, len: number, at: number) => R;

/** Where the first missing byte is, when the file ends early. */
export class Truncated {
  constructor(readonly at: number) {}
}

export function chunkCount(job: Pick<ChunkJob, "size" | "chunkSize">): number {
  return Math.ceil(job.size / job.chunkSize);
}

/** The chunk's bytes, read whole into `buf`, or Truncated. */
function* chunkReads(job: ChunkJob, i: number, buf: Buffer): Generator<[Buffer, number, number, number], Buffer | Truncated, number> {
  const len = Math.min(job.chunkSize, job.size - i * job.chunkSize);
  const at = job.start + i * job.chunkSize;
  for (let got = 0; got < len; ) {
    const r = yield [buf, got, len - got, at + got];
    if (r === 0) return new Truncated(at + got);
    got += r;
  }
  return buf.subarray(0, len);
}

/** Claims the next chunk from the shared counter; null when none is left. */
export function claim(job: ChunkJob, next: Int32Array): number | null {
  const i = Atomics.add(next, 0, 1);
  return i < chunkCount(job) ? i : null;
}

export function readChunkSync(job: ChunkJob, i: number, buf: Buffer, read: ReadAt<number>): Buffer | Truncated {
  const g = chunkReads(job, i, buf);
  for (let s = g.next(); ; ) {
    if (s.done) return s.value;
    s = g.next(read(...s.value));
  }
}

export async function readChunk(job: ChunkJob, i: number, buf: Buffer, read: ReadAt<Promise<number>>): Promise<Buffer | Truncated> {
  const g = chunkReads(job, i, buf);
  for (let s = g.next(); ; ) {
    if (s.done) return s.value;
    s = g.next(await read(...s.value));
  }
}

export function recordChunk(table: Uint8Array, i: number, data: Buffer): void {
  table.set(createHash("sha256").update(data).digest(), i * 32);
}
