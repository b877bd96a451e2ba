// A Redis state source through the real binary against real servers: keys matching the patterns captured with
// type, value and remaining TTL at one point; restore rebases TTLs by the time since the snapshot and skips (and
// lists) keys that would have expired; a non-empty keyspace is refused unless told; the drill restores into a
// throwaway server.
//
// Elapsed time is made testable without waiting: the restore runs under libfaketime (`faketime -f +20s`), so the
// real binary's wall clock is 20 s ahead of the backup's; monotonic clocks are left alone (timers behave).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import { Redis } from "ioredis";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { BIN, json, makeAgent, type RunResult, type TestAgent } from "../helpers.js";
import { drillSpec, patchConfig, server, type Server } from "../sourcekit.js";
import { manifestOf } from "../craft.js";

let a: TestAgent;
let live: Server;
let backup: any;
const servers: Server[] = [];

async function redis<T>(url: string, fn: (r: Redis) => Promise<T>): Promise<T> {
  const r = new Redis(url);
  try {
    return await fn(r);
  } finally {
    r.disconnect();
  }
}
async function fresh(): Promise<Server> {
  const s = await server("redis", a.tmp);
  servers.push(s);
  return s;
}
/** The real binary with its wall clock `shift` ahead (libfaketime). */
async function runShifted(shift: string, args: string[]): Promise<RunResult> {
  const r = await execa("faketime", ["-f", shift, "node", BIN, ...args], {
    cwd: a.dir,
    env: { ...a.env, NO_COLOR: "1", FAKETIME_DONT_FAKE_MONOTONIC: "1" },
    reject: false,
    stdin: "ignore",
  });
  return { code: r.exitCode ?? -1, stdout: String(r.stdout), stderr: String(r.stderr) };
}

/** when the 60 s lease was set (between these two instants) */
const leaseSet = [0, 0];

beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
  live = await fresh();
  await redis(live.target, async (r) => {
    await r.set("wf:run:1", "persistent state");
    leaseSet[0] = Date.now();
    await r.set("wf:lease:1", "worker-7", "PX", 60_000);
    leaseSet[1] = Date.now();
    await r.set("wf:lease:short", "worker-8", "PX", 40_000);
    await r.hset("wf:task:1", { status: "running", step: "3" });
    await r.rpush("wf:queue", "a", "b", "c");
    await r.zadd("wf:timers", 1, "t1", 2, "t2");
    await r.set("cache:unrelated", "not workflow state");
  });
  patchConfig(a, (c) => (c.sources = [{ name: "workflows", kind: "redis", url: "env:AGENT_REDIS_URL", patterns: ["wf:*"] }]));
  const r = await a.run(["backup", "--json"], { AGENT_REDIS_URL: live.target });
  expect(r.code, r.stderr).toBe(0);
  backup = json(r);
  backup.path = await a.file(backup.path);
}, 120_000);

afterAll(async () => {
  await Promise.allSettled(servers.map((s) => s.stop()));
  a?.cleanup();
});

