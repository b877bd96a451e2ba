/**
 * The loop both digest threads run (src/bundle/chunk-table.ts): chunks are
 * claimed once each from a shared counter, read whole however short each
 * read(2) is (the last chunk shorter), a file that ends early reported at its
 * first missing byte, each digest written at its chunk's place in the table.
 */
import { afterAll, describe, expect, it } from "vitest";
import { createHash } from "node:crypto";
import { closeSync, mkdtempSync, openSync, readSync, rmSync, writeFileSync } from "node:fs";
import { open } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chunkCount, claim, readChunk, readChunkSync, recordChunk, Truncated, type ChunkJob } from "../../../src/bundle/chunk-table.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-chunk-table-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const data = Buffer.from(Array.from({ length: 2500 }, (_, i) => (i * 7) % 251));
const file = join(tmp, "bundle");
writeFileSync(file, Buffer.concat([Buffer.from("HEAD"), data]));
const job = (o: Partial<ChunkJob> = {}): ChunkJob => ({ path: file, start: 4, size: data.length, chunkSize: 1000, next: new SharedArrayBuffer(4), table: new SharedArrayBuffer(3 * 32), ...o });

describe("claiming", () => {
  it("counts chunks rounding up, and hands each out once across views of the shared counter, then null", () => {
    expect([chunkCount({ size: 0, chunkSize: 10 }), chunkCount({ size: 10, chunkSize: 10 }), chunkCount({ size: 11, chunkSize: 10 })]).toEqual([0, 1, 2]);
    const j = job();
    const mine = new Int32Array(j.next);
    const theirs = new Int32Array(j.next);
    expect([claim(j, mine), claim(j, theirs), claim(j, mine), claim(j, theirs), claim(j, mine)]).toEqual([0, 1, 2, null, null]);
  });
});

describe("reading a chunk", () => {
  it("sync and async: whole chunks from `start`, the last one shorter, however little each read returns", async () => {
    const fd = openSync(file, "r");
    const fh = await open(file, "r");
    try {
      const dribble = (buf: Buffer, got: number, len: number, at: number) => readSync(fd, buf, got, Math.min(len, 37), at);
      const dribbleAsync = async (buf: Buffer, got: number, len: number, at: number) => (await fh.read(buf, got, Math.min(len, 53), at)).bytesRead;
      for (const i of [0, 1, 2]) {
        const want = data.subarray(i * 1000, Math.min(data.length, (i + 1) * 1000));
        const s = readChunkSync(job(), i, Buffer.alloc(1000), dribble);
        const a = await readChunk(job(), i, Buffer.alloc(1000), dribbleAsync);
        expect(Buffer.isBuffer(s) && s.equals(want)).toBe(true);
        expect(Buffer.isBuffer(a) && a.equals(want)).toBe(true);
      }
    } finally {
      closeSync(fd);
      await fh.close();
    }
  });

  it("a file that ends early is Truncated at its first missing byte (file offset)", async () => {
    const short = join(tmp, "short");
    writeFileSync(short, Buffer.concat([Buffer.from("HEAD"), data.subarray(0, 1500)]));
    const fd = openSync(short, "r");
    try {
      const read = (buf: Buffer, got: number, len: number, at: number) => readSync(fd, buf, got, len, at);
      const r = readChunkSync(job({ path: short }), 1, Buffer.alloc(1000), read);
      expect(r).toBeInstanceOf(Truncated);
      expect((r as Truncated).at).toBe(4 + 1500);
      const a = await readChunk(job({ path: short }), 2, Buffer.alloc(1000), async (buf, got, len, at) => read(buf, got, len, at));
      expect((a as Truncated).at).toBe(4 + 2000);
    } finally {
      closeSync(fd);
    }
  });

  it("recordChunk puts the chunk's sha256 at its index in the table", () => {
    const table = new Uint8Array(3 * 32);
    recordChunk(table, 2, Buffer.from("c"));
    recordChunk(table, 0, Buffer.from("a"));
    const sha = (s: string) => createHash("sha256").update(s).digest();
    expect(Buffer.from(table).equals(Buffer.concat([sha("a"), Buffer.alloc(32), sha("c")]))).toBe(true);
  });
});
