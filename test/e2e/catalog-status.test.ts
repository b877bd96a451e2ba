// `status --all` over a small fleet through the real binary, against a folder and (project s3) the Ceph gateway:
// each agent's drill, restore request, restore and generation facts come from its signed status record beside its
// catalog record (named by the same tenant LIST, cached by ETag), so a status --all again reads the tenant's LISTs
// and only the records that changed (counted store requests), and says what a status of each agent from its own
// objects says: a passing drill, a pending restore request and its denial. An agent without a status record (a
// build before them) is read from its objects, never shown as fine; a catalog record older than the agent's
// newest commit is detected on a host that has not checked it. The tenant's signed summary lets a new host list
// with no per-agent request, and one edited is not used.
import { createHash } from "node:crypto";
import { cpSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
// @ts-expect-error plain JS fixture
import { generateAgent } from "../../fixtures/agent/generate.js";
import { json, makeAgent, ROOT, run, type TestAgent } from "../helpers.js";
import { loadSigningKey } from "../../src/crypto/keys.js";
import { signRecord } from "../../src/crypto/signed.js";
import { NS } from "../../src/crypto/sshsig.js";
import { mcpStdio, tool } from "../agentapi-helpers.js";

let a: TestAgent;
let agent: Client;
const AGENTS = ["agent-2", "agent-3", "billing-agent"];
const cfg = (id: string) => (id === "billing-agent" ? a.config : join(a.tmp, id, "agentbak.json"));
const statusKey = (id: string) => `tenants/acme/catalog/${id}.status`;
const catalogKey = (id: string) => `tenants/acme/catalog/${id}.json`;
const SUMMARY = "tenants/acme/catalog/_summary";
let counter = 0;

/** A command over the repository alone (no config) from `home`, with the store's requests counted. */
async function counted(args: string[], home = a.home): Promise<{ out: any; counts: Record<string, number>; code: number }> {
  const file = join(a.tmp, `counts-${counter++}.jsonl`);
  const r = await run([...args, "--repo", a.repo, "--json"], { cwd: a.tmp, env: { ...a.env, AGENTBAK_HOME: home, AGENTBAK_STORE_COUNTS: file } });
  expect([0, 3, 15], r.stderr).toContain(r.code);
  const counts: Record<string, number> = {};
  // the repository's requests only (on S3 the host's spool folder is a store of its own)
  for (const line of readFileSync(file, "utf8").split("\n").filter(Boolean)) {
    const t = JSON.parse(line) as { url: string; counts: Record<string, number> };
    if (t.url.startsWith(a.repo)) for (const [op, n] of Object.entries(t.counts)) counts[op] = (counts[op] ?? 0) + n;
  }
  return { out: json(r), counts, code: r.code };
}

/** What a status of one agent says, read from its own objects (no record is read for one agent). */
async function alone(id: string): Promise<any> {
  const r = await run(["status", "--repo", a.repo, "--tenant", "acme", "--agent", id, "--json"], { cwd: a.tmp, env: a.env });
  expect([0, 3, 15], r.stderr).toContain(r.code);
  return json(r).agents[0];
}
/** The parts of an agent's status that its facts decide (ages left out: they move with the clock). */
const facts = (s: any) => ({
  checks: s.checks.map((c: any) => (c.name === "snapshot" || c.name === "drill" ? { name: c.name, state: c.state } : c)),
  last_snapshot: s.last_snapshot && { ...s.last_snapshot, age_seconds: undefined },
  last_drill: s.last_drill && { ...s.last_drill, age_seconds: undefined },
  drills: s.drills,
  pending_requests: s.pending_requests,
  unresolved_operations: s.unresolved_operations,
});

const backup = async (id: string) => {
  const dir = id === "billing-agent" ? a.dir : join(a.tmp, id);
  const db = new Database(join(dir, "state", "agent.sqlite"));
  db.exec("CREATE TABLE IF NOT EXISTS touched (x); INSERT INTO touched VALUES (randomblob(64))");
  db.close();
  const b = await a.run(["backup", "-c", cfg(id), "--json"]);
  expect(b.code, b.stderr).toBe(0);
  return json(b).snapshot_id as string;
};

let requestId: string;
beforeAll(async () => {
  a = await makeAgent({ sizeMb: 0.2 });
  for (const id of AGENTS.filter((x) => x !== "billing-agent")) {
    mkdirSync(join(a.tmp, id));
    generateAgent(join(a.tmp, id), { recipient: a.recipient, sizeMb: 0.1, seed: AGENTS.indexOf(id) + 1, agentId: id, repository: a.repo });
    // the fixture's credential references resolve, so its drill has no warning to give
    mkdirSync(join(a.tmp, id, "secrets"), { recursive: true });
    writeFileSync(join(a.tmp, id, "secrets", "smtp-password"), "x\n", { mode: 0o600 });
  }
  for (const id of AGENTS) await backup(id);
  const d = await a.run(["drill", "latest", "-c", cfg("agent-2"), "--spec", join(ROOT, "drills", "checks-only.json"), "--identity", a.identity, "--json"], { OPENAI_API_KEY: "x" });
  expect(d.code, d.stderr).toBe(0);
  agent = await mcpStdio(a, ["--tier", "restore-request"]);
  const snap = json(await a.run(["snapshots", "--json"])).at(-1).snapshot_id;
  const r = await tool(agent, "request_restore", { snapshot: snap, reason: "memory table corrupted" });
  expect(r.isError, r.text).toBe(false);
  requestId = r.data.request_id;
}, 180_000);
afterAll(async () => {
  await agent?.close();
  a?.cleanup();
}, 60_000);

describe("status --all from the status records", () => {
  it("says what each agent's own objects say (a passing drill, a pending request), and again reads only the tenant's LISTs", async () => {
    const store = await a.store();
    for (const id of AGENTS) expect(JSON.parse(String(await store.get(statusKey(id)))).kind).toBe("agent-status");
    const { out } = await counted(["status", "--all"]);
    expect(out.agents.map((s: any) => s.agent_id)).toEqual(AGENTS);
    for (const s of out.agents) expect(facts(s)).toEqual(facts(await alone(s.agent_id)));
    const [two, , billing] = out.agents;
    expect(two.last_drill).toMatchObject({ result: "pass" });
    expect(billing.pending_requests.map((p: any) => [p.request_id, p.reason])).toEqual([[requestId, "memory table corrupted"]]);
    // the fields docs/monitoring.md names, not the whole request record (its decision, outcome, signature)
    expect(Object.keys(billing.pending_requests[0]).sort()).toEqual(["reason", "request_id", "requested_at", "requested_by", "snapshot_id"]);
    expect(billing.checks.find((c: any) => c.name === "requests")).toMatchObject({ state: "warn" });
    // again: the marker and the fleet report, and the LISTs (v1 folders, tenants, the tenant's agents, its catalog folder)
    const warm = await counted(["status", "--all"]);
    expect(warm.counts).toEqual({ get: 2, list: 4 });
    expect(warm.out.agents.map(facts)).toEqual(out.agents.map(facts));
  }, 120_000);

  it("a denial rewrites the agent's status record: status --all reads that one record and shows no pending request", async () => {
    const before = await (await a.store()).get(statusKey("billing-agent"));
    const r = await a.run(["deny", requestId, "--reason", "not now", "--yes"]);
    expect(r.code, r.stderr).toBe(0);
    expect(String(await (await a.store()).get(statusKey("billing-agent")))).not.toEqual(String(before));
    const { out, counts } = await counted(["status", "--all"]);
    expect(counts).toEqual({ get: 3, list: 4 });
    const billing = out.agents.find((s: any) => s.agent_id === "billing-agent");
    expect(billing.pending_requests).toEqual([]);
    expect(facts(billing)).toEqual(facts(await alone("billing-agent")));
  }, 60_000);

  it("an agent without a status record, or with one edited, is read from its objects: its drill is still shown", async () => {
    const store = await a.store();
    const saved = await store.get(statusKey("agent-2"));
    await store.delete(statusKey("agent-2"));
    const rec = JSON.parse(String(await store.get(statusKey("agent-3"))));
    rec.drills = [{ at: new Date().toISOString(), result: "pass", snapshot_id: null, rto_seconds: 1, failed: [] }]; // forged: the signature no longer matches
    await store.put(statusKey("agent-3"), JSON.stringify(rec));
    const { out, counts } = await counted(["status", "--all"]);
    const [two, three] = out.agents;
    expect(two.last_drill).toMatchObject({ result: "pass" });
    expect(facts(two)).toEqual(facts(await alone("agent-2")));
    expect(three.drills).toEqual([]);
    expect(facts(three)).toEqual(facts(await alone("agent-3")));
    expect(counts.get).toBeGreaterThan(4); // their drill reports, audit logs and generations read
    await store.put(statusKey("agent-2"), saved!);
    await store.delete(statusKey("agent-3"));
  }, 60_000);

  it("a catalog record older than the agent's newest commit: a host that has not checked it lists the newest snapshot", async () => {
    const store = await a.store();
    const old = await store.get(catalogKey("agent-3"));
    const id = await backup("agent-3");
    await store.put(catalogKey("agent-3"), old!); // a genuine, signed record of before that backup
    const { out } = await counted(["status", "--all"]);
    expect(out.agents.find((s: any) => s.agent_id === "agent-3").last_snapshot.snapshot_id).toBe(id);
    const { out: listed } = await counted(["snapshots", "--all"]);
    expect(listed.filter((e: any) => e.agent_id === "agent-3").at(-1).snapshot_id).toBe(id);
    await backup("agent-3"); // its record current again
  }, 60_000);

  it("a new host lists from the tenant's signed summary (no per-agent request); a summary edited is not used", async () => {
    const store = await a.store();
    // --fresh checks every record against its agent's folder, and writes the summary of all this host checked
    const warm = await counted(["snapshots", "--all", "--fresh"]);
    expect(warm.counts.put).toBe(1);
    expect(await store.get(SUMMARY)).not.toBeNull();
    const fresh = join(a.tmp, "home-new");
    const host = () => {
      rmSync(fresh, { recursive: true, force: true });
      cpSync(a.home, fresh, { recursive: true });
      rmSync(join(fresh, "cache"), { recursive: true, force: true });
      return fresh;
    };
    const cold = await counted(["snapshots", "--all"], host());
    expect(cold.out).toEqual(warm.out);
    expect(cold.counts).toEqual({ get: 2, list: 4 }); // the marker and the summary
    const st = await counted(["status", "--all"], host());
    expect(st.counts).toEqual({ get: 3, list: 4 }); // and the fleet report
    // the summary is its signed head (naming the records' SHA-256) on one line, then the records
    const text = String(await store.get(SUMMARY));
    const nl = text.indexOf("\n");
    const head = JSON.parse(text.slice(0, nl));
    expect(head.records_sha256).toBe(createHash("sha256").update(text.slice(nl + 1)).digest("hex"));
    const records = JSON.parse(text.slice(nl + 1));
    for (const [, e] of records) if (e.record.snapshots) for (const s of e.record.snapshots) s.label = "forged";
    const forged = JSON.stringify(records);
    // the records edited under the signed head; then the head's digest made to match them (its signature no longer does)
    for (const h of [head, { ...head, records_sha256: createHash("sha256").update(forged).digest("hex") }]) {
      await store.put(SUMMARY, `${JSON.stringify(h)}\n${forged}`);
      const edited = await counted(["snapshots", "--all"], host());
      expect(edited.out).toEqual(warm.out);
      expect(edited.counts.get).toBe(2 + AGENTS.length); // the marker, the summary, each record read and checked
      expect(edited.counts.list).toBe(4 + AGENTS.length);
    }
  }, 90_000);

  it("a status record signed by a trusted key is still the repository's text: a check name is shown escaped, a drill result of another kind has the agent read from its objects", async () => {
    const store = await a.store();
    const key = loadSigningKey(join(a.home, "signing-key"));
    const resign = async (id: string, edit: (r: any) => void) => {
      const { signature: _s, ...body } = JSON.parse(String(await store.get(statusKey(id))));
      edit(body);
      await store.put(statusKey(id), JSON.stringify(signRecord({ ...body, at: new Date().toISOString() }, key, NS.receipt)));
    };
    await resign("agent-2", (r) => r.checks.push({ name: "gen\x1b[2Jeration", state: "warn", detail: "seen" }));
    await resign("billing-agent", (r) => (r.drills = [{ at: new Date().toISOString(), result: "\x1b[32mpass", snapshot_id: null, rto_seconds: 1, failed: [] }]));
    const { out } = await counted(["status", "--all"]);
    const billing = out.agents.find((s: any) => s.agent_id === "billing-agent");
    expect(billing.drills).toEqual([]);
    expect(facts(billing)).toEqual(facts(await alone("billing-agent")));
    expect(out.agents.find((s: any) => s.agent_id === "agent-2").checks).toContainEqual({ name: "gen\x1b[2Jeration", state: "warn", detail: "seen" });
    const human = await run(["status", "--all", "--repo", a.repo], { cwd: a.tmp, env: { ...a.env, NO_COLOR: "1" } });
    expect(human.stdout).toContain("! gen\\x1b[2Jeration: seen");
    expect(human.stdout).not.toContain("\x1b");
  }, 60_000);

  it("a listing writes the summary of a tenant whose records it read, never again that of a tenant whose records it had all checked", async () => {
    const store = await a.store();
    await counted(["snapshots", "--all"]); // every acme record checked on this host
    const acme = await store.get(SUMMARY);
    expect(acme).not.toBeNull();
    for (const id of ["zeta-1", "zeta-2"]) {
      const dir = join(a.tmp, id);
      mkdirSync(dir);
      generateAgent(dir, { recipient: a.recipient, sizeMb: 0.1, seed: 7, agentId: id, tenant: "zeta", repository: a.repo });
      const b = await run(["backup"], { cwd: dir, env: a.env });
      expect(b.code, b.stderr).toBe(0);
    }
    const { out, counts } = await counted(["snapshots", "--all"]);
    expect(out.filter((e: any) => e.tenant === "zeta").map((e: any) => e.agent_id)).toEqual(["zeta-1", "zeta-2"]);
    expect(counts.put).toBe(1); // zeta's summary (it read both its records); acme's, all taken as checked, is not written again
    const zeta = String(await store.get("tenants/zeta/catalog/_summary")); // its signed head on one line, then the records
    expect(JSON.parse(zeta.slice(zeta.indexOf("\n") + 1)).map(([k]: [string]) => k)).toEqual(["tenants/zeta/catalog/zeta-1.json", "tenants/zeta/catalog/zeta-2.json"]);
    expect(String(await store.get(SUMMARY))).toBe(String(acme));
  }, 90_000);
});
