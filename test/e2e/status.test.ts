// `agentbak status` through the real binary: a real agent, real backups and drills (their signed report in the
// repository), the clock moved with libfaketime; exit 0 healthy, 3 stale or drill overdue, 15 a failing last drill.
import { execa } from "execa";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BIN, json, makeAgent, ROOT, type RunResult, type TestAgent } from "../helpers.js";

let a: TestAgent;
beforeAll(async () => {
  a = await makeAgent();
  const cfg = JSON.parse(readFileSync(a.config, "utf8"));
  writeFileSync(a.config, JSON.stringify({ ...cfg, objectives: { rpoMinutes: 60, rtoSeconds: 600, drillEvery: "7d" } }, null, 2));
  // the fixture's credential references resolve here, so a drill has no warning to give
  mkdirSync(join(a.dir, "secrets"), { recursive: true });
  writeFileSync(join(a.dir, "secrets", "smtp-password"), "x\n", { mode: 0o600 });
});
afterAll(() => a.cleanup());

/** The binary with its wall clock `shift` ahead (libfaketime). */
async function shifted(shift: string, args: string[], cwd = a.dir): Promise<RunResult> {
  const r = await execa("faketime", ["-f", shift, "node", BIN, ...args], { cwd, env: { ...a.env, NO_COLOR: "1", FAKETIME_DONT_FAKE_MONOTONIC: "1" }, reject: false, stdin: "ignore" });
  return { code: r.exitCode ?? -1, stdout: String(r.stdout), stderr: String(r.stderr) };
}
const check = (agent: any, name: string) => agent.checks.find((c: any) => c.name === name);

