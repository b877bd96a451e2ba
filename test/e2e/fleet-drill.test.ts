// `agentbak drill --fleet --sample K` through the real binary: eight small agents backed up into one repository
// (real SQLite files, real git workspaces, real backups), one of them planted unrecoverable (bytes of its bundle's
// payload flipped). A seed that samples it fails (15) and lowers the bound to the exact Clopper–Pearson figure for
// those counts; a seed that misses it passes (0); the seed is reported and replays the same picks; the signed
// fleet entry, JUnit and GET /metrics carry the figure. Against a folder, and (project s3) a bucket on the Ceph gateway.
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
// @ts-expect-error plain JS fixture
import { generateAgent } from "../../fixtures/agent/generate.js";
import { clopperPearsonLower, sampleFleet, wilsonLower } from "../../src/fleet/stats.js";
import { api, makeToken, otherTenant, startServer, type Server } from "../agentapi-helpers.js";
import { json, makeAgent, STORE, type TestAgent } from "../helpers.js";

let a: TestAgent;
const AGENTS = Array.from({ length: 8 }, (_, i) => `agent-${i + 1}`);
const PLANTED = "agent-3";
const K = 3;
const fleet = AGENTS.map((x) => `acme/${x}`);
// which seeds draw the planted agent is a pure function of the seed and the fleet (fleet/stats.ts): found, not hard-coded
const window = { from: new Date(0), to: new Date() };
const draws = (seed: string) => sampleFleet(fleet, { k: K, seed, ...window }).picks.map((p) => p.agent);
const seeds = Array.from({ length: 50 }, (_, i) => `seed-${i}`);
const HIT = seeds.find((s) => draws(s).includes(`acme/${PLANTED}`))!;
const MISS = seeds.find((s) => !draws(s).includes(`acme/${PLANTED}`))!;
const drill = (seed: string, extra: string[] = []) => a.run(["drill", "--fleet", "--sample", String(K), "--seed", seed, "--repo", a.repo, "--identity", a.identity, "--json", ...extra]);

beforeAll(async () => {
  a = await makeAgent({ sizeMb: 0.2, agentId: AGENTS[0] });
  const dirs = [a.dir];
  for (const id of AGENTS.slice(1)) {
    const dir = join(a.tmp, id);
    mkdirSync(dir);
    generateAgent(dir, { recipient: a.recipient, sizeMb: 0.1, seed: AGENTS.indexOf(id) + 1, agentId: id, repository: a.repo });
    dirs.push(dir);
  }
  for (let i = 0; i < dirs.length; i += 4)
    await Promise.all(
      dirs.slice(i, i + 4).map(async (dir) => {
        const b = await a.run(["backup", "-c", join(dir, "agentbak.json"), "--json"]);
        expect(b.code, b.stderr).toBe(0);
      }),
    );
  // the planted agent: bytes in the middle of its bundle flipped (the header still verifies, so it is listed; restoring it fails)
  const store = await a.store();
  const snaps = `tenants/acme/agents/${PLANTED}/snapshots/`;
  const bundle = (await store.list(snaps)).find((k: string) => k.endsWith(".agentbak"))!;
  const bytes: Buffer = await store.get(bundle);
  const at = Math.floor(bytes.length * 0.7);
  for (let i = at; i < at + 64; i++) bytes[i] = bytes[i]! ^ 0xff;
  await store.put(bundle, bytes);
}, 120_000);
afterAll(() => a?.cleanup());

