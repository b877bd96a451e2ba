/**
 * The drill: restore a bundle into a fresh temp folder, check it, and replay
 * crash-point scenarios against the agent's own worker with delivery pointed
 * at a local test sink. Never touches the live agent; always cleans up.
 */
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { LinkSource } from "../bundle/chain.js";
import { extractAndCheck, type Check } from "../bundle/extract.js";
import { verifyBundle, type VerifiedBundle } from "../bundle/reader.js";
import type { AgeIdentity } from "../crypto/age.js";
import type { Trust } from "../crypto/trust.js";
import { onInterrupt, removeTree } from "../cleanup.js";
import { pidDir, sweepDead } from "../fsutil.js";
import { checkCredentials } from "../state/secrets/credentials.js";
import { foreignKeyCheck, openDefensive, userVersion, vec0Dimensions } from "../state/sqlite/open.js";
import { loadInvariants, runInvariants, type Invariant, type InvariantResult, type SourceQuery } from "./invariants.js";
import { embeddingChanges, type Embedding } from "../bundle/manifest.js";
import { parseSourceFlags, restoreSources } from "../bundle/sources.js";
import type { ExtractedSource } from "../bundle/extract.js";
import { driverFor, type Throwaway } from "../state/sources/index.js";
import { TestSink } from "./sink.js";
import { describeDifference, runtimeDifferences, type RuntimeDifference } from "../bundle/runtime.js";
import type { Config } from "../config/schema.js";
import { policyError, usageError } from "../errors.js";
import { settleOperations } from "../reconcile/operations.js";
import { reconciliationScenarios, splitBrainScenario, type OperationReport, type RecoveryBench } from "./recovery.js";
import type { CrashPoint, LoadedSpec } from "./spec.js";
import { injectTask, makeReadOnly, runUntilDone, taskCompleted, workerStarter, writableCopy, type DrillCheck, type ScenarioResult } from "./worker.js";

export type { DrillCheck, ScenarioResult } from "./worker.js";

export interface DrillResult {
  ok: boolean;
  /** the failed warning checks, one line each */
  warnings: string[];
  spec: string;
  snapshot_id: string;
  agent_id: string;
  tenant: string;
  sequence: number;
  manifest_sha256: string;
  runtime: VerifiedBundle["manifest"]["runtime"];
  schema: { manifest: number | null; restored: Record<string, number> };
  integrity: Record<string, string>;
  credentials: { name: string; ref: string; status: string }[];
  cursors: { name: string; manifest: unknown; restored: unknown; ok: boolean }[];
  test_task_id: string | null;
  receipts: Record<string, string | null>;
  recovery_seconds: number;
  total_seconds: number;
  checks: DrillCheck[];
  scenarios: ScenarioResult[];
  unresolved: string[];
  /** who owns each unresolved difference (spec owners, then the config's; by category, then default) */
  unresolved_owners: { difference: string; owner: string }[];
  /** the snapshot's open operations and what became of each in the reconciliation scenarios */
  open_operations: OperationReport[];
  /** how the snapshot's runtime differs from the config's (approved with --allow-runtime-change) */
  runtime_differences: RuntimeDifference[];
  /** the snapshot's age when the drill started (the data it would lose: RPO) */
  rpo_seconds: number;
  /** restore and checks, plus the first reconciliation: the time to a recovered, reconciled agent (RTO) */
  rto_seconds: number;
  objectives: { rpoMinutes?: number; rtoSeconds?: number } | null;
}

export interface DrillOptions {
  bundle: { path: string; links: LinkSource };
  spec: LoadedSpec;
  trust: Trust;
  identities: () => AgeIdentity[];
  /**
   * How credential references resolve, as at restore: relative `file:` against
   * the agent's folder (not the temp restore), other schemes through the
   * config's `restore.credentialCheck`; `warn: false` records one that does not
   * resolve without a warning (cron's environment lacks the agent's variables).
   */
  credentials: { root: string; checkers?: Record<string, string[]>; warn: boolean };
  /** the agent's config, when there is one: strategies, reconcile, objectives, owners, runtime */
  config?: Config;
  /** drill a snapshot made under another runtime than the config's */
  allowRuntimeChange?: boolean;
  progress?: (t: string) => void;
  /** `--source NAME=URL`: an empty server for a source instead of a throwaway one */
  sources?: string[];
  /** the embedding models configured for the agent (by database or source name), when a config is known */
  embeddings?: Map<string, Embedding | undefined>;
  allowEmbeddingChange?: boolean;
}

