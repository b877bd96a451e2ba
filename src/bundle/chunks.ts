/**
 * The payload's chunk digests (the manifest's payload.chunks) read back and
 * hashed on two threads: this one and a worker (digest-worker.ts). Each takes
 * the next chunk from a counter they share and writes its digest into a
 * shared table; the root is the sha256 of the table. One sha256 stream was
 * verify's floor (1.3 GB/s here); two threads reached 1.8 GB/s on this VM's
 * two vCPUs (484 MB in ~270 ms).
 */
import { createHash } from "node:crypto";
import { open } from "node:fs/promises";
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import { AgentbakError, Exit, verifyError } from "../errors.js";
import { ROOT } from "../version.js";
import { chunkCount, claim, readChunk, recordChunk, Truncated, type ChunkJob } from "./chunk-table.js";

/** Below this many chunks the payload is hashed on this thread alone: a worker's bootstrap took 36-50 ms of CPU in the profile. */
const WORKER_FROM = 8;

export type FromWorker = { done: true } | { truncated: number } | { error: { message: string; code?: string; errno?: number; syscall?: string; path?: string } };

const truncated = (at: number) => verifyError(`bundle truncated at byte ${at}`);

const startWorker = () => new Worker(join(ROOT, "dist", "packed", "digest-worker.js"), { resourceLimits: { maxOldGenerationSizeMb: 16, maxYoungGenerationSizeMb: 4 } });
let spare: Worker | null = null;

/**
 * Starts the digest worker before its job is known, so that its start (36-50 ms
 * of Node's own bootstrap in the profile) runs on the other core while this thread loads the
 * command, the config and the bundle's header. It waits, unreferenced (it
 * keeps no process alive), for the first fileChunksSha256.
 */
export function warmDigestWorker(): void {
  if (spare) return;
  const w = (spare = startWorker());
  w.unref();
  // a spare that failed to start is not handed a job (its exit would already have been emitted, and nobody would hear it)
  w.once("error", () => undefined);
  w.once("exit", () => {
    if (spare === w) spare = null;
  });
}

/**
 * The root of the chunk digests of bytes [start, start + size) of a file.
 * @throws AgentbakError(13) when the file ends early.
 */
export async function fileChunksSha256(path: string, start: number, size: number, chunkSize: number): Promise<string> {
  const n = chunkCount({ size, chunkSize });
  const job: ChunkJob = { path, start, size, chunkSize, next: new SharedArrayBuffer(4), table: new SharedArrayBuffer(n * 32) };
  let w: Worker | null = null;
  if (n >= WORKER_FROM) {
    w = spare ?? startWorker();
    spare = null;
    w.ref();
    w.postMessage(job);
  }
  const helped = new Promise<void>((resolve, reject) => {
    if (!w) return resolve();
    w.once("message", (m: FromWorker) => ("done" in m ? resolve() : reject("truncated" in m ? truncated(m.truncated) : Object.assign(new Error(m.error.message), m.error))));
    // the worker itself failing says nothing about the bundle: exit 1, never 13
    w.once("error", (e) => reject(new AgentbakError(Exit.failure, `digest worker thread failed: ${e.message}`)));
    w.once("exit", (code) => reject(new AgentbakError(Exit.failure, `digest worker thread stopped (exit ${code}) before it was done`)));
  });
  helped.catch(() => undefined);
  try {
    const next = new Int32Array(job.next);
    const table = new Uint8Array(job.table);
    const bufs = [Buffer.allocUnsafe(chunkSize), Buffer.allocUnsafe(chunkSize)];
    const fh = await open(path, "r");
    const read = async (buf: Buffer, got: number, len: number, at: number) => (await fh.read(buf, got, len, at)).bytesRead;
    // the next chunk is read (in libuv's pool) while this one is hashed
    const take = (k: number) => {
      const i = claim(job, next);
      const r = i === null ? null : readChunk(job, i, bufs[k % 2]!, read).then((data) => ({ i, data }));
      r?.catch(() => undefined); // awaited below, or dropped after an earlier chunk's failure
      return r;
    };
    try {
      for (let k = 0, r = take(0); r; k++) {
        const { i, data } = await r;
        if (data instanceof Truncated) throw truncated(data.at);
        r = take(k + 1);
        recordChunk(table, i, data);
      }
    } finally {
      await fh.close();
    }
    await helped;
  } finally {
    if (w) void w.terminate();
  }
  return createHash("sha256").update(new Uint8Array(job.table)).digest("hex");
}
