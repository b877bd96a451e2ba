/**
 * Reconciling open operations: for each operation sent without a receipt,
 * ask the provider by idempotency key, decide by its strategy (a pure
 * function), and write the outcome into the restored state with the
 * configured SQL. Shared by `agentbak reconcile` and the drill.
 */
import { strategyFor, type Strategy } from "../config/recovery.js";
import type { Config } from "../config/schema.js";
import { openDefensive, type DB } from "../state/sqlite.js";
import { probeWithRetries, type Probe, type ProbeState } from "./probe.js";

/** An open operation as a snapshot recorded it, with its strategy settled. */
export interface OpenOperation {
  id: string | number | null;
  idempotency_key: string;
  kind: string | null;
  strategy: Strategy;
}

/**
 * A snapshot's open operations with kind and strategy settled: the strategy
 * the manifest recorded, else the config's for the operation's kind (bundles
 * made before strategies were recorded).
 */
export const settleOperations = (ops: { id: string | number | null; idempotency_key: string; kind?: string | null; strategy?: Strategy }[], cfg: Config["openOperations"]): OpenOperation[] =>
  ops.map((o) => ({ id: o.id, idempotency_key: o.idempotency_key, kind: o.kind ?? null, strategy: o.strategy ?? strategyFor(o.kind, cfg) }));

/**
 * What happens to an operation: `completed` (the provider's receipt is
 * recorded), `retry` (queued to be resent under the same key), `escalated`
 * (held for a person), `unknown` (the provider could not tell; nothing
 * changed, nothing resent).
 */
export type Resolution = "completed" | "retry" | "escalated" | "unknown";

/** Whether a resolution lets the agent run without a person's say. */
export const isResolved = (r: Resolution) => r === "completed" || r === "retry";

export interface OperationResult extends OpenOperation {
  outcome: ProbeState;
  receipt: string | null;
  resolution: Resolution;
  resolved: boolean;
  attempts: number;
  /** the config key whose SQL wrote the outcome into the restored state */
  applied: "onCompleted" | "onRetry" | "onEscalate" | null;
  detail: string;
  at: string;
}

/**
 * The resolution of a probe outcome under a strategy. A completed operation is
 * recorded whatever the strategy; an operation the provider has no record of
 * is resent only when retry-safe (observe never resends, so a person decides);
 * an unknown one is never resent, and escalate hands it to a person.
 */
export function decide(strategy: Strategy, outcome: ProbeState): Resolution {
  if (outcome === "completed") return "completed";
  if (outcome === "not_found") return strategy === "retry-safe" ? "retry" : "escalated";
  return strategy === "escalate" ? "escalated" : "unknown";
}

const SQL_KEY = { completed: "onCompleted", retry: "onRetry", escalated: "onEscalate", unknown: null } as const;

/**
 * Probes every operation (one after the other), then writes each outcome into
 * the databases in `databases` (name -> restored file) with the configured
 * SQL, one transaction per operation. An outcome the SQL did not record (it
 * failed, or changed no row) leaves the operation unresolved, saying why.
 */
export async function reconcileOperations(ops: OpenOperation[], cfg: NonNullable<Config["reconcile"]>, probe: Probe, databases: Map<string, string>): Promise<OperationResult[]> {
  const results: OperationResult[] = [];
  for (const op of ops) {
    const o = await probeWithRetries(probe, op, cfg.attempts);
    const resolution = decide(op.strategy, o.state);
    results.push({ ...op, outcome: o.state, receipt: o.receipt, resolution, resolved: isResolved(resolution), attempts: o.attempts, applied: null, detail: o.detail, at: new Date().toISOString() });
  }
  const open = new Map<string, DB>();
  try {
    for (const r of results) {
      const key = SQL_KEY[r.resolution];
      const q = key ? cfg[key] : undefined;
      if (!key || !q) continue;
      const file = databases.get(q.database);
      if (!file) {
        unresolve(r, `${key}: no restored database named "${q.database}"`);
        continue;
      }
      let db = open.get(file);
      if (!db) open.set(file, (db = openDefensive(file, { readonly: false })));
      try {
        const stmt = db.prepare(q.sql);
        const params = { id: r.id, idempotency_key: r.idempotency_key, kind: r.kind, strategy: r.strategy, receipt: r.receipt, at: r.at };
        const changes = db.transaction(() => stmt.run(params).changes)();
        if (changes === 0) unresolve(r, `${key} changed no row (does its WHERE match :id ${JSON.stringify(r.id)}?)`);
        else r.applied = key;
      } catch (e) {
        unresolve(r, `${key} failed: ${(e as Error).message}`);
      }
    }
  } finally {
    for (const db of open.values()) db.close();
  }
  return results;
}

/** An outcome that could not be written into the state: the agent would act on the old state, so a person decides. */
function unresolve(r: OperationResult, why: string): void {
  r.resolved = false;
  r.detail = `${r.detail}; ${why}`;
}
