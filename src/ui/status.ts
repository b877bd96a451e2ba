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
import { humanSize } from "./render.js";

const WIDTH = 80;
const fit = (s: string) => (s.length > WIDTH ? `${s.slice(0, WIDTH - 1)}…` : s);
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
    `  requests    ${a.pending_requests.length ? `${a.pending_requests.length} pending: ${a.pending_requests.map((r) => r.request_id).join(", ")}` : "none pending"}`,
    `  operations  ${u ? `${u.unresolved} of ${u.operations} unresolved after the restore into ${safe(u.target)}` : "no restore recorded"}`,
    `  spool       ${a.spool ? `${a.spool.bundles} bundle(s), ${humanSize(a.spool.bytes)}` : "- (a folder repository does not spool)"}`,
    `  stored      ${humanSize(a.bytes)} in ${a.snapshots.length} verified snapshot(s)`,
  ];
  for (const c of a.checks) if (c.state !== "ok") lines.push(`  ${c.state === "fail" ? "✗" : "!"} ${c.name}: ${safe(c.detail)}`);
  return lines.map(fit);
}

/** Prints the report to stdout: each agent, then the repository. */
export function statusScreen(r: StatusReport): void {
  if (!r.agents.length) out("no agents in this repository\n");
  for (const a of r.agents) {
    const [head, ...rest] = statusLines(a);
    out(`${bold(head!)}\n${rest.join("\n")}\n\n`);
  }
  out(fit(`repository  ${safe(r.repository.location)}  ${humanSize(r.repository.bytes)}`) + "\n");
}
