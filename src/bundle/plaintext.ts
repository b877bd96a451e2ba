/**
 * The payload's plaintext: the bundle's payload bytes read, hashed, decrypted
 * and decompressed (bounded) in one chain of stages. A payload of 32 MiB or
 * more runs that chain in a worker thread, so that the calling thread keeps
 * only the tar, the component digests and the writes: on one thread the chain
 * was 3 of 5.5 CPU-s of a 1.2 GB restore (sha256 of the payload, age, zstd),
 * while the stock pipeline spreads the same work over three processes. Errors
 * come out the same either way (message, code, errno, syscall, path).
 */
import { closeSync, createReadStream, openSync, readSync } from "node:fs";
import { join } from "node:path";
import { createHash } from "node:crypto";
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
/** A checked chunk is handed on in copies of this size (one age chunk and its tag), each spent soon after. */
const PIECE = (64 << 10) + 16;

/** Where the payload is and what it must come to. */
export interface PayloadSource {
  path: string;
  offset: number;
  size: number;
  /** the decompressed size the manifest declares: decompression stops past it */
  tarSize: number;
  /**
   * format 7: each `size` bytes' listed digest (the signed manifest's `payload.chunks.digests`) and the payload's
   * signed sha256: each chunk is held back until its digest is checked, and the whole is not hashed again
   */
  chunks?: { size: number; digests: string[]; signed: string };
}

/** The plaintext stream, and the sha256 of the payload bytes it came from once it has ended. */
export interface Plaintext {
  stream: Readable;
  digest: () => string;
}

/** The chain of stages, on whichever thread runs it; `stop` ends it early (the reader went away). */
function stages(s: PayloadSource, identities: AgeIdentity[], sink: Writable): { done: Promise<void>; digest: () => string; stop: () => void } {
  // a format-7 payload is read and checked chunk by chunk (CheckedPayload); an older one hashed whole as it is read
  const checked = s.chunks ? new CheckedPayload({ ...s, chunks: s.chunks }) : null;
  const tap = checked ? null : new HashTap(s.size, "payload.age");
  // reads of 256 KiB, not 1 MiB: a read buffer lives on while any slice of it does (age keeps the tail of one read to
  // complete its next chunk), and with 1 MiB reads the worker's array buffers climbed to 60-80 MiB between
  // collections, forced full ones included. Restore of the bench's 1194 MiB database: peak RSS 160-175 MiB with
  // 1 MiB reads (190-200 MiB before the young collections below), 104-109 MiB with these; CPU the same
  const read = checked ?? createReadStream(s.path, { start: s.offset, end: s.offset + s.size - 1, highWaterMark: READ });
  // the plaintext in buffers of BATCH bytes, each of its own: the worker moves them to the reading thread as they are
  // (a smaller payload's one buffer is its size: no 1 MiB for a few KiB)
  const rest = [new AgeDecryptStream(identities), boundedDecompress(s.tarSize, WINDOW_LOG_MAX, "decompressed payload", Math.max(1, Math.min(BATCH, s.tarSize))), sink] as const;
  const done = tap ? pipeline(read, tap, ...rest) : pipeline(read, ...rest);
  done.catch(() => undefined); // the callers look at `done`; a stopped chain's rejection is not news
  // closing the source (no error: nothing emits one) makes the pipeline tear every stage down
  return { done, digest: () => (tap ?? checked!).digest(), stop: () => read.destroy() };
}

/**
 * The payload read chunk by chunk, each passed on only once its sha256 is the
 * one the signed manifest lists for it: nothing reaches age before its bytes
 * are checked, and the payload is read once. The chunk is read into one
 * buffer kept for the whole payload and handed on in fresh copies of one age
 * chunk and its tag (PIECE, 64 KiB + 16) as the next stage asks (pushing a
 * whole chunk's pieces at once kept them alive
 * across young collections: a 192 MiB restore peaked ~16 MiB higher,
 * test/e2e/restore-memory). A chunk that differs, or a payload cut short,
 * fails (code PAYLOAD_DIGEST: exit 13). Reads are synchronous, 4 MiB at most:
 * on the payload worker, or on the calling thread for a payload under 32 MiB.
 */
