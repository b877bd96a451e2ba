/** Human rendering of a drill result (stderr). */
import type { ReportedDrill } from "../drill/report.js";
import type { FleetDrillResult } from "../drill/fleet.js";
import { safe } from "./escape.js";
import { bad, bold, dim, isTTY, ok, say, warn } from "./output.js";

export function renderDrill(r: ReportedDrill): void {
  // quiet on success without a TTY, like backup: cron mails whatever is printed
  if (!isTTY() && r.ok && !r.warnings.length) return;
  // names, details, sample rows, keys and owners come from the bundle, the agent's database, its worker or a provider: escaped as placed
  say(bold(`drill ${safe(r.spec)}: snapshot ${safe(r.snapshot_id)} of ${safe(r.agent_id)} (sequence ${r.sequence})`));
  const scenarios = [...new Set(r.checks.map((c) => c.scenario))];
  for (const sc of scenarios) {
    say(bold(`  ${safe(sc)}`));
    const own = r.checks.filter((c) => c.scenario === sc);
    const invOk = own.filter((c) => c.name.startsWith("invariant:") && c.ok);
    if (invOk.length) ok(`  invariants: ${invOk.length} checks hold`);
    for (const c of own) {
      if (c.ok && c.name.startsWith("invariant:")) continue;
      line(c);
    }
  }
  function line(c: ReportedDrill["checks"][number]): void {
    const line = `  ${c.name}: ${c.detail}`;
    if (c.ok) ok(line);
    else if (c.severity === "warning") warn(line);
    else if (c.severity === "info") say(dim(`  - ${safe(line.trim())} (not a warning)`));
    else {
      bad(line);
      for (const row of c.sample ?? []) say(dim(`      ${safe(JSON.stringify(row))}`));
    }
  }
  for (const op of r.open_operations) {
    const seen = op.outcomes.map((x) => `${x.scenario}: ${x.fault ? `lookups ${x.fault}` : x.seeded === "delivered" ? "delivered" : "never arrived"} -> ${x.resolution}, ${x.new_effects} new effect(s)`).join("; ");
    say(`  open operation ${safe(op.idempotency_key)}${op.kind ? ` (${safe(op.kind)})` : ""} [${safe(op.strategy)}]${seen ? `: ${safe(seen)}` : dim(": not reconciled in this drill")}`);
  }
  if (r.upgrade) {
    const u = r.upgrade;
    const line = `  upgrade: snapshot of ${u.from.version ?? "unknown version"} (schema ${u.from.schema}) under ${u.to.version} (schema ${u.to.schema}): ${u.recovers ? "recovers" : `does not recover (${u.failure})`}`;
    (u.recovers ? ok : bad)(line);
  }
  if (r.nemeses.length) say(bold("  nemesis matrix"));
  for (const c of r.nemeses) (c.result === "failed" ? bad : ok)(`  ${c.scenario} × ${c.nemesis}: ${c.result === "failed" ? `FAILED ${c.detail}` : `${c.result}: ${c.detail}`}`);
  r.unresolved_owners.forEach((u) => say(dim(`  unresolved (owner ${safe(u.owner)}): ${safe(u.difference)}`)));
  say(`RPO ${(r.rpo_seconds / 60).toFixed(1)} min (snapshot age), RTO ${r.rto_seconds}s (restore, checks${r.open_operations.some((op) => op.outcomes.length) ? ", reconciliation" : ""}); recovery time ${r.recovery_seconds}s, total ${r.total_seconds}s${r.report_file ? `; report entry ${r.report_index} in ${safe(r.report_file)}` : ""}`);
  const failed = r.checks.filter((c) => !c.ok && c.severity === "error").length;
  const warned = r.warnings.length;
  if (r.ok) ok(`drill passed (${r.checks.length} checks)${warned ? ` with ${warned} warning(s); exit 3` : ""}`);
  else bad(`drill FAILED: ${failed} check(s) failed`);
}

/** Human rendering of a fleet drill: one line per sampled agent, then the figure and the seed (always: the figure is the point). */
export function renderFleet(r: FleetDrillResult): void {
  for (const d of r.drills) {
    // ok() and bad() escape what they print
    const line = `  ${d.tenant}/${d.agent} at ${d.snapshot_id ?? "no snapshot"} (point ${d.at})`;
    if (d.result === "pass") ok(line);
    else bad(`${line}: ${d.detail ?? "failed"} (exit ${d.exit_status})`);
  }
  const figure = `fleet drill ${r.spec}: ${r.passed} of ${r.drilled} passed (of ${r.population} agents); recoverable ≥ ${r.lower_bound.toFixed(3)} (Clopper–Pearson, one-sided ${r.confidence * 100}%; Wilson ${r.lower_bound_wilson.toFixed(3)}); seed ${r.seed}`;
  (r.passed === r.drilled ? ok : bad)(figure);
  if (r.report_file) say(dim(`  fleet report entry ${r.report_index} in ${safe(r.report_file)}`));
}
