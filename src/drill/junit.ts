/** JUnit XML and a GitHub job-summary Markdown table for drill results. */
import type { DrillResult } from "./runner.js";

const esc = (s: string) => s.replace(/[<>&"']/g, (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;", "'": "&apos;" })[c]!).replace(/[\x00-\x08\x0b\x0c\x0e-\x1f]/g, "");

/** One testcase per check (classname: the scenario). */
export function junitXml(r: DrillResult): string {
  const failures = r.checks.filter((c) => !c.ok && c.severity === "error").length;
  const cases = r.checks
    .map((c) => {
      const head = `    <testcase classname="${esc(`drill.${r.spec}.${c.scenario}`)}" name="${esc(c.name)}">`;
      if (c.ok) return `${head}</testcase>`;
      const msg = esc(c.detail + (c.sample?.length ? ` rows: ${JSON.stringify(c.sample)}` : ""));
      return c.severity === "error" ? `${head}\n      <failure message="${msg}">${msg}</failure>\n    </testcase>` : `${head}\n      <system-out>warning: ${msg}</system-out>\n    </testcase>`;
    })
    .join("\n");
  return `<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="agentbak drill" tests="${r.checks.length}" failures="${failures}" time="${r.total_seconds}">
  <testsuite name="${esc(`${r.spec} ${r.snapshot_id}`)}" tests="${r.checks.length}" failures="${failures}" time="${r.total_seconds}">
${cases}
  </testsuite>
</testsuites>
`;
}

/** A Markdown summary for $GITHUB_STEP_SUMMARY. */
export function markdownSummary(r: DrillResult): string {
  const rows = r.checks.map((c) => `| ${c.scenario} | ${c.name} | ${c.ok ? "pass" : c.severity === "error" ? "**FAIL**" : "warn"} | ${c.detail.replace(/\|/g, "\\|").slice(0, 200)} |`);
  return [
    `### agentbak drill ${r.spec}: ${r.ok ? "passed" : "FAILED"}`,
    "",
    `snapshot \`${r.snapshot_id}\` of ${r.agent_id} (sequence ${r.sequence}), recovery ${r.recovery_seconds}s, total ${r.total_seconds}s`,
    "",
    "| scenario | check | result | detail |",
    "|---|---|---|---|",
    ...rows,
    "",
  ].join("\n");
}
