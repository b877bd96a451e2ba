// The payload's reused buffers: the components are read into a few buffers that zstd gives back once it has
// copied them, and zstd's output buffers come back from the age stage. A buffer given back too soon would be
// overwritten while a stage still held it: the bytes that come out, decrypted and unpacked by the stock tools,
// would differ from what went in.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import { createHash } from "node:crypto";
import fs, { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, readSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { keygen, loadSigningKey } from "../../src/crypto/keys.js";
import { BufferPool, ZstdCompress, zstdOutSize } from "../../src/bundle/streams.js";
import { planBundle, writePayload } from "../../src/bundle/writer.js";
import type { PageSource } from "../../src/state/sqlite/pagefile.js";

let tmp: string;
let recipient: string;

/** `n` bytes that zstd shrinks about 3:1 and that differ from `seed` to `seed` (sha256 blocks among repeats). */
function content(seed: string, n: number): Buffer {
  const b = Buffer.alloc(n);
  for (let off = 0; off < n; off += 96) {
    const d = createHash("sha256").update(`${seed}.${off}`).digest();
    for (let k = 0; k < 96 && off + k < n; k++) b[off + k] = k < 32 ? d[k]! : 0x61 + (k % 7);
  }
  return b;
}

beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), "agentbak-pool-"));
  recipient = keygen(join(tmp, "keys"), "pool-test").recipient;
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe("reused payload buffers", () => {
  it("zstd gives each input buffer back only after compressing it: 40 MiB through 1 MiB buffers, overwritten as soon as they come back", async () => {
    const pool = new BufferPool(1 << 20, 4);
    const out = new BufferPool(zstdOutSize(), 4);
    const whole = createHash("sha256");
    let i = 0;
    const src = new Readable({
      highWaterMark: 1 << 20,
      read() {
        if (i === 40) return void this.push(null);
        const b = pool.take();
        content(`in ${i++}`, b.length).copy(b); // a reused buffer is overwritten here
        whole.update(b);
        this.push(b);
      },
    });
    const parts: Buffer[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _e, cb) {
        parts.push(Buffer.from(chunk)); // a copy: the chunk goes back to `out`
        out.give(chunk);
        cb();
      },
    });
    await pipeline(src, new ZstdCompress({ level: 3, workers: 2, windowLog: 21, jobSize: 1 << 20 }, pool, out), sink);
    const back = await execa("zstd", ["-d", "-q", "-c"], { input: Buffer.concat(parts), encoding: "buffer", maxBuffer: 64 << 20 });
    expect(back.stdout.length).toBe(40 << 20);
    expect(createHash("sha256").update(back.stdout).digest("hex")).toBe(whole.digest("hex"));
    // reuse happened: not a buffer per read or per block
    expect(pool.made).toBeLessThanOrEqual(6);
    expect(out.made).toBeLessThanOrEqual(8);
  });

  it("a payload of a file and pages read in place comes out of age -d | zstd -d | tar x byte for byte", async () => {
    const dir = join(tmp, "payload");
    mkdirSync(dir);
    const file = content("file", (24 << 20) + 777); // a short last read
    writeFileSync(join(dir, "big.bin"), file);
    const pageBytes = content("pages", 12 << 20);
    const pages: PageSource = { pageSize: 4096, pageCount: pageBytes.length / 4096, read: (first, n, buf) => void pageBytes.copy(buf, 0, (first - 1) * 4096, (first - 1 + n) * 4096) };
    const staged = [
      { path: "files/big.bin", kind: "file" as const, name: "big", file: join(dir, "big.bin") },
      { path: "db/state.sqlite", kind: "sqlite" as const, name: "state", pages },
    ];
    const plan = planBundle(join(dir, "out.agentbak"), loadSigningKey(join(tmp, "keys", "signing-key")), staged);
    const w = await writePayload(staged, [recipient], plan);
    // the payload's bytes where the plan put them
    const payload = Buffer.alloc(w.payload.size);
    const fd = openSync(plan.path, "r");
    readSync(fd, payload, 0, payload.length, plan.payloadAt);
    closeSync(fd);
    const x = join(dir, "x");
    mkdirSync(x);
    await execa("sh", ["-c", `age -d -i '${join(tmp, "keys", "age-identity.txt")}' | zstd -d -q | tar -x -C '${x}'`], { input: payload });
    expect(readFileSync(join(x, "files/big.bin")).equals(file)).toBe(true);
    expect(readFileSync(join(x, "db/state.sqlite")).equals(pageBytes)).toBe(true);
    const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");
    expect(w.components.map((c) => [c.path, c.sha256, c.size])).toEqual([
      ["files/big.bin", sha(file), file.length],
      ["db/state.sqlite", sha(pageBytes), pageBytes.length],
    ]);
  });

  it("a file that shrinks while it is read is refused naming the component, its listed size and what was read", async () => {
    const dir = join(tmp, "shrinks");
    mkdirSync(dir);
    const path = join(dir, "notes.bin");
    writeFileSync(path, content("shrinks", 5 << 20));
    const staged = [{ path: "files/notes.bin", kind: "file" as const, name: "notes", file: path }];
    const plan = planBundle(join(dir, "out.agentbak"), loadSigningKey(join(tmp, "keys", "signing-key")), staged);
    // the agent truncates the file just after its first 1 MiB was read
    const real = fs.readSync;
    let reads = 0;
    fs.readSync = ((...a: Parameters<typeof real>) => {
      const n = real(...a);
      if (reads++ === 0) truncateSync(path, 2 << 20);
      return n;
    }) as typeof real;
    syncBuiltinESMExports();
    try {
      await expect(writePayload(staged, [recipient], plan)).rejects.toThrow(`component files/notes.bin changed size while being packed: ${5 << 20} bytes when listed, ${2 << 20} read`);
    } finally {
      fs.readSync = real;
      syncBuiltinESMExports();
    }
    expect(reads).toBeGreaterThan(1);
  });
});
