/**
 * JUnit XML and a GitHub job-summary Markdown table for drill results, and
 * for a drill that could not run (snapshot not found, untrusted key, ...),
 * so a CI job always gets a file that says why.
 */
import { escapeUnsafe } from "../facts.js";
import type { DrillCheck } from "./checklog.js";
import type { DrillResult } from "./runner.js";
import type { FleetDrillResult } from "./fleet.js";

// the agent's text (cursor values, rows, table names, messages) is data in both files: control, bidi and format
// characters become visible escapes; in XML the markup characters become entities
const esc = (s: string) => escapeUnsafe(s).replace(/[<>&"']/g, (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;", "'": "&apos;" })[c]!);
// ... and in the job summary (GitHub Markdown, HTML allowed) every character that could start markup, a link, an
// image or a table cell is escaped, so a value can not add a link, fetch an image or end its cell; and what starts
// one of GitHub's autolinks (`https://…`, `www.…`, `a@b.c`) is broken by an escape: a bare URL is shown, never a link
const md = (s: string) =>
  escapeUnsafe(s.slice(0, 200))
    .replace(/[\\`*_{}[\]()#+!|~<>&-]/g, (c) => (c === "<" ? "&lt;" : c === ">" ? "&gt;" : c === "&" ? "&amp;" : `\\${c}`))
    .replace(/:(?=\/\/)|(?<=www)\.|@/gi, (c) => `\\${c}`);

/** One testcase: a pass, a failure, an error (the drill could not run) or skipped (a warning, or not checked here). */
interface Case {
  name: string;
  seconds: number;
  outcome: "pass" | "failure" | "error" | "skipped";
  message?: string;
  type?: string;
}

/** A check's outcome: errors fail, warnings and unresolved notes are skipped with the reason (never a pass). */
function caseOf(c: DrillCheck): Case {
  const name = `${c.scenario} / ${c.phase} / ${c.name}`;
  if (c.ok) return { name, seconds: c.seconds, outcome: "pass" };
  const detail = c.detail + (c.sample?.length ? ` rows: ${JSON.stringify(c.sample)}` : "");
  if (c.severity === "error") return { name, seconds: c.seconds, outcome: "failure", message: detail, type: "check" };
  return { name, seconds: c.seconds, outcome: "skipped", message: `${c.severity === "warning" ? "warning" : "not resolved here"}: ${detail}` };
}

function testcase(classname: string, c: Case): string {
  const head = `    <testcase classname="${esc(classname)}" name="${esc(c.name)}" time="${c.seconds.toFixed(3)}"`;
  if (c.outcome === "pass") return `${head}/>`;
  const m = esc(c.message ?? "");
  const body = c.outcome === "skipped" ? `<skipped message="${m}"/>` : `<${c.outcome} message="${m}" type="${esc(c.type ?? "")}">${m}</${c.outcome}>`;
  return `${head}>\n      ${body}\n    </testcase>`;
}

const count = (cs: Case[], o: Case["outcome"]) => cs.filter((c) => c.outcome === o).length;
const totals = (cs: Case[], seconds: number) =>
  `tests="${cs.length}" failures="${count(cs, "failure")}" errors="${count(cs, "error")}" skipped="${count(cs, "skipped")}" time="${seconds.toFixed(3)}"`;

/** A document of one suite per group (a scenario), each case named so that no two are alike. */
function document(groups: { suite: string; classname: string; cases: Case[] }[], seconds: number, properties: Record<string, string>): string {
  const all = groups.flatMap((g) => g.cases);
  const props = Object.entries(properties)
    .map(([k, v]) => `      <property name="${esc(k)}" value="${esc(v)}"/>`)
    .join("\n");
  const suites = groups.map((g) => {
    const secs = g.cases.reduce((t, c) => t + c.seconds, 0);
    return `  <testsuite name="${esc(g.suite)}" ${totals(g.cases, secs)}>\n    <properties>\n${props}\n    </properties>\n${g.cases.map((c) => testcase(g.classname, c)).join("\n")}\n  </testsuite>`;
  });
  return `<?xml version="1.0" encoding="UTF-8"?>\n<testsuites name="agentbak drill" ${totals(all, seconds)}>\n${suites.join("\n")}\n</testsuites>\n`;
}

/** One testsuite per scenario, one testcase per check, named scenario / phase / check. */
export function junitXml(r: DrillResult): string {
  const scenarios = [...new Set(r.checks.map((c) => c.scenario))];
  // the nemesis matrix: one case per cell, failed naming the nemesis and the check
  const matrix = r.nemeses.map((c): Case => ({ name: `${c.scenario} × ${c.nemesis}`, seconds: 0, ...(c.result !== "failed" ? { outcome: "pass" as const } : { outcome: "failure" as const, message: c.detail, type: "nemesis" }) }));
  return document(
    [
      ...scenarios.map((sc) => ({ suite: `${r.spec} ${sc}`, classname: `drill.${r.spec}.${sc}`, cases: r.checks.filter((c) => c.scenario === sc).map(caseOf) })),
      ...(matrix.length ? [{ suite: `${r.spec} nemesis matrix`, classname: `drill.${r.spec}.nemeses`, cases: matrix }] : []),
    ],
    r.total_seconds,
    {
      snapshot_id: r.snapshot_id,
      agent_id: r.agent_id,
      tenant: r.tenant,
      sequence: String(r.sequence),
      result: r.ok ? "pass" : "fail",
      ...(r.upgrade ? { upgrade_from: r.upgrade.from.version ?? "unknown", upgrade_to: r.upgrade.to.version, upgrade_recovers: String(r.upgrade.recovers) } : {}),
    },
  );
}

/**
 * A fleet drill: one testcase per sampled agent (a failure names why), the
 * figure and the seed as properties of the suite.
 */
export function junitFleet(r: FleetDrillResult): string {
  const cases = r.drills.map(
    (d): Case => ({
      name: `${d.tenant}/${d.agent} at ${d.snapshot_id ?? "no snapshot"} (point ${d.at})`,
      seconds: d.seconds,
      ...(d.result === "pass" ? { outcome: "pass" as const } : { outcome: "failure" as const, message: d.detail ?? "failed", type: `exit ${d.exit_status}` }),
    }),
  );
  const seconds = r.drills.reduce((t, d) => t + d.seconds, 0);
  const props = { seed: r.seed, population: String(r.population), drilled: String(r.drilled), passed: String(r.passed), confidence: String(r.confidence), lower_bound: String(r.lower_bound), lower_bound_wilson: String(r.lower_bound_wilson), window: `${r.window.from}/${r.window.to}` };
  return document([{ suite: `${r.spec} fleet`, classname: `drill.${r.spec}.fleet`, cases }], seconds, props);
}

/** The job summary of a fleet drill: the figure, then one row per sampled agent. */
export function markdownFleet(r: FleetDrillResult): string {
  const rows = r.drills.map((d) => `| ${md(`${d.tenant}/${d.agent}`)} | ${md(d.snapshot_id ?? "none")} | ${d.result === "pass" ? "pass" : "**FAIL**"} | ${md(d.detail ?? "")} |`);
  return [
    `### agentbak fleet drill ${r.spec}: ${r.passed} of ${r.drilled} passed`,
    "",
    `recoverable fraction ≥ ${r.lower_bound.toFixed(3)} (Clopper–Pearson, one-sided ${r.confidence * 100}%; Wilson ${r.lower_bound_wilson.toFixed(3)}), seed \`${md(r.seed)}\`, ${r.population} agent(s) in the fleet`,
    "",
    "| agent | snapshot | result | detail |",
    "|---|---|---|---|",
    ...rows,
    "",
  ].join("\n");
}

