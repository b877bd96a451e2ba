/** Human rendering of a restore plan: stderr before a confirmation, stdout as a dry run's result. */
import { describeDifference } from "../bundle/runtime.js";
import type { RestorePlan } from "../restore/plan.js";
import { safe } from "./escape.js";
import { bad, bold, dim, say, warn } from "./output.js";

/**
 * Writes the plan line by line (stderr before a confirmation, by default);
 * `withWarnings: false` leaves the policy's warnings to a caller that prints
 * the result's warnings itself.
 */
export function renderPlan(p: RestorePlan, write: (line: string) => void = say, withWarnings = true): void {
  // nearly every field came from the bundle (its manifest, the agent's database) or the request: escaped as it is placed
  const $ = (v: unknown) => safe(String(v));
  write(bold(`Restore plan for ${$(p.agent_id)} (tenant ${$(p.tenant)})`));
  write(`  snapshot   ${$(p.snapshot_id)}  sequence ${p.sequence}  created ${$(p.created_at)} (${p.age_hours} h ago)`);
  write(`  target     ${$(p.target)}`);
  for (const w of p.writes) write(`  write      ${$(w.path)}  ${dim(`${$(w.kind)}, ${w.size} bytes`)}`);
  if (p.workspace) write(`  workspace  ${$(p.workspace.path)} at ${$(p.workspace.commit.slice(0, 12))}${p.workspace.branch ? ` (${$(p.workspace.branch)})` : ""}${p.workspace.dirty ? " + uncommitted changes" : ""}`);
  for (const x of p.sources) write(`  source     ${$(x.name)} (${$(x.kind)}, ${x.records} records at ${$(x.snapshot_at)}) into ${$(x.into)}${x.resolved ? "" : " — not resolved here"}`);
  for (const [k, v] of Object.entries(p.cursors)) write(`  cursor     ${$(k)} = ${$(v)}`);
  for (const o of p.open_operations) write(`  open op    ${$(o.id)} key ${$(o.idempotency_key)}${o.kind ? ` (${$(o.kind)})` : ""}  ${dim(`sent, no receipt: reconciled by strategy ${$(o.strategy)} before activation`)}`);
  for (const t of p.timers) write(`  timer      ${$(`${t.database}.${t.table}.${t.column}`)}  ${dim(t.mode === "shift" ? `shifted by ${Math.round(t.shift_ms! / 1000)} s (time since the snapshot)` : `leases still in the future end now (${new Date(t.format === "epoch_s" ? Number(t.to) * 1000 : (t.to as string | number)).toISOString()})`)}`);
  for (const c of p.credentials) write(`  credential ${$(c.name)} ${$(c.ref)}: ${$(c.status)}`);
  for (const n of p.not_captured) write(`  left out   ${$(n.path)}  ${dim(`${$(n.reason)}: ${$(n.detail)}`)}`);
  for (const d of p.policy.runtime) write(`  runtime    ${$(describeDifference(d))}  ${dim(d.compatible ? "(declared compatible)" : "(needs approval)")}`);
  write(`  generation ${p.next_generation}; the agent starts suspended`);
  if (withWarnings) for (const w of [...p.policy.warnings, ...p.policy.needs_approval]) warn(w);
  for (const r of p.policy.refusals) bad(`refused by policy: ${r}`);
}
