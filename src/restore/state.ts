/**
 * State this host keeps for itself (AGENTBAK_HOME/state/<tenant>/<agent>.json:
 * highest checkpoint sequence and generation restored, highest sequence backed
 * up) and the markers written into a restored target.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { agentbakHome } from "../crypto/keys.js";
import { AgentbakError, Exit, notFound } from "../errors.js";
import { writeFileAtomic } from "../fsutil.js";
import type { AgentRef } from "../repository/repository.js";
import type { OpenOperation, OperationResult } from "../reconcile/operations.js";
import type { TrustedState } from "./policy.js";

const homeStatePath = (a: AgentRef) => join(agentbakHome(), "state", a.tenant, `${a.agent}.json`);
/** agentbak 0.1 kept one file per agent id, whatever the tenant: read as a floor */
const v1StatePath = (agent: string) => join(agentbakHome(), "state", `${agent}.json`);

/** The state file as written, so a writer keeps the fields it does not own. */
function readRaw(p: string): Record<string, unknown> {
  if (!existsSync(p)) return {};
  try {
    return JSON.parse(readFileSync(p, "utf8")) as Record<string, unknown>;
  } catch {
    throw new AgentbakError(Exit.failure, `trusted state ${p} is not JSON; it records the highest sequence restored here and must not be guessed`);
  }
}

function readState(p: string): TrustedState {
  const s = readRaw(p);
  return { highest_sequence: Number(s.highest_sequence) || 0, generation: Number(s.generation) || 0 };
}

/** The trusted state for `a`, or zeros when none was recorded. */
export function readTrustedState(a: AgentRef): TrustedState {
  const cur = readState(homeStatePath(a));
  const v1 = readState(v1StatePath(a.agent));
  return { highest_sequence: Math.max(cur.highest_sequence, v1.highest_sequence), generation: Math.max(cur.generation, v1.generation) };
}

/** Raises the trusted state (never lowers it). */
export function raiseTrustedState(a: AgentRef, seen: TrustedState): void {
  const cur = readTrustedState(a);
  const raw = readRaw(homeStatePath(a));
  writeFileAtomic(homeStatePath(a), JSON.stringify({ ...raw, highest_sequence: Math.max(cur.highest_sequence, seen.highest_sequence), generation: Math.max(cur.generation, seen.generation) }, null, 2) + "\n");
}

/**
 * This host's watermark for `a`: the highest sequence it has restored or
 * backed up. The next backup takes a sequence above it, so a new repository
 * does not restart at 1 (every restore from it would be a rollback).
 */
export function hostWatermark(a: AgentRef): number {
  return Math.max(readTrustedState(a).highest_sequence, Number(readRaw(homeStatePath(a)).highest_backup_sequence) || 0);
}

/**
 * Records that this host backed up `a` at `sequence` (never lowers it). Kept
 * apart from highest_sequence: restoring an older snapshot of one's own is an
 * operator's choice, not a rollback attack.
 */
export function raiseBackupWatermark(a: AgentRef, sequence: number): void {
  const raw = readRaw(homeStatePath(a));
  if ((Number(raw.highest_backup_sequence) || 0) >= sequence) return;
  writeFileAtomic(homeStatePath(a), JSON.stringify({ highest_sequence: 0, generation: 0, ...raw, highest_backup_sequence: sequence }, null, 2) + "\n");
}

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
  return JSON.parse(readFileSync(p, "utf8")) as TargetRecord;
}

export const isSuspended = (target: string) => existsSync(join(target, MARKER_DIR, SUSPENDED));

const reconcilePath = (target: string) => join(target, MARKER_DIR, "reconcile.json");

/** The reconciliation recorded in a target, or null when `reconcile` never ran there. */
export function readReconcileRecord(target: string): ReconcileRecord | null {
  const p = reconcilePath(target);
  if (!existsSync(p)) return null;
  try {
    return JSON.parse(readFileSync(p, "utf8")) as ReconcileRecord;
  } catch {
    throw new AgentbakError(Exit.verify, `${p} is not JSON; run agentbak reconcile --target ${target} again`);
  }
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
