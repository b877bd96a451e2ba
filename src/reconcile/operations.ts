/**
 * Reconciling open operations: for each operation sent without a receipt,
 * ask the provider by idempotency key, decide by its strategy (a pure
 * function), and write the outcome into the restored state with the
 * configured SQL. Each operation has its own result; operations sharing a key
 * are asked about once and reconciled by the strictest strategy of theirs.
 * Shared by `agentbak reconcile`, `agentbak activate` and the drill.
 */
import { STRICTNESS } from "../config/recovery.js";
import type { Config } from "../config/schema.js";
import { openOperationRows } from "../state/inspect/inspect.js";
import { openDefensive, type DB } from "../state/sqlite/open.js";
import { probeWithRetries, type Probe, type ProbeOutcome, type ProbeState } from "./probe.js";
import { strategyFor, type Strategy } from "../facts.js";

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
 * made before strategies were recorded); then operations sharing an
 * idempotency key all take the strictest of their strategies (escalate >
 * observe > retry-safe): a resend under a key another operation also holds
 * is for a person to decide when that one must not be resent.
 */
export function settleOperations(ops: { id: string | number | null; idempotency_key: string; kind?: string | null; strategy?: Strategy }[], cfg: Config["openOperations"]): OpenOperation[] {
  const own = ops.map((o) => ({ id: o.id, idempotency_key: o.idempotency_key, kind: o.kind ?? null, strategy: o.strategy ?? strategyFor(o.kind, cfg) }));
  const strictest = new Map<string, Strategy>();
  for (const o of own) {
    const s = strictest.get(o.idempotency_key);
    if (!s || STRICTNESS[o.strategy] > STRICTNESS[s]) strictest.set(o.idempotency_key, o.strategy);
  }
  return own.map((o) => ({ ...o, strategy: strictest.get(o.idempotency_key)! }));
}

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

/** U+FFFD: what bytes that are not UTF-8 read as. A key holding it is not the key the agent sent, so no provider is asked about it. */
const NOT_UTF8 = "\uFFFD";
const NOT_ASKED: ProbeOutcome = { state: "unknown", receipt: null, detail: "its idempotency key holds U+FFFD (bytes that are not UTF-8 in the database): not the key the agent sent, never asked", attempts: 0 };

/**
 * Probes every operation (one after the other, each idempotency key once,
 * all of them within timeout × attempts: the ones left when it runs out are
 * not asked and stay unresolved),
 * then writes each outcome into the databases in `databases` (name ->
 * restored file) with the configured SQL, one transaction per operation.
 * @returns one result per operation of `ops`, in its order. An outcome the
 * SQL did not record (it failed, changed no row, or left the row among the
 * ones `openOps` still lists) leaves the operation unresolved, saying why.
 */
export async function reconcileOperations(ops: OpenOperation[], cfg: NonNullable<Config["reconcile"]>, openOps: OpenOpsQuery, probe: Probe, databases: Map<string, string>): Promise<OperationResult[]> {
  const asked = new Map<string, ProbeOutcome>();
  const results: OperationResult[] = [];
  // the whole reconcile, every operation's attempts together, takes at most timeout × attempts (issue 32 point 8)
  const deadline = Date.now() + cfg.timeoutSeconds * 1000 * cfg.attempts;
  for (const op of ops) {
    let o = asked.get(op.idempotency_key);
    if (!o) asked.set(op.idempotency_key, (o = op.idempotency_key.includes(NOT_UTF8) ? NOT_ASKED : await probeWithRetries(probe, op, cfg.attempts, deadline)));
    const resolution = decide(op.strategy, o.state);
    const sharing = ops.filter((x) => x.idempotency_key === op.idempotency_key).length;
    const detail = sharing > 1 ? `${o.detail}; key shared by ${sharing} open operations: asked once, each decided by the strictest strategy of theirs (${op.strategy})` : o.detail;
    results.push({ ...op, outcome: o.state, receipt: o.receipt, resolution, resolved: isResolved(resolution), attempts: o.attempts, applied: null, detail, at: new Date().toISOString() });
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
  // an outcome recorded, yet the state still lists the row as open: the agent would act on it again
  const still = stillOpen(results, openOps, databases);
  for (const [i, r] of results.entries()) if (r.resolved && still[i]) unresolve(r, `${r.applied} ran, but ${still[i]}`);
  return results;
}

/** The query that lists a state's open operations (config `openOperations`). */
export type OpenOpsQuery = Pick<NonNullable<Config["openOperations"]>, "database" | "sql">;

const identity = (o: { id: string | number | null; idempotency_key: string }) => JSON.stringify([o.id, o.idempotency_key]);

/**
 * Which of `ops` the restored state still lists as open: the open-operations
 * query is run again on the restored database (read-only), whatever any
 * record says. @returns for each operation why it is still open, or null;
 * when the query can not run, that reason for every operation.
 */
export function stillOpen(ops: readonly { id: string | number | null; idempotency_key: string }[], q: OpenOpsQuery, databases: Map<string, string>): (string | null)[] {
  if (!ops.length) return [];
  const file = databases.get(q.database);
  if (!file) return ops.map(() => `the restored state could not be re-read: no restored database named "${q.database}"`);
  let rows: Set<string>;
  try {
    const db = openDefensive(file);
    try {
      rows = new Set(openOperationRows(db, q.sql).map(identity));
    } finally {
      db.close();
    }
  } catch (e) {
    return ops.map(() => `the restored state could not be re-read: openOperations.sql failed: ${(e as Error).message}`);
  }
  return ops.map((o) => (rows.has(identity(o)) ? `still open in the restored database: openOperations.sql lists id ${JSON.stringify(o.id)}` : null));
}

/**
 * The rows the open-operations query lists now in the restored database that are none of `ops` (the snapshot's):
 * written into the restored state after the restore, never reconciled. Empty when the query can not run (stillOpen
 * says so for the recorded ones) or no database is restored under its name.
 */
export function openSinceRestore(ops: readonly { id: string | number | null; idempotency_key: string }[], q: OpenOpsQuery, databases: Map<string, string>): { id: string | number | null; idempotency_key: string; kind: string | null }[] {
  const file = databases.get(q.database);
  if (!file) return [];
  const known = new Set(ops.map(identity));
  try {
    const db = openDefensive(file);
    try {
      return openOperationRows(db, q.sql)
        .filter((r) => !known.has(identity(r)))
        .map((r) => ({ id: r.id, idempotency_key: r.idempotency_key, kind: r.kind ?? null }));
    } finally {
      db.close();
    }
  } catch {
    return [];
  }
}

/** An outcome that could not be written into the state: the agent would act on the old state, so a person decides. */
function unresolve(r: OperationResult, why: string): void {
  r.resolved = false;
  r.detail = `${r.detail}; ${why}`;
}
