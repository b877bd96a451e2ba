/**
 * Human rendering of command results. A command's result (a listing, a plan,
 * a report) goes to stdout; progress, confirmations and warnings to stderr.
 */
import type { BackupReceipt } from "../capture/backup.js";
import type { CompactResult } from "../capture/compact.js";
import type { ExportResult } from "../capture/export.js";
import type { ChainVerifyResult } from "../crypto/chainlog.js";
import type { KeygenResult } from "../crypto/keys.js";
import type { ForgetResult } from "../repository/forget.js";
import type { CatalogEntry } from "../repository/repository.js";
import type { CopyResult } from "../repository/replicate.js";
import type { ActivateResult, FenceResult } from "../restore/activate.js";
import type { RestoreResult } from "../restore/apply.js";
import type { ReconcileResult } from "../restore/reconcile.js";
import type { Check } from "../bundle/extract.js";
import { safe } from "./escape.js";
import { bad, dim, isTTY, ok, out, say, table, warn } from "./output.js";
import { renderPlan } from "./plan.js";
import { humanSize } from "./progress.js";

/**
 * Said once, when keys are made: the identity is the only way to decrypt the
 * snapshots, and a host that dies takes it along unless it was copied off.
 */
function copyOffHost(dir: string): void {
  const d = safe(dir);
  warn(`copy the identity off this host now: without ${dir}/age-identity.txt no snapshot can be decrypted, and if this host is lost, so is it`);
  say(`  e.g. from another machine: scp 'THIS-HOST:${d}/{age-identity.txt,allowed_signers}' ~/agentbak-keys/  (then keep them offline or in a password manager)`);
  say(`  on a new host: copy both into AGENTBAK_HOME and run "agentbak key check --repo REPO" (docs/keys.md, "Host lost")`);
}

export function keygen(r: KeygenResult): void {
  ok(`keys written to ${r.dir}`);
  say(`  recipient: ${r.recipient}`);
  say(`  signer:    ${safe(r.principal)} ${r.signer_fingerprint}`);
  copyOffHost(r.dir);
}

/** What `agentbak key check` found (commands/key.ts's result, as much of it as is shown). */
interface KeyCheck {
  identities: { source: string; recipients: string[]; problem: string | null };
  recipients: { recipient: string; identity_here: boolean }[];
  signing_key: { fingerprint: string | null; trusted_here: boolean; problem: string | null };
  allowed_signers: { file: string; signers: { principals: string[]; fingerprint: string; revoked: boolean }[]; missing: boolean };
  latest: { snapshot_id: string; signer: string | null; status: string; problem: string | null } | null;
  restore_possible: boolean;
  problems: { message: string }[];
  warnings: string[];
}

export function keyCheck(r: KeyCheck): void {
  const mark = (good: boolean, line: string) => (good ? ok(line) : bad(line));
  mark(!r.identities.problem, r.identities.problem ?? `identity ${r.identities.source}: ${r.identities.recipients.join(", ")}`);
  for (const x of r.recipients) mark(x.identity_here, `config recipient ${x.recipient}: ${x.identity_here ? "an identity here opens it" : "no identity here opens it"}`);
  const live = r.allowed_signers.signers.filter((s) => !s.revoked);
  mark(live.length > 0, `allowed_signers ${r.allowed_signers.file}: ${r.allowed_signers.missing ? "does not exist" : `${live.length} signer(s)${r.allowed_signers.signers.length > live.length ? `, ${r.allowed_signers.signers.length - live.length} revoked` : ""}`}`);
  for (const s of r.allowed_signers.signers) say(`  ${s.principals.map(safe).join(",")} ${s.fingerprint}${s.revoked ? " (revoked)" : ""}`);
  say(`  signing key here: ${r.signing_key.fingerprint ? `${r.signing_key.fingerprint}${r.signing_key.trusted_here ? " (trusted)" : " (not trusted here)"}` : `none (${safe(r.signing_key.problem ?? "")}); needed to back up, not to restore`}`);
  if (r.latest) mark(r.latest.status === "ok", `latest snapshot ${safe(r.latest.snapshot_id)}: ${r.latest.status === "ok" ? `signed by ${safe(r.latest.signer ?? "?")}, verifies here` : safe(r.latest.problem ?? r.latest.status)}`);
  for (const w of r.warnings) warn(w);
  if (r.restore_possible) ok(`a restore is possible from here${r.latest ? "" : " (name a repository, --repo or -c, to check its latest snapshot too)"}`);
  else for (const p of r.problems) bad(`no restore from here: ${p.message}`);
}

