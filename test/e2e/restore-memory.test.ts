/**
 * Restore's memory stays bounded by its buffers, not by the payload: a
 * 192 MiB database of incompressible BLOBs (the payload as large as the
 * database, decrypted on the payload worker thread) restores under a fixed
 * peak RSS. The payload worker reads 256 KiB at a time (bundle/plaintext.ts
 * READ): with 1 MiB reads a read buffer lived on while any slice of it did,
 * and the worker's array buffers climbed by tens of MiB between collections
 * (the bench's 1194 MiB database: 160-175 MiB peak, 104-109 MiB with 256 KiB).
 * Format 7 (one read of the payload) holds each 4 MiB chunk until its digest
 * is checked, and hands it on in 64 KiB copies: 123-124 MiB measured here
 * (was 104), so the bound is 128 MiB; a payload held whole would be 300+.
 */
import { execa } from "execa";
import { readFileSync, writeFileSync } from "node:fs";
import { afterAll, beforeAll, expect, it } from "vitest";
import { join } from "node:path";
import { json, makeAgent, type TestAgent } from "../helpers.js";

let a: TestAgent;
beforeAll(async () => {
  a = await makeAgent();
  // 192 BLOBs of 1 MiB from SQLite's own randomblob: nothing for zstd to take out
  await execa("sqlite3", [join(a.dir, "state/blobs.sqlite"), "CREATE TABLE b(x); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 192) INSERT INTO b SELECT randomblob(1048576) FROM n;"]);
  const cfg = JSON.parse(readFileSync(a.config, "utf8"));
  writeFileSync(a.config, JSON.stringify({ ...cfg, databases: [...cfg.databases, { name: "blobs", path: "state/blobs.sqlite" }] }, null, 2));
  const b = await a.run(["backup", "--json"]);
  expect(b.code, b.stderr).toBe(0);
  expect(json(b).size).toBeGreaterThan(190 << 20);
}, 180_000);
afterAll(() => a?.cleanup());

it("a 192 MiB incompressible payload restores (through the payload worker) under 128 MiB of peak RSS (format 7: 123-124 MiB measured; 104 before it held a 4 MiB chunk)", async () => {
  const r = await a.run(["restore", "latest", "--target", join(a.tmp, "restored"), "--yes", "--allow-rollback", "--json"], {}, { rss: true });
  expect([0, 3], r.stderr).toContain(r.code);
  expect(r.maxRssKb).toBeGreaterThan(0);
  expect(r.maxRssKb! / 1024).toBeLessThan(128);
}, 180_000);
