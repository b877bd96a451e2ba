// The drill's recovery scenarios through the real binary: reconciliation
// against the sink seeded both ways, sink faults during reconciliation, split
// brain, the report's open operations, owners, RPO and RTO, objectives that
// fail a drill, and the faulty workers only these scenarios catch.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, ROOT, writeSpec, type TestAgent } from "../helpers.js";

const SPEC = join(ROOT, "drills", "recovery.json");
const CRASH_SPEC = join(ROOT, "drills", "reference-agent.json");
let a: TestAgent;

const spec = (name: string, base: string, patch: (s: any) => void) => writeSpec(a.tmp, name, base, patch);
const patchConfig = (patch: (c: any) => void, name: string) => {
  const c = JSON.parse(readFileSync(a.config, "utf8"));
  patch(c);
  const p = join(a.dir, `${name}.json`);
  writeFileSync(p, JSON.stringify(c, null, 2));
  return p;
};
const drill = (args: string[], env: Record<string, string> = {}) => a.run(["drill", "latest", "--identity", a.identity, "--json", ...args], env);
const failedAt = (d: any) => [...new Set(d.checks.filter((c: any) => !c.ok && c.severity === "error").map((c: any) => `${c.scenario}: ${c.name}`))].sort();

beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
  // three open operations: send_invoice (retry-safe), charge_card (escalate), send_reminder (observe)
  const db = new Database(join(a.dir, "state/agent.sqlite"));
  for (const [n, kind] of [[2, "charge_card"], [3, "send_reminder"]] as const) {
    db.prepare("INSERT INTO tasks (task_id, kind, payload, status, worker_id, lease_until, created_at) VALUES (?, ?, '{}', 'running', 'worker-a', 1, '2026-11-30T00:00:00.000Z')").run(`task-open-${n}`, kind);
    db.prepare("INSERT INTO deliveries (delivery_id, task_id, idempotency_key, status) VALUES (?, ?, ?, 'attempted')").run(`dlv-task-open-${n}`, `task-open-${n}`, `idem-task-open-${n}`);
  }
  db.close();
  const c = JSON.parse(readFileSync(a.config, "utf8"));
  c.reconcile.timeoutSeconds = 0.5;
  writeFileSync(a.config, JSON.stringify(c, null, 2));
  const r = await a.run(["backup"]);
  expect(r.code, r.stderr).toBe(0);
});
afterAll(() => a.cleanup());

