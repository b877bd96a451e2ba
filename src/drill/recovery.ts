/**
 * The drill's recovery scenarios: what the agent might repeat after a
 * restore. Reconciliation runs the same code as `agentbak reconcile` against
 * the test sink, seeded so that each open operation is once "already
 * delivered" and once "never arrived", then the worker runs; reconciliation
 * under sink faults must leave everything unresolved and cause no duplicate;
 * and in a split brain the pre-restore and restored generations run at once
 * against a sink that rejects the lower one.
 */
import type { Config } from "../config/schema.js";
import { decide, reconcileOperations, type OpenOperation, type OpenOpsQuery, type Resolution } from "../reconcile/operations.js";
import { makeProbe, type ProbeState } from "../reconcile/probe.js";
import { runInvariants } from "./invariants.js";
import { TestSink, type LookupFault } from "./sink.js";
import { GENERATION, injectTask, runUntilDone, taskCompleted, workerStarter, writableCopy, type Bench, type ScenarioResult } from "./worker.js";

/** One open operation of the snapshot and what became of it in each reconciliation scenario. */
export interface OperationReport extends OpenOperation {
  outcomes: {
    scenario: string;
    seeded: "delivered" | "never_arrived";
    fault: LookupFault | null;
    outcome: ProbeState;
    resolution: Resolution;
    resolved: boolean;
    /** effects at the sink for its key after the worker ran, and how many there should be */
    new_effects: number;
    expected_effects: number;
  }[];
}

/** Effects the worker should cause for an operation after reconciliation: a queued resend, nothing else. */
const expectedEffects = (r: Resolution) => (r === "retry" ? 1 : 0);

/**
 * Runs the reconciliation scenarios the spec asks for.
 * @returns their results, the report of every operation, and how long the first healthy reconciliation took (part of the RTO).
 */
export async function reconciliationScenarios(
  b: Bench,
  ops: OpenOperation[],
  protocol: NonNullable<Config["reconcile"]>,
  openOps: OpenOpsQuery,
): Promise<{ scenarios: ScenarioResult[]; operations: OperationReport[]; reconcileSeconds: number | null }> {
  const { spec } = b.spec;
  const rounds: { name: string; delivered: (i: number) => boolean; fault: LookupFault | null }[] = [
    ...(spec.reconcile
      ? [
          { name: "reconcile_a", delivered: (i: number) => i % 2 === 0, fault: null },
          { name: "reconcile_b", delivered: (i: number) => i % 2 === 1, fault: null },
        ]
      : []),
    // a fault hits operations the provider did execute: the worst case for a duplicate
    ...spec.reconcileFaults.map((f) => ({ name: `reconcile_fault_${f}`, delivered: () => true, fault: f })),
  ];
  const operations: OperationReport[] = ops.map((op) => ({ ...op, outcomes: [] }));
  const scenarios: ScenarioResult[] = [];
  let reconcileSeconds: number | null = null;
  for (const round of rounds) {
    const s0 = Date.now();
    const sc = round.name;
    const check = (name: string, ok: boolean, detail: string) => (b.log.add({ scenario: sc, name, ok, severity: "error", detail }), ok);
    const res: ScenarioResult = { scenario: sc, ok: false, died_at_point: false, restarts: 0, effects: 0, receipt: null, seconds: 0 };
    scenarios.push(res);
    if (!ops.length) {
      res.ok = check("open operations", true, "the snapshot has no open operations: nothing the agent might repeat");
      continue;
    }
    const copy = writableCopy(b.restored, `${b.tmp}/${sc}`, b.dbs);
    const sink = new TestSink();
    const url = await sink.start();
    try {
      const seeded = new Map(ops.filter((_, i) => round.delivered(i)).map((op) => [op.idempotency_key, sink.seed(op.idempotency_key)]));
      sink.lookupFault = round.fault;
      const probe = makeProbe(protocol, { generation: GENERATION.restored, credential: () => "drill", sinkUrl: url });
      const r0 = Date.now();
      const results = await reconcileOperations(ops, protocol, openOps, probe, copy.dbs);
      if (!round.fault && reconcileSeconds === null) reconcileSeconds = (Date.now() - r0) / 1000;
      sink.lookupFault = null;
      check("reconciliation sends nothing", !sink.requests.some((q) => q.method === "POST"), `${sink.requests.filter((q) => q.method === "POST").length} delivery request(s) while reconciling`);
      const expected = ops.map((op) => {
        const outcome: ProbeState = round.fault ? "unknown" : seeded.has(op.idempotency_key) ? "completed" : "not_found";
        return { outcome, resolution: decide(op.strategy, outcome) };
      });
      results.forEach((r, i) => {
        const want = expected[i]!;
        const receiptOk = want.outcome !== "completed" || r.receipt === seeded.get(r.idempotency_key)!.receipt;
        check(
          `reconcile ${r.idempotency_key}`,
          r.outcome === want.outcome && r.resolution === want.resolution && receiptOk && (r.resolved || want.resolution === "escalated" || want.resolution === "unknown"),
          `${round.fault ? `lookups ${round.fault}; ` : `sink seeded ${seeded.has(r.idempotency_key) ? "already delivered" : "never arrived"}; `}strategy ${r.strategy}: ${r.outcome} -> ${r.resolution}${r.applied ? ` (${r.applied})` : ""}, expected ${want.outcome} -> ${want.resolution}; ${r.detail}`,
        );
        if (!round.fault && r.resolution === "escalated") b.log.unresolve(`${sc}: open operation ${r.idempotency_key} (${r.kind ?? "no kind"}, ${r.strategy}) escalated to a person: ${r.detail}`, `open_operation:${r.kind}`, "open_operation");
      });
      // the operator activates (accepting what is unresolved); the provider answers again
      const start = workerStarter(b.spec, copy, { sinkUrl: url, seal: b.seal, workers: b.workers });
      const done = await runUntilDone(start, spec.restarts);
      res.restarts = done.runs;
      check("worker runs after reconciliation", done.finished, done.finished ? `finished after ${done.runs} run(s)` : `did not finish after ${done.runs} run(s); last ${done.last}`);
      results.forEach((r, i) => {
        const n = sink.newEffectsFor(r.idempotency_key).length;
        const want = expectedEffects(expected[i]!.resolution);
        res.effects += n;
        check(`effects ${r.idempotency_key}`, n === want, `${n} new effect(s) for ${r.idempotency_key} after the worker ran, expected ${want} (${expected[i]!.resolution})`);
        operations[i]!.outcomes.push({
          scenario: sc,
          seeded: seeded.has(r.idempotency_key) ? "delivered" : "never_arrived",
          fault: round.fault,
          outcome: r.outcome,
          resolution: r.resolution,
          resolved: r.resolved,
          new_effects: n,
          expected_effects: want,
        });
      });
      b.log.invariants(sc, await runInvariants(b.invariants, copy.dbs));
    } finally {
      await sink.stop();
      res.seconds = Math.round((Date.now() - s0) / 10) / 100;
      res.ok = b.log.passed(sc);
    }
  }
  return { scenarios, operations, reconcileSeconds };
}

