/**
 * The payload's plaintext: the bundle's payload bytes read, hashed, decrypted
 * and decompressed (bounded) in one chain of stages. A payload of 32 MiB or
 * more runs that chain in a worker thread, so that the calling thread keeps
 * only the tar, the component digests and the writes: on one thread the chain
 * was 3 of 5.5 CPU-s of a 1.2 GB restore (sha256 of the payload, age, zstd),
 * while the stock pipeline spreads the same work over three processes. Errors
 * come out the same either way (message, code, errno, syscall, path).
 */
import { createReadStream } from "node:fs";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { Worker } from "node:worker_threads";
import { AgeDecryptStream, type AgeIdentity } from "../crypto/age.js";
import { AgentbakError, Exit } from "../errors.js";
import { ROOT } from "../version.js";
import { boundedDecompress, HashTap, youngCollector } from "./streams.js";

/** zstd window limit for decoding (8 MiB); our writer uses 2 MiB, and a bomb must not pick its own memory. */
const WINDOW_LOG_MAX = 23;
/** Payloads from this size decrypt and decompress in a worker thread (its start measured 58-102 ms to "online", 5 runs beside a CI run). */
export const WORKER_FROM = 32 << 20;
/** Plaintext moves to the calling thread in batches of about this size, at most CREDITS of them unread. */
const BATCH = 1 << 20;
const CREDITS = 2;
/** The payload is read in pieces of this size. */
const READ = 256 << 10;

/** Where the payload is and what it must come to. */
export interface PayloadSource {
  path: string;
  offset: number;
  size: number;
  /** the decompressed size the manifest declares: decompression stops past it */
  tarSize: number;
}

/** The plaintext stream, and the sha256 of the payload bytes it came from once it has ended. */
export interface Plaintext {
  stream: Readable;
  digest: () => string;
}

/** The chain of stages, on whichever thread runs it; `stop` ends it early (the reader went away). */
function stages(s: PayloadSource, identities: AgeIdentity[], sink: Writable): { done: Promise<void>; tap: HashTap; stop: () => void } {
  const tap = new HashTap(s.size, "payload.age");
  // reads of 256 KiB, not 1 MiB: a read buffer lives on while any slice of it does (age keeps the tail of one read to
  // complete its next chunk), and with 1 MiB reads the worker's array buffers climbed to 60-80 MiB between
  // collections, forced full ones included. Restore of the bench's 1194 MiB database: peak RSS 160-175 MiB with
  // 1 MiB reads (190-200 MiB before the young collections below), 104-109 MiB with these; CPU the same
  const read = createReadStream(s.path, { start: s.offset, end: s.offset + s.size - 1, highWaterMark: READ });
  const done = pipeline(read, tap, new AgeDecryptStream(identities), boundedDecompress(s.tarSize, WINDOW_LOG_MAX, "decompressed payload"), sink);
  done.catch(() => undefined); // the callers look at `done`; a stopped chain's rejection is not news
  // closing the source (no error: nothing emits one) makes the pipeline tear every stage down
  return { done, tap, stop: () => read.destroy() };
}

/**
 * The payload's plaintext, decrypted on this thread or (large payloads) a
 * worker. AGENTBAK_PAYLOAD_WORKER=1 uses the worker for any payload, =0 never.
 */
export function plaintext(s: PayloadSource, identities: AgeIdentity[]): Plaintext {
  const force = process.env.AGENTBAK_PAYLOAD_WORKER;
  return force === "1" || (force !== "0" && s.size >= WORKER_FROM) ? inWorker(s, identities) : onThisThread(s, identities);
}

function onThisThread(s: PayloadSource, identities: AgeIdentity[]): Plaintext {
  // the last stage pushes into `out`, honouring its backpressure
  let resume: (() => void) | null = null;
  let chain: ReturnType<typeof stages> | null = null;
  const out = new Readable({
    read() {
      const r = resume;
      resume = null;
      r?.();
    },
    // a reader that fails (a bad tar member) ends the chain: the bundle's descriptor and zstd's context are let go
    destroy(err, cb) {
      chain?.stop();
      cb(err);
    },
  });
  const sink = new Writable({
    write(chunk: Buffer, _e, cb) {
      if (out.push(chunk)) cb();
      else resume = () => cb();
    },
  });
  chain = stages(s, identities, sink);
  chain.done.then(
    () => out.push(null),
    (e: Error) => out.destroy(e),
  );
  const tap = chain.tap;
  return { stream: out, digest: () => tap.digest() };
}