export function init(r: { config: string; config_created: boolean; repository: string; repository_created: boolean; home: string; keys_created: boolean; databases: { name: string; path: string }[]; missing?: string[]; workspace: string | null }): void {
  ok(`${r.config_created ? "wrote" : "using"} ${r.config}`);
  say(`  repository: ${safe(r.repository)}${r.repository_created ? " (created)" : " (already there)"}`);
  say(`  keys:       ${safe(r.home)}${r.keys_created ? " (generated)" : ""}`);
  for (const d of r.databases) say(`  database:   ${safe(d.name)} = ${safe(d.path)}${r.missing?.includes(d.name) ? " (does not exist yet: a backup fails with 10 until it does)" : ""}`);
  if (r.workspace) say(`  workspace:  ${safe(r.workspace)}`);
  if (r.keys_created) copyOffHost(r.home);
  if (!r.databases.length && !r.workspace) say(`  next: name the agent's databases ("databases") or workspace in ${safe(r.config)}; until then a backup refuses: there is nothing to back up`);
}

export function backup(r: BackupReceipt): void {
  // quiet on success without a TTY (cron mails whatever is printed)
  if (r.status === "unchanged") {
    if (isTTY()) ok(`nothing changed since ${r.snapshot_id} (sequence ${r.sequence}); no new snapshot (--skip-if-unchanged)`);
    return;
  }
  if (isTTY() || r.repeated) {
    const what = r.status === "spooled" ? (r.repeated ? "already spooled" : "spooled") : r.repeated ? "already backed up" : "backed up";
    ok(`${what} ${r.agent_id} as ${r.snapshot_id} (${r.kind}, sequence ${r.sequence}, ${r.size} bytes)`);
    say(`  ${safe(r.path)}`);
    for (const n of r.not_captured ?? []) say(`  left out ${safe(n.path)} (${n.reason}: ${safe(n.detail)})`);
  }
}

