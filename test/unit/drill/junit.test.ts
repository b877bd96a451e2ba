// Drill results as JUnit XML and a job summary: errors fail, warnings are skipped (never a pass), agent text is escaped.
import { describe, expect, it } from "vitest";
import { junitFailure, junitXml, markdownFailure, markdownSummary } from "../../../src/drill/junit.js";
import type { DrillCheck } from "../../../src/drill/checklog.js";

const check = (o: Partial<DrillCheck>): DrillCheck => ({ scenario: "restore", phase: "checks", name: "integrity", ok: true, severity: "error", detail: "ok", seconds: 0.25, ...o });
const result = (checks: DrillCheck[], ok = false) =>
  ({ ok, warnings: [], spec: "reference-agent", snapshot_id: "20260301T100000000Z-0a1b2c3d", agent_id: "billing-agent", tenant: "acme", sequence: 7, recovery_seconds: 4.2, total_seconds: 12.5, checks, upgrade: null, nemeses: [] }) as any;

describe("junitXml", () => {
  const xml = junitXml(result([
    check({}),
    check({ name: "row counts", ok: false, detail: "messages: 10 != 11", sample: [{ id: 3 }] }),
    check({ name: "model", ok: false, severity: "warning", detail: "model changed" }),
    check({ scenario: "crash <after_commit>", name: `task "x" & 'y'`, ok: false, severity: "info", detail: "bell\x07 <b>" }),
  ]));

  it("one suite per scenario, one case per check; totals count failures and skips", () => {
    expect(xml.match(/<testsuite /g)).toHaveLength(2);
    expect(xml.match(/<testcase /g)).toHaveLength(4);
    expect(xml).toContain('<testsuites name="agentbak drill" tests="4" failures="1" errors="0" skipped="2" time="12.500">');
    expect(xml).toContain('<failure message="messages: 10 != 11 rows: [{&quot;id&quot;:3}]" type="check">');
    expect(xml).toContain('<skipped message="warning: model changed"/>');
    expect(xml).toContain('<property name="result" value="fail"/>');
  });

  it("escapes markup and shows control characters as visible escapes (XML 1.0 can not hold them)", () => {
    expect(xml).toContain('name="crash &lt;after_commit&gt; / checks / task &quot;x&quot; &amp; &apos;y&apos;"');
    // a control character becomes a visible escape (XML 1.0 can not hold it raw)
    expect(xml).toContain('<skipped message="not resolved here: bell\\x07 &lt;b&gt;"/>');
    expect(xml).not.toMatch(/[\x00-\x08\x0b\x0c\x0e-\x1f]/);
  });
});

describe("junitXml: the upgrade and the nemesis matrix", () => {
  const r = {
    ...result([check({ scenario: "after_send_before_receipt~lost_write", phase: "after_recovery", name: "exactly one effect", ok: false, detail: "2 effect(s)" })]),
    upgrade: { from: { version: "1.4.2", schema: 3 }, to: { version: "1.5.0", schema: 4 }, recovers: true, failure: null },
    nemeses: [
      { scenario: "after_send_before_receipt", nemesis: "clock_ahead_1h", result: "recovered", check: null, detail: "task complete" },
      { scenario: "after_send_before_receipt", nemesis: "lost_write", result: "failed", check: "exactly one effect", detail: "lost_write: exactly one effect: 2 effect(s)" },
      { scenario: "restore", nemesis: "enospc", result: "contained", check: null, detail: "ENOSPC" },
    ],
  };
  const xml = junitXml(r);

  it("a suite for the matrix with a case per cell: recovered and contained pass, failed fails naming the nemesis and the check", () => {
    expect(xml).toMatch(/<testsuite name="reference-agent nemesis matrix" tests="3" failures="1" /);
    expect(xml).toContain('name="after_send_before_receipt × clock_ahead_1h" time="0.000"/>');
    expect(xml).toContain('name="restore × enospc" time="0.000"/>');
    expect(xml).toContain('<failure message="lost_write: exactly one effect: 2 effect(s)" type="nemesis">');
    expect(xml).toContain('name="after_send_before_receipt~lost_write / after_recovery / exactly one effect"');
  });

  it("the job summary has the upgrade line and the matrix, a failed cell in bold", () => {
    const md = markdownSummary(r);
    expect(md).toContain("upgrade: snapshot of 1.4.2 under 1.5.0: recovers");
    expect(md).toContain("| after\\_send\\_before\\_receipt | lost\\_write | **FAIL** | lost\\_write: exactly one effect: 2 effect\\(s\\) |");
    expect(md).toContain("| restore | enospc | contained | ENOSPC |");
    expect(markdownSummary(result([check({})]))).not.toContain("| nemesis |");
  });

  it("both versions as properties", () => {
    expect(xml).toContain('<property name="upgrade_from" value="1.4.2"/>');
    expect(xml).toContain('<property name="upgrade_to" value="1.5.0"/>');
    expect(xml).toContain('<property name="upgrade_recovers" value="true"/>');
    expect(junitXml(result([check({})]))).not.toContain("upgrade_from");
  });
});

describe("a drill that could not run", () => {
  const f = { spec: "reference-agent", ref: "latest", exit_status: 13, code: "verify", message: "manifest.sig: signature does not match | bad", seconds: 0.5 };

  it("is one errored testcase saying why", () => {
    const xml = junitFailure(f);
    expect(xml).toContain('tests="1" failures="0" errors="1" skipped="0"');
    expect(xml).toContain('<error message="manifest.sig: signature does not match | bad" type="verify">');
    expect(xml).toContain('<property name="exit_status" value="13"/>');
  });

  it("and one Markdown line, with table pipes escaped, and the ref as data (no code span it could end)", () => {
    expect(markdownFailure(f)).toBe("### agentbak drill reference\\-agent: could not run\n\nsnapshot latest: manifest.sig: signature does not match \\| bad (exit 13, verify)\n");
  });
});

describe("markdownSummary", () => {
  it("a row per check; FAIL, warn and not-resolved outcomes; pipes and newlines kept out of cells", () => {
    const md = markdownSummary(result([check({}), check({ name: "counts", ok: false, detail: "a|b\nc" }), check({ name: "m", ok: false, severity: "warning", detail: "w" })]));
    expect(md.split("\n")[0]).toBe("### agentbak drill reference\\-agent: FAILED");
    expect(md).toContain("| restore | checks | integrity | pass | ok |");
    // a newline is shown as \x0a (its backslash escaped for Markdown), never a line break in the cell
    expect(md).toContain("| restore | checks | counts | **FAIL** | a\\|b\\\\x0ac |");
    expect(md).toContain("| restore | checks | m | warn | w |");
    expect(markdownSummary(result([check({})], true)).split("\n")[0]).toBe("### agentbak drill reference\\-agent: passed");
  });
});