/** What a drill that could not run reports: which spec and snapshot, the exit status and why. */
export interface DrillFailure {
  spec: string;
  ref: string;
  exit_status: number;
  code: string;
  message: string;
  seconds: number;
}

/** JUnit XML for a drill that could not run: one errored testcase saying why. */
export function junitFailure(f: DrillFailure): string {
  const c: Case = { name: `drill ${f.ref}`, seconds: f.seconds, outcome: "error", message: f.message, type: f.code };
  return document([{ suite: `${f.spec} ${f.ref}`, classname: `drill.${f.spec}`, cases: [c] }], f.seconds, { snapshot: f.ref, exit_status: String(f.exit_status), result: "error" });
}

/** A Markdown summary for $GITHUB_STEP_SUMMARY. */
export function markdownSummary(r: DrillResult): string {
  const outcome = (c: DrillCheck) => (c.ok ? "pass" : c.severity === "error" ? "**FAIL**" : c.severity === "warning" ? "warn" : "not resolved here");
  const rows = r.checks.map((c) => `| ${md(c.scenario)} | ${md(c.phase)} | ${md(c.name)} | ${outcome(c)} | ${md(c.detail)} |`);
  return [
    `### agentbak drill ${md(r.spec)}: ${r.ok ? (r.warnings.length ? "passed with warnings" : "passed") : "FAILED"}`,
    "",
    `snapshot ${md(r.snapshot_id)} of ${md(r.agent_id)} (sequence ${r.sequence}), recovery ${r.recovery_seconds}s, total ${r.total_seconds}s`,
    "",
    ...(r.upgrade ? [`upgrade: snapshot of ${md(r.upgrade.from.version ?? "unknown")} under ${md(r.upgrade.to.version)}: ${r.upgrade.recovers ? "recovers" : `**does not recover** (${md(r.upgrade.failure ?? "")})`}`, ""] : []),
    ...(r.nemeses.length ? ["| scenario | nemesis | result | detail |", "|---|---|---|---|", ...r.nemeses.map((c) => `| ${md(c.scenario)} | ${md(c.nemesis)} | ${c.result === "failed" ? "**FAIL**" : c.result} | ${md(c.detail)} |`), ""] : []),
    "| scenario | phase | check | result | detail |",
    "|---|---|---|---|---|",
    ...rows,
    "",
  ].join("\n");
}

/** The job summary of a drill that could not run. */
export function markdownFailure(f: DrillFailure): string {
  // the ref is what the job was given (a workflow input, perhaps the agent's): data like the rest
  return [`### agentbak drill ${md(f.spec)}: could not run`, "", `snapshot ${md(f.ref)}: ${md(f.message)} (exit ${f.exit_status}, ${f.code})`, ""].join("\n");
}
