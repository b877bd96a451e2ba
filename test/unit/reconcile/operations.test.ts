// Open operations: strategies settled per operation (the strictest wins for a shared key), the decision table, and the re-read of the restored state.
import { afterAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { decide, isResolved, reconcileOperations, settleOperations, stillOpen } from "../../../src/reconcile/operations.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-operations-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe("settleOperations", () => {
  const cfg = { database: "state", sql: "SELECT 1", strategies: { payment: "escalate" as const, email: "retry-safe" as const }, defaultStrategy: "observe" as const };

  it("takes the recorded strategy, else the config's for the kind, else its default", () => {
    const s = settleOperations([
      { id: 1, idempotency_key: "k1", kind: "email", strategy: "observe" },
      { id: 2, idempotency_key: "k2", kind: "email" },
      { id: 3, idempotency_key: "k3", kind: "sms" },
      { id: 4, idempotency_key: "k4" },
    ], cfg);
    expect(s.map((o) => [o.id, o.kind, o.strategy])).toEqual([[1, "email", "observe"], [2, "email", "retry-safe"], [3, "sms", "observe"], [4, null, "observe"]]);
  });

  it("operations sharing an idempotency key all take the strictest of their strategies", () => {
    const s = settleOperations([
      { id: 1, idempotency_key: "shared", kind: "email" },
      { id: 2, idempotency_key: "shared", kind: "payment" },
      { id: 3, idempotency_key: "alone", kind: "email" },
    ], cfg);
    expect(s.map((o) => o.strategy)).toEqual(["escalate", "escalate", "retry-safe"]);
  });
});

describe("decide", () => {
  it("completed is recorded always; not_found is resent only when retry-safe; unknown is never resent", () => {
    const table = (["retry-safe", "observe", "escalate"] as const).map((s) => (["completed", "not_found", "unknown"] as const).map((o) => decide(s, o)));
    expect(table).toEqual([
      ["completed", "retry", "unknown"],
      ["completed", "escalated", "unknown"],
      ["completed", "escalated", "escalated"],
    ]);
    expect((["completed", "retry", "escalated", "unknown"] as const).map(isResolved)).toEqual([true, true, false, false]);
  });
});

describe("stillOpen", () => {
  const file = join(tmp, "state.sqlite");
  const db = new Database(file);
  db.exec("CREATE TABLE outbox (id INTEGER PRIMARY KEY, idempotency_key TEXT, done INTEGER); INSERT INTO outbox VALUES (1, 'k1', 0), (2, 'k2', 1), (3, 'k3', 0);");
  db.close();
  const q = { database: "state", sql: "SELECT id, idempotency_key FROM outbox WHERE done = 0" };
  const ops = [{ id: 1, idempotency_key: "k1" }, { id: 2, idempotency_key: "k2" }, { id: 3, idempotency_key: "other" }];

  it("names each operation the restored database still lists (same id and key), null for the others", () => {
    expect(stillOpen(ops, q, new Map([["state", file]]))).toEqual(["still open in the restored database: openOperations.sql lists id 1", null, null]);
    expect(stillOpen([], q, new Map())).toEqual([]);
  });

  it("a missing database or a query that fails leaves every operation open, saying why", () => {
    expect(stillOpen(ops, q, new Map())).toEqual(ops.map(() => 'the restored state could not be re-read: no restored database named "state"'));
    const bad = stillOpen(ops, { ...q, sql: "SELECT nope FROM outbox" }, new Map([["state", file]]));
    expect(bad).toHaveLength(3);
    for (const b of bad) expect(b).toMatch(/^the restored state could not be re-read: openOperations\.sql failed: .*nope/);
  });
});

describe("[E3] reconcileOperations and a key read from bytes that are not UTF-8", () => {
  it("[E3] a key holding U+FFFD is never sent to the provider (it is not the key the agent sent): unknown, named; the other keys are asked", async () => {
    const asked: string[] = [];
    const probe = async (q: { idempotency_key: string }) => (asked.push(q.idempotency_key), { state: "not_found" as const, receipt: null, detail: "provider answered 404" });
    const cfg = { timeoutSeconds: 1, attempts: 2, receiptFields: ["receipt"] } as never;
    const ops = [
      { id: "a", idempotency_key: "idem-\ufffd\x1b[31m", kind: "send_invoice", strategy: "retry-safe" as const },
      { id: "b", idempotency_key: "idem-ok", kind: "send_invoice", strategy: "retry-safe" as const },
    ];
    const r = await reconcileOperations(ops, cfg, { database: "state", sql: "SELECT 1" }, probe, new Map());
    expect(asked).toEqual(["idem-ok"]);
    expect(r[0]).toMatchObject({ id: "a", outcome: "unknown", resolution: "unknown", resolved: false, attempts: 0, detail: expect.stringContaining("holds U+FFFD") });
    expect(r[1]).toMatchObject({ id: "b", outcome: "not_found", resolution: "retry" });
  });
});
