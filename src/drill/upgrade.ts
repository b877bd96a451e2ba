/**
 * The upgrade drill: does the snapshot of version N recover under N+1? The
 * next version's own start command (the spec's `upgrade`, or `--upgrade-to`)
 * runs against a copy of the restored state, migrating it; then the
 * invariants, and every crash point replayed with that version's worker on
 * copies of the migrated state (scenarios `upgrade:<point>`).
 */
import { join } from "node:path";
import { openDefensive, userVersion } from "../state/sqlite/open.js";
import { runInvariants } from "./invariants.js";
import { crashScenario, type ScenarioPlan } from "./scenarios.js";
import { TestSink } from "./sink.js";
import type { CrashPoint } from "./spec.js";
import { workerStarter, writableCopy, type Bench, type Copy, type ScenarioResult } from "./worker.js";

/** What the report says about the upgrade. */
export interface UpgradeReport {
  /** version N: the snapshot's runtime.agent_version; its schema: the manifest's */
  from: { version: string | null; schema: number | null };
  /** version N+1: the spec's upgrade.version, else the first line its command prints for --version; its schema after migrating */
  to: { version: string; schema: number | null };
  /** whether the migration and every scenario under N+1 passed */
  recovers: boolean;
  /** what failed first, when it does not recover */
  failure: string | null;
}

/** The crash points replayed under the new version: all but the two that are about the upgrade itself. */
const replayed = (points: readonly CrashPoint[]) => points.filter((p) => p !== "during_migration" && p !== "old_backup_new_worker");

/**
 * The new version's name: the spec's, else what its command prints for --version (first line), else "unknown". The
 * command runs as the upgrade's worker does (workerStarter: its environment, sealed when the drill is), on `copy`.
 */
async function versionOf(b: Bench, copy: Copy): Promise<string> {
  const given = b.spec.spec.upgrade?.version;
  if (given) return given;
  const sink = new TestSink();
  const r = await workerStarter(b.spec, copy, { sinkUrl: await sink.start(), upgrade: true, seal: b.seal, args: ["--version"], workers: b.workers })(null).finally(() => sink.stop());
  const line = String(r.stdout).trim().split("\n")[0]?.trim().slice(0, 80);
  return r.exitCode === 0 && line ? line : "unknown";
}

/**
 * The upgrade pass. Never throws for a failed check (the log says so).
 * @returns the scenarios it ran (the migration, then one per crash point) and the upgrade's verdict
 */
export async function upgradeScenarios(b: Bench, p: ScenarioPlan & { agentVersion: string | null }): Promise<{ scenarios: ScenarioResult[]; upgrade: UpgradeReport }> {
  const { spec } = b.spec;
  const base = writableCopy(b.restored, join(b.tmp, "upgrade"), b.dbs);
  const upgrade: UpgradeReport = { from: { version: p.agentVersion, schema: p.schemaVersion }, to: { version: await versionOf(b, base), schema: null }, recovers: false, failure: null };
  const s0 = Date.now();
  const result: ScenarioResult = { scenario: "upgrade", ok: false, died_at_point: false, restarts: 0, effects: 0, receipt: null, seconds: 0 };
  const scenarios = [result];
  const check = (name: string, ok: boolean, detail: string) => {
    b.log.add({ scenario: "upgrade", phase: "migration", name, ok, severity: "error", detail });
    if (!ok) upgrade.failure ??= `${name}: ${detail}`;
    return ok;
  };
  // 1. the new version starts on the restored state: its own migration
  p.progress?.stage(`upgrade: ${upgrade.to.version} starts on the snapshot's state`);
  const sink = new TestSink();
  const r = await workerStarter(b.spec, base, { sinkUrl: await sink.start(), upgrade: true, seal: b.seal, workers: b.workers })(null).finally(() => sink.stop());
  const first = b.dbs[0] ? base.dbs.get(spec.inject?.database ?? b.dbs[0].name) : undefined;
  upgrade.to.schema = first ? readVersion(first) : null;
  const want = spec.upgrade?.schemaVersion;
  const started = r.exitCode === 0;
  const why = `${upgrade.to.version} exited ${r.exitCode ?? r.signal}${r.timedOut ? " (timed out)" : ""}: ${String(r.stderr).trim().split("\n").at(-1)?.slice(0, 300) ?? ""}`;
  const migrated = started && (want === undefined ? (upgrade.to.schema ?? 0) >= (p.schemaVersion ?? 0) : upgrade.to.schema === want);
  check("migration", migrated, started ? `user_version ${p.schemaVersion} -> ${upgrade.to.schema}${want !== undefined ? ` (expected ${want})` : ""} under ${upgrade.to.version}` : why);
  result.ok = migrated && b.log.invariants("upgrade", await runInvariants(b.invariants, base.dbs, p.sourceQueries), "migration");
  result.seconds = Math.round((Date.now() - s0) / 10) / 100;
  if (!result.ok) {
    upgrade.failure ??= "upgrade: an invariant failed after the migration";
    return { scenarios, upgrade };
  }
  // 2. every crash point again, with the new version's worker, on copies of the migrated state
  const migratedBench: Bench = { ...b, restored: base.dir, dbs: b.dbs.map((d) => ({ name: d.name, path: base.dbs.get(d.name)! })) };
  const points: (CrashPoint | "sink_kill")[] = [...replayed(spec.crashPoints), ...(spec.sinkKill ? ["sink_kill" as const] : [])];
  for (const [i, sc] of points.entries()) {
    p.progress?.stage(`scenario upgrade:${sc}`);
    const c = await crashScenario(migratedBench, sc, join(b.tmp, `upgrade-${i}`), p, { name: `upgrade:${sc}`, upgrade: true });
    scenarios.push(c.result);
    if (!c.result.ok) upgrade.failure ??= `upgrade:${sc}: ${b.log.checks.find((x) => x.scenario === `upgrade:${sc}` && !x.ok && x.severity === "error")?.name ?? "failed"}`;
  }
  upgrade.recovers = scenarios.every((s) => s.ok);
  return { scenarios, upgrade };
}

function readVersion(file: string): number | null {
  try {
    const db = openDefensive(file);
    try {
      return userVersion(db);
    } finally {
      db.close();
    }
  } catch {
    return null;
  }
}