const DRILL_PREFIX = "agentbak-drill";

/** Removes temp folders of drills whose process is gone (kill -9). */
export const sweepDrillTemps = () => {
  sweepDead(tmpdir(), `${DRILL_PREFIX}-`);
  // throwaway servers of a drill run as root live in /tmp when the temp folder is private (state/sources/common.ts)
  if (process.getuid?.() === 0) sweepDead("/tmp", `${DRILL_PREFIX}-`);
};

function blobSafe(rows: unknown[]): unknown[] {
  return rows.map((r) =>
    r && typeof r === "object" ? Object.fromEntries(Object.entries(r).map(([k, v]) => [k, Buffer.isBuffer(v) ? `<blob ${v.length} bytes>` : v])) : r,
  );
}

/**
 * Runs a drill. Never throws for a failed check (the result says so); throws
 * AgentbakError when the drill can not run (not found, verification, keys),
 * and (14) for vectors of another embedding model than the config's without
 * --allow-embedding-change.
 * 2 when the spec asks for reconciliation and no config says how, 14 when
 * the snapshot's runtime differs from the config's without approval.
 */
export async function runDrill(o: DrillOptions): Promise<DrillResult> {
  const t0 = Date.now();
  const { spec } = o.spec;
  const protocol = o.config?.reconcile;
  if ((spec.reconcile || spec.reconcileFaults.length) && !protocol)
    throw usageError(`drill spec ${o.spec.path} asks for reconciliation, but no config with a reconcile section was given (pass -c)`);
  sweepDrillTemps();
  const v = await verifyBundle(o.bundle.path, o.trust);
  const m = v.manifest;
  const embeddings = o.embeddings ? embeddingChanges(m, o.embeddings) : { changes: [], unknown: [] };
  if (embeddings.changes.length && !o.allowEmbeddingChange)
    throw policyError(`drill of ${m.snapshot_id} refused: ${embeddings.changes[0]}; pass --allow-embedding-change to drill it anyway`);
  const sourceFlags = parseSourceFlags(o.sources, m);
  const runtime = o.config ? runtimeDifferences(m.runtime, o.config.runtime) : [];
  const changed = runtime.filter((d) => !d.compatible);
  if (changed.length && !o.allowRuntimeChange)
    throw policyError(`drill of ${m.snapshot_id} refused: runtime differs from the snapshot's: ${changed.map(describeDifference).join(", ")}; declare it in runtime.compatible, or pass --allow-runtime-change`);
  const operations = settleOperations(m.open_operations, o.config?.openOperations);
  const owners: Record<string, string> = { ...(o.config?.owners ?? {}), ...spec.owners };
  const invariants = loadInvariants(o.spec.dir, spec.invariants);
  const tmp = pidDir(tmpdir(), DRILL_PREFIX);
  const removeTemp = () => removeTree(tmp);
  const unregister = onInterrupt(removeTemp);
  const checks: DrillCheck[] = [];
  let mark = t0;
  /** Records a check and the time since the one before; a check without a phase is one of the restore checks. */
  const add = (c: Omit<DrillCheck, "seconds" | "phase"> & { phase?: string }) => {
    const now = Date.now();
    checks.push({ ...c, phase: c.phase ?? "checks", seconds: (now - mark) / 1000 });
    mark = now;
  };
  const servers: Throwaway[] = [];
  const sourceQueries = new Map<string, SourceQuery>();
  for (const c of [...embeddings.changes, ...embeddings.unknown]) add({ scenario: "restore", name: "embedding", ok: false, severity: "warning", detail: c });
  const result: DrillResult = {
    ok: false,
    warnings: [],
    spec: spec.name,
    snapshot_id: m.snapshot_id,
    agent_id: m.agent_id,
    tenant: m.tenant,
    sequence: m.sequence,
    manifest_sha256: v.manifestSha256,
    runtime: m.runtime,
    schema: { manifest: m.schema_version, restored: {} },
    integrity: {},
    credentials: [],
    cursors: [],
    test_task_id: spec.inject?.taskId ?? null,
    receipts: {},
    recovery_seconds: 0,
    total_seconds: 0,
    checks,
    scenarios: [],
    unresolved: [],
    unresolved_owners: [],
    open_operations: operations.map((op) => ({ ...op, outcomes: [] })),
    runtime_differences: runtime,
    rpo_seconds: Math.round((t0 - Date.parse(m.created_at)) / 100) / 10,
    rto_seconds: 0,
    objectives: o.config?.objectives ?? null,
  };
  /** an unresolved difference and its owner, by the first of `categories` the owners name */
  const unresolve = (text: string, ...categories: string[]) => {
    result.unresolved.push(text);
    result.unresolved_owners.push({ difference: text, owner: [...categories, "default"].map((c) => owners[c]).find(Boolean) ?? "unassigned" });
  };
  try {
    o.progress?.("restoring into a temp folder");
    const restored = join(tmp, "restored");
    let extracted: Check[];
    let dbs: { name: string; path: string; schemaVersion: number | null }[];
    let sources: ExtractedSource[];
    try {
      const x = await extractAndCheck(v, o.identities(), restored, o.trust, o.bundle.links);
      extracted = x.checks;
      dbs = x.databases;
      sources = x.sources;
    } catch (e) {
      const err = e as { code?: number; message: string };
      if (err.code === 12) throw e;
      add({ scenario: "restore", name: "extract", ok: false, severity: "error", detail: err.message });
      return finish();
    }
    for (const c of extracted) add({ scenario: "restore", name: c.name, ok: c.ok, severity: "error", detail: c.detail });
    if (sources.length) {
      o.progress?.("restoring state sources into throwaway servers");
      await drillSources(sources);
    }
    checkVectorDimensions(dbs);
    makeReadOnly(restored);
    const dbMap = new Map(dbs.map((d) => [d.name, d.path]));
    for (const d of dbs) {
      const db = openDefensive(d.path);
      try {
        const safely = (f: () => string[]) => {
          try {
            return f();
          } catch (e) {
            return [(e as Error).message];
          }
        };
        // integrity_check ran once, in staging (extractAndCheck's `full`, reported as integrity:<name>): a database that
        // failed it stopped the drill above, so it is not run a second time here (2-3 s per GiB)
        const ic = extracted.find((c) => c.name === `integrity:${d.name}`);
        const fk = safely(() => foreignKeyCheck(db));
        const uv = userVersion(db);
        result.integrity[d.name] = ic?.ok ? "ok" : "not checked";
        result.schema.restored[d.name] = uv;
        add({ scenario: "restore", name: `foreign_key_check:${d.name}`, ok: fk.length === 0, severity: "error", detail: fk.length ? fk.slice(0, 5).join("; ") : "ok" });
        add({ scenario: "restore", name: `schema_version:${d.name}`, ok: uv === d.schemaVersion, severity: "error", detail: `user_version ${uv}, manifest ${d.schemaVersion}` });
      } finally {
        db.close();
      }
    }
    for (const [name, q] of Object.entries(m.cursor_queries)) {
      const p = dbMap.get(q.database);
      let restoredValue: unknown = null;
      let err: string | null = null;
      if (p) {
        const db = openDefensive(p);
        try {
          const row = db.prepare(q.sql).raw().get() as unknown[] | undefined;
          restoredValue = row?.[0] ?? null;
        } catch (e) {
          err = (e as Error).message;
        } finally {
          db.close();
        }
      } else err = `no database ${q.database}`;
      const same = err === null && String(restoredValue) === String(m.cursors[name]);
      result.cursors.push({ name, manifest: m.cursors[name], restored: restoredValue, ok: same });
      add({ scenario: "restore", name: `cursor:${name}`, ok: same, severity: "error", detail: err ?? `manifest ${m.cursors[name]}, restored ${restoredValue}` });
    }
    const creds = await checkCredentials(m.credentials, o.credentials.root, o.credentials.checkers);
    result.credentials = creds.map((c) => ({ name: c.name, ref: c.ref, status: c.status }));
    for (const c of creds) {
      add({ scenario: "restore", name: `credential:${c.name}`, ok: c.status === "present", severity: o.credentials.warn ? "warning" : "info", detail: `${c.ref}: ${c.status} (${c.detail})` });
      if (c.status !== "present") unresolve(`credential ${c.name} (${c.ref}) is ${c.status} here`, `credential:${c.name}`, "credential");
    }
    addInvariants("restore", await runInvariants(invariants, dbMap, sourceQueries));
    for (const d of runtime) add({ scenario: "restore", name: `runtime:${d.key}`, ok: true, severity: "warning", detail: `${describeDifference(d)} (${d.compatible ? "declared compatible" : "approved with --allow-runtime-change"})` });
    const reconciled = protocol && (spec.reconcile || spec.reconcileFaults.length > 0);
    // a spec that runs the worker but does not reconcile leaves the question open (a warning); a checks-only
    // spec says so by its shape, and the report still lists the operations (recorded, not a warning)
    if (operations.length && !reconciled)
      add({ scenario: "restore", name: "open operations", ok: false, severity: spec.worker ? "warning" : "info", detail: `${operations.length} open operation(s) in the snapshot, not reconciled in this drill: the report can not say what the agent might repeat (spec: "reconcile": true)` });
    result.recovery_seconds = Math.round((Date.now() - t0) / 10) / 100;
    result.rto_seconds = result.recovery_seconds;

    if (spec.worker && spec.inject) {
      const scenarios: (CrashPoint | "sink_kill")[] = [...spec.crashPoints];
      if (spec.sinkKill) scenarios.push("sink_kill");
      for (const [i, sc] of scenarios.entries()) {
        o.progress?.(`scenario ${sc}`);
        result.scenarios.push(await runScenario(sc, join(tmp, `run-${i}`), restored, dbs, invariants));
      }
    }
    const bench: RecoveryBench = {
      spec: o.spec,
      restored,
      tmp,
      dbs,
      invariants,
      add,
      addInvariants,
      unresolved: (op, text) => unresolve(text, `open_operation:${op.kind}`, "open_operation"),
      passed: (sc) => checks.filter((c) => c.scenario === sc).every((c) => c.ok || c.severity !== "error"),
    };
    if (reconciled) {
      o.progress?.("reconciliation scenarios");
      // a config with a reconcile section has openOperations (the schema says so)
      const r = await reconciliationScenarios(bench, operations, protocol, o.config!.openOperations!);
      result.scenarios.push(...r.scenarios);
      result.open_operations = r.operations;
      result.rto_seconds = Math.round((result.recovery_seconds + (r.reconcileSeconds ?? 0)) * 100) / 100;
    }
    if (spec.splitBrain) {
      o.progress?.("scenario split_brain");
      result.scenarios.push(await splitBrainScenario(bench));
    }
    return finish();
  } finally {
    await Promise.allSettled(servers.map((x) => x.stop()));
    removeTemp();
    unregister();
  }

  /**
   * Restores each source into an empty server (a `--source` one, or a
   * throwaway one started here and always stopped) and records what it found;
   * invariants naming a postgres source then run there.
   */
  async function drillSources(extracted: ExtractedSource[]): Promise<void> {
    const targets = new Map<string, string>();
    try {
      for (const x of extracted) {
        const given = sourceFlags.get(x.name);
        if (given) targets.set(x.name, given);
        else {
          const t = await driverFor(x.kind).throwaway(join(tmp, "servers"));
          servers.push(t);
          targets.set(x.name, t.target);
        }
      }
      for (const r of await restoreSources(m, extracted, targets)) {
        add({ scenario: "restore", name: `source-restore:${r.name}`, ok: true, severity: "error", detail: r.detail + (r.skipped.length ? ` (expired: ${r.skipped.slice(0, 10).join(", ")})` : "") });
        const query = driverFor(r.kind).query;
        if (query) sourceQueries.set(r.name, (sql) => query(targets.get(r.name)!, sql));
        for (const c of m.components.filter((c) => c.name === r.name && c.embedding)) {
          const table = Object.keys(c.records ?? {})[0] ?? "";
          const got = r.dimensions[table];
          const want = c.embedding!.dimension;
          add({ scenario: "restore", name: `vector_dimension:${r.name}.${table}`, ok: got === want, severity: "error", detail: `stored vectors have dimension ${got ?? "none"}; ${c.embedding!.model} is recorded with ${want}` });
        }
      }
    } catch (e) {
      const err = e as { code?: number; message: string };
      add({ scenario: "restore", name: "sources", ok: false, severity: "error", detail: err.message });
    }
  }

  /** For SQLite databases recorded with an embedding model: every sqlite-vec vector column has its dimension. */
  function checkVectorDimensions(dbs: { name: string; path: string }[]): void {
    for (const d of dbs) {
      const want = m.components.find((c) => c.name === d.name && c.embedding)?.embedding;
      if (!want) continue;
      const db = openDefensive(d.path);
      try {
        const cols = vec0Dimensions(db);
        if (!cols.length) add({ scenario: "restore", name: `vector_dimension:${d.name}`, ok: false, severity: "warning", detail: "no sqlite-vec vec0 table found to check" });
        for (const c of cols) {
          const ok = c.dimension === want.dimension && c.badChunks === 0;
          const why = c.badChunks !== 0 ? (c.badChunks < 0 ? "; its vector chunks could not be read" : `; ${c.badChunks} chunk(s) hold vectors of another width`) : "";
          add({ scenario: "restore", name: `vector_dimension:${d.name}.${c.table}`, ok, severity: "error", detail: `${c.table}.${c.column} declares dimension ${c.dimension}; ${want.model} is recorded with ${want.dimension}${why}` });
        }
      } finally {
        db.close();
      }
    }
  }

  function addInvariants(scenario: string, rs: InvariantResult[], phase?: string): boolean {
    for (const r of rs)
      add({
        scenario,
        phase,
        name: `invariant:${r.name}`,
        ok: r.ok,
        severity: r.severity,
        detail: r.error ? `error: ${r.error}` : r.ok ? "no offending rows" : `${r.rows} offending row(s)`,
        ...(r.ok ? {} : { sample: blobSafe(r.sample) }),
      });
    return rs.every((r) => r.ok || r.severity === "warning");
  }

  function finish(): DrillResult {
    result.total_seconds = Math.round((Date.now() - t0) / 10) / 100;
    const obj = o.config?.objectives;
    if (obj?.rpoMinutes !== undefined)
      add({ scenario: "objectives", name: "rpo", ok: result.rpo_seconds <= obj.rpoMinutes * 60, severity: "error", detail: `snapshot was ${(result.rpo_seconds / 60).toFixed(1)} minutes old at drill time; objective ${obj.rpoMinutes} minutes` });
    if (obj?.rtoSeconds !== undefined)
      add({ scenario: "objectives", name: "rto", ok: result.rto_seconds <= obj.rtoSeconds, severity: "error", detail: `recovered and reconciled in ${result.rto_seconds} s; objective ${obj.rtoSeconds} s` });
    const failed = checks.filter((c) => !c.ok && c.severity === "error");
    result.ok = failed.length === 0;
    result.warnings = checks.filter((c) => !c.ok && c.severity === "warning").map((c) => `${c.scenario}: ${c.name}: ${c.detail}`);
    for (const f of failed) unresolve(`${f.scenario}: ${f.name}: ${f.detail}`, f.scenario, "check");
    return result;
  }

  async function runScenario(
    sc: CrashPoint | "sink_kill",
    dir: string,
    restored: string,
    dbs: { name: string; path: string }[],
    invariants: Invariant[],
  ): Promise<ScenarioResult> {
    const s0 = Date.now();
    const inject = spec.inject!;
    const upgrade = sc === "during_migration" || sc === "old_backup_new_worker";
    const copy = writableCopy(restored, dir, dbs);
    const dbMap = copy.dbs;
    const res: ScenarioResult = { scenario: sc, ok: false, died_at_point: false, restarts: 0, effects: 0, receipt: null, seconds: 0 };
    let phase = "setup";
    const check = (name: string, ok: boolean, detail: string) => {
      add({ scenario: sc, phase, name, ok, severity: "error", detail });
      return ok;
    };
    const injected = injectTask(inject, copy);
    if (injected) {
      check("inject", false, injected);
      return res;
    }
    const sink = new TestSink();
    const start = workerStarter(o.spec, copy, { sinkUrl: await sink.start(), upgrade });
    const completed = () => taskCompleted(inject, copy);
    try {
      // 1. run until the worker dies at the point
      phase = "after_crash";
      if (sc === "old_backup_new_worker") {
        res.died_at_point = true;
      } else {
        let r;
        if (sc === "sink_kill") {
          // the sink commits the delivery, then kills the worker before answering
          const child = start(null);
          sink.onNextPost = () => child.kill("SIGKILL");
          r = await child;
        } else r = await start(sc);
        res.died_at_point = r.signal === "SIGKILL" && !r.timedOut;
        if (!check("died at crash point", res.died_at_point, res.died_at_point ? `worker killed with SIGKILL at ${sc}` : `worker exited ${r.exitCode ?? r.signal}${r.timedOut ? " (timed out)" : ""} without reaching ${sc}: ${String(r.stderr).trim().slice(0, 200)}`)) return res;
        // 2. invariants right after the crash
        addInvariants(sc, await runInvariants(invariants, dbMap, sourceQueries), phase);
      }
      // 3. restart until it finishes
      phase = "after_recovery";
      const { finished, runs, last } = await runUntilDone(start, spec.restarts);
      res.restarts = runs;
      check("worker recovers", finished, finished ? `finished after ${res.restarts} restart(s)` : `did not finish after ${res.restarts} restart(s); last ${last}`);
      if (upgrade) {
        const db = openDefensive(dbMap.get(inject.database)!);
        const uv = userVersion(db);
        db.close();
        const want = spec.upgrade?.schemaVersion;
        check("migration", want === undefined ? uv >= (m.schema_version ?? 0) : uv === want, `user_version ${m.schema_version} -> ${uv}${want !== undefined ? ` (expected ${want})` : ""}`);
      }
      const done = completed();
      check("task completed", done, done ? `${inject.taskId} is complete` : `${inject.taskId} is not complete (lost)`);
      let effects = sink.effectsFor(inject.taskId);
      res.effects = effects.length;
      res.receipt = effects[0]?.receipt ?? null;
      check("exactly one effect", effects.length === 1, `${effects.length} effect(s) at the sink for ${inject.taskId}${effects.length > 1 ? ` (keys ${effects.map((e) => e.key).join(", ")})` : ""}`);
      addInvariants(sc, await runInvariants(invariants, dbMap, sourceQueries), phase);
      // 4. one more restart: still complete, still one effect
      phase = "after_restart";
      const again = await start(null);
      effects = sink.effectsFor(inject.taskId);
      check("stable after restart", again.exitCode === 0 && completed() && effects.length === res.effects, `restart exit ${again.exitCode ?? again.signal}; complete ${completed()}; effects ${effects.length}`);
      res.ok = checks.filter((c) => c.scenario === sc).every((c) => c.ok || c.severity !== "error");
      result.receipts[sc] = res.receipt;
      return res;
    } finally {
      res.seconds = Math.round((Date.now() - s0) / 10) / 100;
      await sink.stop();
    }

  }
}

