/**
 * FastCDC (src/chunks/fastcdc.ts): cuts are stable under insertions and
 * deletions elsewhere, respect min and max, are the same however the input
 * is split (property), and are pinned for a known input (a change of the gear
 * table or the masks would stop every stored chunk from deduplicating).
 */
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { createCipheriv, createHash } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { open } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checkParams, chunkBuffer, chunkLengths, Cutter, gearTable, handleChunks, LARGE_STATE, streamChunks, type ChunkParams } from "../../../src/chunks/fastcdc.js";

/** Deterministic incompressible bytes (AES-CTR keystream). */
const noise = (n: number, seed = "fastcdc") => createCipheriv("aes-128-ctr", createHash("sha256").update(seed).digest().subarray(0, 16), Buffer.alloc(16)).update(Buffer.alloc(n));
const SMALL: ChunkParams = { min: 256, avg: 1024, max: 4096 };
const MiB = 2 ** 20;

/** The chunks of `data` as digests, in order. */
function chunkDigests(data: Buffer, p: ChunkParams = LARGE_STATE): string[] {
  const out: string[] = [];
  let at = 0;
  for (const n of chunkLengths(data, p)) {
    out.push(createHash("sha256").update(data.subarray(at, at + n)).digest("hex"));
    at += n;
  }
  return out;
}

/** Of the chunks of `after`, the share (by count) already among the chunks of `before`. */
function reused(before: Buffer, after: Buffer, p: ChunkParams = LARGE_STATE): number {
  const known = new Set(chunkDigests(before, p));
  const now = chunkDigests(after, p);
  return now.filter((d) => known.has(d)).length / now.length;
}

