/**
 * The drill's scenarios, in the order they run: each crash point (and the
 * sink kill) replayed against the agent's own worker, then the reconciliation
 * scenarios and the split brain (recovery.ts). Each works on its own writable
 * copy of the restored root and records its checks in the drill's log.
 */
import { join } from "node:path";
import type { Config } from "../config/schema.js";
import type { OpenOperation, OpenOpsQuery } from "../reconcile/operations.js";
import { openDefensive, userVersion } from "../state/sqlite/open.js";
import { runInvariants, type SourceQuery } from "./invariants.js";
import { reconciliationScenarios, splitBrainScenario, type OperationReport } from "./recovery.js";
import { TestSink } from "./sink.js";
import type { CrashPoint } from "./spec.js";
import { injectTask, runUntilDone, taskCompleted, workerStarter, writableCopy, type Bench, type ScenarioResult, type WorkerFault } from "./worker.js";
import type { Progress } from "../progress.js";

/** What the scenarios add to the drill's result. */
export interface ScenarioOutcome {
  scenarios: ScenarioResult[];
  /** the sink's receipt for the test task, by crash scenario that ran to its end */
  receipts: Record<string, string | null>;
  /** the snapshot's open operations and what became of each in the reconciliation scenarios */
  operations: OperationReport[];
  /** how long the first healthy reconciliation took (part of the RTO); null when none ran */
  reconcileSeconds: number | null;
}

/** What the scenarios need beyond the bench. */
export interface ScenarioPlan {
  /** the snapshot's open operations, settled against the config */
  operations: OpenOperation[];
  /** how to reconcile them, when the spec asks for reconciliation */
  reconcile: { protocol: NonNullable<Config["reconcile"]>; openOps: OpenOpsQuery } | null;
  /** queries into the restored state sources, for invariants naming one */
  sourceQueries: Map<string, SourceQuery>;
  /** the snapshot's schema version (a migration scenario compares against it) */
  schemaVersion: number | null;
  progress?: Progress;
}

/** Runs the scenarios the spec asks for. Never throws for a failed check (the log says so). */
export async function runScenarios(b: Bench, p: ScenarioPlan): Promise<ScenarioOutcome> {
  const { spec } = b.spec;
  const out: ScenarioOutcome = { scenarios: [], receipts: {}, operations: p.operations.map((op) => ({ ...op, outcomes: [] })), reconcileSeconds: null };
  if (spec.worker && spec.inject) {
    const points: (CrashPoint | "sink_kill")[] = [...spec.crashPoints];
    if (spec.sinkKill) points.push("sink_kill");
    for (const [i, sc] of points.entries()) {
      p.progress?.stage(`scenario ${sc}`);
      const r = await crashScenario(b, sc, join(b.tmp, `run-${i}`), p);
      out.scenarios.push(r.result);
      if (r.ranToEnd) out.receipts[sc] = r.result.receipt;
    }
  }
  if (p.reconcile) {
    p.progress?.stage("reconciliation scenarios");
    const r = await reconciliationScenarios(b, p.operations, p.reconcile.protocol, p.reconcile.openOps);
    out.scenarios.push(...r.scenarios);
    out.operations = r.operations;
    out.reconcileSeconds = r.reconcileSeconds;
  }
  if (spec.splitBrain) {
    p.progress?.stage("scenario split_brain");
    out.scenarios.push(await splitBrainScenario(b));
  }
  return out;
}

/** How a crash scenario differs from the plain one: its name in the log, the worker it runs, a fault put on it. */
export interface CrashOptions {
  name?: string;
  /** run the upgraded worker (default: for during_migration and old_backup_new_worker) */
  upgrade?: boolean;
  fault?: WorkerFault;
}

/**
 * One crash point: the worker dies at it (or the sink kills it after
 * committing a delivery), invariants hold right after, restarts finish the
 * test task with exactly one effect at the sink, and one more restart changes
 * nothing. `old_backup_new_worker` and `during_migration` run the upgraded worker.
 * @returns the scenario's result, and whether it ran to its end (its receipt then goes in the report)
 */
