/**
 * The payload's tar, read without tar-stream: the same headers accepted and
 * the same refused, with the same messages (checksum, unknown format, a long
 * header over 4 MiB, a bad size, a cut-off end), pax and GNU long names
 * applied as tar-stream applies them. What differs is where a member's bytes
 * go: each is handed to `Member.data` as a view of the buffer it arrived in,
 * and a buffer is handed to `giveBack` once every write of its bytes has
 * completed and nothing here holds a view of it, so the decompressor's
 * buffers can be reused instead of fresh ones made per MiB (the worker's
 * page faults; docs/performance.md, issue 35 restore). Headers and long
 * names are copied out of the buffers as they are read.
 */
import { Writable } from "node:stream";

/** A tar header as tar-stream's decode gives it (the fields restore reads). */
export interface TarHeader {
  name: string;
  size: number | null;
  type: string | null;
}

/** Where one member's bytes go: `data` is called with views in order; `end` once all `size` of them were given. */
export interface Member {
  /** `done` must be called once the view is no longer held (its write completed) */
  data(view: Buffer, done: (e?: Error | null) => void): void;
  /** resolves once the member can take more (its writes are not backed up) */
  ready(): Promise<void>;
  end(): Promise<void>;
  /** the tar failed before the member's end: its file is let go (resolves once it is closed) */
  abort(): Promise<void>;
}

const MAX_HEADER_SIZE = 4 * 1024 * 1024; // tar-stream's limit on a pax or GNU long header
const LONG = new Set(["gnu-long-path", "gnu-long-link-path", "pax-global-header", "pax-header"]);
const pad = (size: number) => {
  const s = size & 511;
  return s && 512 - s;
};

/**
 * A Writable over the tar's bytes: `entry` is called for each member (after
 * its long headers), and returns where its bytes go or throws to refuse it.
 */
export class PayloadUntar extends Writable {
  private readonly head = Buffer.alloc(512);
  private headFill = 0;
  /** bytes still to come of the current member's data, long header, or padding */
  private missing = 0;
  private state: "header" | "data" | "long" | "pad" = "header";
  private header: TarHeader | null = null;
  private member: Member | null = null;
  private long: Buffer | null = null;
  private longFill = 0;
  private pax: Record<string, string> | null = null;
  private paxGlobal: Record<string, string> | null = null;
  private gnuLongPath: string | null = null;
  /** the buffer being parsed: a member's end is awaited in it */
  private parsing: Promise<void> = Promise.resolve();

  constructor(
    private readonly entry: (h: TarHeader) => Member,
    private readonly giveBack: (b: Buffer) => void = () => undefined,
  ) {
    super({ highWaterMark: 1 << 20 });
  }

  override _write(buf: Buffer, _e: BufferEncoding, cb: (e?: Error | null) => void): void {
    // the buffer goes back once it is parsed and every write of a view of it has completed, none failed
    let pending = 1;
    let failed = false;
    const release = (e?: Error | null) => {
      if (e) failed = true;
      if (--pending === 0 && !failed) this.giveBack(buf);
    };
    const hold = () => (pending++, release);
    this.parsing = this.consume(buf, hold);
    // the next buffer is taken once this one is parsed and the member's file has room (its writes not backed up)
    this.parsing
      .then(() => this.member?.ready())
      .then(
        () => (release(), cb()),
        (e: Error) => (release(e), cb(e)),
      );
  }

  override _final(cb: (e?: Error | null) => void): void {
    cb(this.missing === 0 && this.headFill === 0 ? null : new Error("Unexpected end of data"));
  }

  /** closed only once a member's file is: the caller removes the folder it was going to */
  override _destroy(err: Error | null, cb: (e?: Error | null) => void): void {
    // the parse under way stops at its next step (a member's end it waits for is let finish: its file closes)
    void this.parsing
      .catch(() => undefined)
      .then(() => {
        const m = this.member;
        this.member = null;
        return m?.abort();
      })
      .then(() => cb(err));
  }

  /** Parses one buffer; a member's end (its file closed and checked) is waited for before what follows it. */
  private async consume(buf: Buffer, hold: () => (e?: Error | null) => void): Promise<void> {
    for (let at = 0; at < buf.length; ) {
      // destroyed (the pipeline failed elsewhere) while a member's end was awaited: no further member is begun
      if (this.destroyed) throw new Error("payload tar: stopped");
      if (this.missing > 0) {
        const n = Math.min(this.missing, buf.length - at);
        const view = buf.subarray(at, at + n);
        at += n;
        this.missing -= n;
        if (this.state === "data") {
          this.member!.data(view, hold());
          if (this.missing === 0) await this.endMember();
        } else if (this.state === "long") {
          view.copy(this.long!, this.longFill);
          this.longFill += n;
          if (this.missing === 0) this.endLong();
        }
        continue;
      }
      const n = Math.min(512 - this.headFill, buf.length - at);
      buf.copy(this.head, this.headFill, at, at + n);
      this.headFill += n;
      at += n;
      if (this.headFill < 512) break;
      this.headFill = 0;
      await this.onHeader();
    }
  }