describe(`agentbak drill --fleet --sample K (${STORE === "s3" ? "a bucket on the Ceph gateway" : "a folder"})`, () => {
  let hit: any;
  let miss: any;
  it("a seed that samples the planted agent fails (15), names it, and reports the exact bound for 2 of 3", async () => {
    const r = await drill(HIT, ["--junit", join(a.tmp, "fleet.xml")]);
    expect(r.code, r.stderr).toBe(15);
    hit = json(r);
    expect(hit).toMatchObject({ seed: HIT, population: 8, drilled: K, passed: K - 1, confidence: 0.95, lower_bound: clopperPearsonLower(K, K - 1), lower_bound_wilson: wilsonLower(K, K - 1) });
    expect(hit.drills.map((d: any) => `${d.tenant}/${d.agent}`)).toEqual(draws(HIT));
    const bad = hit.drills.find((d: any) => d.agent === PLANTED);
    expect(bad).toMatchObject({ result: "fail", exit_status: 13 });
    expect(hit.drills.filter((d: any) => d.result === "pass")).toHaveLength(K - 1);
    // the JUnit file: one failure, the figure and the seed as properties
    const xml = readFileSync(join(a.tmp, "fleet.xml"), "utf8");
    expect(xml).toMatch(new RegExp(`tests="${K}" failures="1"`));
    expect(xml).toContain(`<property name="seed" value="${HIT}"/>`);
    expect(xml).toContain(`<property name="lower_bound" value="${clopperPearsonLower(K, K - 1)}"/>`);
    expect(xml).toMatch(new RegExp(`acme/${PLANTED} at [^"]+"[^>]*>\\s*<failure`));
  }, 120_000);

  it("a seed that misses it passes (0) with the higher bound for 3 of 3; the same seed and window end replay the same picks and points", async () => {
    const r = await drill(MISS);
    expect(r.code, r.stderr).toBe(0);
    miss = json(r);
    expect(miss).toMatchObject({ seed: MISS, drilled: K, passed: K, lower_bound: clopperPearsonLower(K, K), lower_bound_wilson: wilsonLower(K, K) });
    expect(miss.lower_bound).toBeCloseTo(0.05 ** (1 / K), 12);
    expect(miss.lower_bound).toBeGreaterThan(hit.lower_bound);
    expect(miss.drills.map((d: any) => `${d.tenant}/${d.agent}`)).toEqual(draws(MISS));
    const again = json(await drill(MISS, ["--until", miss.window.to]));
    expect(again.window).toEqual(miss.window);
    expect(again.drills.map((d: any) => [d.agent, d.at, d.snapshot_id])).toEqual(miss.drills.map((d: any) => [d.agent, d.at, d.snapshot_id]));
  }, 120_000);

  it("without --seed a fresh seed is drawn and reported; bad flags are one-line errors (2)", async () => {
    const r = await a.run(["drill", "--fleet", "--sample", "1", "--repo", a.repo, "--identity", a.identity, "--json"]);
    expect([0, 15]).toContain(r.code);
    expect(json(r).seed).toMatch(/^[0-9a-f]{16}$/);
    for (const [args, msg] of [
      [["drill", "--fleet", "--repo", a.repo], /--sample K/],
      [["drill", "--fleet", "--sample", "0", "--repo", a.repo], /--sample: not a positive whole number: 0/],
      [["drill", "--fleet", "--sample", "x", "--repo", a.repo], /--sample: not a positive whole number/],
      [["drill", "latest", "--fleet", "--sample", "2", "--repo", a.repo], /drop "latest"/],
      [["drill", "latest", "--seed", "1", "--repo", a.repo], /--seed goes with --fleet/],
      [["drill", "--fleet", "--sample", "2", "--until", "yesterday", "--repo", a.repo], /--until: not a time up to now/],
    ] as [string[], RegExp][]) {
      const b = await a.run(args);
      expect(b.code, b.stderr).toBe(2);
      expect(b.stderr).toMatch(msg);
    }
  }, 60_000);

  it("appends signed fleet entries that verify, and GET /metrics shows the last figure", async () => {
    const report = await a.file(`${a.repo}/fleet/drills/report.jsonl`);
    const text = readFileSync(report, "utf8").trim().split("\n");
    const last = JSON.parse(text.at(-1)!);
    expect(last).toMatchObject({ kind: "fleet", seed: expect.any(String), drilled: expect.any(Number) });
    expect(JSON.parse(text[0]!)).toMatchObject({ kind: "fleet", seed: HIT, result: "fail", lower_bound: hit.lower_bound });
    expect(json(await a.run(["report", "verify", report, "--json"])).entries).toBe(text.length);
    // the fresh-seed run came last: drill MISS again so the figure /metrics shows is known
    expect((await drill(MISS)).code).toBe(0);
    const tok = (await makeToken(a, "acme", AGENTS[0]!, "read")).token;
    const st = await a.run(["status", "--all", "--repo", a.repo]);
    expect(st.stdout).toMatch(new RegExp(`fleet {7}${K} of ${K} passed, recoverable ≥ ${clopperPearsonLower(K, K).toFixed(3)} \\(seed ${MISS},`));
    const srv: Server = await startServer(a, ["-c", a.config, "-c", otherTenant(a, "other").config]);
    try {
      const m = await api(srv.url, tok, "GET", "/metrics");
      expect(m.status).toBe(200);
      expect(m.body).toContain(`agentbak_fleet_recoverable_ratio_lower_bound{repository="${a.repo}"} ${clopperPearsonLower(K, K)}`);
      expect(m.body).toContain(`agentbak_fleet_drilled{repository="${a.repo}"} ${K}`);
      // a token of another tenant's agent served here does not see a figure over acme's agents
      const other = await api(srv.url, (await makeToken(a, "other", "billing-agent", "read")).token, "GET", "/metrics");
      expect(other.status).toBe(200);
      expect(String(other.body)).toContain('agentbak_status{tenant="other",agent="billing-agent"}');
      expect(String(other.body)).not.toContain("agentbak_fleet_");
    } finally {
      await srv.stop();
    }
  }, 120_000);
});
