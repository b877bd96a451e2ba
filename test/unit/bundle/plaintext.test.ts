/**
 * The payload's plaintext (src/bundle/plaintext.ts) from a payload made by the
 * stock tools (`zstd | age -r`), at an offset inside a file: on this thread,
 * the bytes and the payload's digest, the declared size enforced, no matching
 * identity NO_IDENTITY, a reader that goes away letting the file go; the
 * worker's side (serveWorker) driven through a real MessageChannel: batches
 * of about 1 MiB, moved, sent only while the reader has given credit, then
 * the digest, or the error with its code. (Starting the worker itself needs
 * dist/: test/e2e/restore.test.ts runs both with AGENTBAK_PAYLOAD_WORKER.)
 * And a format-7 payload (CheckedPlaintext): every chunk checked against its
 * listed digest before age sees it, at chunk sizes that cut age's header and
 * sealed chunks every way.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFileSync } from "node:child_process";
import { createCipheriv, createHash } from "node:crypto";
import { mkdtempSync, readdirSync, readlinkSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buffer } from "node:stream/consumers";
import { MessageChannel } from "node:worker_threads";
import { generateIdentity, type AgeIdentity } from "../../../src/crypto/age.js";
import { CheckedPlaintext, plaintext, serveWorker, type PayloadSource } from "../../../src/bundle/plaintext.js";

let tmp: string;
let id: AgeIdentity;
let src: PayloadSource;
let ageBytes: Buffer;
let zstBytes: Buffer;
const plain = Buffer.concat([createCipheriv("aes-128-ctr", Buffer.alloc(16, 5), Buffer.alloc(16)).update(Buffer.alloc(2 << 20)), Buffer.from("state ".repeat(200_000))]);
const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), "agentbak-plaintext-"));
  id = generateIdentity();
  writeFileSync(join(tmp, "plain"), plain);
  zstBytes = execFileSync("zstd", ["-q", "-c", "plain"], { cwd: tmp, maxBuffer: 64 << 20 });
  writeFileSync(join(tmp, "plain.zst"), zstBytes);
  ageBytes = execFileSync("age", ["-r", id.recipient, "plain.zst"], { cwd: tmp, maxBuffer: 64 << 20 });
  // the payload sits inside a bigger file, as payload.age does in a bundle
  writeFileSync(join(tmp, "bundle"), Buffer.concat([Buffer.alloc(2048, 1), ageBytes, Buffer.alloc(1024, 2)]));
  src = { path: join(tmp, "bundle"), offset: 2048, size: ageBytes.length, tarSize: plain.length };
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** descriptors of this process open on `path` */
const openOn = (path: string) => readdirSync("/proc/self/fd").filter((fd) => {
  try {
    return readlinkSync(`/proc/self/fd/${fd}`) === path;
  } catch {
    return false;
  }
}).length;

describe("plaintext on this thread", () => {
  it("gives the plaintext and, once ended, the sha256 of the payload bytes it came from", async () => {
    const p = plaintext(src, [id]);
    expect((await buffer(p.stream)).equals(plain)).toBe(true);
    expect(p.digest()).toBe(sha(ageBytes));
  });

  it("more plaintext than declared is OVERSIZE; no matching identity is NO_IDENTITY", async () => {
    const over = await buffer(plaintext({ ...src, tarSize: plain.length - 1 }, [id]).stream).then(() => null, (e: NodeJS.ErrnoException) => e);
    expect([over?.code, over?.message]).toEqual(["OVERSIZE", `decompressed payload exceeds its declared size of ${plain.length - 1} bytes`]);
    const none = await buffer(plaintext(src, [generateIdentity()]).stream).then(() => null, (e: NodeJS.ErrnoException) => e);
    expect(none?.code).toBe("NO_IDENTITY");
  });

  it("a payload range that is not the age file is an error, never plaintext", async () => {
    const e = await buffer(plaintext({ ...src, offset: 2049 }, [id]).stream).then(() => null, (x: Error) => x);
    expect(e).toBeInstanceOf(Error);
  });

  it("a reader that goes away ends the chain: the file is let go", async () => {
    // a payload larger than the stages buffer between them, so the file is still being read when the reader goes
    const big = createCipheriv("aes-128-ctr", Buffer.alloc(16, 6), Buffer.alloc(16)).update(Buffer.alloc(6 << 20));
    writeFileSync(join(tmp, "big"), big);
    writeFileSync(join(tmp, "big.age"), execFileSync("sh", ["-c", `zstd -q -1 -c big | age -r ${id.recipient}`], { cwd: tmp, maxBuffer: 64 << 20 }));
    const path = join(tmp, "big.age");
    const p = plaintext({ path, offset: 0, size: statSync(path).size, tarSize: big.length }, [id]);
    await new Promise<void>((r) => p.stream.once("readable", () => r()));
    expect(openOn(path)).toBe(1);
    p.stream.destroy();
    for (let i = 0; i < 100 && openOn(path); i++) await new Promise((r) => setTimeout(r, 10));
    expect(openOn(path)).toBe(0);
  });
});

