// Leases (src/repository/lease.ts) on every store: a local folder always, and
// buckets on the Ceph RADOS Gateway when AGENTBAK_TEST_S3_ENDPOINT is set (an
// unversioned one, and a versioned one whose leases live in an unversioned
// bucket beside it). In-process against the stores, then through the real
// binary: three "hosts" (own AGENTBAK_HOME and AGENTBAK_HOST_ID) running
// forget --prune and compact of the same agents at once, and a holder stalled
// (SIGSTOP) past its lease while another host takes the agent over.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import { randomBytes } from "node:crypto";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BIN, json, makeAgent, makeBucket, pausedAtStep, run, storeAt, type RunResult, type TestAgent } from "../helpers.js";
import { LocalStore } from "../../dist/storage/local.js";
import { S3Store } from "../../dist/storage/s3.js";
import { acquireLease, probeConditionalWrites } from "../../dist/repository/lease.js";
import type { ObjectStore } from "../../dist/storage/store.js";

const endpoint = process.env.AGENTBAK_TEST_S3_ENDPOINT;
if (!endpoint) console.warn("lease tests against S3 skipped: AGENTBAK_TEST_S3_ENDPOINT is not set (.ci/run starts a Ceph RADOS Gateway and sets it)");
const s3env = { AGENTBAK_S3_ENDPOINT: endpoint, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true" };
const tmp = mkdtempSync(join(tmpdir(), "agentbak-lease-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

async function bucketStore(versioned: boolean): Promise<ObjectStore> {
  const b = `lease-${versioned ? "v" : "u"}-${randomBytes(4).toString("hex")}`;
  await makeBucket(b, versioned); // Object Lock: a versioned bucket
  Object.assign(process.env, s3env);
  return new S3Store(`s3://${b}/p`).init();
}

const stores: [string, () => Promise<ObjectStore>, boolean][] = [
  ["local folder", async () => new LocalStore(mkdtempSync(join(tmp, "store-"))), false],
  ["S3, unversioned bucket", () => bucketStore(false), !endpoint],
];

/** Runs `fn` with environment variables set, then puts them back. */
async function withEnv<T>(vars: Record<string, string>, fn: () => Promise<T>): Promise<T> {
  const old = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  Object.assign(process.env, vars);
  try {
    return await fn();
  } finally {
    for (const [k, v] of Object.entries(old)) if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
}

const grantKey = (prefix: string, token: number) => `${prefix}${String(token).padStart(16, "0")}.lease`;
const grant = (token: number, o: Record<string, unknown> = {}) =>
  JSON.stringify({ format: "agentbak-lease", token, host: "elsewhere", pid: 4242, nonce: "n", acquired_at: new Date().toISOString(), expires_at: new Date(Date.now() + 60_000).toISOString(), released: false, ...o });

describe.each(stores)("leases on a %s", (_name, make, skip) => {
  let s: ObjectStore;
  beforeAll(async () => {
    if (!skip) s = await make();
  });
  const prefix = () => `t/${randomBytes(3).toString("hex")}/locks/agent/`;

  it.skipIf(skip)("one holder at a time: a second exits 11 naming it, or waits; every grant gets the next token; release frees it", async () => {
    const p = prefix();
    const a = await acquireLease(s, p, { waitMs: 0, what: "agent lock of t/x" });
    expect(a.token).toBe(1);
    await expect(acquireLease(s, p, { waitMs: 0, what: "agent lock of t/x" })).rejects.toMatchObject({ code: 11, message: expect.stringMatching(/^repository locked \(agent lock of t\/x\) by pid \d+ on \S+ since .*; pass --wait to wait$/) });
    const waiting = acquireLease(s, p, { waitMs: 30_000, what: "agent lock of t/x" });
    await new Promise((r) => setTimeout(r, 300));
    await a.check();
    await a.release();
    const b = await waiting;
    expect(b.token).toBe(2);
    await b.release();
    const c = await acquireLease(s, p, { waitMs: 0, what: "x" });
    expect(c.token).toBe(3);
    // grants older than the one before are removed by the holder; the highest is never removed
    expect((await s.list(p)).map((k) => k.slice(p.length))).toEqual([grantKey("", 2), grantKey("", 3)]);
    await c.release();
  });

  it.skipIf(skip)("concurrent takers of one lease: exactly one holds each token", async () => {
    const p = prefix();
    const got = await Promise.allSettled(Array.from({ length: 8 }, () => acquireLease(s, p, { waitMs: 0, what: "x" })));
    const won = got.filter((g) => g.status === "fulfilled");
    expect(won).toHaveLength(1);
    for (const g of got) if (g.status === "rejected") expect(g.reason.code).toBe(11);
    await (won[0] as PromiseFulfilledResult<any>).value.release();
  });

  it.skipIf(skip)("a holder whose lease another process took (a higher token) fails its check with 11 before it deletes", async () => {
    const p = prefix();
    const a = await acquireLease(s, p, { waitMs: 0, what: "agent lock of t/x in r" });
    await a.check();
    expect(await s.put(grantKey(p, a.token + 1), grant(a.token + 1), { ifNoneMatch: true })).toBe(true);
    await expect(a.check()).rejects.toMatchObject({ code: 11, message: expect.stringMatching(/^lost the agent lock of t\/x in r: another process took it over \(token 2 was issued after 1\)/) });
    await a.release(); // writes nothing: the grant is not its own any more
    expect(JSON.parse(String(await s.get(grantKey(p, 2)))).nonce).toBe("n");
  });

  it.skipIf(skip)("an expired grant of another host, a released one, and one of a dead process of this host are taken over with the next token", async () => {
    const dead = (await execa("node", ["-e", "process.stdout.write(String(process.pid))"])).stdout;
    for (const [token, g] of [
      [7, grant(7, { expires_at: new Date(Date.now() - 1000).toISOString() })],
      [3, grant(3, { released: true })],
      [5, grant(5, { host: "host-a", pid: Number(dead) })],
    ] as const) {
      const p = prefix();
      await s.put(grantKey(p, token), g);
      const l = await withEnv({ AGENTBAK_HOST_ID: "host-a" }, () => acquireLease(s, p, { waitMs: 0, what: "x" }));
      expect(l.token).toBe(token + 1);
      await l.release();
    }
    // a live grant of another host is not
    const p = prefix();
    await s.put(grantKey(p, 1), grant(1));
    await expect(acquireLease(s, p, { waitMs: 0, what: "x" })).rejects.toMatchObject({ code: 11, message: expect.stringContaining("by pid 4242 on elsewhere") });
  });

  it.skipIf(skip)("a grant that ran out while its holder was stalled (no renewal) is extended with the next token when nobody took it", async () => {
    const p = prefix();
    const a = await withEnv({ AGENTBAK_LEASE_SECONDS: "2" }, () => acquireLease(s, p, { waitMs: 0, what: "x" }));
    const end = Date.now() + 2200;
    while (Date.now() < end); // the event loop blocked: no heartbeat runs
    await a.check();
    expect(a.token).toBe(2);
    await a.release();
    expect(JSON.parse(String(await s.get(grantKey(p, 2)))).released).toBe(true);
  });

  it.skipIf(skip)("a grant not written by agentbak is refused (11) naming it; the store refuses a second conditional create", async () => {
    const p = prefix();
    await s.put(grantKey(p, 1), "null");
    await expect(acquireLease(s, p, { waitMs: 0, what: "x" })).rejects.toMatchObject({ code: 11, message: expect.stringMatching(/repository lock \S+0000000000000001\.lease in .* is unreadable \(not written by agentbak\)/) });
    expect(await probeConditionalWrites(s)).toBe(true);
  });
});

describe.skipIf(!endpoint)("leases in a versioned bucket on Ceph RGW", () => {
  it("are refused (2) naming the remedy: its conditional writes are not honoured", async () => {
    const s = await bucketStore(true);
    expect(await probeConditionalWrites(s)).toBe(false);
    await expect(acquireLease(s, "t/locks/agent/", { waitMs: 0, what: "x" })).rejects.toMatchObject({
      code: 2,
      message: expect.stringMatching(/does not honour conditional writes .* agentbak init --leases s3:\/\/BUCKET\/PREFIX/),
    });
  });
});

// ---- through the real binary ----

const AGENTS = ["a1", "a2", "a3"];

interface Fleet {
  t: TestAgent;
  /** config file per agent id */
  cfg: Record<string, string>;
  /** the snapshot ids each agent has before the hosts start, oldest first */
  before: Record<string, string[]>;
  /** a host's environment: its own AGENTBAK_HOME (a copy of the same keys) and host id */
  host(n: number, extra?: Record<string, string>): Record<string, string>;
  bin(args: string[], env: Record<string, string>): Promise<RunResult>;
}

/** Three agents in one repository, each with snapshots full, incr, incr, full, incr (keep-last 2 can remove the first three). */
async function fleet(repo: string, leases?: string): Promise<Fleet> {
  const t = await makeAgent({ sizeMb: 0.3 });
  const base = JSON.parse(readFileSync(t.config, "utf8"));
  const cfg: Record<string, string> = {};
  for (const id of AGENTS) writeFileSync((cfg[id] = join(t.dir, `${id}.json`)), JSON.stringify({ ...base, agent: { id, tenant: "acme" }, repository: repo }));
  const env = { ...t.env, ...s3env } as Record<string, string>;
  const bin = (args: string[], e: Record<string, string>) => run(args, { cwd: t.dir, env: e, timeout: 180_000 });
  const init = await bin(["init", "-c", cfg.a1!, ...(leases ? ["--leases", leases] : [])], env);
  expect(init.code, init.stderr).toBe(0);
  const before: Record<string, string[]> = {};
  await Promise.all(
    AGENTS.map(async (id) => {
      before[id] = [];
      for (const mode of ["--no-incremental", "--incremental", "--incremental", "--no-incremental", "--incremental"]) {
        const b = await bin(["backup", "-c", cfg[id]!, mode, "--json"], env);
        expect(b.code, b.stderr).toBe(0);
        before[id]!.push(json(b).snapshot_id);
      }
    }),
  );
  const homes = [1, 2, 3].map((n) => {
    const h = join(t.tmp, `host${n}`);
    cpSync(t.home, h, { recursive: true });
    return h;
  });
  return { t, cfg, before, bin, host: (n, extra = {}) => ({ ...env, AGENTBAK_HOME: homes[n - 1]!, AGENTBAK_HOST_ID: `host${n}`, ...extra }) };
}

const backends: [string, () => Promise<{ repo: string; leases?: string }>, boolean][] = [
  ["a local folder", async () => ({ repo: join(mkdtempSync(join(tmp, "repo-")), "r") }), false],
  [
    "an unversioned bucket",
    async () => {
      const b = `fleet-u-${randomBytes(4).toString("hex")}`;
      await makeBucket(b);
      return { repo: `s3://${b}/repo` };
    },
    !endpoint,
  ],
  [
    "a versioned (Object Lock) bucket, leases in an unversioned one",
    async () => {
      const b = `fleet-v-${randomBytes(4).toString("hex")}`;
      const l = `fleet-l-${randomBytes(4).toString("hex")}`;
      await makeBucket(b, true);
      await makeBucket(l);
      return { repo: `s3://${b}/repo`, leases: `s3://${l}/leases` };
    },
    !endpoint,
  ],
];

describe.each(backends)("three hosts at once on %s", (_name, where, skip) => {
  let f: Fleet;
  beforeAll(async () => {
    if (skip) return;
    const w = await where();
    f = await fleet(w.repo, w.leases);
  });
  afterAll(() => f?.t.cleanup());

  it.skipIf(skip)("forget --prune (waiting and not) and compact of the same agents: no double delete, no broken chain, nothing lost, every loser exits 11", async () => {
    const jobs = AGENTS.flatMap((id) => [
      { id, host: 1, args: ["forget", "-c", f.cfg[id]!, "--keep-last", "2", "--prune", "--wait", "120s", "--json"] },
      { id, host: 2, args: ["forget", "-c", f.cfg[id]!, "--keep-last", "2", "--prune", "--json"] },
      { id, host: 3, args: ["compact", "latest", "-c", f.cfg[id]!, "--json"] },
    ]);
    const results = await Promise.all(jobs.map((j) => f.bin(j.args, f.host(j.host))));
    console.log(`exit codes (forget --wait, forget, compact) per agent: ${AGENTS.map((id, i) => `${id} ${results.slice(3 * i, 3 * i + 3).map((r) => r.code).join("/")}`).join(", ")}`);
    for (const id of AGENTS) {
      const mine = jobs.map((j, i) => ({ ...j, r: results[i]! })).filter((j) => j.id === id);
      for (const j of mine) {
        expect([0, 11], `${j.args.join(" ")}: ${j.r.stderr}`).toContain(j.r.code);
        if (j.r.code === 11) expect(j.r.stderr).toMatch(new RegExp(`repository locked \\(agent lock of acme/${id} in .*\\) by pid \\d+ on host\\d`));
      }
      // the forget that waited always ran
      expect(mine[0]!.r.code, mine[0]!.r.stderr).toBe(0);
      const removed = mine.filter((j) => j.args[0] === "forget" && j.r.code === 0).flatMap((j) => json(j.r).removed as string[]);
      expect(new Set(removed).size, `removed twice: ${removed}`).toBe(removed.length);
      const [f1, i1, i2, f2, i3] = f.before[id]!;
      expect(new Set(removed)).toEqual(new Set([f1, i1, i2]));
      const left = json(await f.bin(["snapshots", "-c", f.cfg[id]!, "--json"], f.host(1)));
      for (const e of left) expect(e.status, `${e.snapshot_id}: ${e.problem}`).toBe("ok");
      const ids = left.map((e: any) => e.snapshot_id);
      // nothing lost: every snapshot there before is still listed, or some forget reported removing it
      for (const b of f.before[id]!) expect(ids.includes(b) !== removed.includes(b), b).toBe(true);
      expect(ids).toEqual(expect.arrayContaining([f2, i3]));
      const compacted = mine[2]!.r.code === 0 ? json(mine[2]!.r).snapshot_id : null;
      if (compacted) expect(ids).toContain(compacted);
      const v = await f.bin(["verify", i3!, "-c", f.cfg[id]!, "--identity", join(f.t.home, "age-identity.txt")], f.host(2));
      expect(v.code, v.stderr).toBe(0);
    }
  });

  it.skipIf(skip)("a holder stalled past its lease (SIGSTOP) while another host backs the agent up: on SIGCONT it exits 11 and deletes nothing", async () => {
    const id = "a2";
    const listed = async () => json(await f.bin(["snapshots", "-c", f.cfg[id]!, "--json"], f.host(1))).map((e: any) => e.snapshot_id);
    // a snapshot the stalled forget plans to remove (keep-last 1 keeps the newest and its chain)
    const extra = json(await f.bin(["backup", "-c", f.cfg[id]!, "--no-incremental", "--json"], f.host(1))).snapshot_id;
    const start = await listed();
    const child = execa("node", [BIN, "forget", "-c", f.cfg[id]!, "--keep-last", "1", "--prune", "--json"], {
      cwd: f.t.dir,
      env: { NO_COLOR: "1", ...f.host(1, { AGENTBAK_LEASE_SECONDS: "3", AGENTBAK_PAUSE_STEP: "forget-planned" }) },
      reject: false,
    });
    expect(await pausedAtStep(child.pid!)).toBe(true);
    try {
      await new Promise((r) => setTimeout(r, 3500)); // past its lease
      const other = await f.bin(["backup", "-c", f.cfg[id]!, "--json"], f.host(2));
      expect(other.code, other.stderr).toBe(0);
    } finally {
      process.kill(child.pid!, "SIGCONT");
    }
    const r = await child;
    expect(r.exitCode, String(r.stderr)).toBe(11);
    expect(String(r.stderr)).toMatch(/lost the agent lock of acme\/a2 in .*: it ran out and another process took it over \(token \d+\); nothing more is changed under it/);
    const after = await listed();
    expect(after).toEqual(expect.arrayContaining(start));
    expect(after).toContain(extra);
    expect(after.length).toBe(start.length + 1);
  });
});

describe.skipIf(!endpoint)("an Object Lock bucket with its leases beside it (test/s3.test.ts's case, which this suite must not run)", () => {
  it("backups go in, and forget reports each deletion retention refused (3)", async () => {
    const t = await makeAgent({ sizeMb: 0.3 });
    try {
      const [locked, leases] = [`lock-${randomBytes(4).toString("hex")}`, `leases-${randomBytes(4).toString("hex")}`];
      await makeBucket(locked, true);
      await makeBucket(leases);
      const env = { ...t.env, ...s3env } as Record<string, string>;
      const c = join(t.dir, "locked.json");
      writeFileSync(c, JSON.stringify({ ...JSON.parse(readFileSync(t.config, "utf8")), repository: `s3://${locked}/x`, objectLock: { mode: "compliance", days: 1 } }));
      expect((await run(["init", "-c", c, "--leases", `s3://${leases}/l`], { cwd: t.dir, env })).code).toBe(0);
      const b1 = json(await run(["backup", "-c", c, "--json"], { cwd: t.dir, env }));
      const b2 = json(await run(["backup", "-c", c, "--json"], { cwd: t.dir, env }));
      const f = await run(["forget", "-c", c, "--keep-last", "1", "--prune", "--json"], { cwd: t.dir, env });
      expect(f.code, f.stderr).toBe(3);
      expect(json(f).not_removed).toEqual([{ snapshot_id: b1.snapshot_id, reason: "object lock retention refused the deletion" }]);
      expect(json(await run(["snapshots", "-c", c, "--json"], { cwd: t.dir, env })).map((e: any) => e.snapshot_id)).toEqual([b1.snapshot_id, b2.snapshot_id]);
      // init --leases again with the same store is a no-op (the marker, and its id, stay: a versioned bucket does not refuse
      // the conditional create, so init reads first); with another one it is refused
      const marker = async () => String(await (await storeAt(`s3://${locked}/x`)).get("agentbak-repository.json"));
      const before = await marker();
      expect(JSON.parse(before).leases).toBe(`s3://${leases}/l`);
      expect((await run(["init", "-c", c, "--leases", `s3://${leases}/l`], { cwd: t.dir, env })).code).toBe(0);
      expect(await marker()).toBe(before);
      const moved = await run(["init", "-c", c, "--leases", `s3://${leases}/elsewhere`], { cwd: t.dir, env });
      expect(moved.code).toBe(2);
      expect(moved.stderr).toMatch(/keeps its leases in s3:\/\/\S+\/l, not s3:\/\/\S+\/elsewhere/);
    } finally {
      t.cleanup();
    }
  });
});

describe.skipIf(!endpoint)("a versioned bucket on Ceph RGW without a lease store", () => {
  it("backup and forget exit 2 naming --leases, before writing anything; init --leases refuses a versioned bucket for leases", async () => {
    const t = await makeAgent({ sizeMb: 0.3 });
    try {
      const b = `fleet-n-${randomBytes(4).toString("hex")}`;
      await makeBucket(b, true);
      const env = { ...t.env, ...s3env } as Record<string, string>;
      const c = join(t.dir, "v.json");
      writeFileSync(c, JSON.stringify({ ...JSON.parse(readFileSync(t.config, "utf8")), repository: `s3://${b}/repo` }));
      expect((await run(["init", "-c", c], { cwd: t.dir, env })).code).toBe(0);
      for (const args of [["backup"], ["forget", "--keep-last", "1"]]) {
        const r = await run([...args, "-c", c], { cwd: t.dir, env });
        expect(r.code, r.stderr).toBe(2);
        expect(r.stderr).toMatch(/does not honour conditional writes .*agentbak init --leases s3:\/\/BUCKET\/PREFIX/);
      }
      expect(json(await run(["snapshots", "-c", c, "--json"], { cwd: t.dir, env }))).toEqual([]);
      const v2 = `fleet-n2-${randomBytes(4).toString("hex")}`;
      await makeBucket(v2, true);
      const bad = await run(["init", "-c", c, "--leases", `s3://${v2}/l`], { cwd: t.dir, env });
      expect(bad.code).toBe(2);
      expect(bad.stderr).toMatch(/--leases s3:\/\/\S+: this store does not refuse a second conditional create/);
    } finally {
      t.cleanup();
    }
  });
});

describe("SIGTERM while a backup holds its agent lease", () => {
  it("the process marks its grant released before it exits 130, and writes no commit marker after the signal", async () => {
    const t = await makeAgent({ sizeMb: 0.2 });
    try {
      const store = await t.store();
      const commits = async () => (await store.list("tenants/")).filter((k: string) => k.endsWith(".commit"));
      expect(json(await t.run(["backup", "--json"])).snapshot_id).toBeTruthy(); // a first snapshot: the second is an upload, then a commit
      const before = await commits();
      // stopped after the bundle's upload, before its commit marker: the signal is handled as the run resumes
      const child = execa("node", [BIN, "backup", "--json", "--no-incremental"], { cwd: t.dir, env: { ...t.env, NO_COLOR: "1", AGENTBAK_PAUSE_STEP: "uploaded" }, reject: false });
      expect(await pausedAtStep(child.pid!)).toBe(true);
      process.kill(child.pid!, "SIGTERM");
      process.kill(child.pid!, "SIGCONT");
      const r = await child;
      expect(r.exitCode, String(r.stderr)).toBe(130);
      expect(String(r.stderr)).toMatch(/^agentbak: interrupted$/m);
      const grants = await store.list("tenants/acme/agents/billing-agent/locks/agent/");
      expect(grants.length).toBe(2);
      for (const g of grants) expect(JSON.parse(String(await store.get(g))), g).toMatchObject({ format: "agentbak-lease", released: true });
      expect(await commits()).toEqual(before);
    } finally {
      t.cleanup();
    }
  });
});
