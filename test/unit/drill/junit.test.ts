// Drill results as JUnit XML and a job summary: errors fail, warnings are skipped (never a pass), agent text is escaped.
import { describe, expect, it } from "vitest";
import { junitFailure, junitXml, markdownFailure, markdownSummary } from "../../../src/drill/junit.js";
import type { DrillCheck } from "../../../src/drill/checklog.js";

const check = (o: Partial<DrillCheck>): DrillCheck => ({ scenario: "restore", phase: "checks", name: "integrity", ok: true, severity: "error", detail: "ok", seconds: 0.25, ...o });
const result = (checks: DrillCheck[], ok = false) =>
  ({ ok, warnings: [], spec: "reference-agent", snapshot_id: "20260301T100000000Z-0a1b2c3d", agent_id: "billing-agent", tenant: "acme", sequence: 7, recovery_seconds: 4.2, total_seconds: 12.5, checks }) as any;

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

describe("a drill that could not run", () => {
  const f = { spec: "reference-agent", ref: "latest", exit_status: 13, code: "verify", message: "manifest.sig: signature does not match | bad", seconds: 0.5 };

  it("is one errored testcase saying why", () => {
    const xml = junitFailure(f);
    expect(xml).toContain('tests="1" failures="0" errors="1" skipped="0"');
    expect(xml).toContain('<error message="manifest.sig: signature does not match | bad" type="verify">');
    expect(xml).toContain('<property name="exit_status" value="13"/>');
  });

  it("and one Markdown line, with table pipes escaped", () => {
    expect(markdownFailure(f)).toBe("### agentbak drill reference-agent: could not run\n\nsnapshot `latest`: manifest.sig: signature does not match \\| bad (exit 13, verify)\n");
  });
});

describe("markdownSummary", () => {
  it("a row per check; FAIL, warn and not-resolved outcomes; pipes and newlines kept out of cells", () => {
    const md = markdownSummary(result([check({}), check({ name: "counts", ok: false, detail: "a|b\nc" }), check({ name: "m", ok: false, severity: "warning", detail: "w" })]));
    expect(md.split("\n")[0]).toBe("### agentbak drill reference-agent: FAILED");
    expect(md).toContain("| restore | checks | integrity | pass | ok |");
    // a newline is shown as \x0a (its backslash escaped for Markdown), never a line break in the cell
    expect(md).toContain("| restore | checks | counts | **FAIL** | a\\|b\\\\x0ac |");
    expect(md).toContain("| restore | checks | m | warn | w |");
    expect(markdownSummary(result([check({})], true)).split("\n")[0]).toBe("### agentbak drill reference-agent: passed");
  });
});
