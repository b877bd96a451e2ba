/**
 * The chunk store keeps its memory bounded: a file much larger than its
 * buffers is stored with RSS growing by far less than the file (moved here
 * from test/unit/chunks/store.test.ts: 96 MiB of I/O is not a unit test's
 * budget; npm run test:unit stays fast).
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { createCipheriv, createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalStore } from "../../src/storage/local.js";
import { generateIdentity } from "../../src/crypto/age.js";
import { ChunkStore } from "../../src/chunks/store.js";
import { LARGE_STATE } from "../../src/chunks/fastcdc.js";

const MiB = 2 ** 20;
const noise = (n: number, seed: string) => createCipheriv("aes-128-ctr", createHash("sha256").update(seed).digest().subarray(0, 16), Buffer.alloc(16)).update(Buffer.alloc(n));
let tmp: string;
beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), "chunk-store-mem-"));
  mkdirSync(join(tmp, "home"));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

it("a 96 MiB file is stored through a bounded buffer (RSS grows by far less than the file)", async () => {
  const repo = new LocalStore(join(tmp, "repo"), { create: true });
  const cs = new ChunkStore(repo, "tenants/acme/agents/billing-agent/chunks");
  const id = generateIdentity();
  const f = join(tmp, "big.bin");
  writeFileSync(f, noise(96 * MiB, "big"));
  global.gc?.();
  const before = process.memoryUsage().rss;
  let peak = before;
  const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 5);
  const w = await cs.writer({ home: join(tmp, "home"), location: repo.root, scope: { tenant: "acme", agent: "billing-agent" }, recipients: [id.recipient], params: LARGE_STATE });
  const r = await w.putFile(f, { statCache: false });
  clearInterval(timer);
  expect(r.size).toBe(96 * MiB);
  expect((peak - before) / MiB).toBeLessThan(80);
});
