/**
 * The payload's plaintext (src/bundle/plaintext.ts) from a payload made by the
 * stock tools (`zstd | age -r`), at an offset inside a file: on this thread,
 * the bytes and the payload's digest, the declared size enforced, no matching
 * identity NO_IDENTITY, a reader that goes away letting the file go; the
 * worker's side (serveWorker) driven through a real MessageChannel: batches
 * of about 1 MiB, moved, sent only while the reader has given credit, then
 * the digest, or the error with its code. (Starting the worker itself needs
 * dist/: test/e2e/restore.test.ts runs both with AGENTBAK_PAYLOAD_WORKER.)
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
import { plaintext, serveWorker, type PayloadSource } from "../../../src/bundle/plaintext.js";

let tmp: string;
let id: AgeIdentity;
let src: PayloadSource;
let ageBytes: Buffer;
const plain = Buffer.concat([createCipheriv("aes-128-ctr", Buffer.alloc(16, 5), Buffer.alloc(16)).update(Buffer.alloc(2 << 20)), Buffer.from("state ".repeat(200_000))]);
const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), "agentbak-plaintext-"));
  id = generateIdentity();
  writeFileSync(join(tmp, "plain"), plain);
  ageBytes = execFileSync("sh", ["-c", `zstd -q -c plain | age -r ${id.recipient}`], { cwd: tmp, maxBuffer: 64 << 20 });
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
