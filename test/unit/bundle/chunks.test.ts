/**
 * The payload's chunk root (src/bundle/chunks.ts) hashed on this thread
 * (fewer than 8 chunks: no worker; a worker's start costs more than it saves):
 * the sha256 of each chunk's sha256 over bytes [start, start + size) of the
 * file, and a file cut short is a verification error (13) naming the first
 * missing byte. Two threads (8 chunks and more, a worker from dist/) are
 * test/e2e/payload-chunks.test.ts's.
 */
import { afterAll, describe, expect, it } from "vitest";
import { createCipheriv, createHash } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileChunksSha256 } from "../../../src/bundle/chunks.js";
import { AgentbakError } from "../../../src/errors.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-chunks-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const noise = (n: number) => createCipheriv("aes-128-ctr", Buffer.alloc(16, 1), Buffer.alloc(16)).update(Buffer.alloc(n));
/** the root written out here: sha256 over each chunk's sha256 */
const root = (b: Buffer, size: number) => {
  const h = createHash("sha256");
  for (let off = 0; off < b.length; off += size) h.update(createHash("sha256").update(b.subarray(off, off + size)).digest());
  return h.digest("hex");
};

describe("fileChunksSha256 on this thread", () => {
  const payload = noise(7 * 4096 - 100);
  const file = join(tmp, "bundle");
  writeFileSync(file, Buffer.concat([Buffer.alloc(1536, 9), payload, Buffer.alloc(1024)]));

  it("is the root of the chunks of the range, not of the bytes around it", async () => {
    expect(await fileChunksSha256(file, 1536, payload.length, 4096)).toBe(root(payload, 4096));
    expect(await fileChunksSha256(file, 1536, payload.length, 8192)).toBe(root(payload, 8192));
    expect(await fileChunksSha256(file, 1536, payload.length, 4096)).not.toBe(root(payload, 8192));
  });

  it("an empty payload is the sha256 of no digests", async () => {
    expect(await fileChunksSha256(file, 0, 0, 4096)).toBe(createHash("sha256").digest("hex"));
  });

  it("a file that ends inside the range is 13 naming the first missing byte", async () => {
    const e = await fileChunksSha256(file, 1536, payload.length + 1024 + 10, 8192).then(() => null, (x: unknown) => x);
    expect(e).toBeInstanceOf(AgentbakError);
    expect((e as AgentbakError).code).toBe(13);
    expect((e as Error).message).toBe(`bundle truncated at byte ${1536 + payload.length + 1024}`);
  });
});