describe("redis source", () => {
  it("records the keys matching the patterns, by type, with the snapshot time and the reference", async () => {
    const m = manifestOf(backup.path);
    const c = m.components.find((x: any) => x.kind === "redis");
    expect(c).toMatchObject({ name: "workflows", path: "sources/workflows/keys.jsonl", records: { string: 3, hash: 1, list: 1, zset: 1 } });
    expect(m.capture_instant.sources[0]).toMatchObject({ name: "workflows", kind: "redis", ref: "env:AGENT_REDIS_URL", server_version: expect.stringMatching(/^7\./) });
    expect(JSON.stringify(m)).not.toContain(live.target);
    const v = await a.run(["verify", backup.snapshot_id, "--identity", a.identity, "--json"]);
    expect(v.code, v.stderr).toBe(0);
    expect(json(v).checks.find((x: any) => x.name === "source:workflows").detail).toContain("6 keys with type, TTL and value");
  });

  it("rebases TTLs by the time since the snapshot: 60 s left, restored 20 s later, has at most 40 s; expired keys are skipped and listed", async () => {
    // expectations follow from when the lease was set and the real time each restore took,
    // so a slow machine changes the numbers, never the verdict
    const window = async (shiftMs: number, args: string[], target: string) => {
      const t0 = Date.now();
      const r = shiftMs ? await runShifted(`+${shiftMs / 1000}s`, args) : await a.run(args);
      const t1 = Date.now();
      const ttl = await redis(target, (x) => x.pttl("wf:lease:1"));
      return { r, ttl, min: 60_000 - shiftMs - (t1 - leaseSet[0]!) - 1500, max: 60_000 - shiftMs - (t0 - leaseSet[1]!) + 500 };
    };
    // control: no clock shift, the lease keeps what is left of its minute
    const now = await fresh();
    const c = await window(0, ["restore", backup.snapshot_id, "--target", join(a.tmp, "restored-now"), "--yes", "--json", "--source", `workflows=${now.target}`], now.target);
    expect([0, 3], c.r.stderr).toContain(c.r.code); // 3: the reference agent's credentials are not set here
    expect(c.ttl).toBeGreaterThanOrEqual(c.min);
    expect(c.ttl).toBeLessThanOrEqual(c.max);
    // 20 s later (the restore's clock runs 20 s ahead): at most 40 s left
    const target = await fresh();
    const late = await window(20_000, ["restore", backup.snapshot_id, "--target", join(a.tmp, "restored-late"), "--yes", "--json", "--source", `workflows=${target.target}`], target.target);
    expect([0, 3], late.r.stderr).toContain(late.r.code);
    expect(late.ttl).toBeLessThanOrEqual(40_000);
    expect(late.ttl).toBeGreaterThanOrEqual(late.min);
    expect(late.ttl).toBeLessThanOrEqual(late.max);
    await redis(target.target, async (x) => {
      expect(await x.pttl("wf:run:1")).toBe(-1); // no TTL stays none
      expect(await x.get("wf:run:1")).toBe("persistent state");
      expect(await x.hgetall("wf:task:1")).toEqual({ status: "running", step: "3" });
      expect(await x.lrange("wf:queue", 0, -1)).toEqual(["a", "b", "c"]);
      expect(await x.zrange("wf:timers", 0, -1, "WITHSCORES")).toEqual(["t1", "1", "t2", "2"]);
      expect(await x.exists("cache:unrelated")).toBe(0); // not matched by the patterns
    });
    // 100 s later the 40 s lease is gone: skipped, listed in the receipt and a warning, never written
    const gone = await fresh();
    const r = await runShifted("+100s", ["restore", backup.snapshot_id, "--target", join(a.tmp, "restored-later"), "--yes", "--json", "--source", `workflows=${gone.target}`]);
    expect(r.code, r.stderr).toBe(3);
    const res = json(r);
    expect(res.sources[0].skipped).toEqual(expect.arrayContaining(["wf:lease:short"]));
    expect(res.warnings.join("\n")).toMatch(/source workflows: \d key\(s\) expired since the snapshot and were not restored: .*wf:lease:short/);
    expect(await redis(gone.target, (x) => x.exists("wf:lease:short"))).toBe(0);
    expect(await redis(gone.target, (x) => x.get("wf:run:1"))).toBe("persistent state");
  });

  it("refuses a keyspace holding keys (the live one, through its reference) and writes nothing", async () => {
    const target = join(a.tmp, "refused");
    // (the live short lease may run out meanwhile: compare the keys that have no TTL)
    const stable = (x: Redis) => x.keys("*").then(async (ks) => (await Promise.all(ks.map(async (k) => ((await x.pttl(k)) === -1 ? k : null)))).filter(Boolean).sort());
    const before = await redis(live.target, stable);
    const r = await a.run(["restore", backup.snapshot_id, "--target", target, "--yes"], { AGENT_REDIS_URL: live.target });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/source workflows: its target is not empty: the keyspace holds \d+ keys; restore only into an empty target \(--allow-nonempty-source/);
    expect(existsSync(target)).toBe(false);
    expect(await redis(live.target, stable)).toEqual(before);
    expect(before.length).toBe(5);
  });

  it("with --allow-nonempty-source restores beside other keys, but never over a key that exists", async () => {
    const other = await fresh();
    await redis(other.target, (x) => x.set("cache:other", "1"));
    const ok = await a.run(["restore", backup.snapshot_id, "--target", join(a.tmp, "beside"), "--yes", "--json", "--source", `workflows=${other.target}`, "--allow-nonempty-source", "workflows"]);
    expect([0, 3], ok.stderr).toContain(ok.code);
    expect(await redis(other.target, (x) => x.exists("cache:other", "wf:run:1", "wf:task:1"))).toBe(3);
    const clash = await fresh();
    await redis(clash.target, (x) => x.set("wf:task:1", "newer"));
    const r = await a.run(["restore", backup.snapshot_id, "--target", join(a.tmp, "clash"), "--yes", "--source", `workflows=${clash.target}`, "--allow-nonempty-source", "workflows"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("key wf:task:1 already exists");
    expect(await redis(clash.target, async (x) => [await x.dbsize(), await x.get("wf:task:1")])).toEqual([1, "newer"]);
  });

  it("drills into a throwaway redis server", async () => {
    const spec = drillSpec(a, "redis-drill", { no_orphans: "SELECT 1 WHERE 0" });
    const r = await a.run(["drill", backup.snapshot_id, "--spec", spec, "--identity", a.identity, "--no-report", "--json"]);
    expect([0, 3], r.stderr).toContain(r.code);
    const d = json(r);
    expect(d.ok).toBe(true);
    expect(d.checks.find((c: any) => c.name === "source-restore:workflows")).toMatchObject({ ok: true, detail: expect.stringMatching(/^[56] keys restored with TTLs reduced by \d+\.\d s/) });
    expect(a.leftovers()).toEqual([]);
  });
});
