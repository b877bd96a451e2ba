/** Human rendering of a restore plan (stderr). */
import type { RestorePlan } from "../restore/plan.js";
import { bold, dim, say, warn } from "./output.js";

export function renderPlan(p: RestorePlan): void {
  say(bold(`Restore plan for ${p.agent_id} (tenant ${p.tenant})`));
  say(`  snapshot   ${p.snapshot_id}  sequence ${p.sequence}  created ${p.created_at} (${p.age_hours} h ago)`);
  say(`  target     ${p.target}`);
  for (const w of p.writes) say(`  write      ${w.path}  ${dim(`${w.kind}, ${w.size} bytes`)}`);
  if (p.workspace) say(`  workspace  ${p.workspace.path} at ${p.workspace.commit.slice(0, 12)}${p.workspace.branch ? ` (${p.workspace.branch})` : ""}${p.workspace.dirty ? " + uncommitted changes" : ""}`);
  for (const [k, v] of Object.entries(p.cursors)) say(`  cursor     ${k} = ${v}`);
  for (const o of p.open_operations) say(`  open op    ${o.id} key ${o.idempotency_key}  ${dim("(sent, no receipt: reconcile before activation)")}`);
  for (const c of p.credentials) say(`  credential ${c.name} ${c.ref}: ${c.status}`);
  for (const n of p.not_captured) say(`  left out   ${n.path}  ${dim(`${n.reason}: ${n.detail}`)}`);
  say(`  generation ${p.next_generation}; the agent starts suspended`);
  for (const w of [...p.policy.warnings, ...p.policy.needsApproval]) warn(w);
}
