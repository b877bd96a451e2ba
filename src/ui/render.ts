/**
 * Human rendering of command results. A command's result (a listing, a plan,
 * a report) goes to stdout; progress, confirmations and warnings to stderr.
 */
import type { BackupReceipt } from "../capture/backup.js";
import type { CompactResult } from "../capture/compact.js";
import type { ChainVerifyResult } from "../crypto/chainlog.js";
import type { KeygenResult } from "../crypto/keys.js";
import type { ForgetResult } from "../repository/forget.js";
import type { CatalogEntry } from "../repository/repository.js";
import type { CopyResult } from "../repository/replicate.js";
import type { ActivateResult, FenceResult } from "../restore/activate.js";
import type { RestoreResult } from "../restore/apply.js";
import type { Check } from "../bundle/extract.js";
import { dim, isTTY, ok, out, say, table, warn } from "./output.js";
import { renderPlan } from "./plan.js";

export function keygen(r: KeygenResult): void {
  ok(`keys written to ${r.dir}`);
  say(`  recipient: ${r.recipient}`);
  say(`  signer:    ${r.principal} ${r.signerFingerprint}`);
}

export function init(r: { config: string; config_created: boolean; repository: string; repository_created: boolean; home: string; keys_created: boolean }): void {
  ok(`${r.config_created ? "wrote" : "using"} ${r.config}`);
  say(`  repository: ${r.repository}${r.repository_created ? " (created)" : " (already there)"}`);
  say(`  keys:       ${r.home}${r.keys_created ? " (generated)" : ""}`);
}

export function backup(r: BackupReceipt): void {
  // quiet on success without a TTY (cron mails whatever is printed)
  if (isTTY() || r.repeated) {
    ok(`${r.repeated ? "already backed up" : "backed up"} ${r.agent_id} as ${r.snapshot_id} (${r.kind}, sequence ${r.sequence}, ${r.size} bytes)`);
    say(`  ${r.path}`);
    for (const n of r.not_captured ?? []) say(`  left out ${n.path} (${n.reason}: ${n.detail})`);
  }
}

export function snapshots(list: CatalogEntry[]): void {
  table(
    ["SNAPSHOT", "TENANT", "AGENT", "SEQ", "KIND", "CREATED", "SIZE", "STATUS"],
    list.map((e) => [e.snapshot_id, e.tenant ?? "-", e.agent_id, String(e.sequence ?? "-"), e.kind ?? "-", e.created_at ?? "-", String(e.size), e.status === "ok" ? "ok" : `${e.status}: ${e.problem}`]),
  );
}

export function verify(r: { snapshot_id: string; deep: boolean; checks: Check[] }): void {
  for (const c of r.checks) ok(`${c.name}: ${c.detail}`);
  out(`${r.snapshot_id} verified${r.deep ? "" : " (pass --identity to check the contents too)"}\n`);
}

export function restore(r: RestoreResult): void {
  if (!r.restored) renderPlan(r.plan);
  else ok(`${r.repeated ? "already restored" : "restored"} ${r.plan.snapshot_id} into ${r.plan.target} at generation ${r.generation}; the agent is suspended until "agentbak activate --target ${r.plan.target}"`);
  for (const w of r.warnings) warn(w);
}

export function activate(r: ActivateResult): void {
  ok(r.already_active ? `${r.agent_id} at ${r.target} is already active` : `activated ${r.agent_id} at generation ${r.generation}`);
}

export function fence(r: FenceResult): void {
  ok(`generation ${r.generation} is current`);
}

export function reportVerify(r: ChainVerifyResult): void {
  ok(`${r.entries} entries verified; head ${r.head_sha256.slice(0, 16)}…`);
}

export function forget(r: ForgetResult): void {
  for (const k of r.kept) out(`keep    ${k.snapshot_id}  ${dim(k.reasons.join("; "))}\n`);
  for (const id of r.removed) out(`${r.dry_run ? "would remove" : "remove"}  ${id}\n`);
  for (const n of r.not_removed) warn(`not removed ${n.snapshot_id}: ${n.reason}`);
}

export function compact(r: CompactResult): void {
  ok(r.already_full ? `${r.snapshot_id} is already a full snapshot` : `compacted ${r.replaces} into ${r.snapshot_id}`);
}

export function copy(r: CopyResult): void {
  ok(`copied ${r.copied.length}, already there ${r.skipped.length} (${r.from} -> ${r.to})`);
}

export function schedule(r: { crontab: string[]; systemd: Record<string, string> }): void {
  out(r.crontab.join("\n") + "\n");
  for (const [name, body] of Object.entries(r.systemd)) out(`\n# --- ${name} ---\n${body}`);
}