describe("recovery scenarios with the reference worker", () => {
  it("passes reconciliation (both seeds), every sink fault and split brain; the report answers what the agent might repeat", async () => {
    const report = join(a.tmp, "recovery.jsonl");
    const r = await drill(["--spec", SPEC, "--report", report], { OPENAI_API_KEY: "x" });
    const d = json(r);
    expect(failedAt(d)).toEqual([]);
    expect(r.code, r.stderr).toBe(3); // the mail credential's file is not on the drill host
    expect(d.scenarios.map((s: any) => [s.scenario, s.ok])).toEqual([
      ["reconcile_a", true],
      ["reconcile_b", true],
      ["reconcile_fault_5xx", true],
      ["reconcile_fault_timeout", true],
      ["reconcile_fault_lost_answer", true],
      ["split_brain", true],
    ]);
    const ops = Object.fromEntries(d.open_operations.map((o: any) => [o.idempotency_key, o]));
    const seen = (k: string) => ops[k].outcomes.map((x: any) => [x.scenario, x.seeded, x.resolution, x.new_effects]);
    // seeded alternately: each operation once already delivered, once never arrived
    expect(seen("idem-task-open-1")).toEqual([
      ["reconcile_a", "delivered", "completed", 0],
      ["reconcile_b", "never_arrived", "retry", 1],
      ["reconcile_fault_5xx", "delivered", "unknown", 0],
      ["reconcile_fault_timeout", "delivered", "unknown", 0],
      ["reconcile_fault_lost_answer", "delivered", "unknown", 0],
    ]);
    expect(seen("idem-task-open-2")).toEqual([
      ["reconcile_a", "never_arrived", "escalated", 0],
      ["reconcile_b", "delivered", "completed", 0],
      ["reconcile_fault_5xx", "delivered", "escalated", 0],
      ["reconcile_fault_timeout", "delivered", "escalated", 0],
      ["reconcile_fault_lost_answer", "delivered", "escalated", 0],
    ]);
    expect(seen("idem-task-open-3").slice(0, 2)).toEqual([
      ["reconcile_a", "delivered", "completed", 0],
      ["reconcile_b", "never_arrived", "escalated", 0],
    ]);
    expect(ops["idem-task-open-3"].strategy).toBe("observe");
    expect(d.checks.find((c: any) => c.scenario === "reconcile_fault_timeout" && c.name === "reconcile idem-task-open-1").detail).toMatch(/no answer within 0\.[1-5]s \(after 2 attempts\)/); // the last attempt is cut to reconcile's time left (timeout × attempts in all)
    expect(d.checks.find((c: any) => c.scenario === "reconcile_fault_lost_answer" && c.name === "reconcile idem-task-open-1").detail).toMatch(/request failed/);
    expect(d.checks.filter((c: any) => c.scenario === "split_brain").map((c: any) => [c.name, c.ok])).toEqual(
      expect.arrayContaining([["stale write rejected", true], ["no stale write accepted", true], ["exactly one effect", true], ["restored generation finishes", true]]),
    );
    // escalations are reported with their owners, by kind; the missing credential with its own
    expect(d.unresolved_owners).toEqual(
      expect.arrayContaining([
        { difference: expect.stringMatching(/^reconcile_a: open operation idem-task-open-2 \(charge_card, escalate\) escalated to a person/), owner: "payments-oncall" },
        { difference: expect.stringMatching(/^reconcile_b: open operation idem-task-open-3 \(send_reminder, observe\) escalated to a person/), owner: "billing-oncall" },
        { difference: "credential mail (file:secrets/smtp-password) is missing here", owner: "platform-team" },
      ]),
    );
    expect(d.unresolved_owners.length).toBe(d.unresolved.length);
    expect(d.rpo_seconds).toBeGreaterThan(0);
    expect(d.rto_seconds).toBeGreaterThan(d.recovery_seconds);
    const entry = JSON.parse(readFileSync(report, "utf8").trim());
    expect(entry).toMatchObject({ result: "pass", rpo_seconds: d.rpo_seconds, rto_seconds: d.rto_seconds });
    expect(entry.open_operations).toEqual(d.open_operations);
    expect(entry.unresolved_owners).toEqual(d.unresolved_owners);
    expect((await a.run(["report", "verify", report])).code).toBe(0);
  });

  it("a spec that asks for reconciliation needs a config that says how (exit 2)", async () => {
    const cfg = patchConfig((c) => delete c.reconcile, "no-reconcile");
    const r = await drill(["--spec", SPEC, "--no-report", "-c", cfg]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/asks for reconciliation, but no config with a reconcile section was given/);
  });

  it("a drill that runs the worker without reconciling says it can not answer what the agent might repeat; a checks-only drill records it", async () => {
    // the worker, but neither crash points nor reconciliation
    const ref = JSON.parse(readFileSync(join(ROOT, "drills", "reference-agent.json"), "utf8"));
    const spec = join(a.tmp, "worker-no-reconcile.json");
    writeFileSync(spec, JSON.stringify({ ...ref, invariants: [join(ROOT, "drills/invariants/reference/*.sql")], worker: { ...ref.worker, command: ["node", join(ROOT, "fixtures/agent/worker.js")] }, crashPoints: [], sinkKill: false, upgrade: undefined }));
    const w = await drill(["--spec", spec, "--no-report"], { OPENAI_API_KEY: "x" });
    expect(w.code, w.stderr).toBe(3);
    expect(json(w).checks.find((c: any) => c.name === "open operations")).toMatchObject({ ok: false, severity: "warning" });
    const checksOnly = await drill(["--spec", join(ROOT, "drills", "checks-only.json"), "--no-report"], { OPENAI_API_KEY: "x" });
    const co = json(checksOnly).checks.find((c: any) => c.name === "open operations");
    expect(co).toMatchObject({ ok: false, severity: "info" });
    const r = w;
    const c = json(r).checks.find((c: any) => c.name === "open operations");
    expect(c.detail).toMatch(/3 open operation\(s\) in the snapshot, not reconciled in this drill/);
    expect(json(r).open_operations.map((o: any) => [o.idempotency_key, o.outcomes])).toEqual([
      ["idem-task-open-1", []],
      ["idem-task-open-2", []],
      ["idem-task-open-3", []],
    ]);
  });
});

