/**
 * Lifting the suspension of a restored agent, and fencing checks. Activation
 * trusts only signed records (the restore's and the reconciliation's), and
 * refuses while the restore is superseded, while an open operation is
 * unresolved — by the reconciliation record, or because the restored
 * database still lists it as open — (unless accepted with a reason), and
 * while the original runtime answers alive (unless the operator confirms it
 * is isolated). The activation record, and every refusal, is signed into the
 * agent's audit log.
 */
import { rmSync } from "node:fs";
import { userInfo } from "node:os";
import { join } from "node:path";
import type { LoadedConfig } from "../config/load.js";
import { fingerprint, type SigningKey } from "../crypto/sshsig.js";
import type { Trust } from "../crypto/trust.js";
import { AgentbakError, Exit, policyError, usageError } from "../errors.js";
import { openSinceRestore, settleOperations, stillOpen, type OpenOperation, type OperationResult } from "../reconcile/operations.js";
import { Repository } from "../repository/repository.js";
import { unreachableWarning } from "../repository/generation.js";
import { readTrustedState } from "../state/watermark.js";
import { checkLiveness, type LivenessAnswer } from "./liveness.js";
import { appendReceipt } from "./receipt.js";
import { checkActivationRecord, isSuspended, MARKER_DIR, operationStatus, readReconcileRecord, readTargetRecord, summarize, SUSPENDED, writeActivationRecord, type ReconcileSummary, type Target, type TargetRecord } from "./state.js";
import { agentbakHome } from "../home.js";

/** An open operation that still needs a person: never reconciled, escalated, unknown, or its outcome not recorded. */
export interface Unresolved extends OpenOperation {
  why: string;
}

/** What the operator is asked to confirm. */
export interface ActivationCheck {
  record: TargetRecord;
  unresolved: Unresolved[];
  liveness: LivenessAnswer[];
}

export interface ActivateOptions {
  /** the repository, when not the one the restore recorded */
  repo?: string;
  signingKey: SigningKey | null;
  /** the agent's config: runtime.liveness, and openOperations (the restored database is asked again) */
  lc?: LoadedConfig;
  /** accept unresolved operations, for this reason */
  acceptUnresolved?: string;
  /** the operator confirms the original runtime is isolated although it answers alive */
  isolated?: boolean;
  confirm: (c: ActivationCheck) => Promise<boolean>;
}

export interface ActivateResult {
  target: string;
  agent_id: string;
  generation: number;
  open_operations: TargetRecord["open_operations"];
  reconciliation: ReconcileSummary;
  unresolved: Unresolved[];
  accepted_unresolved: string | null;
  liveness: LivenessAnswer[];
  activated: boolean;
  already_active: boolean;
  receipt_signed: boolean;
  /** what an operator must know about this activation (the command exits 3 when there is any) */
  warnings: string[];
}

const why = (r: OperationResult | null) =>
  !r ? "never reconciled" : r.resolved ? "" : r.resolution === "escalated" ? `escalated: ${r.detail}` : r.resolution === "unknown" ? `unknown: ${r.detail}` : `outcome not recorded: ${r.detail}`;

/**
 * Why each of the target's open operations is still open in its restored database (null: it is not), whatever
 * any record says: the config's open-operations query, run again.
 */
function openInState(t: Target, lc: LoadedConfig | undefined): { recorded: (string | null)[]; since: Unresolved[] } {
  const { open_operations: ops, databases } = t.record;
  const q = lc?.config.openOperations;
  if (!q || !databases) return { recorded: ops.map(() => `the restored database was not re-read: ${q ? "the restore did not record its databases" : "no openOperations query in the config"}`), since: [] };
  const files = new Map(databases.map((d) => [d.name, join(t.dir, d.path)]));
  // a row the query lists that the snapshot did not (written into the restored state since): never reconciled
  const since = settleOperations(openSinceRestore(ops, q, files), q).map((o) => ({ ...o, why: `listed by openOperations.sql in the restored database, not in the snapshot: never reconciled (id ${JSON.stringify(o.id)})` }));
  return { recorded: stillOpen(ops, q, files), since };
}

/**
 * Lifts the suspended marker of a restored target.
 * @throws AgentbakError: 2 --reason missing or empty, 13 reconcile.json damaged, unsigned, edited or of another
 *   restore, 14 superseded, unresolved operations, original runtime alive, or not confirmed.
 */