export async function crashScenario(b: Bench, sc: CrashPoint | "sink_kill", dir: string, p: ScenarioPlan, o: CrashOptions = {}): Promise<{ result: ScenarioResult; ranToEnd: boolean }> {
  const s0 = Date.now();
  const { spec } = b.spec;
  const inject = spec.inject!;
  const name = o.name ?? sc;
  const upgrade = o.upgrade ?? (sc === "during_migration" || sc === "old_backup_new_worker");
  const copy = writableCopy(b.restored, dir, b.dbs);
  const dbMap = copy.dbs;
  const res: ScenarioResult = { scenario: name, ok: false, died_at_point: false, restarts: 0, effects: 0, receipt: null, seconds: 0 };
  const stopped = { result: res, ranToEnd: false };
  let phase = "setup";
  const check = (check: string, ok: boolean, detail: string) => {
    b.log.add({ scenario: name, phase, name: check, ok, severity: "error", detail });
    return ok;
  };
  const injected = injectTask(inject, copy);
  if (injected) {
    check("inject", false, injected);
    return stopped;
  }
  const sink = new TestSink();
  const start = workerStarter(b.spec, copy, { sinkUrl: await sink.start(), upgrade, seal: b.seal, workers: b.workers });
  const completed = () => taskCompleted(inject, copy);
  const armed = o.fault?.arm(copy) ?? { crashEnv: {}, restartEnv: {}, afterCrash: () => null };
  try {
    // 1. run until the worker dies at the point
    phase = "after_crash";
    const applyFault = () => {
      const faulted = armed.afterCrash();
      return faulted === null || check(`nemesis ${o.fault!.name}`, !faulted.startsWith("error: "), faulted);
    };
    if (sc === "old_backup_new_worker") {
      res.died_at_point = true;
      if (!applyFault()) return stopped;
    } else {
      let r;
      if (sc === "sink_kill") {
        // the sink commits the delivery, then kills the worker before answering
        const child = start(null, armed.crashEnv);
        sink.onNextPost = () => child.kill("SIGKILL");
        r = await child;
      } else r = await start(sc, armed.crashEnv);
      res.died_at_point = r.signal === "SIGKILL" && !r.timedOut;
      if (!check("died at crash point", res.died_at_point, res.died_at_point ? `worker killed with SIGKILL at ${sc}` : `worker exited ${r.exitCode ?? r.signal}${r.timedOut ? " (timed out)" : ""} without reaching ${sc}: ${String(r.stderr).trim().slice(0, 200)}`)) return stopped;
      if (!applyFault()) return stopped;
      // 2. invariants right after the crash
      b.log.invariants(name, await runInvariants(b.invariants, dbMap, p.sourceQueries), phase);
    }
    // 3. restart until it finishes
    phase = "after_recovery";
    const { finished, runs, last } = await runUntilDone(start, spec.restarts, armed.restartEnv);
    res.restarts = runs;
    check("worker recovers", finished, finished ? `finished after ${res.restarts} restart(s)` : `did not finish after ${res.restarts} restart(s); last ${last}`);
    if (upgrade) {
      const db = openDefensive(dbMap.get(inject.database)!);
      const uv = userVersion(db);
      db.close();
      const want = spec.upgrade?.schemaVersion;
      check("migration", want === undefined ? uv >= (p.schemaVersion ?? 0) : uv === want, `user_version ${p.schemaVersion} -> ${uv}${want !== undefined ? ` (expected ${want})` : ""}`);
    }
    const done = completed();
    check("task completed", done, done ? `${inject.taskId} is complete` : `${inject.taskId} is not complete (lost)`);
    let effects = sink.effectsFor(inject.taskId);
    res.effects = effects.length;
    res.receipt = effects[0]?.receipt ?? null;
    check("exactly one effect", effects.length === 1, `${effects.length} effect(s) at the sink for ${inject.taskId}${effects.length > 1 ? ` (keys ${effects.map((e) => e.key).join(", ")})` : ""}`);
    b.log.invariants(name, await runInvariants(b.invariants, dbMap, p.sourceQueries), phase);
    // 4. one more restart: still complete, still one effect
    phase = "after_restart";
    const again = await start(null, armed.restartEnv);
    effects = sink.effectsFor(inject.taskId);
    check("stable after restart", again.exitCode === 0 && completed() && effects.length === res.effects, `restart exit ${again.exitCode ?? again.signal}; complete ${completed()}; effects ${effects.length}`);
    res.ok = b.log.passed(name);
    return { result: res, ranToEnd: true };
  } finally {
    res.seconds = Math.round((Date.now() - s0) / 10) / 100;
    await sink.stop();
  }
}