describe("agentbak status", () => {
  let snapshot: string;
  it("warns (3) before any snapshot or drill: nothing is recoverable yet", async () => {
    const r = await a.run(["status", "--json"]);
    expect(r.code, r.stderr).toBe(3);
    const s = json(r).agents[0];
    expect(s.last_snapshot).toBeNull();
    expect(check(s, "snapshot")).toMatchObject({ state: "warn", detail: "no verified snapshot" });
    expect(check(s, "drill")).toMatchObject({ state: "warn", detail: "no drill recorded" });
  });

  it("is healthy (0) after a fresh backup and a passing drill, and says so in JSON and on one 80-column screen", async () => {
    const b = await a.run(["backup", "--json"]);
    expect(b.code, b.stderr).toBe(0);
    snapshot = json(b).snapshot_id;
    const d = await a.run(["drill", "latest", "--spec", join(ROOT, "drills", "checks-only.json"), "--identity", a.identity, "--json"], { OPENAI_API_KEY: "x" });
    expect(d.code, d.stderr + d.stdout.slice(0, 3000)).toBe(0);
    const r = await a.run(["status", "--json"]);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    const rep = json(r);
    expect(rep.exit_status).toBe(0);
    const s = rep.agents[0];
    expect(s).toMatchObject({ tenant: "acme", agent_id: "billing-agent", state: "ok", rpo_objective_seconds: 3600, drill_every_seconds: 604800, pending_requests: [], unresolved_operations: null, spool: null });
    expect(s.last_snapshot.snapshot_id).toBe(snapshot);
    expect(s.last_snapshot.age_seconds).toBeLessThan(120);
    expect(s.chain).toMatchObject({ head: snapshot, links: 1, verified: 1 });
    expect(s.last_drill).toMatchObject({ result: "pass", snapshot_id: snapshot, rto_objective_seconds: 600 });
    expect(s.last_drill.rto_seconds).toBeGreaterThan(0);
    expect(s.drills).toHaveLength(1);
    expect(s.bytes).toBe(json(b).size);
    expect(rep.repository.bytes).toBe(json(b).size);
    expect(s.checks.every((c: any) => c.state === "ok")).toBe(true);

    const h = await a.run(["status"]);
    expect(h.code).toBe(0);
    const lines = h.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^acme\/billing-agent +ok$/);
    expect(h.stdout).toContain(`snapshot    ${snapshot}`);
    expect(h.stdout).toMatch(/drill +pass .* ago, RTO [\d.]+ s \(objective 600 s\); every 7\.0 d/);
    expect(Math.max(...lines.map((l) => [...l].length))).toBeLessThanOrEqual(80);
    expect(lines.length).toBeLessThanOrEqual(24);
  });

  it("warns (3) when the newest snapshot is older than the RPO, and when the drill is overdue", async () => {
    const r = await shifted("+2h", ["status", "--json"]);
    expect(r.code, r.stderr).toBe(3);
    const s = json(r).agents[0];
    expect(check(s, "snapshot").state).toBe("warn");
    expect(check(s, "snapshot").detail).toMatch(/^stale: newest verified snapshot is 2\.0 h old, objective 60 min$/);
    expect(check(s, "drill").state).toBe("ok");
    const late = await shifted("+8d", ["status"]);
    expect(late.code).toBe(3);
    expect(late.stdout).toMatch(/! drill: overdue: last drill 8\.0 d ago, objective every 7\.0 d/);
    expect(late.stdout).toMatch(/! snapshot: stale/);
  });

  it("fails (15) once the last drill failed an invariant, naming the check; --all over the repository alone says the same", async () => {
    const inv = join(a.tmp, "failing-inv");
    mkdirSync(inv, { recursive: true });
    writeFileSync(join(inv, "always_fails.sql"), "-- check: a row is always found\n-- severity: error\n-- database: state\nSELECT 1 AS found;\n");
    const spec = join(a.tmp, "failing.json");
    writeFileSync(spec, JSON.stringify({ name: "failing", invariants: [join(inv, "*.sql")] }));
    const d = await a.run(["drill", "latest", "--spec", spec, "--identity", a.identity, "--json"], { OPENAI_API_KEY: "x" });
    expect(d.code, d.stderr).toBe(15);
    const r = await a.run(["status", "--json"]);
    expect(r.code).toBe(15);
    const s = json(r).agents[0];
    expect(s.state).toBe("fail");
    expect(s.drills.map((x: any) => x.result)).toEqual(["pass", "fail"]);
    expect(check(s, "drill").state).toBe("fail");
    expect(check(s, "drill").detail).toContain("invariant:always_fails");
    const h = await a.run(["status"]);
    expect(h.stdout).toMatch(/^acme\/billing-agent +FAIL$/m);
    expect(h.stdout).toMatch(/✗ drill: last drill failed: .*invariant:always_fails/);

    const all = await shifted("+0", ["status", "--all", "--repo", a.repo, "--json"], a.tmp);
    expect(all.code, all.stderr).toBe(15);
    expect(json(all).agents.map((x: any) => `${x.tenant}/${x.agent_id}`)).toEqual(["acme/billing-agent"]);
    // without a config the objectives are not known: the failing drill is
    expect(json(all).agents[0].rpo_objective_seconds).toBeNull();
  });

  it("counts the open operations a restore left unresolved (signed audit log) until reconcile resolves them", async () => {
    const target = join(a.tmp, "restored");
    const r = await a.run(["restore", "latest", "--target", target, "--identity", a.identity, "--yes", "--json"], { OPENAI_API_KEY: "x" });
    expect([0, 3], r.stderr).toContain(r.code);
    let s = json(await a.run(["status", "--json"])).agents[0];
    expect(s.unresolved_operations).toEqual({ target, generation: json(r).generation, operations: 1, unresolved: 1 });
    expect(check(s, "operations")).toMatchObject({ state: "warn", detail: `1 of 1 open operation(s) unresolved in ${target}` });
    // the mail provider of the fixture, on a port of this test's: it has a receipt for every key
    const provider = createServer((_req, res) => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ receipt: "r-1" })));
    await new Promise<void>((ok) => provider.listen(0, "127.0.0.1", ok));
    try {
      const cfg = JSON.parse(readFileSync(a.config, "utf8"));
      cfg.reconcile.probe.http.url = `http://127.0.0.1:${(provider.address() as AddressInfo).port}/v1/deliveries/{idempotency_key}`;
      const variant = join(a.dir, "provider-here.json");
      writeFileSync(variant, JSON.stringify(cfg));
      const rc = await a.run(["reconcile", "--target", target, "-c", variant, "--json"]);
      expect(rc.code, rc.stderr).toBe(0);
    } finally {
      provider.close();
    }
    s = json(await a.run(["status", "--json"])).agents[0];
    expect(s.unresolved_operations.unresolved).toBe(0);
    expect(check(s, "operations")).toBeUndefined();
    // the restored folder's name stays on the 80-column line however long the path
    expect((await a.run(["status"])).stdout).toMatch(/^ {2}operations {2}0 of 1 unresolved after the restore into [/…].*\/restored$/m);
  });

  it("refuses a bad objective in the config with a usage error (2) naming the key", async () => {
    const cfg = JSON.parse(readFileSync(a.config, "utf8"));
    const bad = join(a.tmp, "bad.json");
    writeFileSync(bad, JSON.stringify({ ...cfg, repository: a.repo, objectives: { drillEvery: "weekly" } }));
    const r = await a.run(["status", "-c", bad]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/objectives\.drillEvery: a duration such as 12h, 7d or 2w/);
    expect(r.stdout).toBe("");
  });
});
