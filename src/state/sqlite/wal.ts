/**
 * Reading a SQLite write-ahead log (https://sqlite.org/fileformat2.html#walformat):
 * which frames form the last committed state, and the newest frame of each
 * page in it. Frames are trusted only up to the last commit frame whose salts
 * and cumulative checksums hold, exactly as SQLite's own recovery does.
 */
import { closeSync, openSync, readSync } from "node:fs";

const MAGIC_LE = 0x377f0682;
const MAGIC_BE = 0x377f0683;
const HEADER = 32;
const FRAME_HEADER = 24;

/** The committed frames of a WAL file. */
export interface WalIndex {
  pageSize: number;
  /** salts of this WAL generation (a restart changes them) */
  salt1: number;
  salt2: number;
  /** number of valid frames up to and including the last commit frame (0: nothing committed in the WAL) */
  mxFrame: number;
  /** database size in pages after the last commit (0 when mxFrame is 0) */
  dbPages: number;
  /** page number → byte offset of its newest frame's page data, for frames 1..mxFrame */
  pages: Map<number, number>;
}

/** SQLite's WAL checksum over `b` (a multiple of 8 bytes), continuing from (s0, s1). */
function checksum(b: Buffer, bigEndian: boolean, s: [number, number]): [number, number] {
  let [s0, s1] = s;
  const word = bigEndian ? (o: number) => b.readUInt32BE(o) : (o: number) => b.readUInt32LE(o);
  for (let o = 0; o < b.length; o += 8) {
    s0 = (s0 + word(o) + s1) >>> 0;
    s1 = (s1 + word(o + 4) + s0) >>> 0;
  }
  return [s0, s1];
}

/**
 * Indexes the committed frames of `walFile` (a missing or empty file is a WAL
 * with nothing committed).
 * @throws Error when the header is present but not a WAL header for `pageSize`.
 */
export function readWal(walFile: string, pageSize: number): WalIndex {
  const empty: WalIndex = { pageSize, salt1: 0, salt2: 0, mxFrame: 0, dbPages: 0, pages: new Map() };
  let fd: number;
  try {
    fd = openSync(walFile, "r");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return empty;
    throw e;
  }
  try {
    const h = Buffer.alloc(HEADER);
    if (readSync(fd, h, 0, HEADER, 0) < HEADER) return empty;
    const magic = h.readUInt32BE(0);
    if (magic !== MAGIC_LE && magic !== MAGIC_BE) return empty; // never written, or being reset
    const bigEndian = magic === MAGIC_BE;
    if (h.readUInt32BE(8) !== pageSize) throw new Error(`WAL page size ${h.readUInt32BE(8)} is not the database's ${pageSize}`);
    let s = checksum(h.subarray(0, 24), bigEndian, [0, 0]);
    if (s[0] !== h.readUInt32BE(24) || s[1] !== h.readUInt32BE(28)) return empty;
    const salt1 = h.readUInt32BE(16);
    const salt2 = h.readUInt32BE(20);
    const frame = Buffer.alloc(FRAME_HEADER + pageSize);
    const pending = new Map<number, number>();
    const pages = new Map<number, number>();
    let mxFrame = 0;
    let dbPages = 0;
    for (let n = 1, off = HEADER; ; n++, off += frame.length) {
      if (readSync(fd, frame, 0, frame.length, off) < frame.length) break;
      if (frame.readUInt32BE(8) !== salt1 || frame.readUInt32BE(12) !== salt2) break; // a frame of an earlier generation
      s = checksum(frame.subarray(0, 8), bigEndian, s);
      s = checksum(frame.subarray(FRAME_HEADER), bigEndian, s);
      if (s[0] !== frame.readUInt32BE(16) || s[1] !== frame.readUInt32BE(20)) break; // torn or stale: the log ends here
      pending.set(frame.readUInt32BE(0), off + FRAME_HEADER);
      const commit = frame.readUInt32BE(4);
      if (commit !== 0) {
        for (const [p, o] of pending) pages.set(p, o);
        pending.clear();
        mxFrame = n;
        dbPages = commit;
      }
    }
    return { pageSize, salt1, salt2, mxFrame, dbPages, pages };
  } finally {
    closeSync(fd);
  }
}
