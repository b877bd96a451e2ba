/**
 * How a status report reads: the terminal screen of `agentbak status` (80
 * columns), the status page of `agentbak serve` (server-side HTML, inline SVG,
 * no script, no external asset) and /metrics (OpenMetrics text). Every string
 * from an agent or a repository is escaped here: safe() for the terminal,
 * html() for the page, label() for metrics.
 */
import type { AgentStatus, CheckState, StatusReport } from "../status/gather.js";
import { human } from "../status/gather.js";
import { safe } from "./escape.js";
import { bold, out } from "./output.js";
import { humanSize } from "./progress.js";

const WIDTH = 80;
const secondsSince = (iso: string) => Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
const fit = (s: string) => (s.length > WIDTH ? `${s.slice(0, WIDTH - 1)}…` : s);
/** A path in `room` columns: its head elided, so the folder's own name stays (and what follows the path on the line). */
const tail = (path: string, room: number) => (path.length > room ? `…${path.slice(path.length - Math.max(1, room - 1))}` : path);
const MARK: Record<CheckState, string> = { ok: "ok", warn: "WARN", fail: "FAIL" };

/** The lines of one agent: one per fact, then each check that is not ok, named. */
export function statusLines(a: AgentStatus): string[] {
  const s = a.last_snapshot;
  const d = a.last_drill;
  const u = a.unresolved_operations;
  const lines = [
    `${safe(a.tenant)}/${safe(a.agent_id)}`.padEnd(WIDTH - 4) + MARK[a.state].padStart(4),
    `  snapshot    ${s ? `${s.snapshot_id} ${human(s.age_seconds)} ago` : "none verified"}${a.rpo_objective_seconds !== null ? ` (RPO ${human(a.rpo_objective_seconds)})` : ""}`,
    `  chain       ${a.chain ? `${a.chain.links} link(s), ${a.chain.verified} verified${a.chain.next_full_in !== null ? `; full due in ${a.chain.next_full_in} backup(s)` : ""}` : "-"}`,
    `  drill       ${d ? `${d.result} ${human(d.age_seconds)} ago${d.rto_seconds !== null ? `, RTO ${d.rto_seconds} s` : ""}${d.rto_objective_seconds !== null ? ` (objective ${d.rto_objective_seconds} s)` : ""}` : "none recorded"}${a.drill_every_seconds !== null ? `; every ${human(a.drill_every_seconds)}` : ""}`,
    `  requests    ${a.pending_requests.length ? `${a.pending_requests.length} pending: ${a.pending_requests.map((r) => safe(r.request_id)).join(", ")}` : "none pending"}`,
    u ? operationsLine(`  operations  ${u.unresolved} of ${u.operations} unresolved after the restore into `, safe(u.target)) : "  operations  no restore recorded",
    `  spool       ${a.spool ? `${a.spool.bundles} bundle(s), ${humanSize(a.spool.bytes)}` : "- (a folder repository does not spool)"}`,
    `  stored      ${humanSize(a.bytes)} in ${a.snapshots.length} verified snapshot(s)`,
  ];
  for (const c of a.checks) {
    if (c.state === "ok") continue;
    const line = `  ${c.state === "fail" ? "✗" : "!"} ${safe(c.name)}: ${safe(c.detail)}`;
    const target = u ? safe(u.target) : "";
    // the operations check ends in the restored folder: keep its name, and say what settles it
    if (c.name !== "operations" || !target || !line.endsWith(target)) lines.push(line);
    else lines.push(operationsLine(line.slice(0, -target.length), target), operationsLine("    next: agentbak reconcile --target ", target));
  }
  return lines.map(fit);
}

function operationsLine(head: string, target: string): string {
  return head + tail(target, WIDTH - head.length);
}

/** The repository's line: its location (head elided to fit) and the bytes it holds, always shown. */
export function repositoryLine(r: StatusReport): string {
  const size = humanSize(r.repository.bytes);
  return `repository  ${tail(safe(r.repository.location), WIDTH - 14 - size.length)}  ${size}`;
}