/** What the worker says. */
type FromWorker = { data: ArrayBuffer } | { end: true; digest: string } | { error: { message: string; code?: string; errno?: number; syscall?: string; path?: string } };

function inWorker(s: PayloadSource, identities: AgeIdentity[]): Plaintext {
  const w = new Worker(join(ROOT, "dist", "packed", "payload-worker.js"), { resourceLimits: { maxOldGenerationSizeMb: 64, maxYoungGenerationSizeMb: 8 } });
  let digest = "";
  let owed = 0; // batches taken that the worker has not been told of, while the reader is full
  const out = new Readable({
    highWaterMark: 1 << 20,
    read() {
      if (owed) {
        w.postMessage(owed);
        owed = 0;
      }
    },
    destroy(err, cb) {
      void w.terminate().then(
        () => cb(err),
        () => cb(err),
      );
    },
  });
  let ended = false;
  w.on("message", (m: FromWorker) => {
    if ("data" in m) {
      if (out.push(Buffer.from(m.data))) w.postMessage(1);
      else owed++;
    } else if ("end" in m) {
      ended = true;
      digest = m.digest;
      out.push(null);
      void w.terminate();
    } else {
      ended = true;
      out.destroy(Object.assign(new Error(m.error.message), m.error));
    }
  });
  // the worker itself failing (it could not start, ran out of memory, stopped) says nothing about the bundle: exit 1, never 13
  w.on("error", (e) => {
    ended = true;
    out.destroy(new AgentbakError(Exit.failure, `payload worker thread failed: ${e.message}`));
  });
  w.on("exit", (code) => {
    if (!ended) out.destroy(new AgentbakError(Exit.failure, `payload worker thread stopped (exit ${code}) before the payload ended`));
  });
  w.postMessage({ source: s, identities: identities.map((i) => ({ secret: i.secret, recipient: i.recipient })), credits: CREDITS });
  return { stream: out, digest: () => digest };
}

/**
 * The worker's side (payload-worker.ts): runs the chain, sends plaintext in
 * batches of about 1 MiB (moved, not copied) while it has credit, and ends with
 * the payload's digest or the error.
 */
export function serveWorker(port: { on(e: "message", f: (m: unknown) => void): unknown; postMessage(m: unknown, t?: ArrayBuffer[]): void }): void {
  let credits = 0;
  let waiting: (() => void) | null = null;
  port.on("message", (m) => {
    if (typeof m === "number") {
      credits += m;
      const w = waiting;
      waiting = null;
      w?.();
      return;
    }
    const { source, identities, credits: c } = m as { source: PayloadSource; identities: { secret: Uint8Array; recipient: string }[]; credits: number };
    credits = c;
    let parts: Buffer[] = [];
    let held = 0;
    // every stage here makes fresh buffers (reads, age's plaintext, zstd's output, the batches), spent at once
    const collect = youngCollector(4 << 20);
    const send = (cb: () => void) => {
      // an ArrayBuffer of its own, to be moved (a small Buffer may sit in Node's shared pool)
      const batch = new ArrayBuffer(held);
      const view = new Uint8Array(batch);
      let at = 0;
      for (const p of parts) {
        view.set(p, at);
        at += p.length;
      }
      parts = [];
      held = 0;
      credits--;
      port.postMessage({ data: batch }, [batch]);
      if (credits > 0) cb();
      else waiting = cb;
    };
    const sink = new Writable({
      highWaterMark: BATCH,
      write(chunk: Buffer, _e, cb) {
        parts.push(chunk);
        held += chunk.length;
        collect(chunk.length);
        if (held >= BATCH) send(() => cb());
        else cb();
      },
      final(cb) {
        if (held) send(() => cb());
        else cb();
      },
    });
    const { done, tap } = stages(
      source,
      identities.map((i) => ({ secret: Buffer.from(i.secret), recipient: i.recipient })),
      sink,
    );
    done.then(
      () => port.postMessage({ end: true, digest: tap.digest() }),
      (e: NodeJS.ErrnoException) => port.postMessage({ error: { message: e.message, code: e.code, errno: e.errno, syscall: e.syscall, path: e.path } }),
    );
  });
}
