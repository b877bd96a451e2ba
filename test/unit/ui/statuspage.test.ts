// The page and the metrics text as strings: agent text escaped for HTML and for OpenMetrics labels, one chart point
// per snapshot and drill, an objective line only when it is near the scale, and `# EOF` last.
import { describe, expect, it } from "vitest";
import { statusMetrics } from "../../../src/ui/status.js";
import { statusPage } from "../../../src/ui/statuspage.js";

const agent = (over: Record<string, unknown> = {}) =>
  ({
    tenant: "acme",
    agent_id: 'bill"ing\\x',
    state: "warn",
    checks: [{ name: "requests", state: "warn", detail: "1 restore request(s) wait for a decision" }],
    last_snapshot: { snapshot_id: "s3", created_at: "2026-12-06T10:00:00.000Z", age_seconds: 60, kind: "full", size: 30 },
    rpo_objective_seconds: 3600,
    snapshots: [10, 20, 30].map((size, i) => ({ created_at: `2026-12-06T0${7 + i}:00:00.000Z`, size })),
    chain: { head: "s3", links: 1, verified: 1, next_full_in: null },
    last_drill: { at: "2026-12-06T10:30:00.000Z", result: "pass", snapshot_id: "s3", rto_seconds: 4, failed: [], age_seconds: 30, rto_objective_seconds: 5 },
    drill_every_seconds: null,
    drills: [
      { at: "2026-12-06T09:30:00.000Z", result: "fail", snapshot_id: "s2", rto_seconds: 6, failed: ["restore/invariant:x: 1 offending row(s)"] },
      { at: "2026-12-06T10:30:00.000Z", result: "pass", snapshot_id: "s3", rto_seconds: 4, failed: [] },
    ],
    pending_requests: [{ request_id: "req-1", snapshot_id: "s3", reason: "<img src=x onerror=alert(1)>", requested_at: "2026-12-06T10:40:00.000Z", requested_by: "token tok_1" }],
    unresolved_operations: null,
    spool: null,
    bytes: 60,
    ...over,
  }) as any;
const report = { at: "2026-12-06T10:41:00.000Z", repository: { location: "/srv/<repo>", bytes: 60 }, agents: [agent()], fleet: [], exit_status: 3 } as any;

describe("statusPage", () => {
  const page = statusPage(report);
  it("escapes every string from the agent or the repository", () => {
    expect(page).not.toContain("<img");
    expect(page).toContain("&lt;img src=x onerror=alert(1)&gt;");
    expect(page).toContain("/srv/&lt;repo&gt;");
    expect(page).toContain("bill&quot;ing\\x");
  });
  it("draws one point per snapshot and per drill, the failed drill red, the objective when near the scale", () => {
    const svg = (id: string) => page.slice(page.indexOf(`<svg id="${id}"`), page.indexOf("</svg>", page.indexOf(`<svg id="${id}"`)));
    expect(svg("snapshots-0").match(/<circle class="point/g)).toHaveLength(3);
    expect(svg("drills-0").match(/<circle class="point/g)).toHaveLength(2);
    expect(svg("drills-0").match(/<circle class="point fail"/g)).toHaveLength(1);
    expect(svg("drills-0")).toContain('class="objective"');
    expect(page).toContain("restore/invariant:x: 1 offending row(s)");
    expect(page).toMatch(/<html lang="en">/);
    expect(page).toContain("<title>agentbak status: warning (1 agent)</title>");
    expect(page).not.toMatch(/<script|<form|https?:\/\//);
  });
});

describe("statusMetrics", () => {
  it("escapes label values, gives each agent a sample of every gauge it has, and ends with # EOF", () => {
    const text = statusMetrics({ ...report, agents: [agent(), agent({ agent_id: "other\nline", last_snapshot: null, last_drill: null })] });
    expect(text.endsWith("\n# EOF\n")).toBe(true);
    expect(text).toContain('agentbak_last_snapshot_timestamp_seconds{tenant="acme",agent="bill\\"ing\\\\x"} ' + Date.parse("2026-12-06T10:00:00.000Z") / 1000);
    expect(text).toContain('agentbak_last_drill_success{tenant="acme",agent="bill\\"ing\\\\x"} 1');
    expect(text).toContain('agentbak_last_drill_rto_seconds{tenant="acme",agent="bill\\"ing\\\\x"} 4');
    // no drill, no snapshot: no sample (not a made-up 0)
    expect(text).not.toMatch(/agentbak_last_drill_success\{tenant="acme",agent="other\\nline"\}/);
    expect(text).toContain('agentbak_spool_bundles{tenant="acme",agent="other\\nline"} 0');
    expect(text.split("\n").filter((l) => l.startsWith("# TYPE")).every((l) => l.endsWith(" gauge"))).toBe(true);
    // no fleet drill ran: no fleet family at all
    expect(text).not.toContain("agentbak_fleet_");
  });

  it("gives the last fleet drill's figure per repository, label escaped, before # EOF", () => {
    const fleet = [{ repository: 's3://b/"x"', at: "2026-12-06T10:00:00.000Z", seed: "42", drilled: 20, passed: 19, lower_bound: 0.784, lower_bound_wilson: 0.79 }];
    const text = statusMetrics({ ...report, fleet });
    expect(text).toContain('agentbak_fleet_recoverable_ratio_lower_bound{repository="s3://b/\\"x\\""} 0.784\n');
    expect(text).toContain('agentbak_fleet_recoverable_ratio_lower_bound_wilson{repository="s3://b/\\"x\\""} 0.79\n');
    expect(text).toContain('agentbak_fleet_drilled{repository="s3://b/\\"x\\""} 20\n');
    expect(text).toContain('agentbak_fleet_passed{repository="s3://b/\\"x\\""} 19\n');
    expect(text).toContain("# TYPE agentbak_fleet_recoverable_ratio_lower_bound gauge");
    expect(text.endsWith("\n# EOF\n")).toBe(true);
  });
});