describe("FastCDC cut points", () => {
  const data = noise(50 * 1000 * 1000);

  it("are pinned for a known input: the gear table and masks are a stored-format fact", () => {
    const lengths = chunkLengths(data.subarray(0, 32 * MiB));
    expect(lengths.slice(0, 6)).toEqual(PINNED_FIRST);
    expect(createHash("sha256").update(lengths.join(",")).digest("hex").slice(0, 16)).toBe(PINNED_DIGEST);
    expect(gearTable().slice(0, 4)).toEqual(Int32Array.from(PINNED_GEAR));
  });

  it("respect min, max and the average: every chunk but the last is within [min, max]", () => {
    const lengths = chunkLengths(data);
    expect(lengths.reduce((a, b) => a + b, 0)).toBe(data.length);
    for (const n of lengths.slice(0, -1)) {
      expect(n).toBeGreaterThanOrEqual(LARGE_STATE.min);
      expect(n).toBeLessThanOrEqual(LARGE_STATE.max);
    }
    expect(lengths.at(-1)!).toBeLessThanOrEqual(LARGE_STATE.max);
    const mean = data.length / lengths.length;
    // normalized chunking gathers sizes above the average: min plus about one average
    expect(mean).toBeGreaterThan(LARGE_STATE.avg * 0.9);
    expect(mean).toBeLessThan(LARGE_STATE.avg * 1.6);
  });

  it("cut a run of one byte value at max (or min): never a chunk outside the bounds", () => {
    for (const v of [0, 0xff, 0x5a]) {
      const lengths = chunkLengths(Buffer.alloc(20 * MiB, v));
      expect(lengths.length).toBeGreaterThan(2);
      // the hash of a run settles on one value: its masked bits are zero (cut at min) or not (cut at max)
      expect(new Set(lengths.slice(0, -1)).size).toBe(1);
      expect([LARGE_STATE.min, LARGE_STATE.max]).toContain(lengths[0]);
    }
  });

  it("are deterministic", () => {
    expect(chunkLengths(data)).toEqual(chunkLengths(Buffer.from(data)));
  });

  it("resist shifts: bytes inserted at the start of a 50 MB file leave >= 95% of its chunks reused", () => {
    for (const n of [1, 100, 4096, 1_000_003]) {
      const shifted = Buffer.concat([noise(n, `insert ${n}`), data]);
      expect(reused(data, shifted), `${n} bytes inserted`).toBeGreaterThanOrEqual(0.95);
    }
    // with small chunks the same edit costs a vanishing share
    expect(reused(data.subarray(0, 8 * MiB), Buffer.concat([Buffer.from("x"), data.subarray(0, 8 * MiB)]), SMALL)).toBeGreaterThanOrEqual(0.99);
  });

  it("resist edits in the middle: a deletion and an insertion there cost the chunks around them only", () => {
    const mid = 25_000_000;
    const deleted = Buffer.concat([data.subarray(0, mid), data.subarray(mid + 5000)]);
    const inserted = Buffer.concat([data.subarray(0, mid), noise(777, "middle"), data.subarray(mid)]);
    expect(reused(data, deleted)).toBeGreaterThanOrEqual(0.95);
    expect(reused(data, inserted)).toBeGreaterThanOrEqual(0.95);
  });

  it("are the same however the input is split (fed to a Cutter in pieces)", () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 0, maxLength: 40_000 }), fc.array(fc.nat(40_000), { maxLength: 30 }), (bytes, splits) => {
        const whole = chunkLengths(bytes, SMALL);
        const c = new Cutter(SMALL);
        const points = [...new Set(splits.map((s) => s % (bytes.length + 1)))].sort((x, y) => x - y);
        const cuts: number[] = [];
        let last = 0;
        let from = 0;
        for (const to of [...points, bytes.length]) {
          // each piece is its own array: the Cutter sees only the piece, never the bytes before it
          const piece = bytes.slice(from, to);
          for (let at, pos = 0; (at = c.next(piece, pos, piece.length)) >= 0; pos = at) {
            cuts.push(from + at - last);
            last = from + at;
          }
          from = to;
        }
        if (last < bytes.length) cuts.push(bytes.length - last);
        expect(cuts).toEqual(whole);
      }),
      { numRuns: 300 },
    );
  });

  it("are the same through a stream of any piece sizes and any buffer block (streamChunks)", async () => {
    await fc.assert(
      fc.asyncProperty(fc.uint8Array({ minLength: 0, maxLength: 60_000 }), fc.array(fc.integer({ min: 1, max: 9000 }), { minLength: 1, maxLength: 20 }), fc.integer({ min: 1, max: 5000 }), async (bytes, sizes, block) => {
        async function* pieces() {
          for (let i = 0, at = 0; at < bytes.length; i++) {
            const n = sizes[i % sizes.length]!;
            yield bytes.subarray(at, at + n);
            at += n;
          }
        }
        const got: number[] = [];
        const joined: Buffer[] = [];
        for await (const c of streamChunks(pieces(), SMALL, chunkBuffer(SMALL, block))) {
          got.push(c.length);
          joined.push(Buffer.from(c));
        }
        expect(got).toEqual(chunkLengths(bytes, SMALL));
        expect(Buffer.concat(joined).equals(Buffer.from(bytes))).toBe(true);
      }),
      { numRuns: 200 },
    );
  });

  it("read from a file through a bounded buffer: the same chunks as the whole buffer", async () => {
    const dir = mkdtempSync(join(tmpdir(), "fastcdc-"));
    try {
      const file = join(dir, "f");
      writeFileSync(file, data.subarray(0, 20 * MiB));
      const fh = await open(file);
      const got: string[] = [];
      for await (const c of handleChunks(fh, LARGE_STATE, chunkBuffer(LARGE_STATE, 64 * 1024))) got.push(createHash("sha256").update(c).digest("hex"));
      await fh.close();
      expect(got).toEqual(chunkDigests(data.subarray(0, 20 * MiB)));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("give no chunk for empty input and one chunk for input below min", async () => {
    expect(chunkLengths(Buffer.alloc(0))).toEqual([]);
    expect(chunkLengths(Buffer.from("x"))).toEqual([1]);
    expect(chunkLengths(noise(LARGE_STATE.min - 1))).toEqual([LARGE_STATE.min - 1]);
    const none: Buffer[] = [];
    for await (const c of streamChunks((async function* () {})())) none.push(c);
    expect(none).toEqual([]);
    const dir = mkdtempSync(join(tmpdir(), "fastcdc-"));
    try {
      writeFileSync(join(dir, "empty"), "");
      const fh = await open(join(dir, "empty"));
      for await (const c of handleChunks(fh)) none.push(c);
      await fh.close();
      expect(none).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("refuse sizes that are out of order, not a power of two, or out of bounds", () => {
    expect(() => checkParams({ min: 1024, avg: 512, max: 4096 })).toThrow(/must grow/);
    expect(() => checkParams({ min: 256, avg: 1000, max: 4096 })).toThrow(/power of two/);
    expect(() => checkParams({ min: 32, avg: 1024, max: 4096 })).toThrow(/below 64/);
    expect(() => checkParams({ min: 256, avg: 1024, max: 128 * MiB })).toThrow(/above 64 MiB/);
    expect(() => new Cutter({ min: 256, avg: 1024, max: 1024 })).toThrow(/must grow/);
    expect(() => streamChunks((async function* () {})(), SMALL, Buffer.alloc(SMALL.max)).next()).rejects.toThrow(/not larger than the largest chunk/);
  });

  it("run at >= 500 MB per CPU second (the inner loop stays on int32 arithmetic)", () => {
    const buf = data.subarray(0, 48 * MiB);
    chunkLengths(buf); // warm up (optimised)
    const t = performance.now();
    const cpu = process.cpuUsage();
    chunkLengths(buf);
    const used = process.cpuUsage(cpu);
    const perCpuSecond = buf.length / 1e6 / ((used.user + used.system) / 1e6);
    console.log(`FastCDC ${LARGE_STATE.min / 1024}/${LARGE_STATE.avg / 1024}/${LARGE_STATE.max / 1024} KiB: ${(buf.length / 1e6 / ((performance.now() - t) / 1000)).toFixed(0)} MB/s wall, ${perCpuSecond.toFixed(0)} MB per CPU second`);
    // CPU time, not wall time: the machine is shared, and a loop that fell off int32 math runs several times slower
    expect(perCpuSecond).toBeGreaterThan(500);
  });
});

// the cuts of 32 MiB of the AES-CTR keystream above, and the gear table's first entries: any change to them
// is a change of the stored format's chunking (nothing stored before dedupes any more)
const PINNED_FIRST = [1230508, 1340014, 1311495, 1064941, 1059796, 603151];
const PINNED_DIGEST = "7023ad73496929ea";
const PINNED_GEAR = [1205283340, -1409979224, -1211215759, -52326433];
