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
import { AgeDecryptStream, AgeOpener, type AgeIdentity } from "../crypto/age.js";
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
/** Batch buffers given back that the worker keeps for reuse, at most. */
const FREE = 8;
/** The payload is read in pieces of this size. */
const READ = 256 << 10;

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
  /** a buffer of the stream that nothing holds a view of any more: the worker decompresses into it again */
  giveBack?: (b: Buffer) => void;
}

/** The chain of stages, on whichever thread runs it; `stop` ends it early (the reader went away). */
function stages(s: PayloadSource, identities: AgeIdentity[], sink: Writable, reuse?: () => Buffer | undefined): { done: Promise<void>; digest: () => string; stop: () => void } {
  // the plaintext in buffers of BATCH bytes, each of its own: the worker moves them to the reading thread as they are
  // (a smaller payload's one buffer is its size: no 1 MiB for a few KiB)
  const rest = [boundedDecompress(s.tarSize, WINDOW_LOG_MAX, "decompressed payload", Math.max(1, Math.min(BATCH, s.tarSize)), reuse), sink] as const;
  if (s.chunks) {
    // format 7: read, checked chunk by chunk and decrypted in one stage (CheckedPlaintext)
    const checked = new CheckedPlaintext({ ...s, chunks: s.chunks }, identities);
    const done = pipeline(checked, ...rest);
    done.catch(() => undefined); // the callers look at `done`; a stopped chain's rejection is not news
    return { done, digest: () => checked.digest(), stop: () => checked.destroy() };
  }
  // an older payload is hashed whole as it is read. Reads of 256 KiB, not 1 MiB: a read buffer lives on while any
  // slice of it does (age keeps the tail of one read to complete its next chunk), and with 1 MiB reads the worker's
  // array buffers climbed to 60-80 MiB between collections, forced full ones included. Restore of the bench's
  // 1194 MiB database: peak RSS 160-175 MiB with 1 MiB reads (190-200 MiB before the young collections below),
  // 104-109 MiB with these; CPU the same
  const tap = new HashTap(s.size, "payload.age");
  const read = createReadStream(s.path, { start: s.offset, end: s.offset + s.size - 1, highWaterMark: READ });
  const done = pipeline(read, tap, new AgeDecryptStream(identities), ...rest);
  done.catch(() => undefined);
  // closing the source (no error: nothing emits one) makes the pipeline tear every stage down
  return { done, digest: () => tap.digest(), stop: () => read.destroy() };
}

/** age's sealed chunk: 64 KiB of plaintext and its tag. */
const SEALED = (64 << 10) + 16;

/**
 * A format-7 payload's plaintext: payload.age read a chunk (4 MiB) at a time
 * into one buffer kept for the whole payload, each chunk's sha256 compared
 * with the one the signed manifest lists before any of its bytes reaches age,
 * then its sealed chunks opened where they lie (AgeOpener), one per read of
 * this stream. The one sealed chunk that straddles two chunks is copied
 * aside, across the read of the next (64 KiB of each 4 MiB). No view of the
 * buffer leaves this class: each plaintext is a new buffer, and age is handed
 * the bytes only for the call that opens them, so refilling the buffer can
 * not change bytes anything still holds (the ciphertext was copied twice
 * before: into 64 KiB pieces, then age joined each piece's carried part).
 * A chunk that differs, or a payload cut short, fails (code PAYLOAD_DIGEST:
 * exit 13). Reads are synchronous, 4 MiB at most: on the payload worker, or
 * on the calling thread for a payload under 32 MiB.
 */