describe("serveWorker, the worker's side", () => {
  const serve = (source: PayloadSource, ids: AgeIdentity[], credits: number) => {
    const { port1, port2 } = new MessageChannel();
    serveWorker(port1);
    const got: unknown[] = [];
    port2.on("message", (m) => got.push(m));
    port2.postMessage({ source, identities: ids.map((i) => ({ secret: new Uint8Array(i.secret), recipient: i.recipient })), credits });
    return { got, port2, close: () => (port1.close(), port2.close()) };
  };
  const until = async (f: () => boolean) => {
    for (let i = 0; i < 500 && !f(); i++) await new Promise((r) => setTimeout(r, 10));
  };

  it("sends about 1 MiB batches only while it has credit, then the payload's digest", async () => {
    const s = serve(src, [id], 2);
    try {
      await until(() => s.got.length >= 2);
      await new Promise((r) => setTimeout(r, 150));
      // no more credit: it waits
      expect(s.got.length).toBe(2);
      let taken = 2;
      s.port2.on("message", (m: { data?: ArrayBuffer }) => {
        if (m.data) {
          taken++;
          s.port2.postMessage(1);
        }
      });
      s.port2.postMessage(2);
      await until(() => s.got.some((m) => (m as { end?: boolean }).end));
      const sent = s.got.filter((m): m is { data: ArrayBuffer; length: number } => (m as { data?: unknown }).data instanceof ArrayBuffer);
      const batches = sent.map((m) => Buffer.from(m.data, 0, m.length));
      expect(taken).toBe(batches.length);
      expect(Buffer.concat(batches).equals(plain)).toBe(true);
      expect(batches.slice(0, -1).every((b) => b.length === 1 << 20)).toBe(true);
      // each batch is the decompressor's own 1 MiB output buffer, moved as it is (no copy into a batch of its own)
      expect(sent.every((m) => m.data.byteLength === 1 << 20)).toBe(true);
      expect(s.got.at(-1)).toEqual({ end: true, digest: sha(ageBytes) });
    } finally {
      s.close();
    }
  });

  it("an error is sent with its code (no identity), not thrown", async () => {
    const s = serve(src, [generateIdentity()], 2);
    try {
      await until(() => s.got.length > 0);
      expect(s.got).toHaveLength(1);
      expect((s.got[0] as { error: { code: string } }).error.code).toBe("NO_IDENTITY");
    } finally {
      s.close();
    }
  });
});

