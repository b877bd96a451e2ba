// The restore plan as people read it: every field from the bundle or the request is escaped as it is placed.
import { describe, expect, it } from "vitest";
import { renderPlan } from "../../../src/ui/plan.js";
import { buildPlan } from "../../../src/restore/plan.js";

const evil = "billing\x1b[2J\x1b]8;;http://x\x07agent\nFAKE: restore approved\u202e";
const manifest = {
  snapshot_id: "20260301T100000000Z-0a1b2c3d",
  agent_id: evil,
  tenant: "acme",
  sequence: 7,
  created_at: "2026-03-01T10:00:00.000Z",
  components: [{ kind: "file", path: `notes/${evil}.md`, size: 12 }],
  workspace: { path: "workspace", commit: "0123456789abcdef", branch: `main${evil}`, dirty: true },
  cursors: { [evil]: evil },
  schema_version: null,
} as any;
const policy = { runtime: [], warnings: [], needs_approval: [], refusals: [] } as any;

describe("renderPlan", () => {
  const lines: string[] = [];
  const timers = [{ database: "state", table: "leases", column: "until", mode: "shift", format: "epoch_ms", shift_ms: 9_000_000, to: null, rows: null }] as any;
  const ops = [{ id: 5, idempotency_key: `key${evil}`, kind: "email", strategy: "observe" }] as any;
  renderPlan(buildPlan(manifest, "/r/b.agentbak", "/target", [], policy, 2, new Date("2026-03-01T12:30:00.000Z"), { operations: ops, timers }), (l) => lines.push(l), false);
  const text = lines.join("\n");

  it("writes one line per item: snapshot, target, each write, workspace, cursor, open operation, timer, generation", () => {
    expect(lines).toHaveLength(9);
    expect(lines[1]).toMatch(/^  snapshot   20260301T100000000Z-0a1b2c3d  sequence 7  created 2026-03-01T10:00:00\.000Z \(2\.5 h ago\)$/);
    expect(lines[2]).toBe("  target     /target");
    expect(text).toContain("  workspace  workspace at 0123456789ab (");
    expect(text).toContain("shifted by 9000 s (time since the snapshot)");
    expect(lines.at(-1)).toBe("  generation 2; the agent starts suspended");
  });

  it("no agent-controlled text reaches the terminal raw: no escape, bell, newline or bidi control inside a line", () => {
    for (const l of lines) expect(l.replace(/\x1b\[[0-9;]*m/g, "")).not.toMatch(/[\x00-\x1f\x7f\u202e]/);
    expect(text).not.toContain("\nFAKE");
    expect(text.match(/FAKE: restore approved/g)!.length).toBeGreaterThanOrEqual(5);
  });
});
