/**
 * Worker-thread entry: hashes chunks of a payload beside the calling thread
 * (bundle/chunks.ts). It imports nothing of agentbak's but types, so its start
 * is Node's own worker bootstrap (36-50 ms of CPU in the profile) and no more.
 */
import { createHash } from "node:crypto";
import { closeSync, openSync, readSync } from "node:fs";
import { parentPort, type MessagePort } from "node:worker_threads";
import type { ChunkJob, FromWorker } from "./chunks.js";

/** Takes chunks until none are left: the worker's loop (synchronous reads; it has nothing else to do). */
function hashClaimedSync(job: ChunkJob, fd: number): number | null {
  const next = new Int32Array(job.next);
  const table = new Uint8Array(job.table);
  const n = Math.ceil(job.size / job.chunkSize);
  const buf = Buffer.allocUnsafe(job.chunkSize);
  for (let i: number; (i = Atomics.add(next, 0, 1)) < n; ) {
    const len = Math.min(job.chunkSize, job.size - i * job.chunkSize);
    for (let got = 0; got < len; ) {
      const r = readSync(fd, buf, got, len - got, job.start + i * job.chunkSize + got);
      if (r === 0) return job.start + i * job.chunkSize + got;
      got += r;
    }
    table.set(createHash("sha256").update(buf.subarray(0, len)).digest(), i * 32);
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
