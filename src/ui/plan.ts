/** Human rendering of a restore plan (stderr). */
import { describeDifference } from "../bundle/runtime.js";
import type { RestorePlan } from "../restore/plan.js";
import { bold, dim, say, warn } from "./output.js";

export function renderPlan(p: RestorePlan): void {
  say(bold(`Restore plan for ${p.agent_id} (tenant ${p.tenant})`));
  say(`  snapshot   ${p.snapshot_id}  sequence ${p.sequence}  created ${p.created_at} (${p.age_hours} h ago)`);
  say(`  target     ${p.target}`);
  for (const w of p.writes) say(`  write      ${w.path}  ${dim(`${w.kind}, ${w.size} bytes`)}`);
  if (p.workspace) say(`  workspace  ${p.workspace.path} at ${p.workspace.commit.slice(0, 12)}${p.workspace.branch ? ` (${p.workspace.branch})` : ""}${p.workspace.dirty ? " + uncommitted changes" : ""}`);
  for (const [k, v] of Object.entries(p.cursors)) say(`  cursor     ${k} = ${v}`);
  for (const o of p.open_operations) say(`  open op    ${o.id} key ${o.idempotency_key}${o.kind ? ` (${o.kind})` : ""}  ${dim(`sent, no receipt: reconciled by strategy ${o.strategy} before activation`)}`);
  for (const t of p.timers) say(`  timer      ${t.database}.${t.table}.${t.column}  ${dim(t.mode === "shift" ? `shifted by ${Math.round(t.shift_ms! / 1000)} s (time since the snapshot)` : `leases still in the future end now (${new Date(t.format === "epoch_s" ? Number(t.to) * 1000 : (t.to as string | number)).toISOString()})`)}`);
  for (const c of p.credentials) say(`  credential ${c.name} ${c.ref}: ${c.status}`);
  for (const d of p.policy.runtime) say(`  runtime    ${describeDifference(d)}  ${dim(d.compatible ? "(declared compatible)" : "(needs approval)")}`);
  say(`  generation ${p.next_generation}; the agent starts suspended`);
  for (const w of [...p.policy.warnings, ...p.policy.needsApproval]) warn(w);
}
