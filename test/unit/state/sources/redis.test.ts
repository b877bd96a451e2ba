/**
 * The Redis source's server-free part (state/sources/redis.ts): check() reads
 * a dump file and holds it to the manifest's key counts per type, 13 naming
 * the type when they differ or the file is not a dump. Capture and restore
 * against a real redis-server: test/e2e/source-redis.test.ts.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { redisDriver } from "../../../../src/state/sources/redis.js";
import { AgentbakError } from "../../../../src/errors.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-redis-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const line = (k: string, t: string, ttl = -1) => JSON.stringify({ k: Buffer.from(k).toString("base64"), t, ttl, v: Buffer.from("dump").toString("base64") });
function dump(lines: string[], head = JSON.stringify({ format: "agentbak-redis", version: 1, keys: lines.length, redis_version: "7.0.15" })): string {
  const f = join(dir, `d${Math.random().toString(16).slice(2)}.jsonl`);
  writeFileSync(f, [head, ...lines].join("\n") + "\n");
  return f;
}
const file = (f: string, records: Record<string, number>) => [{ path: "sources/cache/keys.jsonl", file: f, records }];
async function failure(p: Promise<unknown>): Promise<AgentbakError> {
  const e = await p.then(() => null, (x: unknown) => x);
  expect(e).toBeInstanceOf(AgentbakError);
  return e as AgentbakError;
}

describe("redis check", () => {
  it("counts keys per type against the manifest", async () => {
    const f = dump([line("a", "string"), line("b", "hash", 5000), line("c", "string"), line("\u0000bin", "list")]);
    expect(await redisDriver.check("cache", file(f, { string: 2, hash: 1, list: 1 }))).toBe("4 keys with type, TTL and value");
    expect(await redisDriver.check("cache", file(dump([]), {}))).toBe("0 keys with type, TTL and value");
  });

  it("a count that differs, a type the manifest lacks, or one the dump lacks is 13 naming it", async () => {
    const f = dump([line("a", "string"), line("b", "set")]);
    for (const [records, msg] of [
      [{ string: 2, set: 1 }, "source cache: the dump holds 1 string keys, manifest says 2"],
      [{ string: 1 }, "source cache: the dump holds 1 set keys, manifest says 0"],
      [{ string: 1, set: 1, zset: 3 }, "source cache: the dump holds 0 zset keys, manifest says 3"],
    ] as const) {
      const e = await failure(redisDriver.check("cache", file(f, records)));
      expect([e.code, e.message]).toEqual([13, msg]);
    }
  });

  it("a file that is not an agentbak redis dump, or a damaged line, is 13", async () => {
    const e = await failure(redisDriver.check("cache", file(dump([], '{"format":"something-else"}'), {})));
    expect([e.code, e.message]).toEqual([13, "source cache: not an agentbak redis dump"]);
    const bad = await failure(redisDriver.check("cache", file(dump([line("a", "string"), "{ torn"]), { string: 1 })));
    expect(bad.code).toBe(13);
    expect(bad.message.startsWith("source cache: ")).toBe(true);
  });
});
