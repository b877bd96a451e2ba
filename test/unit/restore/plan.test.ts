// The restore plan: a pure description of what a restore writes, shown before approval and by --dry-run.
import { describe, expect, it } from "vitest";
import { buildPlan } from "../../../src/restore/plan.js";

const manifest = {
  snapshot_id: "20260301T100000000Z-0a1b2c3d",
  agent_id: "billing-agent",
  tenant: "acme",
  sequence: 7,
  created_at: "2026-03-01T10:00:00.000Z",
  components: [
    { kind: "sqlite", path: "state/agent.sqlite", size: 4096 },
    { kind: "sqlite-delta", path: "state/memory.sqlite", target: "state/mem.sqlite", size: 100, full_size: 8192 },
    { kind: "file", path: "prompts/system.md", size: 12 },
    { kind: "workspace", path: "workspace", size: 999 },
  ],
  workspace: { path: "workspace", commit: "abc123", branch: "main", dirty: true, extra: "not shown" },
  cursors: { inbox: { value: 42 } },
  schema_version: 3,
} as any;
const policy = { allowed: true } as any;

describe("buildPlan", () => {
  it("lists the databases and files it writes (a delta at its target and full size), the workspace, and the age to a tenth of an hour", () => {
    const p = buildPlan(manifest, "/r/x.agentbak", "/target", [], policy, 3, new Date("2026-03-01T12:34:00.000Z"), { operations: [], timers: [] });
    expect(p.writes).toEqual([
      { path: "state/agent.sqlite", kind: "sqlite", size: 4096 },
      { path: "state/mem.sqlite", kind: "sqlite-delta", size: 8192 },
      { path: "prompts/system.md", kind: "file", size: 12 },
    ]);
    expect(p.workspace).toEqual({ path: "workspace", commit: "abc123", branch: "main", dirty: true });
    expect(p.age_hours).toBe(2.6);
    expect([p.snapshot_id, p.agent_id, p.tenant, p.sequence, p.next_generation, p.schema_version]).toEqual([manifest.snapshot_id, "billing-agent", "acme", 7, 3, 3]);
    expect([p.not_captured, p.sources, p.cursors]).toEqual([[], [], { inbox: { value: 42 } }]);
  });

  it("no workspace is null; what was left out, open operations, timers and sources are carried as given", () => {
    const m = { ...manifest, workspace: null, not_captured: [{ path: ".env", reason: "credential", detail: "x" }] };
    const ops = [{ id: 1 }] as any;
    const timers = [{ database: "state", table: "leases", column: "until", mode: "shift", format: "epoch_ms", shift_ms: 1, to: null, rows: null }] as any;
    const sources = [{ name: "pg", kind: "postgres", into: "env:PG_URL", resolved: false, records: 3, snapshot_at: "t" }];
    const p = buildPlan(m, "b", "t", [], policy, 1, new Date(m.created_at), { operations: ops, timers, sources });
    expect(p.workspace).toBeNull();
    expect(p.age_hours).toBe(0);
    expect(p.not_captured).toEqual(m.not_captured);
    expect([p.open_operations, p.timers, p.sources]).toEqual([ops, timers, sources]);
  });
});