describe("faulty workers only the recovery scenarios catch", () => {
  it("resend_unreceipted (resends without asking the provider) passes every crash point, and fails reconciliation and sink faults", async () => {
    const crash = await drill(["--spec", spec("resend-crash", CRASH_SPEC, (s) => (s.worker.env = { WORKER_FAULT: "resend_unreceipted" })), "--no-report"], { OPENAI_API_KEY: "x" });
    expect(failedAt(json(crash))).toEqual([]);
    expect([0, 3]).toContain(crash.code);
    const r = await drill(["--spec", spec("resend", SPEC, (s) => (s.worker.env = { WORKER_FAULT: "resend_unreceipted" })), "--no-report"]);
    expect(r.code).toBe(15);
    const failed = failedAt(json(r));
    // the escalated payment is held for a person, and resent anyway
    expect(failed).toContain("reconcile_a: effects idem-task-open-2");
    expect(failed).toContain("reconcile_b: effects idem-task-open-3");
    // after a lookup failed, operations the provider did execute are sent a second time
    for (const f of ["5xx", "timeout", "lost_answer"]) expect(failed).toContain(`reconcile_fault_${f}: effects idem-task-open-1`);
    expect(failed.some((f) => f.startsWith("split_brain"))).toBe(false);
  });

  it("ignore_generation (never sends its fencing token) passes every crash point, and fails split brain and the runs after reconciliation", async () => {
    const crash = await drill(["--spec", spec("nogen-crash", CRASH_SPEC, (s) => (s.worker.env = { WORKER_FAULT: "ignore_generation" })), "--no-report"], { OPENAI_API_KEY: "x" });
    expect(failedAt(json(crash))).toEqual([]);
    const r = await drill(["--spec", spec("nogen", SPEC, (s) => (s.worker.env = { WORKER_FAULT: "ignore_generation" })), "--no-report"]);
    expect(r.code).toBe(15);
    const failed = failedAt(json(r));
    expect(failed).toContain("split_brain: exactly one effect");
    expect(failed).toContain("split_brain: restored generation finishes");
    // reconciliation's probes told the provider the restored generation: a write without a token is refused
    expect(failed).toContain("reconcile_b: worker runs after reconciliation");
    expect(json(r).checks.find((c: any) => c.scenario === "reconcile_b" && c.name === "worker runs after reconciliation").detail).toMatch(/answered 409/);
  });
});

describe("objectives and runtime", () => {
  const checksOnly = join(ROOT, "drills", "checks-only.json");
  it("a missed RPO or RTO fails the drill (15); snapshots warns (3) when the newest verified snapshot is older than the RPO", async () => {
    const tight = patchConfig((c) => (c.objectives = { rpoMinutes: 0.001, rtoSeconds: 0.001 }), "tight");
    const r = await drill(["--spec", checksOnly, "--no-report", "-c", tight], { OPENAI_API_KEY: "x" });
    expect(r.code).toBe(15);
    const d = json(r);
    expect(failedAt(d)).toEqual(["objectives: rpo", "objectives: rto"]);
    expect(d.checks.find((c: any) => c.name === "rpo").detail).toMatch(/snapshot was [\d.]+ minutes old at drill time; objective 0.001 minutes/);
    const s = await a.run(["snapshots", "-c", tight]);
    expect(s.code).toBe(3);
    expect(s.stderr).toMatch(/newest verified snapshot of acme\/billing-agent is [\d.]+ minutes old, older than the recovery point objective \(0.001 minutes\)/);
    const loose = patchConfig((c) => (c.objectives = { rpoMinutes: 60, rtoSeconds: 300 }), "loose");
    const ok = await drill(["--spec", checksOnly, "--no-report", "-c", loose], { OPENAI_API_KEY: "x" });
    expect(failedAt(json(ok))).toEqual([]);
    expect(json(ok).objectives).toEqual({ rpoMinutes: 60, rtoSeconds: 300 });
    expect((await a.run(["snapshots", "-c", loose])).code).toBe(0);
  });

  it("a snapshot made under another runtime is refused (14) unless approved with --allow-runtime-change; the report lists the difference", async () => {
    const changed = patchConfig((c) => (c.runtime.models = { llm: "gpt-test-2027-01", embedding: "text-embedding-3-large" }), "changed-models");
    const r = await drill(["--spec", checksOnly, "--no-report", "-c", changed]);
    expect(r.code).toBe(14);
    expect(r.stderr).toContain("model llm gpt-test-2026-01 -> gpt-test-2027-01, model embedding (not recorded) -> text-embedding-3-large");
    const ok = await drill(["--spec", checksOnly, "--no-report", "-c", changed, "--allow-runtime-change"], { OPENAI_API_KEY: "x" });
    expect([0, 3]).toContain(ok.code);
    expect(json(ok).runtime_differences.map((d: any) => d.key)).toEqual(["model:llm", "model:embedding"]);
  });
});
