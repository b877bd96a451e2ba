/**
 * `reconcile` at a restored target: each open operation of the snapshot is
 * asked about by idempotency key through the configured probe, and its
 * outcome written into the restored state, the target's .agentbak/ (a record
 * signed and bound to the restore record) and a signed receipt in the audit
 * log. The agent stays suspended throughout. Operations already resolved by
 * an earlier run are not asked again.
 */
import { join } from "node:path";
import { CREDENTIAL_PLACEHOLDER } from "../config/recovery.js";
import type { LoadedConfig } from "../config/load.js";
import type { SigningKey } from "../crypto/sshsig.js";
import { policyError, usageError } from "../errors.js";
import { makeProbe } from "../reconcile/probe.js";
import { reconcileOperations, settleOperations, type OperationResult } from "../reconcile/operations.js";
import { Repository } from "../repository/repository.js";
import { readCredential } from "../state/secrets/credentials.js";
import { appendReceipt } from "./receipt.js";
import { isSuspended, operationStatus, readReconcileRecord, summarize, writeReconcileRecord, type ReconcileSummary, type Target } from "./state.js";

export interface ReconcileResult {
  target: string;
  agent_id: string;
  tenant: string;
  snapshot_id: string;
  generation: number;
  /** every open operation with its latest result, in the snapshot's order */
  operations: OperationResult[];
  /** how many were asked about this time (the others were resolved before) */
  probed: number;
  summary: ReconcileSummary;
  receipt_signed: boolean;
}

/**
 * Reconciles the open operations of a suspended, current restore. Each
 * distinct key is asked at most `attempts` times, each attempt ending within
 * `timeoutSeconds`, with 0.25 s, 0.5 s, 1 s ... (at most 4 s) between them.
 * @throws AgentbakError: 2 no reconcile section or a credential can not be read, 11 a restore of the agent is
 *   running, 13 reconcile.json damaged, edited or of another restore, 14 already active or superseded.
 */
export async function reconcileTarget(t: Target, lc: LoadedConfig, repoOverride: string | undefined, key: SigningKey): Promise<ReconcileResult> {
  const rec = t.record;
  const target = t.dir;
  const cfg = lc.config.reconcile;
  if (!cfg) throw usageError(`config ${lc.path} has no reconcile section (the probe and the SQL that records outcomes)`);
  if (!isSuspended(target)) throw policyError(`${rec.agent_id} at ${target} is already active; reconciliation runs before activation`);
  if (!rec.databases) throw usageError(`${target} was restored by an older agentbak that did not record its databases; restore it again to reconcile`);
  const a = { tenant: rec.tenant, agent: rec.agent_id };
  const repoPath = repoOverride ?? rec.repository;
  const repo = repoPath ? await Repository.open(repoPath) : null;
  const lock = repo ? await repo.lock(a, "restore") : null;
  try {
    if (repo) {
      const cur = await repo.generation(a, t.trust);
      if (cur !== rec.generation) throw policyError(`generation ${rec.generation} of ${rec.agent_id} is superseded by generation ${cur}; reconcile the current restore instead`);
    }
    // credentials are read once, now, and live only in this process's memory
    const values = new Map<string, string>();
    for (const v of Object.values("http" in cfg.probe ? cfg.probe.http.headers : cfg.probe.env))
      for (const m of v.matchAll(CREDENTIAL_PLACEHOLDER)) {
        const c = lc.config.credentials.find((x) => x.name === m[1])!;
        values.set(c.name, readCredential(c.name, c.ref, lc.dir));
      }
    const probe = makeProbe(cfg, { generation: rec.generation, credential: (n) => values.get(n)! });
    // a config with a reconcile section has openOperations (the schema says so)
    const ops = settleOperations(rec.open_operations, lc.config.openOperations);
    const before = operationStatus(ops, readReconcileRecord(t)?.operations);
    const todo = before.flatMap((x, i) => (x.result?.resolved ? [] : [i]));
    const fresh = await reconcileOperations(
      todo.map((i) => ops[i]!),
      cfg,
      lc.config.openOperations!,
      probe,
      new Map(rec.databases.map((d) => [d.name, join(target, d.path)])),
    );
    const latest = new Map(todo.map((i, j) => [i, fresh[j]!]));
    const operations = before.map((x, i) => latest.get(i) ?? x.result!);
    const record = { snapshot_id: rec.snapshot_id, generation: rec.generation, reconciled_at: new Date().toISOString(), operations, summary: summarize(ops, operations) };
    const recordSha256 = writeReconcileRecord(t, record, key);
    const signed = await appendReceipt(
      repo,
      a,
      "reconcile",
      {
        kind: "reconcile-receipt",
        snapshot_id: rec.snapshot_id,
        agent_id: rec.agent_id,
        tenant: rec.tenant,
        target,
        generation: rec.generation,
        operations,
        probed: fresh.length,
        summary: record.summary,
        record_sha256: recordSha256,
        at: record.reconciled_at,
      },
      key,
    );
    return { target, agent_id: rec.agent_id, tenant: rec.tenant, snapshot_id: rec.snapshot_id, generation: rec.generation, operations, probed: fresh.length, summary: record.summary, receipt_signed: signed };
  } finally {
    await lock?.release();
  }
}
