/**
 * The outer bundle container: a plain ustar archive with exactly three regular
 * members, `manifest.json`, `manifest.sig`, `payload.age`, in that order.
 * Reading is strict and bounded: anything else is a verification failure.
 */
import { closeSync, fstatSync, readSync } from "node:fs";
import { verifyError } from "../errors.js";
import { openRegular } from "../fsutil.js";

export const MEMBERS = ["manifest.json", "manifest.sig", "payload.age"] as const;
/** A tar block: every header is one, every member's data is padded to whole ones. */
export const BLOCK = 512;
/** manifest.json: 8 MiB, the manifest cap (bundle/manifest.ts MAX_MANIFEST; a format-5 manifest lists chunks) */
const LIMITS: Record<string, number> = { "manifest.json": 8 * 1024 * 1024, "manifest.sig": 16 * 1024 };

/** A ustar header block for a regular file. */
export function tarHeader(name: string, size: number, mtime: Date): Buffer {
  const h = Buffer.alloc(BLOCK);
  const put = (s: string, off: number, len: number) => h.write(s, off, len, "latin1");
  const oct = (n: number, len: number) => n.toString(8).padStart(len - 1, "0") + "\0";
  put(name, 0, 100);
  put(oct(0o644, 8), 100, 8);
  put(oct(0, 8), 108, 8);
  put(oct(0, 8), 116, 8);
  put(oct(size, 12), 124, 12);
  put(oct(Math.floor(mtime.getTime() / 1000), 12), 136, 12);
  put("        ", 148, 8);
  put("0", 156, 1);
  put("ustar\0", 257, 6);
  put("00", 263, 2);
  let sum = 0;
  for (const b of h) sum += b;
  put(sum.toString(8).padStart(6, "0") + "\0 ", 148, 8);
  return h;
}

/** Zero padding after a member of `size` bytes. */
export const tarPadding = (size: number) => Buffer.alloc(tarBlocks(size) - size);
/** `size` bytes of member data rounded up to whole blocks. */
export const tarBlocks = (size: number) => Math.ceil(size / BLOCK) * BLOCK;
/** The end-of-archive marker. */
export const tarEnd = () => Buffer.alloc(BLOCK * 2);

/** Where the members of a bundle file are. */
export interface BundleLayout {
  path: string;
  manifest: Buffer;
  signature: string;
  payloadOffset: number;
  payloadSize: number;
  fileSize: number;
  /** the key manifest.sig verified with, once it has: set by verifyLayout, or by the header cache for bytes it verified */
  signedBy?: Buffer;
  /** sha256 of `manifest`, once computed (by the header cache), so the listing's hot path hashes each manifest once */
  manifestSha256?: string;
}

function parseOctal(b: Buffer, name: string): number {
  const s = b.toString("latin1").replace(/\0.*$/s, "").trim();
  if (!/^[0-7]{1,11}$/.test(s)) throw verifyError(`bundle member ${name}: invalid tar size field`);
  return parseInt(s, 8);
}

/**
 * Parses the container from a reader of byte ranges (a file, or the head and
 * tail of a remote object) without reading the payload.
 * @throws AgentbakError(13) naming the member when the container is malformed.
 */
export function parseLayout(path: string, fileSize: number, readAt: (n: number, at: number) => Buffer): BundleLayout {
  let off = 0;
  const read = (n: number, at: number) => {
    if (at + n > fileSize) throw verifyError(`bundle truncated at byte ${at}`);
    return readAt(n, at);
  };
  const out: { name: string; offset: number; size: number }[] = [];
  for (const expected of MEMBERS) {
    const h = read(BLOCK, off);
    if (h.every((b) => b === 0)) throw verifyError(`bundle member ${expected} missing`);
    let sum = 0;
    for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : h[i]!;
    if (parseOctal(h.subarray(148, 156), expected) !== sum) throw verifyError(`bundle member ${expected}: tar header checksum mismatch`);
    const name = h.subarray(0, 100).toString("latin1").replace(/\0.*$/s, "");
    const prefix = h.subarray(345, 500).toString("latin1").replace(/\0.*$/s, "");
    const type = String.fromCharCode(h[156]!);
    if (prefix || name !== expected) throw verifyError(`bundle member ${out.length + 1} is "${(prefix ? prefix + "/" : "") + name}", expected ${expected}`);
    if (type !== "0" && type !== "\0") throw verifyError(`bundle member ${expected} is not a regular file`);
    const size = parseOctal(h.subarray(124, 136), expected);
    const limit = LIMITS[expected];
    if (limit !== undefined && size > limit) throw verifyError(`bundle member ${expected} is ${size} bytes, over the ${limit}-byte limit`);
    off += BLOCK;
    if (off + size > fileSize) throw verifyError(`bundle truncated inside ${expected}`);
    out.push({ name, offset: off, size });
    off += size + tarPadding(size).length;
  }
  // after the three members only zero blocks may follow
  const rest = fileSize - off;
  if (rest < BLOCK * 2) throw verifyError("bundle truncated: end-of-archive marker missing");
  if (rest > 64 * 1024 || !read(rest, off).every((b) => b === 0)) throw verifyError("bundle has an extra member or trailing data");
  const [m, sg, p] = out as [(typeof out)[0], (typeof out)[0], (typeof out)[0]];
  return {
    path,
    manifest: read(m.size, m.offset),
    signature: read(sg.size, sg.offset).toString("latin1"),
    payloadOffset: p.offset,
    payloadSize: p.size,
    fileSize,
  };
}

/**
 * Reads the layout of a bundle file without reading the payload.
 * @throws AgentbakError(13) naming the member when the container is malformed.
 */
export function readLayout(path: string): BundleLayout {
  const fd = openRegular(path);
  try {
    return parseLayout(path, fstatSync(fd).size, (n, at) => {
      const b = Buffer.alloc(n);
      if (readSync(fd, b, 0, n, at) !== n) throw verifyError(`bundle truncated at byte ${at}`);
      return b;
    });
  } finally {
    closeSync(fd);
  }
}

/** Thrown by a range reader that does not hold the bytes asked for yet. */
class NeedBytes {
  constructor(readonly at: number, readonly n: number) {}
}

/**
 * Reads the layout of a bundle through a byte-range reader (an object in a
 * store) with a few exact range reads: the head, then whatever the member
 * headers say is still missing, then the tail after the payload.
 * @throws AgentbakError(13) naming the member when the container is malformed.
 */
export async function readLayoutRanges(name: string, size: number, readRange: (start: number, end: number) => Promise<Buffer>): Promise<BundleLayout> {
  const have: { start: number; buf: Buffer }[] = [];
  if (size > 0) have.push({ start: 0, buf: await readRange(0, Math.min(size, 16 * 1024) - 1) });
  for (;;) {
    try {
      return parseLayout(name, size, (n, at) => {
        const c = have.find((h) => at >= h.start && at + n <= h.start + h.buf.length);
        if (!c) throw new NeedBytes(at, n);
        return c.buf.subarray(at - c.start, at - c.start + n);
      });
    } catch (e) {
      if (!(e instanceof NeedBytes)) throw e;
      // parseLayout bounds every member it reads before asking, so this ends
      have.push({ start: e.at, buf: await readRange(e.at, Math.min(size, e.at + Math.max(e.n, 64 * 1024)) - 1) });
    }
  }
}
