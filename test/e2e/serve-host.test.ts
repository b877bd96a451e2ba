// `agentbak serve --host agentbak-host.json` through the real binary: five small agents (real SQLite files and git
// workspaces) in one repository, one process backing each up on a 10 s schedule with at most 2 captures at once
// and serving HTTP for all of them with per-agent tokens. Each gets a snapshot in the first round; in the next an
// agent that did not change gets no snapshot and no lease grant (the unchanged check comes before the lease), one
// that changed gets a new snapshot; SIGTERM stops it cleanly (exit 0). Then drill --fleet --host over the same file.
// Against a folder, and (project s3) a bucket on the Ceph gateway.
import { execa, type ResultPromise } from "execa";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
// @ts-expect-error plain JS fixture
import { generateAgent } from "../../fixtures/agent/generate.js";
import { api, makeToken } from "../agentapi-helpers.js";
import { BIN, json, makeAgent, STORE, type TestAgent } from "../helpers.js";

let a: TestAgent;
const AGENTS = Array.from({ length: 5 }, (_, i) => `agent-${i + 1}`);
const dirs = new Map<string, string>();
const hostFile = () => join(a.tmp, "agentbak-host.json");
// read through the store: the same checks for a folder and a bucket
const keysUnder = async (prefix: string): Promise<string[]> => (await a.store()).list(prefix);
const snapshots = async (id: string) => (await keysUnder(`tenants/acme/agents/${id}/snapshots/`)).filter((k) => k.endsWith(".commit")).map((k) => k.split("/").at(-1)!);
const grants = async (id: string) => (await keysUnder(`tenants/acme/agents/${id}/locks/agent/`)).length;
/** the agent's lease grants not marked released */
async function held(id: string): Promise<string[]> {
  const store = await a.store();
  const out: string[] = [];
  for (const k of await keysUnder(`tenants/acme/agents/${id}/locks/`)) if (k.endsWith(".lease") && JSON.parse(String(await store.get(k))).released !== true) out.push(k);
  return out;
}
async function until(what: string, ok: () => boolean | Promise<boolean>, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

beforeAll(async () => {
  a = await makeAgent({ sizeMb: 0.2, agentId: AGENTS[0] });
  dirs.set(AGENTS[0]!, a.dir);
  for (const id of AGENTS.slice(1)) {
    const dir = join(a.tmp, "agents", id);
    mkdirSync(dir, { recursive: true });
    generateAgent(dir, { recipient: a.recipient, sizeMb: 0.1, seed: AGENTS.indexOf(id) + 1, agentId: id, repository: a.repo });
    dirs.set(id, dir);
  }
  writeFileSync(
    hostFile(),
    JSON.stringify({
      hostId: "test-host-1",
      maxConcurrent: 2,
      defaults: { schedule: { every: "10s" }, tokens: { maxTier: "read" } },
      agents: [{ config: "agents/*/agentbak.json" }, { config: join(a.dir, "agentbak.json"), tokens: { maxTier: "checkpoint" } }],
    }),
  );
}, 60_000);
afterAll(() => a?.cleanup());

describe(`agentbak serve --host (${STORE === "s3" ? "a bucket on the Ceph gateway" : "a folder"})`, () => {
  let proc: ResultPromise;
  let err = "";
  it("backs up every agent in the first round and serves each with its own token and tier", async () => {
    proc = execa("node", [BIN, "serve", "--host", hostFile(), "--listen", "127.0.0.1:0"], { cwd: a.tmp, env: { ...a.env, NO_COLOR: "1" }, reject: false, stdin: "ignore" });
    proc.stderr!.on("data", (d: Buffer) => (err += d));
    await until("the server", () => /agent interface on http/.test(err), 30_000);
    const url = err.match(/agent interface on (http:\/\/127\.0\.0\.1:\d+)/)![1]!;
    await until("a backup of every agent", () => (err.match(/backup acme\/agent-\d: committed/g) ?? []).length === 5, 60_000);
    for (const id of AGENTS) expect(await snapshots(id), id).toHaveLength(1);
    // tokens per agent: agent-2's token reads agent-2 and nothing else; its host file tier (read) caps a checkpoint token
    const t2 = (await makeToken(a, "acme", "agent-2", "checkpoint")).token;
    const list = await api(url, t2, "GET", "/v1/snapshots");
    expect(list.status, JSON.stringify(list.body)).toBe(200);
    const ids = async (id: string) => (await snapshots(id)).map((f) => f.replace(/\.commit$/, ""));
    expect(list.body.snapshots.map((s: any) => s.snapshot_id)).toEqual(await ids("agent-2"));
    expect((await api(url, t2, "POST", "/v1/backups", { body: {} })).status).toBe(403);
    const t1 = (await makeToken(a, "acme", "agent-1", "checkpoint")).token;
    expect((await api(url, t1, "GET", "/v1/snapshots")).body.snapshots.map((s: any) => s.snapshot_id)).toEqual(await ids("agent-1"));
  }, 120_000);

  it("the next round: an unchanged agent gets no snapshot and no lease grant; a changed one gets a snapshot", async () => {
    const before = new Map(await Promise.all(AGENTS.map(async (id) => [id, await grants(id)] as const)));
    const db = new Database(join(dirs.get("agent-4")!, "state", "agent.sqlite"));
    db.exec("CREATE TABLE IF NOT EXISTS touched (x); INSERT INTO touched VALUES (1)");
    db.close();
    // one full round (10 s) and a margin: agent-4 is captured again
    await until("a second snapshot of agent-4", async () => (await snapshots("agent-4")).length === 2, 30_000);
    await new Promise((r) => setTimeout(r, 11_000));
    for (const id of AGENTS.filter((x) => x !== "agent-4")) {
      expect(await snapshots(id), id).toHaveLength(1);
      expect(await grants(id), id).toBe(before.get(id));
    }
    expect(await grants("agent-4")).toBeGreaterThan(before.get("agent-4")!);
  }, 90_000);

  it("SIGTERM stops it cleanly: exit 0, the in-flight work finished, no lease left held", async () => {
    proc.kill("SIGTERM");
    const r = await proc;
    expect(r.exitCode, err).toBe(0);
    expect(err).toMatch(/SIGTERM: no new requests or backups/);
    for (const id of AGENTS) expect(await held(id), id).toEqual([]);
  }, 60_000);

  it("a bad host file, or -c with --host, is refused with one line before anything starts (10, 2)", async () => {
    const missing = await a.run(["serve", "--host", join(a.tmp, "nope.json"), "--listen", "127.0.0.1:0"]);
    expect(missing.code, missing.stderr).toBe(10);
    expect(missing.stderr).toMatch(/host file .*nope\.json: not found/);
    writeFileSync(join(a.tmp, "bad-host.json"), JSON.stringify({ agents: [{ config: "agents/*/agentbak.json", schedule: { every: "1s" } }] }));
    const bad = await a.run(["serve", "--host", join(a.tmp, "bad-host.json"), "--listen", "127.0.0.1:0"]);
    expect(bad.code, bad.stderr).toBe(2);
    expect(bad.stderr).toMatch(/agents\.0\.schedule\.every: at least 10s/);
    const both = await a.run(["serve", "--host", hostFile(), "-c", a.config, "--listen", "127.0.0.1:0"]);
    expect(both.code, both.stderr).toBe(2);
    expect(both.stderr).toMatch(/-c FILE\.\.\. or --host FILE, not both/);
  }, 60_000);

  it("drill --fleet --host drills the host file's agents, each with its config", async () => {
    const r = await a.run(["drill", "--fleet", "--host", hostFile(), "--sample", "5", "--seed", "h", "--identity", a.identity, "--json"], { OPENAI_API_KEY: "x" });
    expect(r.code, r.stderr).toBe(0);
    const f = json(r);
    expect(f).toMatchObject({ population: 5, drilled: 5, passed: 5, seed: "h" });
    expect(f.drills.map((d: any) => d.agent).sort()).toEqual(AGENTS);
  }, 120_000);
});