/**
 * Split brain: the pre-restore generation and the restored one work at once
 * on the same task against a sink that has learned the restored generation.
 * Passes when the restored worker finishes, the task has exactly one effect,
 * and the stale generation's write was rejected, none accepted.
 */
export async function splitBrainScenario(b: Bench): Promise<ScenarioResult> {
  const s0 = Date.now();
  const sc = "split_brain";
  const inject = b.spec.spec.inject!;
  const check = (name: string, ok: boolean, detail: string) => (b.log.add({ scenario: sc, name, ok, severity: "error", detail }), ok);
  const res: ScenarioResult = { scenario: sc, ok: false, died_at_point: false, restarts: 0, effects: 0, receipt: null, seconds: 0 };
  const stale = writableCopy(b.restored, `${b.tmp}/${sc}-stale`, b.dbs);
  const fresh = writableCopy(b.restored, `${b.tmp}/${sc}-restored`, b.dbs);
  const sink = new TestSink();
  try {
    for (const c of [stale, fresh]) {
      const why = injectTask(inject, c);
      if (why) return (check("inject", false, why), res);
    }
    const url = await sink.start();
    // activation raised the generation; the provider has seen the restored agent's token
    sink.fence(GENERATION.restored);
    const [old, cur] = await Promise.all([
      workerStarter(b.spec, stale, { sinkUrl: url, generation: GENERATION.stale, workerId: "pre-restore-worker", seal: b.seal, workers: b.workers })(null),
      workerStarter(b.spec, fresh, { sinkUrl: url, generation: GENERATION.restored, seal: b.seal, workers: b.workers })(null),
    ]);
    res.restarts = 1;
    const rejected = sink.requests.filter((q) => q.method === "POST" && q.status === 409);
    const staleAccepted = sink.effects.filter((e) => !e.seeded && (e.generation ?? 0) < GENERATION.restored);
    check("restored generation finishes", cur.exitCode === 0 && taskCompleted(inject, fresh), `restored worker exited ${cur.exitCode ?? cur.signal}; ${inject.taskId} ${taskCompleted(inject, fresh) ? "complete" : "not complete"}${cur.exitCode ? `: ${String(cur.stderr).trim().split("\n").at(-1)?.slice(0, 200)}` : ""}`);
    check(
      "stale write rejected",
      rejected.some((q) => (q.generation ?? 0) < GENERATION.restored),
      `${rejected.length} write(s) rejected (generations ${[...new Set(rejected.map((q) => q.generation ?? "none"))].join(", ") || "-"}); the pre-restore worker exited ${old.exitCode ?? old.signal}`,
    );
    check("no stale write accepted", staleAccepted.length === 0, `${staleAccepted.length} effect(s) accepted from a generation below ${GENERATION.restored}${staleAccepted.length ? ` (keys ${staleAccepted.map((e) => e.key).join(", ")})` : ""}`);
    const effects = sink.effectsFor(inject.taskId);
    res.effects = effects.length;
    res.receipt = effects[0]?.receipt ?? null;
    check("exactly one effect", effects.length === 1, `${effects.length} effect(s) at the sink for ${inject.taskId}`);
    b.log.invariants(sc, await runInvariants(b.invariants, fresh.dbs));
    return res;
  } finally {
    await sink.stop();
    res.seconds = Math.round((Date.now() - s0) / 10) / 100;
    res.ok = b.log.passed(sc);
  }
}
