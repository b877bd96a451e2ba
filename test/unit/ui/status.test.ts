// The status screen: one line per fact within 80 columns, agent text escaped, each check that is not ok named.
import { describe, expect, it } from "vitest";
import { repositoryLine, statusLines } from "../../../src/ui/status.js";

const agent = (over: Record<string, unknown> = {}) =>
  ({
    tenant: "acme",
    agent_id: "billing-agent",
    state: "fail",
    checks: [{ name: "drill", state: "fail", detail: `last drill failed: restore/invariant:x: \u001b[31mred\u202e ${"long ".repeat(30)}` }],
    last_snapshot: { snapshot_id: "20261206T180854080Z-2e541272", created_at: "", age_seconds: 7200, kind: "full", size: 1 },
    rpo_objective_seconds: 3600,
    snapshots: [],
    chain: { head: "x", links: 3, verified: 3, next_full_in: 7 },
    last_drill: null,
    drill_every_seconds: null,
    drills: [],
    pending_requests: [],
    unresolved_operations: { target: "/srv/a\nb", generation: 2, operations: 3, unresolved: 1 },
    spool: { bundles: 2, bytes: 2048 },
    bytes: 1024,
    ...over,
  }) as any;

describe("statusLines", () => {
  it("fits 80 columns, escapes what came from the agent and names the failing check", () => {
    const lines = statusLines(agent());
    expect(lines[0]).toMatch(/^acme\/billing-agent +FAIL$/);
    expect(lines[0]).toHaveLength(80);
    expect(lines.every((l) => [...l].length <= 80)).toBe(true);
    expect(lines.join("\n")).not.toMatch(/[\u001b\u202e]/);
    expect(lines).toContain("  operations  1 of 3 unresolved after the restore into /srv/a\\x0ab");
    expect(lines).toContain("  chain       3 link(s), 3 verified; full due in 7 backup(s)");
    expect(lines).toContain("  spool       2 bundle(s), 2.0 KiB");
    expect(lines.at(-1)).toMatch(/^  ✗ drill: last drill failed: restore\/invariant:x: \\x1b\[31mred\\u202e long/);
  });

  it("keeps the end of a long path: the restored folder's name, and the repository's size", () => {
    const target = `/srv/agents/${"deep/".repeat(12)}billing-restored`;
    const ops = statusLines(agent({ unresolved_operations: { target, generation: 2, operations: 3, unresolved: 1 } })).find((l) => l.startsWith("  operations"))!;
    expect([...ops].length).toBe(80);
    const lines = statusLines(agent({ checks: [{ name: "operations", state: "warn", detail: `1 of 3 open operation(s) unresolved in ${target}` }], unresolved_operations: { target, generation: 2, operations: 3, unresolved: 1 } }));
    expect(lines.slice(-2)).toEqual([
      expect.stringMatching(/^ {2}! operations: 1 of 3 open operation\(s\) unresolved in …[a-z/]*\/deep\/billing-restored$/),
      expect.stringMatching(/^ {4}next: agentbak reconcile --target …[a-z/]*\/deep\/billing-restored$/),
    ]);
    expect(lines.every((l) => [...l].length <= 80)).toBe(true);
    expect(statusLines(agent({ checks: [{ name: "operations", state: "warn", detail: "1 of 3 open operation(s) unresolved in /r" }], unresolved_operations: { target: "/r", generation: 2, operations: 3, unresolved: 1 } })).at(-1)).toBe("    next: agentbak reconcile --target /r");
    expect(ops).toMatch(/^ {2}operations {2}1 of 3 unresolved after the restore into …[a-z/]*\/deep\/billing-restored$/);
    const repo = repositoryLine({ repository: { location: `/mnt/${"backup-disk/".repeat(10)}repo`, bytes: 5 * 1024 * 1024 }, agents: [] } as any);
    expect([...repo].length).toBeLessThanOrEqual(80);
    expect(repo).toMatch(/^repository {2}…[a-z/-]*\/repo {2}5\.0 MiB$/);
    expect(repositoryLine({ repository: { location: "/srv/backups", bytes: 0 }, agents: [] } as any)).toBe("repository  /srv/backups  0 B");
  });
});