/** Prints the report to stdout: each agent, then the repository. */
export function statusScreen(r: StatusReport): void {
  if (!r.agents.length) out("no agents in this repository\n");
  for (const a of r.agents) {
    const [head, ...rest] = statusLines(a);
    out(`${bold(head!)}\n${rest.join("\n")}\n\n`);
  }
  for (const f of r.fleet) out(fit(`fleet       ${f.passed} of ${f.drilled} passed, recoverable ≥ ${f.lower_bound.toFixed(3)} (seed ${safe(f.seed)}, ${human(secondsSince(f.at))} ago)`) + "\n");
  out(repositoryLine(r) + "\n");
}

/** A label value in OpenMetrics: backslash, double quote and line feed escaped. */
const label = (s: string) => s.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");

/** Every metric: name, help, and its value for an agent (undefined: no sample). */
const METRICS: [string, string, (a: AgentStatus) => number | undefined][] = [
  ["agentbak_last_snapshot_timestamp_seconds", "Creation time of the newest verified snapshot (Unix seconds)", (a) => (a.last_snapshot ? Date.parse(a.last_snapshot.created_at) / 1000 : undefined)],
  ["agentbak_rpo_objective_seconds", "The configured recovery point objective", (a) => a.rpo_objective_seconds ?? undefined],
  ["agentbak_last_drill_timestamp_seconds", "When the last drill ran (Unix seconds)", (a) => (a.last_drill ? Date.parse(a.last_drill.at) / 1000 : undefined)],
  ["agentbak_last_drill_success", "1 when the last drill passed, 0 when it failed", (a) => (a.last_drill ? Number(a.last_drill.result === "pass") : undefined)],
  ["agentbak_last_drill_rto_seconds", "Recovery time the last drill measured (restore, checks, first reconciliation)", (a) => a.last_drill?.rto_seconds ?? undefined],
  ["agentbak_pending_restore_requests", "Restore requests waiting for an operator's decision", (a) => a.pending_requests.length],
  ["agentbak_unresolved_operations", "Open operations of the last restore not yet resolved by reconcile or activation", (a) => a.unresolved_operations?.unresolved ?? 0],
  ["agentbak_spool_bundles", "Bundles waiting in this host's spool for the repository", (a) => a.spool?.bundles ?? 0],
  ["agentbak_repository_bytes", "Bytes of the agent's bundles in the repository", (a) => a.bytes],
  ["agentbak_status", "What agentbak status exits with for the agent: 0 healthy, 3 warnings, 15 failing drill", (a) => ({ ok: 0, warn: 3, fail: 15 })[a.state]],
];

/** The report in the OpenMetrics text format: one gauge family per metric, a sample per agent, `# EOF` last. */
export function statusMetrics(r: StatusReport): string {
  const lines: string[] = [];
  for (const [name, help, value] of METRICS) {
    lines.push(`# TYPE ${name} gauge`, `# HELP ${name} ${help}`);
    for (const a of r.agents) {
      const v = value(a);
      if (v !== undefined) lines.push(`${name}{tenant="${label(a.tenant)}",agent="${label(a.agent_id)}"} ${v}`);
    }
  }
  const fleet: [string, string, (f: StatusReport["fleet"][number]) => number][] = [
    ["agentbak_fleet_recoverable_ratio_lower_bound", "One-sided 95% Clopper–Pearson lower bound on the fraction of the fleet that is recoverable, from the last fleet drill", (f) => f.lower_bound],
    ["agentbak_fleet_recoverable_ratio_lower_bound_wilson", "The same bound by Wilson's score interval, for comparison", (f) => f.lower_bound_wilson],
    ["agentbak_fleet_drilled", "Agents the last fleet drill sampled and drilled", (f) => f.drilled],
    ["agentbak_fleet_passed", "Agents of the last fleet drill whose drill passed", (f) => f.passed],
    ["agentbak_fleet_drill_timestamp_seconds", "When the last fleet drill ran (Unix seconds)", (f) => Date.parse(f.at) / 1000],
  ];
  if (r.fleet.length)
    for (const [name, help, value] of fleet) {
      lines.push(`# TYPE ${name} gauge`, `# HELP ${name} ${help}`);
      for (const f of r.fleet) lines.push(`${name}{repository="${label(f.repository)}"} ${value(f)}`);
    }
  return `${lines.join("\n")}\n# EOF\n`;
}
