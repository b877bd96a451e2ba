/** Human rendering of a drill result (stderr). */
import type { DrillResult } from "../drill/runner.js";

type DrillCmdResult = DrillResult & { report_file: string | null; report_index: number | null };
import { bad, bold, dim, isTTY, ok, say, warn } from "./output.js";

export function renderDrill(r: DrillCmdResult): void {
  // quiet on success without a TTY, like backup: cron mails whatever is printed
  if (!isTTY() && r.ok && !r.warnings.length) return;
  say(bold(`drill ${r.spec}: snapshot ${r.snapshot_id} of ${r.agent_id} (sequence ${r.sequence})`));
  const scenarios = [...new Set(r.checks.map((c) => c.scenario))];
  for (const sc of scenarios) {
    say(bold(`  ${sc}`));
    const own = r.checks.filter((c) => c.scenario === sc);
    const invOk = own.filter((c) => c.name.startsWith("invariant:") && c.ok);
    if (invOk.length) ok(`  invariants: ${invOk.length} checks hold`);
    for (const c of own) {
      if (c.ok && c.name.startsWith("invariant:")) continue;
      line(c);
    }
  }
  function line(c: DrillCmdResult["checks"][number]): void {
    const line = `  ${c.name}: ${c.detail}`;
    if (c.ok) ok(line);
    else if (c.severity === "warning") warn(line);
    else if (c.severity === "info") say(dim(`  - ${line.trim()} (not a warning)`));
    else {
      bad(line);
      for (const row of c.sample ?? []) say(dim(`      ${JSON.stringify(row)}`));
    }
  }
  for (const op of r.open_operations) {
    const seen = op.outcomes.map((x) => `${x.scenario}: ${x.fault ? `lookups ${x.fault}` : x.seeded === "delivered" ? "delivered" : "never arrived"} -> ${x.resolution}, ${x.new_effects} new effect(s)`).join("; ");
    say(`  open operation ${op.idempotency_key}${op.kind ? ` (${op.kind})` : ""} [${op.strategy}]${seen ? `: ${seen}` : dim(": not reconciled in this drill")}`);
  }
  r.unresolved_owners.forEach((u) => say(dim(`  unresolved (owner ${u.owner}): ${u.difference}`)));
  say(`RPO ${(r.rpo_seconds / 60).toFixed(1)} min (snapshot age), RTO ${r.rto_seconds}s (restore, checks${r.open_operations.some((op) => op.outcomes.length) ? ", reconciliation" : ""}); recovery time ${r.recovery_seconds}s, total ${r.total_seconds}s${r.report_file ? `; report entry ${r.report_index} in ${r.report_file}` : ""}`);
  const failed = r.checks.filter((c) => !c.ok && c.severity === "error").length;
  const warned = r.warnings.length;
  if (r.ok) ok(`drill passed (${r.checks.length} checks)${warned ? ` with ${warned} warning(s); exit 3` : ""}`);
  else bad(`drill FAILED: ${failed} check(s) failed`);
}
