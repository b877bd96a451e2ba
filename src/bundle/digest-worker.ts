/**
 * Worker-thread entry: hashes chunks of a payload beside the calling thread
 * (bundle/chunks.ts). It imports nothing of agentbak's but types, so its start
 * is Node's own worker bootstrap (36-50 ms of CPU in the profile) and no more.
 */
import { closeSync, openSync, readSync } from "node:fs";
import { parentPort, type MessagePort } from "node:worker_threads";
import { claim, readChunkSync, recordChunk, Truncated, type ChunkJob } from "./chunk-table.js";
import type { FromWorker } from "./chunks.js";

/** Takes chunks until none are left: the worker's loop (synchronous reads; it has nothing else to do). */
function hashClaimedSync(job: ChunkJob, fd: number): number | null {
  const next = new Int32Array(job.next);
  const table = new Uint8Array(job.table);
  const buf = Buffer.allocUnsafe(job.chunkSize);
  const read = (b: Buffer, got: number, len: number, at: number) => readSync(fd, b, got, len, at);
  for (let i: number | null; (i = claim(job, next)) !== null; ) {
    const data = readChunkSync(job, i, buf, read);
    if (data instanceof Truncated) return data.at;
    recordChunk(table, i, data);
  }
  return null;
}

/** The worker's side: one job, then it says how it ended. */
function serveChunkWorker(port: MessagePort, job: ChunkJob): void {
  let msg: FromWorker;
  try {
    const fd = openSync(job.path, "r");
    try {
      const at = hashClaimedSync(job, fd);
      msg = at === null ? { done: true } : { truncated: at };
    } finally {
      closeSync(fd);
    }
  } catch (e) {
    const x = e as NodeJS.ErrnoException;
    msg = { error: { message: x.message, code: x.code, errno: x.errno, syscall: x.syscall, path: x.path } };
  }
  port.postMessage(msg);
}

// the job comes as the first message: the worker may be started before it is known (chunks.ts warmDigestWorker)
parentPort!.once("message", (job: ChunkJob) => serveChunkWorker(parentPort!, job));