/** Time since `iso`, in the largest unit that fits: 45s, 12m, 3h, 5d. */
export function humanAge(iso: string, now = Date.now()): string {
  const s = Math.max(0, Math.round((now - new Date(iso).getTime()) / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86_400)}d`;
}

/** The snapshot listing: 80 columns (label, status, then agent cut to fit), or every column with `wide`. */
export function snapshots(list: CatalogEntry[], wide = false): void {
  const status = (e: CatalogEntry) => (e.status === "ok" ? "ok" : `${e.status}: ${e.problem}`);
  if (wide) {
    table(
      ["SNAPSHOT", "TENANT", "AGENT", "SEQ", "KIND", "PARENT", "CREATED", "AGE", "SIZE", "LABEL", "STATUS"],
      list.map((e) => [e.snapshot_id, e.tenant ?? "-", e.agent_id, String(e.sequence ?? "-"), e.kind ?? "-", e.parent ?? "-", e.created_at?.replace(/\.\d+Z$/, "Z") ?? "-", e.created_at ? humanAge(e.created_at) : "-", humanSize(e.size), e.label ?? "", status(e)]),
    );
    return;
  }
  // the snapshot id holds its creation time; tenant, sequence, parent and the full time are in --wide and --json
  const labels = list.some((e) => e.label);
  const rows = list.map((e) => [e.snapshot_id, e.agent_id, e.kind === "incremental" ? "incr" : e.kind ?? "-", e.created_at ? humanAge(e.created_at) : "-", humanSize(e.size), ...(labels ? [e.label ?? ""] : []), status(e)]);
  table(["SNAPSHOT", "AGENT", "KIND", "AGE", "SIZE", ...(labels ? ["LABEL"] : []), "STATUS"], rows, { width: 80, shrink: labels ? [5, 6, 1] : [5, 1] });
  // a cut status must not hide why a snapshot can not be used: each one that is not ok is named in full below
  const unusable = list.filter((e) => e.status !== "ok");
  if (unusable.length) out("\n" + unusable.map((e) => `${safe(e.snapshot_id)} ${safe(status(e))}`).join("\n") + "\n");
}

export function verify(r: { snapshot_id: string; deep: boolean; checks: Check[] }): void {
  for (const c of r.checks) ok(`${c.name}: ${c.detail}`);
  out(`${safe(r.snapshot_id)} verified${r.deep ? "" : " (pass --identity to check the contents too)"}\n`);
}

export function restore(r: RestoreResult): void {
  if (!r.restored) renderPlan(r.plan, (line) => out(line + "\n"), false); // a dry run's plan is its result; its warnings follow
  else ok(`${r.repeated ? "already restored" : "restored"} ${r.plan.snapshot_id} into ${r.plan.target} at generation ${r.generation}; the agent is suspended until "agentbak activate --target ${r.plan.target}"`);
  // which check established each database's integrity: re-run here, or attested at backup for these bytes
  for (const c of r.checks) if (c.name.startsWith("integrity:")) ok(`${c.name}: ${c.detail}`);
  for (const x of r.sources ?? []) ok(`source ${x.name} (${x.kind}): ${x.detail}`);
  for (const w of r.warnings) warn(w);
}

export function activate(r: ActivateResult): void {
  ok(r.already_active ? `${r.agent_id} at ${r.target} is already active` : `activated ${r.agent_id} at generation ${r.generation}`);
}

export function reconcile(r: ReconcileResult): void {
  for (const op of r.operations) {
    const line = `${op.idempotency_key}${op.kind ? ` (${op.kind})` : ""} [${op.strategy}]: ${op.outcome} -> ${op.resolution}${op.applied ? `, recorded by ${op.applied}` : ""}${op.resolved ? "" : ` — ${op.detail}`}`;
    if (op.resolved) ok(line);
    else warn(line);
  }
  const s = r.summary;
  out(`${safe(r.agent_id)} generation ${r.generation}: ${s.operations} open operation(s): ${s.completed} completed, ${s.retry} to resend, ${s.escalated} escalated, ${s.unknown} unknown; ${s.unresolved} unresolved${s.unresolved ? " (activate refuses until they are resolved or accepted)" : ""}\n`);
}

export function fence(r: FenceResult): void {
  ok(`generation ${r.generation} is current`);
}

export function reportVerify(r: ChainVerifyResult & { agent?: string; agents?: string[] }): void {
  const of = r.agents ?? (r.agent ? [r.agent] : []);
  ok(`${r.entries} entries verified${of.length ? ` (${safe(of.join(", "))})` : ""}; head ${r.head_sha256.slice(0, 16)}…`);
}

export function forget(r: ForgetResult): void {
  for (const k of r.kept) out(`keep    ${safe(k.snapshot_id)}  ${dim(safe(k.reasons.join("; ")))}\n`);
  for (const id of r.removed) out(`${r.dry_run ? "would remove" : "remove"}  ${safe(id)}\n`);
  for (const n of r.not_removed) warn(`not removed ${n.snapshot_id}: ${n.reason}`);
  const c = r.chunks;
  if (c && "skipped" in c) warn(`chunks not swept: ${c.skipped}`);
  else if (c?.listed)
    out(`chunks  ${c.referenced} listed by kept snapshots, ${c.deleted} removed (${humanSize(c.deletedBytes)})${c.young ? `, ${c.young} unlisted kept (younger than the grace period)` : ""}${c.retained ? `, ${c.retained} kept by object lock retention` : ""}\n`);
}

export function compact(r: CompactResult): void {
  ok(r.already_full ? `${r.snapshot_id} is already a full snapshot` : `compacted ${r.replaces} into ${r.snapshot_id}`);
}

export function exportBundle(r: ExportResult): void {
  const what = [r.inlined ? `${r.inlined} chunked file(s) inlined` : "", r.rebuilt ? `${r.rebuilt} database(s) rebuilt whole` : ""].filter(Boolean).join(", ");
  ok(`exported ${safe(r.snapshot_id)} to ${safe(r.path)} (format ${r.format_version}, ${humanSize(r.size)}${what ? `; ${what}` : ""}), signed by ${safe(r.signer.principal)} ${r.signer.fingerprint}`);
}

export function copy(r: CopyResult): void {
  ok(`copied ${r.copied.length}, already there ${r.skipped.length} (${r.from} -> ${r.to})`);
}

/** One format on stdout: crontab lines and comments only (for `crontab -`), or the units, each under a comment naming its file. */
export function schedule(r: { crontab?: string[]; systemd?: Record<string, string>; warnings: string[] }): void {
  if (r.crontab) out(r.crontab.join("\n") + "\n");
  for (const [i, [name, body]] of Object.entries(r.systemd ?? {}).entries()) out(`${i ? "\n" : ""}# --- ${name} ---\n${body}`);
  for (const w of r.warnings) warn(w);
}
