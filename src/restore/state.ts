/** The markers a restore writes into a restored target, and reading them back. */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { AgentbakError, Exit, notFound } from "../errors.js";
import { writeFileAtomic, readFileRegular } from "../fsutil.js";
import type { OpenOperation, OperationResult } from "../reconcile/operations.js";

/** Files inside a restored target. */
export const MARKER_DIR = ".agentbak";
export const SUSPENDED = "SUSPENDED";

/** What a restore records inside the target. */
export interface TargetRecord {
  agent_id: string;
  tenant: string;
  snapshot_id: string;
  sequence: number;
  generation: number;
  repository: string;
  restored_at: string;
  open_operations: OpenOperation[];
  /** the restored databases, by config name, as paths inside the target (absent in records of agentbak before 0.2) */
  databases?: { name: string; path: string }[];
  /** the config the restore ran with: reconcile and activate use it when none is named */
  config?: string | null;
}

/** What `agentbak reconcile` records inside the target (.agentbak/reconcile.json). */
export interface ReconcileRecord {
  snapshot_id: string;
  generation: number;
  reconciled_at: string;
  operations: OperationResult[];
  summary: ReconcileSummary;
}

export interface ReconcileSummary {
  operations: number;
  completed: number;
  retry: number;
  escalated: number;
  unknown: number;
  /** operations a person must still decide (never reconciled, escalated, unknown, or not recorded) */
  unresolved: number;
}

/** Reads the restore record of a target. @throws AgentbakError(10) when the folder was not restored by agentbak. */
export function readTargetRecord(target: string): TargetRecord {
  const p = join(target, MARKER_DIR, "restore.json");
  if (!existsSync(p)) throw notFound(`${target} holds no agentbak restore record (${MARKER_DIR}/restore.json)`);
  let r: Partial<TargetRecord> | null;
  try {
    r = JSON.parse(readFileRegular(p, "utf8")) as Partial<TargetRecord> | null;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code && (e as NodeJS.ErrnoException).code !== "ENOTREG") throw e;
    r = null;
  }
  // written by restore and never edited: anything else is damage, and nothing here is guessed
  const ok =
    r && typeof r === "object" && typeof r.agent_id === "string" && typeof r.tenant === "string" && typeof r.snapshot_id === "string" && Number.isSafeInteger(r.generation) && Array.isArray(r.open_operations);
  if (!ok) throw new AgentbakError(Exit.verify, `${p} is damaged (not the record restore wrote); restore the snapshot again into a new folder`);
  return r as TargetRecord;
}

export const isSuspended = (target: string) => existsSync(join(target, MARKER_DIR, SUSPENDED));

const reconcilePath = (target: string) => join(target, MARKER_DIR, "reconcile.json");

/** The reconciliation recorded in a target, or null when `reconcile` never ran there. */
export function readReconcileRecord(target: string): ReconcileRecord | null {
  const p = reconcilePath(target);
  if (!existsSync(p)) return null;
  let r: ReconcileRecord | null = null;
  try {
    r = JSON.parse(readFileRegular(p, "utf8")) as ReconcileRecord;
  } catch {
    /* damaged: below */
  }
  if (!r || typeof r !== "object" || !Array.isArray(r.operations) || !r.operations.every((x) => x && typeof x === "object" && typeof x.idempotency_key === "string"))
    throw new AgentbakError(Exit.verify, `${p} is damaged; remove it and run agentbak reconcile --target ${target} again (every operation is asked about afresh)`);
  return r;
}

export const writeReconcileRecord = (target: string, r: ReconcileRecord) => writeFileAtomic(reconcilePath(target), JSON.stringify(r, null, 2) + "\n");

/** Each of the target's open operations with its latest result (none when never reconciled). */
export function operationStatus(rec: TargetRecord, results: OperationResult[] = []): { op: OpenOperation; result: OperationResult | null }[] {
  const byKey = new Map(results.map((x) => [x.idempotency_key, x]));
  return rec.open_operations.map((op) => ({ op, result: byKey.get(op.idempotency_key) ?? null }));
}

/** Counts for receipts and activation records. */
export function summarize(rec: TargetRecord, results: OperationResult[] = []): ReconcileSummary {
  const st = operationStatus(rec, results);
  const n = (res: string) => st.filter((x) => x.result?.resolution === res).length;
  return { operations: st.length, completed: n("completed"), retry: n("retry"), escalated: n("escalated"), unknown: n("unknown"), unresolved: st.filter((x) => !x.result?.resolved).length };
}