export class CheckedPayload extends Readable {
  private readonly hold: Buffer;
  private fd: number | null = null;
  private index = 0;
  private filled = 0;
  private at = 0;
  constructor(private readonly s: PayloadSource & { chunks: NonNullable<PayloadSource["chunks"]> }) {
    super({ highWaterMark: READ });
    this.hold = Buffer.allocUnsafeSlow(Math.min(s.chunks.size, s.size));
  }
  override _read(): void {
    try {
      if (this.at === this.filled && !this.next()) return;
      const end = Math.min(this.filled, this.at + PIECE);
      this.push(Buffer.from(this.hold.subarray(this.at, end)));
      this.at = end;
    } catch (e) {
      this.destroy(e as Error);
    }
  }
  /** Reads and checks the next chunk; false when the payload has ended (pushed null). */
  private next(): boolean {
    const { chunks: c, size, offset } = this.s;
    if (this.index === c.digests.length) return (this.push(null), false);
    this.fd ??= openSync(this.s.path, "r");
    const start = this.index * c.size;
    const len = Math.min(c.size, size - start);
    let got = 0;
    for (let n = 1; got < len && n > 0; got += n) n = readSync(this.fd, this.hold, got, len - got, offset + start + got);
    if (got < len) throw mismatch(`payload.age: ends inside chunk ${this.index + 1} of ${c.digests.length} (truncated)`);
    if (createHash("sha256").update(this.hold.subarray(0, len)).digest("hex") !== c.digests[this.index])
      throw mismatch(`payload.age: digest mismatch in chunk ${this.index + 1} of ${c.digests.length} (not the payload the manifest signed)`);
    this.index++;
    this.filled = len;
    this.at = 0;
    return true;
  }
  override _destroy(err: Error | null, cb: (e: Error | null) => void): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
    cb(err);
  }
  /** the signed sha256 once every chunk was read and checked, else "" */
  digest(): string {
    return this.index === this.s.chunks.digests.length && this.at === this.filled ? this.s.chunks.signed : "";
  }
}

const mismatch = (m: string) => Object.assign(new Error(m), { code: "PAYLOAD_DIGEST" });

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
  return { stream: out, digest: chain.digest };
}

/** What the worker says. */
type FromWorker = { data: ArrayBuffer; length: number } | { end: true; digest: string } | { error: { message: string; code?: string; errno?: number; syscall?: string; path?: string } };

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
      if (out.push(Buffer.from(m.data, 0, m.length))) w.postMessage(1);
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
      // an ArrayBuffer of its own, to be moved: the decompressor's output buffer itself when the batch is one
      // (its buffers are BATCH bytes, so never Node's shared pool), else a copy of the parts (a small Buffer may
      // sit in the pool). Copying each 1 MiB batch was 10-20% of the worker's profile (ledger and blobs shapes)
      const own = parts.length === 1 && parts[0]!.byteOffset === 0 && parts[0]!.buffer.byteLength >= BATCH;
      const batch = own ? (parts[0]!.buffer as ArrayBuffer) : new ArrayBuffer(held);
      if (!own) {
        const view = new Uint8Array(batch);
        let at = 0;
        for (const p of parts) {
          view.set(p, at);
          at += p.length;
        }
      }
      const length = held;
      parts = [];
      held = 0;
      credits--;
      port.postMessage({ data: batch, length }, [batch]);
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
    const { done, digest } = stages(
      source,
      identities.map((i) => ({ secret: Buffer.from(i.secret), recipient: i.recipient })),
      sink,
    );
    done.then(
      () => port.postMessage({ end: true, digest: digest() }),
      (e: NodeJS.ErrnoException) => port.postMessage({ error: { message: e.message, code: e.code, errno: e.errno, syscall: e.syscall, path: e.path } }),
    );
  });
}