describe("a format-7 payload: checked chunk by chunk as it is decrypted (CheckedPlaintext)", () => {
  /** the payload's chunk list for chunks of `size` bytes, as the signed manifest has it */
  const listed = (bytes: Buffer, size: number) => {
    const digests: string[] = [];
    for (let at = 0; at < bytes.length; at += size) digests.push(sha(bytes.subarray(at, at + size)));
    return { size, digests, signed: sha(bytes) };
  };
  /** every piece kept until the end, then joined: a piece that was a view of the reader's buffer would have changed */
  const all = async (r: CheckedPlaintext) => {
    const pieces: Buffer[] = [];
    for await (const p of r) pieces.push(p as Buffer);
    return { pieces, bytes: Buffer.concat(pieces) };
  };
  const age = (chunkSize: number, patch: (b: Buffer) => void = () => undefined) => {
    const bytes = Buffer.from(ageBytes);
    patch(bytes);
    const path = join(tmp, `checked-${chunkSize}`);
    writeFileSync(path, Buffer.concat([Buffer.alloc(512, 3), bytes]));
    return new CheckedPlaintext({ path, offset: 512, size: bytes.length, tarSize: plain.length, chunks: listed(ageBytes, chunkSize) }, [id]);
  };

  // 4 MiB (the payload in one chunk); one sealed chunk exactly; cuts inside sealed chunks; chunks shorter than a sealed
  // one; chunks shorter than age's header (~200 bytes: the header is put together across chunks)
  it.each([4 << 20, 65552, 100_000, 65551, 40_000, 777, 97])("chunks of %i bytes: age's plaintext whole, each piece its own, the signed digest at the end", async (size) => {
    expect(ageBytes.length).toBeGreaterThan(3 * 65552);
    const r = age(size);
    const { pieces, bytes } = await all(r);
    expect(bytes.equals(zstBytes)).toBe(true);
    // one sealed chunk per piece: 64 KiB, the last shorter
    expect(pieces.slice(0, -1).every((p) => p.length === 64 << 10)).toBe(true);
    expect(r.digest()).toBe(sha(ageBytes));
  });

  it("a byte changed in a chunk is the chunk's digest mismatch (age never sees it), at any size", async () => {
    for (const [size, at] of [[100_000, 250_000], [97, 5], [4 << 20, ageBytes.length - 1]] as const) {
      const e = await all(age(size, (b) => (b[at]! ^= 1))).then(() => null, (x: NodeJS.ErrnoException) => x);
      const n = Math.ceil(ageBytes.length / size);
      expect([e?.code, e?.message]).toEqual(["PAYLOAD_DIGEST", `payload.age: digest mismatch in chunk ${Math.floor(at / size) + 1} of ${n} (not the payload the manifest signed)`]);
    }
  });

  it("a payload cut short is named as such; a wrong identity is NO_IDENTITY, after the first chunk's check", async () => {
    const path = join(tmp, "checked-short");
    writeFileSync(path, ageBytes.subarray(0, 150_000));
    const short = new CheckedPlaintext({ path, offset: 0, size: ageBytes.length, tarSize: plain.length, chunks: listed(ageBytes, 100_000) }, [id]);
    const e = await all(short).then(() => null, (x: NodeJS.ErrnoException) => x);
    expect([e?.code, e?.message]).toEqual(["PAYLOAD_DIGEST", `payload.age: ends inside chunk 2 of ${Math.ceil(ageBytes.length / 100_000)} (truncated)`]);
    const whole = join(tmp, "checked-whole");
    writeFileSync(whole, ageBytes);
    const none = await all(new CheckedPlaintext({ path: whole, offset: 0, size: ageBytes.length, tarSize: plain.length, chunks: listed(ageBytes, 100_000) }, [generateIdentity()])).then(() => null, (x: NodeJS.ErrnoException) => x);
    expect(none?.code).toBe("NO_IDENTITY");
  });

  it("through plaintext(): the decompressed bytes and the signed digest", async () => {
    const path = join(tmp, "checked-plain");
    writeFileSync(path, ageBytes);
    const s7: PayloadSource = { path, offset: 0, size: ageBytes.length, tarSize: plain.length, chunks: listed(ageBytes, 100_000) };
    const p = plaintext(s7, [id]);
    expect((await buffer(p.stream)).equals(plain)).toBe(true);
    expect(p.digest()).toBe(sha(ageBytes));
  });
});
