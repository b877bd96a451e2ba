/**
 * The bundle's stream helpers (src/bundle/streams.ts): chunk digests equal to
 * what `split -b N --filter sha256sum` and a sha256 of those digests give;
 * the hashing tap's size limits (a declared size exceeded is OVERSIZE, a file
 * that changed size while packed is named with both sizes); buffer reuse;
 * zstd compression that stock `zstd -d` reads, and decompression bounded in
 * output, window and frame (a bomb stops at its limit, a cut frame fails).
 */
import { afterAll, describe, expect, it } from "vitest";
import { execFileSync } from "node:child_process";
import { createCipheriv, createHash } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { AgentbakError } from "../../../src/errors.js";
import { boundedDecompress, BufferPool, ByteCounter, ChunkDigests, fileSha256, HashTap, pooledFileStream, ZstdCompress, zstdOutSize } from "../../../src/bundle/streams.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-streams-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const noise = (n: number, seed: string) => createCipheriv("aes-128-ctr", createHash("sha256").update(seed).digest().subarray(0, 16), Buffer.alloc(16)).update(Buffer.alloc(n));
const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");
/** `b` cut into pieces of these sizes in turn (pieces that straddle chunk boundaries) */
const pieces = (b: Buffer, sizes: number[]) => {
  const out: Buffer[] = [];
  for (let off = 0, i = 0; off < b.length; i++) {
    const n = sizes[i % sizes.length]!;
    out.push(b.subarray(off, off + n));
    off += n;
  }
  return out;
};
/** what comes out of `src` through `stages`, chunk by chunk */
const parts = async (src: Readable, ...stages: unknown[]) => {
  const out: Buffer[] = [];
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  await (pipeline as any)(src, ...stages, new Writable({ write: (c: Buffer, _e, cb) => (out.push(c), cb()) }));
  return out;
};
const collect = async (src: Readable, ...stages: unknown[]) => Buffer.concat(await parts(src, ...stages));
const thrown = async (p: Promise<unknown>) => p.then(() => { throw new Error("no error"); }, (e: unknown) => e as NodeJS.ErrnoException);

describe("ChunkDigests", () => {
  it("is the sha256 of split -b N --filter sha256sum's digests, however the bytes arrive", () => {
    for (const len of [10_000, 7000, 1, 999]) {
      const data = noise(len, `c${len}`);
      const f = join(tmp, `payload-${len}`);
      writeFileSync(f, data);
      const hex = execFileSync("sh", ["-c", `split -b 1000 --filter 'sha256sum' '${f}' | cut -c1-64`], { encoding: "utf8" }).trim().split("\n").join("");
      const c = new ChunkDigests(1000);
      for (const p of pieces(data, [333, 1000, 1, 2500])) c.update(p);
      expect(c.digest()).toBe(sha(Buffer.from(hex, "hex")));
    }
  });

  it("of nothing: the sha256 of no digests", () => {
    expect(new ChunkDigests(4).digest()).toBe(sha(Buffer.alloc(0)));
  });
});

describe("HashTap and ByteCounter", () => {
  it("pass everything through, hashing (whole and per chunk) and counting", async () => {
    const data = noise(5000, "t");
    const tap = new HashTap(Number.POSITIVE_INFINITY, "x", 1000);
    const seen: number[] = [];
    const counter = new ByteCounter(5000, "x", (n) => seen.push(n));
    const out = await collect(Readable.from(pieces(data, [700])), tap, counter);
    expect(out.equals(data)).toBe(true);
    expect([tap.bytes, tap.digest()]).toEqual([5000, sha(data)]);
    const c = new ChunkDigests(1000);
    c.update(data);
    expect(tap.chunks!.digest()).toBe(c.digest());
    expect(counter.bytes).toBe(5000);
    expect(seen.reduce((a, b) => a + b, 0)).toBe(5000);
  });

  it("past a declared size: OVERSIZE naming what and the size", async () => {
    const e = await thrown(collect(Readable.from([Buffer.alloc(600), Buffer.alloc(600)]), new HashTap(1000, "component files/a")));
    expect([e.code, e.message]).toEqual(["OVERSIZE", "component files/a exceeds its declared size of 1000 bytes"]);
    const b = await thrown(collect(Readable.from([Buffer.alloc(1001)]), new ByteCounter(1000, "decompressed payload")));
    expect([b.code, b.message]).toEqual(["OVERSIZE", "decompressed payload exceeds its declared size of 1000 bytes"]);
  });

  it("exact: a file that shrank or grew while packed is AgentbakError(1) naming both sizes", async () => {
    const short = await thrown(collect(Readable.from([Buffer.alloc(800)]), new HashTap(1000, "component files/a", undefined, true)));
    expect(short).toBeInstanceOf(AgentbakError);
    expect([(short as unknown as AgentbakError).code, short.message]).toEqual([1, "component files/a changed size while being packed: 1000 bytes when listed, 800 read"]);
    const long = await thrown(collect(Readable.from([Buffer.alloc(900), Buffer.alloc(900)]), new HashTap(1000, "component files/a", undefined, true)));
    expect(long.message).toBe("component files/a changed size while being packed: 1000 bytes when listed, at least 1800 read");
    const exact = new HashTap(1000, "c", undefined, true);
    await collect(Readable.from([Buffer.alloc(1000)]), exact);
    expect(exact.bytes).toBe(1000);
  });

  it("fileSha256 is sha256sum's", async () => {
    const f = join(tmp, "file");
    writeFileSync(f, noise(3 << 20, "f"));
    expect(await fileSha256(f)).toBe(execFileSync("sha256sum", [f], { encoding: "utf8" }).slice(0, 64));
  });
});