export async function activate(t: Target, o: ActivateOptions): Promise<ActivateResult> {
  if (o.acceptUnresolved !== undefined && !o.acceptUnresolved.trim()) throw usageError("--accept-unresolved needs --reason TEXT: why the unresolved operations are accepted");
  const { record: rec, dir: target } = t;
  const results = readReconcileRecord(t)?.operations;
  const open = openInState(t, o.lc);
  const unresolved = operationStatus(rec.open_operations, results).flatMap((x, i) => {
    const reason = x.result?.resolved ? open.recorded[i] : why(x.result);
    return reason ? [{ ...x.op, why: reason }] : [];
  });
  unresolved.push(...open.since);
  const base = {
    target,
    agent_id: rec.agent_id,
    generation: rec.generation,
    open_operations: rec.open_operations,
    // what activation counts as unresolved: the record's, and what the restored state still lists as open
    reconciliation: { ...summarize(rec.open_operations, results), unresolved: unresolved.length },
    unresolved,
    accepted_unresolved: null,
    liveness: [] as LivenessAnswer[],
    receipt_signed: false,
    warnings: [] as string[],
  };
  const suspended = isSuspended(target);
  // "already active" only for a restore agentbak activated: a marker removed by hand is not an activation
  if (!suspended) checkActivationRecord(t);
  const repoPath = o.repo ?? rec.repository;
  const repo = repoPath ? await Repository.open(repoPath) : null;
  const a = { tenant: rec.tenant, agent: rec.agent_id };
  const key = o.signingKey;
  const who = { principal: key ? key.comment || "agentbak" : null, signer: key ? fingerprint(key.publicKey) : null, os_user: osUser() };
  const refuse = async (reason: string) => {
    await appendReceipt(repo, a, "activate-refused", { kind: "activation-refusal", snapshot_id: rec.snapshot_id, target, generation: rec.generation, who, reason, at: new Date().toISOString() }, key);
    return policyError(reason);
  };
  if (repo) {
    const view = await repo.generations(a, t.trust);
    const cur = view.highest;
    if (cur !== rec.generation) throw await refuse(`generation ${rec.generation} of ${rec.agent_id} is superseded by generation ${cur}; this restore must not ${suspended ? "be activated" : "keep running: stop it"}`);
    if (view.forked) throw await refuse(`${view.forked}: no holder of it may run; ${suspended ? "restore again to issue a generation above it" : "stop it, and restore again"}`);
  }
  if (!suspended) return { ...base, activated: false, already_active: true };
  if (unresolved.length && o.acceptUnresolved === undefined) {
    const list = unresolved.slice(0, 3).map((u) => `${u.idempotency_key} (${u.why})`).join("; ");
    throw await refuse(`${unresolved.length} open operation(s) unresolved: ${list}${unresolved.length > 3 ? "; ..." : ""}; run agentbak reconcile --target ${target}, or pass --accept-unresolved --reason TEXT`);
  }
  const liveness = o.lc?.config.runtime.liveness ? await checkLiveness(o.lc.config.runtime.liveness, o.lc.resolve) : [];
  const notStopped = liveness.filter((l) => l.state !== "stopped");
  if (notStopped.length && !o.isolated)
    throw await refuse(`the original runtime may still run (${notStopped.map((l) => `${l.how}: ${l.state}, ${l.detail}`).join("; ")}); stop it, or pass --isolated once it can no longer reach the outside world`);
  if (!(await o.confirm({ record: rec, unresolved, liveness }))) throw await refuse("activation not confirmed");
  const at = new Date().toISOString();
  const record = {
    kind: "activation-record",
    snapshot_id: rec.snapshot_id,
    agent_id: rec.agent_id,
    tenant: rec.tenant,
    target,
    generation: rec.generation,
    who,
    at,
    reconciliation: base.reconciliation,
    unresolved: unresolved.map(({ id, idempotency_key, kind, strategy, why }) => ({ id, idempotency_key, kind, strategy, why })),
    accepted_unresolved: o.acceptUnresolved === undefined ? 0 : unresolved.length,
    reason: o.acceptUnresolved ?? null,
    liveness,
    isolated: Boolean(o.isolated),
  };
  writeActivationRecord(t, record, key);
  rmSync(join(target, MARKER_DIR, SUSPENDED));
  const signed = await appendReceipt(repo, a, "activate", record, key);
  const warnings: string[] = [];
  if (record.accepted_unresolved) warnings.push(`activated with ${record.accepted_unresolved} open operation(s) accepted unresolved (reason: ${o.acceptUnresolved}); the agent may repeat or miss them`);
  if (notStopped.length) warnings.push(`activated while the original runtime answers ${notStopped.map((l) => `${l.how}: ${l.state}`).join(", ")} (--isolated)`);
  if (!signed) warnings.push("no signing key: the activation record is recorded unsigned");
  return { ...base, accepted_unresolved: o.acceptUnresolved ?? null, liveness, activated: true, already_active: false, receipt_signed: signed, warnings };
}

function osUser(): string | null {
  try {
    return userInfo().username;
  } catch {
    return process.env.USER ?? null;
  }
}

export interface FenceResult {
  agent_id: string;
  generation: number;
  current: number;
  ok: boolean;
  /** linked replicas that could not be read (a newer generation there is not seen), a generation resting on entries no trusted key signed: the command exits 3 */
  warnings: string[];
}

/**
 * Checks a generation number against the agent's current one: the highest of
 * the repository's generation log and record, those of the replicas copy
 * linked it with, and this host's trusted state; log entries are checked
 * against `trust`.
 * @throws AgentbakError(14) naming both numbers when `generation` is superseded or was never issued;
 *   (13) naming a log entry changed or missing, or the record when it is damaged.
 */
export async function fenceCheck(target: string, generation: number, trust: Trust, repoOverride?: string): Promise<FenceResult> {
  const rec = readTargetRecord(target);
  const repoPath = repoOverride ?? rec.repository;
  if (!repoPath) throw new AgentbakError(Exit.usage, "no repository recorded for this target: pass --repo");
  const a = { tenant: rec.tenant, agent: rec.agent_id };
  const view = await (await Repository.open(repoPath)).generations(a, trust);
  const current = Math.max(view.highest, readTrustedState(agentbakHome(), a).generation);
  // a number above the current one was never issued: not "superseded", and never accepted
  if (generation > current) throw policyError(`fenced: generation ${generation} of ${rec.agent_id} is unknown: never issued (current generation is ${current})`);
  if (generation !== current) throw policyError(`fenced: generation ${generation} of ${rec.agent_id} is superseded (current generation is ${current})`);
  if (view.forked && view.highest === generation) throw policyError(`fenced: ${view.forked}: no holder of it is current; restore again to issue generation ${generation + 1}`);
  return { agent_id: rec.agent_id, generation, current, ok: true, warnings: [...view.unreachable.map(unreachableWarning), ...view.warnings] };
}
