// Issue 32, the second attack on the trust edges: cases the first round's tests did not
// write, each through the real binary on a real agent (SQLite file, git workspace,
// FIFOs made with mkfifo). See docs/security-edges.md for the whole list.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { json, makeAgent, type TestAgent } from "../helpers.js";

let a: TestAgent;
beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
}, 120_000);
afterAll(() => a?.cleanup());

describe("[E3] prototype names in the agent's data are data", () => {
  it("[E3] open operations of kind constructor / toString (one under key __proto__): the backup commits; they take the default strategy, not Object's", async () => {
    const db = new Database(join(a.dir, "state/agent.sqlite"));
    db.exec(`INSERT INTO tasks VALUES ('task-p1', 'constructor', '{}', 'running', NULL, NULL, NULL, '2026-11-01T00:00:00Z', NULL);
             INSERT INTO deliveries VALUES ('dlv-p1', 'task-p1', '__proto__', 'attempted', NULL, '2026-11-01T00:00:00Z', NULL);
             INSERT INTO tasks VALUES ('task-p2', 'toString', '{}', 'running', NULL, NULL, NULL, '2026-11-01T00:00:00Z', NULL);
             INSERT INTO deliveries VALUES ('dlv-p2', 'task-p2', 'idem-p2', 'attempted', NULL, '2026-11-01T00:00:00Z', NULL);`);
    db.close();
    const b = await a.run(["backup", "--json"]);
    expect(b.code, b.stderr).toBe(0);
    const plan = await a.run(["restore", "latest", "--target", join(a.tmp, "proto-target"), "--dry-run", "--json"]);
    expect([0, 3], plan.stderr).toContain(plan.code); // 3: the fixture's credentials are missing here
    const ops = json(plan).plan.open_operations as { id: string; kind: string; strategy: string }[];
    expect(ops.filter((o) => o.id === "dlv-p1" || o.id === "dlv-p2").map((o) => [o.id, o.kind, o.strategy])).toEqual([
      ["dlv-p1", "constructor", "observe"],
      ["dlv-p2", "toString", "observe"],
    ]);
    // the configured kind still gets its own strategy
    expect(ops.find((o) => o.kind === "send_invoice")?.strategy).toBe("retry-safe");
  }, 120_000);
});
