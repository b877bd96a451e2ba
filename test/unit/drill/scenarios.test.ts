// The drill's crash scenarios with the reference agent's real worker (fixtures/agent/worker.js) and the real test sink: a correct worker
// dies at the point, recovers with exactly one effect and stays stable; a worker that re-sends under a new key is caught as a duplicate.
import { afterAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { CheckLog } from "../../../src/drill/checklog.js";
import { loadInvariants } from "../../../src/drill/invariants.js";
import { runScenarios } from "../../../src/drill/scenarios.js";
import { loadSpec } from "../../../src/drill/spec.js";
import { makeReadOnly, type Bench } from "../../../src/drill/worker.js";
// @ts-expect-error the reference agent is plain JavaScript
import { migrate } from "../../../fixtures/agent/schema.js";

const WORKER = resolve(import.meta.dirname, "..", "..", "..", "fixtures", "agent", "worker.js");
const tmp = mkdtempSync(join(tmpdir(), "agentbak-scenarios-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const INJECT = {
  database: "state",
  sql: "INSERT INTO tasks (task_id, kind, payload, status, created_at) VALUES (:taskId, 'send_invoice', '{}', 'pending', '2000-01-01T00:00:00.000Z')",
  taskId: "drill-task-1",
  completedSql: "SELECT 1 FROM tasks WHERE task_id = :taskId AND status = 'completed'",
};
let n = 0;
/** a restored root (read-only, as the drill leaves it) holding the reference agent's migrated state, and a bench on it */
function bench(spec: Record<string, unknown>): Bench {
  const dir = join(tmp, `b${n++}`);
  const restored = join(dir, "restored");
  mkdirSync(restored, { recursive: true });
  const db = new Database(join(restored, "state.sqlite"));
  migrate(db);
  db.close();
  makeReadOnly(restored);
  writeFileSync(join(dir, "one-task.sql"), "-- check: the test task is never completed twice\nSELECT task_id FROM events WHERE type = 'task.completed' GROUP BY task_id HAVING count(*) > 1\n");
  writeFileSync(join(dir, "spec.json"), JSON.stringify({ name: "t", invariants: ["one-task.sql"], worker: { command: ["node", WORKER], timeoutSeconds: 20 }, inject: INJECT, ...spec }));
  const s = loadSpec(join(dir, "spec.json"));
  return { spec: s, restored, tmp: dir, dbs: [{ name: "state", path: join(restored, "state.sqlite") }], invariants: loadInvariants(dir, s.spec.invariants), log: new CheckLog(Date.now(), {}), workers: { started: 0 } };
}
const plan = { operations: [], reconcile: null, sourceQueries: new Map(), schemaVersion: 3 };

describe("runScenarios", () => {
  it("a correct worker killed after sending, before storing the receipt: recovers with exactly one effect, and a restart changes nothing", async () => {
    const b = bench({ crashPoints: ["after_send_before_receipt"] });
    const out = await runScenarios(b, plan);
    expect(out.scenarios).toEqual([expect.objectContaining({ scenario: "after_send_before_receipt", ok: true, died_at_point: true, effects: 1, receipt: expect.stringMatching(/^rcpt-/) })]);
    expect(out.receipts).toEqual({ after_send_before_receipt: out.scenarios[0]!.receipt });
    expect(b.log.checks.filter((c) => !c.ok)).toEqual([]);
    expect(b.log.checks.map((c) => c.name)).toEqual(expect.arrayContaining(["died at crash point", "worker recovers", "task completed", "exactly one effect", "stable after restart", "invariant:one-task"]));
  });

  it("a worker that re-sends an unconfirmed delivery under a new key is caught: two effects, the scenario fails", async () => {
    const b = bench({ crashPoints: ["after_send_before_receipt"], worker: { command: ["node", WORKER], env: { WORKER_FAULT: "blind_retry" }, timeoutSeconds: 20 } });
    const out = await runScenarios(b, plan);
    expect(out.scenarios[0]).toMatchObject({ ok: false, died_at_point: true, effects: 2 });
    expect(b.log.checks.find((c) => c.name === "exactly one effect")).toMatchObject({ ok: false, detail: expect.stringMatching(/^2 effect\(s\) at the sink for drill-task-1 \(keys /) });
  });

  it("a worker that never reaches the crash point fails there and runs nothing more", async () => {
    const b = bench({ crashPoints: ["after_commit_before_delivery"], worker: { command: ["node", "-e", "process.exit(0)"], timeoutSeconds: 20 } });
    const out = await runScenarios(b, plan);
    expect(out.scenarios[0]).toMatchObject({ ok: false, died_at_point: false, restarts: 0 });
    expect(out.receipts).toEqual({});
    expect(b.log.checks.map((c) => [c.name, c.ok])).toEqual([["died at crash point", false]]);
  });
});