export class CheckedPlaintext extends Readable {
  private readonly hold: Buffer;
  /** a sealed chunk that crosses from one chunk into the next, put together */
  private readonly carry = Buffer.allocUnsafeSlow(SEALED);
  private readonly age: AgeOpener;
  private fd: number | null = null;
  /** chunks read so far; the last one read is in `hold`, from payload offset `start`, `filled` bytes */
  private index = 0;
  private start = 0;
  private filled = 0;
  /** the payload offset of the next byte age has not taken */
  private pos = 0;
  constructor(
    private readonly s: PayloadSource & { chunks: NonNullable<PayloadSource["chunks"]> },
    identities: AgeIdentity[],
  ) {
    super({ highWaterMark: READ });
    this.hold = Buffer.allocUnsafeSlow(Math.min(s.chunks.size, s.size));
    this.age = new AgeOpener(identities);
  }
  override _read(): void {
    try {
      let plain: Buffer | null;
      do plain = this.next();
      while (plain?.length === 0); // an empty final chunk (an empty tar): nothing to pass on
      this.push(plain);
    } catch (e) {
      this.destroy(e as Error);
    }
  }
  /** The next sealed chunk's plaintext, or null at the payload's end. */
  private next(): Buffer | null {
    if (!this.age.keyed) this.header();
    if (this.pos === this.s.size) return (this.age.finish(), null);
    const len = Math.min(SEALED, this.s.size - this.pos);
    const plain = this.age.open(this.sealedAt(len), this.pos + len === this.s.size);
    this.pos += len;
    return plain;
  }
  /** age's header and nonce, from the first chunk (or more, for a header longer than a chunk: copied as it grows). */
  private header(): void {
    let head = Buffer.alloc(0);
    for (;;) {
      const rest = this.hold.subarray(this.pos - this.start, this.filled);
      const buf = head.length ? Buffer.concat([head, rest]) : rest;
      const used = this.age.header(buf, this.index === this.s.chunks.digests.length);
      if (used !== null) return void (this.pos += used - head.length);
      head = Buffer.from(buf);
      this.pos = this.start + this.filled;
      this.readChunk();
    }
  }
  /** `len` bytes from `pos`: a view of the held chunk when they lie in it, else put together in `carry` across reads. */
  private sealedAt(len: number): Buffer {
    if (this.pos === this.start + this.filled) this.readChunk();
    const at = this.pos - this.start;
    if (at + len <= this.filled) return this.hold.subarray(at, at + len);
    // it crosses into the next chunk (or more, were a chunk shorter than a sealed one): put together across the reads
    for (let got = 0, a = at; ; a = 0) {
      const n = Math.min(len - got, this.filled - a);
      this.hold.copy(this.carry, got, a, a + n);
      got += n;
      if (got === len) return this.carry.subarray(0, len);
      this.readChunk();
    }
  }
  /** Reads the next chunk into `hold` and checks its digest against the signed list. */
  private readChunk(): void {
    const { chunks: c, size, offset } = this.s;
    if (this.index === c.digests.length) throw mismatch(`payload.age: more bytes than its ${c.digests.length} listed chunks`);
    this.fd ??= openSync(this.s.path, "r");
    const start = this.index * c.size;
    const len = Math.min(c.size, size - start);
    let got = 0;
    for (let n = 1; got < len && n > 0; got += n) n = readSync(this.fd, this.hold, got, len - got, offset + start + got);
    if (got < len) throw mismatch(`payload.age: ends inside chunk ${this.index + 1} of ${c.digests.length} (truncated)`);
    if (createHash("sha256").update(this.hold.subarray(0, len)).digest("hex") !== c.digests[this.index])
      throw mismatch(`payload.age: digest mismatch in chunk ${this.index + 1} of ${c.digests.length} (not the payload the manifest signed)`);
    this.index++;
    this.start = start;
    this.filled = len;
  }
  override _destroy(err: Error | null, cb: (e: Error | null) => void): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
    cb(err);
  }
  /** the signed sha256 once every chunk was read, checked and decrypted, else "" */
  digest(): string {
    return this.index === this.s.chunks.digests.length && this.pos === this.s.size ? this.s.chunks.signed : "";
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
  // a whole batch buffer moved back (the worker's own, BATCH bytes): it decompresses into it again
  const giveBack = (b: Buffer) => {
    if (ended || b.byteOffset !== 0 || b.buffer.byteLength !== BATCH) return;
    const ab = b.buffer as ArrayBuffer;
    w.postMessage({ back: ab }, [ab]);
  };
  return { stream: out, digest: () => digest, giveBack };
}

/**
 * The worker's side (payload-worker.ts): runs the chain, sends plaintext in
 * batches of about 1 MiB (moved, not copied) while it has credit, and ends with
 * the payload's digest or the error.
 */
export function serveWorker(port: { on(e: "message", f: (m: unknown) => void): unknown; postMessage(m: unknown, t?: ArrayBuffer[]): void }): void {
  let credits = 0;
  let waiting: (() => void) | null = null;
  // batch buffers the reading thread gave back, for the decompressor's next outputs
  const free: Buffer[] = [];
  port.on("message", (m) => {
    if (m !== null && typeof m === "object" && "back" in m) {
      if (free.length < FREE) free.push(Buffer.from((m as { back: ArrayBuffer }).back));
      return;
    }
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
      () => free.pop(),
    );
    done.then(
      () => port.postMessage({ end: true, digest: digest() }),
      (e: NodeJS.ErrnoException) => port.postMessage({ error: { message: e.message, code: e.code, errno: e.errno, syscall: e.syscall, path: e.path } }),
    );
  });
}
