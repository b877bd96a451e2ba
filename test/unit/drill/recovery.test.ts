// The drill's recovery scenarios with the reference agent's real worker and the real sink: reconciliation seeded both ways resolves each
// open operation as its strategy says and the worker then causes exactly the expected effects; a lookup fault leaves them unresolved
// with no duplicate; a worker that re-sends held deliveries is caught; in a split brain the stale generation is rejected.
import { afterAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { openOperations, reconcile } from "../../../src/config/recovery.js";
import { CheckLog } from "../../../src/drill/checklog.js";
import { reconciliationScenarios, splitBrainScenario } from "../../../src/drill/recovery.js";
import { loadSpec } from "../../../src/drill/spec.js";
import { makeReadOnly, type Bench } from "../../../src/drill/worker.js";
import { settleOperations } from "../../../src/reconcile/operations.js";
// @ts-expect-error the reference agent is plain JavaScript
import { migrate } from "../../../fixtures/agent/schema.js";

const WORKER = resolve(import.meta.dirname, "..", "..", "..", "fixtures", "agent", "worker.js");
const tmp = mkdtempSync(join(tmpdir(), "agentbak-recovery-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const INJECT = {
  database: "state",
  sql: "INSERT INTO tasks (task_id, kind, payload, status, created_at) VALUES (:taskId, 'send_invoice', '{}', 'pending', '2000-01-01T00:00:00.000Z')",
  taskId: "drill-task-1",
  completedSql: "SELECT 1 FROM tasks WHERE task_id = :taskId AND status = 'completed'",
};
// the reference agent's config (fixtures/agent/generate.js): a resend of an invoice is safe, a card charge goes to a person
const OPEN_OPS = openOperations.parse({
  database: "state",
  sql: "SELECT d.delivery_id AS id, d.idempotency_key, t.kind FROM deliveries d JOIN tasks t ON t.task_id = d.task_id WHERE d.status = 'attempted' ORDER BY d.delivery_id",
  strategies: { send_invoice: "retry-safe", charge_card: "escalate" },
})!;
const PROTOCOL = reconcile.parse({
  probe: { http: { url: "http://127.0.0.1:9/v1/deliveries/{idempotency_key}" } },
  onCompleted: { database: "state", sql: "UPDATE deliveries SET status = 'delivered', provider_receipt = :receipt, delivered_at = :at WHERE delivery_id = :id AND (status IN ('attempted', 'held') OR provider_receipt = :receipt)" },
  onRetry: { database: "state", sql: "UPDATE deliveries SET status = 'queued' WHERE delivery_id = :id AND status IN ('attempted', 'queued')" },
  onEscalate: { database: "state", sql: "UPDATE deliveries SET status = 'held' WHERE delivery_id = :id AND status IN ('attempted', 'held')" },
  timeoutSeconds: 1,
  attempts: 1, // retries are reconcile/probe.test.ts's: here a fault is final at once
});
let n = 0;
/** a restored root (read-only) whose worker died after sending two deliveries, before their receipts */
function bench(worker: Record<string, unknown> = {}, spec: Record<string, unknown> = {}): Bench {
  const dir = join(tmp, `b${n++}`);
  const restored = join(dir, "restored");
  mkdirSync(restored, { recursive: true });
  const db = new Database(join(restored, "state.sqlite"));
  migrate(db);
  for (const [task, kind] of [["t1", "send_invoice"], ["t2", "charge_card"]]) {
    db.prepare("INSERT INTO tasks (task_id, kind, payload, status, worker_id, lease_until, created_at) VALUES (?, ?, '{}', 'running', 'old-worker', 0, '2000-01-01')").run(task, kind);
    db.prepare("INSERT INTO deliveries (delivery_id, task_id, idempotency_key, status, attempted_at) VALUES (?, ?, ?, 'attempted', '2000-01-01')").run(`dlv-${task}`, task, `idem-${task}`);
  }
  db.close();
  makeReadOnly(restored);
  writeFileSync(join(dir, "spec.json"), JSON.stringify({ name: "r", invariants: [], worker: { command: ["node", WORKER], timeoutSeconds: 20, ...worker }, inject: INJECT, ...spec }));
  return { spec: loadSpec(join(dir, "spec.json")), restored, tmp: dir, dbs: [{ name: "state", path: join(restored, "state.sqlite") }], invariants: [], log: new CheckLog(Date.now(), {}), workers: { started: 0 } };
}
const opsOf = (b: Bench) => {
  const db = new Database(b.dbs[0]!.path, { readonly: true });
  const rows = db.prepare(OPEN_OPS.sql).all() as { id: string; idempotency_key: string; kind: string }[];
  db.close();
  return settleOperations(rows, OPEN_OPS);
};

describe("reconciliationScenarios", () => {
  it("seeded both ways: delivered ones complete, a lost invoice is resent once under its key, a lost card charge waits for a person", async () => {
    const b = bench({}, { reconcile: true });
    const ops = opsOf(b);
    expect(ops.map((o) => [o.idempotency_key, o.strategy])).toEqual([["idem-t1", "retry-safe"], ["idem-t2", "escalate"]]);
    const r = await reconciliationScenarios(b, ops, PROTOCOL, OPEN_OPS);
    expect(r.scenarios.map((s) => [s.scenario, s.ok])).toEqual([["reconcile_a", true], ["reconcile_b", true]]);
    expect(r.reconcileSeconds).toBeGreaterThanOrEqual(0);
    const row = (key: string) => r.operations.find((o) => o.idempotency_key === key)!.outcomes.map((x) => [x.scenario, x.seeded, x.outcome, x.resolution, x.new_effects]);
    expect(row("idem-t1")).toEqual([["reconcile_a", "delivered", "completed", "completed", 0], ["reconcile_b", "never_arrived", "not_found", "retry", 1]]);
    expect(row("idem-t2")).toEqual([["reconcile_a", "never_arrived", "not_found", "escalated", 0], ["reconcile_b", "delivered", "completed", "completed", 0]]);
    expect(b.log.unresolved).toEqual([expect.stringMatching(/^reconcile_a: open operation idem-t2 \(charge_card, escalate\) escalated to a person: /)]);
    expect(b.log.checks.filter((c) => c.name === "reconciliation sends nothing").every((c) => c.ok)).toBe(true);
  });

  it("while lookups fail (5xx), nothing is resolved (unknown; the card charge held for a person) and nothing is sent twice", async () => {
    const b = bench({}, { reconcileFaults: ["5xx"] });
    const r = await reconciliationScenarios(b, opsOf(b), PROTOCOL, OPEN_OPS);
    expect(r.scenarios.map((s) => [s.scenario, s.ok, s.effects])).toEqual([["reconcile_fault_5xx", true, 0]]);
    expect(r.operations.map((o) => [o.outcomes[0]!.outcome, o.outcomes[0]!.resolution])).toEqual([["unknown", "unknown"], ["unknown", "escalated"]]);
    expect(r.operations.every((o) => !o.outcomes[0]!.resolved)).toBe(true);
    expect(r.reconcileSeconds).toBeNull();
  });

  it("a worker that re-sends held deliveries without asking is caught as an effect a person was to decide", async () => {
    const b = bench({ env: { WORKER_FAULT: "resend_unreceipted" } }, { reconcile: true });
    const r = await reconciliationScenarios(b, opsOf(b), PROTOCOL, OPEN_OPS);
    expect(r.scenarios.find((s) => s.scenario === "reconcile_a")!.ok).toBe(false);
    expect(b.log.checks.find((c) => c.scenario === "reconcile_a" && c.name === "effects idem-t2")).toMatchObject({ ok: false, detail: "1 new effect(s) for idem-t2 after the worker ran, expected 0 (escalated)" });
  });

  it("no open operations: each scenario passes saying so, and no worker runs", async () => {
    const b = bench({ command: ["node", "-e", "process.exit(9)"] }, { reconcile: true });
    const r = await reconciliationScenarios(b, [], PROTOCOL, OPEN_OPS);
    expect(r.scenarios.map((s) => [s.scenario, s.ok, s.restarts])).toEqual([["reconcile_a", true, 0], ["reconcile_b", true, 0]]);
  });
});

describe("splitBrainScenario", () => {
  it("the restored generation finishes with one effect and the stale one's write is rejected", async () => {
    const b = bench();
    const r = await splitBrainScenario(b);
    expect(r).toMatchObject({ scenario: "split_brain", ok: true, effects: 1 });
    expect(b.log.checks.map((c) => [c.name, c.ok])).toEqual([["restored generation finishes", true], ["stale write rejected", true], ["no stale write accepted", true], ["exactly one effect", true]]);
  });
});