describe("BufferPool and pooledFileStream", () => {
  it("gives back a buffer it made (whole, from a part of it) once; ignores foreign buffers and keeps at most `keep`", () => {
    const pool = new BufferPool(1024, 2);
    const a = pool.take();
    const b = pool.take();
    const c = pool.take();
    expect(pool.made).toBe(3);
    pool.give(Buffer.alloc(1024));
    pool.give(a.subarray(10, 20));
    pool.give(a);
    pool.give(b);
    pool.give(c);
    const again = [pool.take(), pool.take(), pool.take()];
    expect(pool.made).toBe(4);
    expect(again[0]!.buffer === b.buffer || again[0]!.buffer === a.buffer).toBe(true);
    expect(again.every((x) => x.length === 1024)).toBe(true);
  });

  it("a file read through a pool is its bytes exactly; buffers given back are reused", async () => {
    const data = noise(10 * 4096 + 17, "p");
    const f = join(tmp, "pooled");
    writeFileSync(f, data);
    const pool = new BufferPool(4096);
    const parts: Buffer[] = [];
    await pipeline(pooledFileStream(f, pool), new Writable({ write: (c: Buffer, _e, cb) => (parts.push(Buffer.from(c)), pool.give(c), cb()) }));
    expect(Buffer.concat(parts).equals(data)).toBe(true);
    expect(pool.made).toBeLessThan(4);
    const e = await thrown(pipeline(pooledFileStream(join(tmp, "missing"), pool), new Writable({ write: (_c, _e, cb) => cb() })));
    expect(e.code).toBe("ENOENT");
  });
});

describe("zstd", () => {
  const compress = async (data: Buffer, windowLog = 21) => {
    const input = new BufferPool(64 * 1024);
    const output = new BufferPool(zstdOutSize());
    return collect(Readable.from(pieces(data, [100_000, 3])), new ZstdCompress({ level: 3, workers: 0, windowLog, jobSize: 1 << 20 }, input, output));
  };

  it("ZstdCompress makes one checksummed frame that stock zstd -d reads back", async () => {
    const data = Buffer.concat([noise(300_000, "z"), Buffer.from("agent memory ".repeat(50_000))]);
    const frame = await compress(data);
    const f = join(tmp, "frame.zst");
    writeFileSync(f, frame);
    expect(execFileSync("zstd", ["-dc", f], { maxBuffer: 64 << 20 }).equals(data)).toBe(true);
    expect(execFileSync("zstd", ["-lv", f], { encoding: "utf8" })).toMatch(/Check: XXH64/);
    expect(frame.length).toBeLessThan(data.length);
  });

  it("boundedDecompress gives the bytes back exactly, in blocks of at most 128 KiB", async () => {
    const data = Buffer.concat([noise(200_000, "d"), Buffer.alloc(500_000, 1)]);
    const back = await parts(Readable.from(pieces(await compress(data), [777])), boundedDecompress(data.length, 23, "x"));
    expect(Buffer.concat(back).equals(data)).toBe(true);
    expect(Math.max(...back.map((b) => b.length))).toBeLessThanOrEqual(128 * 1024);
  });

  it("boundedDecompress with an output size fills buffers of their own to it, a frame that ends on a boundary included", async () => {
    const out = 64 << 10;
    // 3 outputs exactly (the frame ends where a buffer does), then one that ends inside a buffer
    for (const data of [Buffer.concat([noise(100_000, "e"), Buffer.alloc(3 * out - 100_000, 2)]), noise(3 * out + 5000, "f")]) {
      const back = await parts(Readable.from(pieces(await compress(data), [999, 70_000])), boundedDecompress(data.length, 23, "x", out));
      expect(Buffer.concat(back).equals(data)).toBe(true);
      expect(back.map((b) => b.length)).toEqual(data.length === 3 * out ? [out, out, out] : [out, out, out, 5000]);
      // each its own memory, at its start: the payload worker moves it to the reading thread without a copy
      expect(back.map((b) => [b.byteOffset, b.buffer.byteLength])).toEqual(back.map(() => [0, out]));
      expect(new Set(back.map((b) => b.buffer)).size).toBe(back.length);
    }
  });

  it("a bomb stops at its limit (OVERSIZE), having made little more than the limit", async () => {
    const bomb = execFileSync("sh", ["-c", "head -c 200000000 /dev/zero | zstd -1 -c"], { maxBuffer: 16 << 20 });
    expect(bomb.length).toBeLessThan(64 * 1024);
    let made = 0;
    const counted = new ByteCounter(Number.POSITIVE_INFINITY, "", (n) => (made += n));
    const e = await thrown(collect(Readable.from([bomb]), boundedDecompress(1_000_000, 23, "decompressed payload"), counted));
    expect([e.code, e.message]).toEqual(["OVERSIZE", "decompressed payload exceeds its declared size of 1000000 bytes"]);
    expect(made).toBeLessThanOrEqual(1_000_000);
  });

  it("a frame cut short fails; a window over 2^windowLogMax is refused", async () => {
    const frame = await compress(noise(100_000, "cut"));
    const cut = await thrown(collect(Readable.from([frame.subarray(0, frame.length - 10)]), boundedDecompress(1 << 20, 23, "x")));
    expect(cut.message).toBe("stream ended in the middle of a zstd frame");
    const wide = await compress(noise(1000, "w"), 24);
    const e = await thrown(collect(Readable.from([wide]), boundedDecompress(1 << 20, 23, "x")));
    expect(e.message).toMatch(/window|memory/i);
  });
});