  private async onHeader(): Promise<void> {
    const h = decodeHeader(this.head);
    if (!h) return; // a zero block: skipped, as tar-stream does
    if (h.type && LONG.has(h.type)) {
      if ((h.size ?? 0) > MAX_HEADER_SIZE) throw new Error("Header exceeds max size");
      // a size that is no count (tar-stream then reads the next block as a header) is an empty long header here
      const size = h.size !== null && h.size > 0 ? h.size : 0;
      this.header = { ...h, size };
      this.long = Buffer.alloc(size);
      this.longFill = 0;
      this.missing = size;
      this.state = "long";
      if (this.missing === 0) this.endLong();
      return;
    }
    if (this.gnuLongPath) h.name = this.gnuLongPath;
    this.gnuLongPath = null;
    if (this.pax) {
      if (this.pax.path) h.name = this.pax.path;
      if (this.pax.size) h.size = parseInt(this.pax.size, 10);
      this.pax = null;
    }
    if (!((h.size as number) >= 0)) throw new Error("Invalid header");
    this.header = h;
    this.member = this.entry(h);
    this.state = "data";
    this.missing = h.size ?? 0;
    if (this.missing === 0) await this.endMember();
  }

  private async endMember(): Promise<void> {
    const m = this.member!;
    this.member = null;
    await m.end();
    this.missing = pad(this.header!.size ?? 0);
    this.state = "pad";
  }

  private endLong(): void {
    const buf = this.long!;
    this.long = null;
    switch (this.header!.type) {
      case "gnu-long-path":
        this.gnuLongPath = decodeStr(buf, 0, buf.length);
        break;
      case "gnu-long-link-path":
        break; // a link's target: no member restore accepts has one
      case "pax-global-header":
        this.paxGlobal = decodePax(buf);
        break;
      case "pax-header":
        this.pax = this.paxGlobal === null ? decodePax(buf) : Object.assign({}, this.paxGlobal, decodePax(buf));
        break;
    }
    this.missing = pad(this.header!.size ?? 0);
    this.state = "pad";
  }
}

/** tar-stream's headers.decode, for the fields read here: null for a zero block. */
export function decodeHeader(buf: Buffer): TarHeader | null {
  const typeflag = buf[156] === 0 ? 0 : buf[156]! - 48;
  let name = decodeStr(buf, 0, 100);
  const size = decodeOct(buf, 124, 12);
  let c = 8 * 32;
  for (let i = 0; i < 148; i++) c += buf[i]!;
  for (let j = 156; j < 512; j++) c += buf[j]!;
  if (c === 8 * 32) return null;
  if (c !== decodeOct(buf, 148, 8)) throw new Error("Invalid tar header. Maybe the tar is corrupted or it needs to be gunzipped?");
  const magic = buf.toString("latin1", 257, 263);
  if (magic === "ustar\x00") {
    if (buf[345]) name = decodeStr(buf, 345, 155) + "/" + name;
  } else if (!(magic === "ustar " && buf[263] === 0x20 && buf[264] === 0)) {
    throw new Error("Invalid tar header: unknown format.");
  }
  return { name, size, type: TYPES[typeflag] ?? null };
}

const TYPES: Record<number, string> = { 0: "file", 1: "link", 2: "symlink", 3: "character-device", 4: "block-device", 5: "directory", 6: "fifo", 7: "contiguous-file", 72: "pax-header", 55: "pax-global-header", 27: "gnu-long-link-path", 28: "gnu-long-path", 30: "gnu-long-path" };

function decodeStr(buf: Buffer, offset: number, length: number): string {
  let end = offset;
  while (end < offset + length && buf[end] !== 0) end++;
  return buf.toString("utf8", offset, end);
}

function decodeOct(buf: Buffer, offset: number, length: number): number | null {
  const val = buf.subarray(offset, offset + length);
  if (val[0]! & 0x80) return parse256(val);
  let at = 0;
  while (at < val.length && val[at] === 32) at++;
  let end = at;
  while (end < val.length && val[end] !== 32) end++;
  while (at < end && val[at] === 0) at++;
  if (end === at) return 0;
  return parseInt(val.toString("utf8", at, end), 8);
}

/** base-256 (0x80 positive, 0xff two's complement), else null: as node-tar and tar-stream read it */
function parse256(buf: Buffer): number | null {
  const positive = buf[0] === 0x80 ? true : buf[0] === 0xff ? false : null;
  if (positive === null) return null;
  let sum = 0;
  for (let i = buf.length - 1, p = 1; i > 0; i--, p *= 256) sum += (positive ? buf[i]! : 0xff - buf[i]!) * p;
  return positive ? sum : -1 * sum;
}

function decodePax(buf: Buffer): Record<string, string> {
  const result: Record<string, string> = {};
  while (buf.length) {
    let i = 0;
    while (i < buf.length && buf[i] !== 32) i++;
    const len = parseInt(buf.toString("utf8", 0, i), 10);
    if (!len) return result;
    const b = buf.subarray(i + 1, len - 1).toString("utf8");
    const k = b.indexOf("=");
    if (k === -1) return result;
    result[b.slice(0, k)] = b.slice(k + 1);
    buf = buf.subarray(len);
  }
  return result;
}
