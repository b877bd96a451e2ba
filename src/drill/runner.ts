/**
 * The drill: restore a bundle into a fresh temp folder, check it, and replay
 * crash-point scenarios against the agent's own worker with delivery pointed
 * at a local test sink. Never touches the live agent; always cleans up.
 * The steps live beside it: the check log (checklog.ts), the restore checks
 * (checks.ts), the scenarios (scenarios.ts, recovery.ts) and their workbench (worker.ts).
 */
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { LinkSource } from "../bundle/chain.js";
import type { ChunkSource } from "../bundle/chunked.js";
import { embeddingChanges, type Embedding, type Manifest } from "../bundle/manifest.js";
import { verifyBundle, type VerifiedBundle } from "../bundle/reader.js";
import { describeDifference, runtimeDifferences, type RuntimeDifference } from "../bundle/runtime.js";
import { parseSourceFlags } from "../bundle/sources.js";
import type { AgeIdentity } from "../crypto/age.js";
import type { Trust } from "../crypto/trust.js";
import { onInterrupt, removeTree } from "../cleanup.js";
import type { Config } from "../config/schema.js";
import { policyError, usageError } from "../errors.js";
import { ensureDir, pidDir, sweepDead, unmountUnder } from "../fsutil.js";
import { settleOperations, type OpenOperation } from "../reconcile/operations.js";
import type { Throwaway } from "../state/sources/index.js";
import { CheckLog, type DrillCheck, type UnresolvedDifference } from "./checklog.js";
import { credentialChecks, cursorChecks, databaseChecks, drillSources, extractInto, objectiveChecks, runtimeChecks, unreconciledOperations, vectorDimensions, type CredentialResolution } from "./checks.js";
import { loadInvariants, runInvariants, type SourceQuery } from "./invariants.js";
import { recallChecks, type StoreRecall } from "./recall.js";
import { networkChecks, Seal, sealUnavailable, type NetworkReport } from "./seal.js";
import { runScenarios, type ScenarioOutcome } from "./scenarios.js";
import type { OperationReport } from "./recovery.js";
import type { LoadedSpec } from "./spec.js";
import type { NemesisCell } from "./matrix.js";
import { nemesisScenarios, restoreNemeses, type Placement, type StoreReads } from "./nemesis.js";
import { upgradeScenarios, type UpgradeReport } from "./upgrade.js";
import { makeReadOnly, type ScenarioResult } from "./worker.js";
import type { Progress } from "../progress.js";

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
  unresolved_owners: UnresolvedDifference[];
  /** the snapshot's open operations and what became of each in the reconciliation scenarios */
  open_operations: OperationReport[];
  /** how the snapshot's runtime differs from the config's (approved with --allow-runtime-change) */
  runtime_differences: RuntimeDifference[];
  /** the upgrade drill: both versions, and whether the snapshot of N recovers under N+1; null when none ran */
  upgrade: UpgradeReport | null;
  /** the nemesis matrix: a result per scenario × nemesis the spec asks for */
  nemeses: NemesisCell[];
  /** the snapshot's age when the drill started (the data it would lose: RPO) */
  rpo_seconds: number;
  /** restore and checks, plus the first reconciliation: the time to a recovered, reconciled agent (RTO) */
  rto_seconds: number;
  objectives: { rpoMinutes?: number; rtoSeconds?: number } | null;
  /** recall parity per vector store (the spec's recall section; empty without one) */
  recall: StoreRecall[];
  /** whether the worker ran sealed in its own network namespace, and the connections it tried; null when no worker ran */
  network: NetworkReport | null;
}

export interface DrillOptions {
  bundle: { path: string; links: LinkSource; chunks?: ChunkSource | null };
  spec: LoadedSpec;
  trust: Trust;
  identities: () => AgeIdentity[];
  /**
   * How credential references resolve, as at restore: relative `file:` against
   * the agent's folder (not the temp restore), other schemes through the
   * config's `restore.credentialCheck`; `warn: false` records one that does not
   * resolve without a warning (cron's environment lacks the agent's variables).
   */
  credentials: CredentialResolution;
  /** the agent's config, when there is one: strategies, reconcile, objectives, owners, runtime */
  config?: Config;
  /** drill a snapshot made under another runtime than the config's */
  allowRuntimeChange?: boolean;
  /** where long work reports how far it has got (src/progress.ts) */
  progress?: Progress;
  /** `--source NAME=URL`: an empty server for a source instead of a throwaway one */
  sources?: string[];
  /** the bundle read again from its S3 repository through another endpoint (the object-store nemeses' fault proxy); absent for a folder or a file */
  storeReads?: StoreReads;
  /** how the `eio` nemesis runs `agentbak restore` of this bundle in a child: the identity file and config the drill was given */
  restoreChild?: { identity?: string; config?: string };
  /** `--upgrade-to`: the next version's command (argv), run after the restore (upgrade.ts) */
  upgradeTo?: string[];
  /** the embedding models configured for the agent (by database or source name), when a config is known */
  embeddings?: Map<string, Embedding | undefined>;
  allowEmbeddingChange?: boolean;
  /** refuse (2) to run the worker unsealed */
  requireSealed?: boolean;
}

const DRILL_PREFIX = "agentbak-drill";

/** Removes temp folders of drills whose process is gone (kill -9). */
export const sweepDrillTemps = () => {
  sweepDead(tmpdir(), `${DRILL_PREFIX}-`);
  // throwaway servers of a drill run as root live in /tmp when the temp folder is private (state/sources/common.ts)
  if (process.getuid?.() === 0) sweepDead("/tmp", `${DRILL_PREFIX}-`);
};

/**
 * Runs a drill: verify → admit (policy) → restore into a temp folder →
 * restore checks and invariants → scenarios → result. Never throws for a
 * failed check (the result says so); throws AgentbakError when the drill can
 * not run (not found, verification, keys): 2 when the spec asks for
 * reconciliation and no config says how, 14 for vectors of another embedding
 * model than the config's without --allow-embedding-change, or a runtime
 * other than the config's without approval.
 */
export async function runDrill(opts: DrillOptions): Promise<DrillResult> {
  const t0 = Date.now();
  const o = withUpgrade(opts);
  const { spec } = o.spec;
  const protocol = o.config?.reconcile;
  const reconciled = spec.reconcile || spec.reconcileFaults.length > 0;
  if (reconciled && !protocol) throw usageError(`drill spec ${o.spec.path} asks for reconciliation, but no config with a reconcile section was given (pass -c)`);
  const unsealed = spec.worker ? await sealUnavailable() : null;
  if (unsealed && o.requireSealed) throw usageError(`drill --require-sealed: the worker can not be sealed here (${unsealed}); nothing was run`);
  sweepDrillTemps();
  // a payload that lists its chunks' digests (format 7) is read once: each chunk checked as extractInto decrypts it
  // (a chunk that differs stops the drill there with 13, as this check did; nothing in the log says the payload passed)
  const v = await verifyBundle(o.bundle.path, o.trust, undefined, o.progress, { decrypting: true });
  const m = v.manifest;
  const admitted = admit(m, o);
  const operations = settleOperations(m.open_operations, o.config?.openOperations);
  const invariants = loadInvariants(o.spec.dir, spec.invariants);
  const tmp = pidDir(tmpdir(), DRILL_PREFIX);
  // a tmpfs the enospc nemesis mounted in it is unmounted first (an interrupt mid-cell skips the cell's own unmount)
  const removeTemp = () => (unmountUnder(tmp), removeTree(tmp));
  const unregister = onInterrupt(removeTemp);
  const log = new CheckLog(t0, { ...(o.config?.owners ?? {}), ...spec.owners });
  for (const c of admitted.embeddingNotes) log.add({ scenario: "restore", name: "embedding", ok: false, severity: "warning", detail: c });
  const servers: Throwaway[] = [];
  let seal: Seal | undefined;
  const finish = (f: Partial<Findings>) => drillResult({ o, v, t0, runtime: admitted.runtime, log }, { ...nothingFound(operations), ...f });
  try {
    const restored = join(tmp, "restored");
    const x = await extractInto(v, o.identities, restored, o.trust, o.bundle, log, o.progress);
    if (!x) return finish({});
    let sourceQueries = new Map<string, SourceQuery>();
    const sourceTargets = new Map<string, string>();
    if (x.sources.length) {
      o.progress?.stage("restoring state sources into throwaway servers");
      sourceQueries = await drillSources(m, x.sources, admitted.sourceFlags, join(tmp, "servers"), servers, log, sourceTargets);
    }
    o.progress?.stage("checking the restored agent");
    vectorDimensions(m, x.databases, log);
    makeReadOnly(restored);
    const { integrity, restored: schemas } = databaseChecks(x, log);
    const dbMap = new Map(x.databases.map((d) => [d.name, d.path]));
    const cursors = cursorChecks(m, dbMap, log);
    const recall = spec.recall ? await recallChecks(m, spec.recall, dbMap, sourceTargets, log) : [];
    const credentials = await credentialChecks(m, o.credentials, log);
    log.invariants("restore", await runInvariants(invariants, dbMap, sourceQueries));
    runtimeChecks(admitted.runtime, log);
    unreconciledOperations(operations.length, reconciled, Boolean(spec.worker), log);
    const recoverySeconds = Math.round((Date.now() - t0) / 10) / 100;
    // a short folder name: a unix socket's path has room for 107 bytes
    if (spec.worker && !unsealed) ensureDir(join(tmp, "s"), 0o700);
    seal = spec.worker && !unsealed ? new Seal(join(tmp, "s")) : undefined;
    const bench = { spec: o.spec, restored, tmp, dbs: x.databases, invariants, log, seal, workers: { started: 0 } };
    const plan = {
      operations,
      // a config with a reconcile section has openOperations (the schema says so)
      reconcile: reconciled ? { protocol: protocol!, openOps: o.config!.openOperations! } : null,
      sourceQueries,
      schemaVersion: m.schema_version,
      progress: o.progress,
    };
    const scenarios = await runScenarios(bench, plan);
    const up = spec.upgrade?.version !== undefined || o.upgradeTo ? await upgradeScenarios(bench, { ...plan, agentVersion: m.runtime.agent_version }) : null;
    if (up) scenarios.scenarios.push(...up.scenarios);
    const nemeses = Object.keys(spec.nemeses).length ? await nemesisScenarios(bench, plan) : { scenarios: [], cells: [] };
    scenarios.scenarios.push(...nemeses.scenarios);
    if (spec.nemeses.restore?.length) o.progress?.stage("restore nemeses");
    const place: Placement = async (root, l, file) => (await extractInto(file ? await verifyBundle(file, o.trust) : v, o.identities, root, o.trust, o.bundle, l)) !== null;
    nemeses.cells.push(...(await restoreNemeses(bench, place, o.storeReads ?? null, o.restoreChild ? { bundle: o.bundle.path, ...o.restoreChild } : null)));
    // said only of a worker that ran: a spec with a worker and nothing that starts it makes no claim of its network
    const network = bench.workers.started > 0 ? networkChecks(seal?.report() ?? null, unsealed, spec.seal?.maxEgressBlocked, log) : null;
    return finish({ integrity, schemas, cursors, credentials, recoverySeconds, recall, network, ...scenarios, upgrade: up?.upgrade ?? null, nemeses: nemeses.cells });
  } finally {
    seal?.close();
    await Promise.allSettled(servers.map((x) => x.stop()));
    removeTemp();
    unregister();
  }
}

/**
 * The options with `--upgrade-to` folded into the spec: its command is the upgrade's worker.
 * @throws AgentbakError(2) when the spec has no worker and test task to run it with
 */
function withUpgrade(o: DrillOptions): DrillOptions {
  if (!o.upgradeTo) return o;
  const { spec } = o.spec;
  if (!spec.worker || !spec.inject) throw usageError(`drill --upgrade-to needs a spec with worker and inject (${o.spec.path} has ${spec.worker ? "no inject" : "no worker"})`);
  return { ...o, spec: { ...o.spec, spec: { ...spec, upgrade: { ...(spec.upgrade ?? { env: {} }), command: o.upgradeTo } } } };
}

/**
 * What policy must let through before anything is restored.
 * @returns the embedding differences to warn about, the `--source` targets, and the runtime differences let through
 * @throws AgentbakError(14) for vectors of another embedding model, or another runtime, without approval; (2) for a bad --source
 */
function admit(m: Manifest, o: DrillOptions): { embeddingNotes: string[]; sourceFlags: Map<string, string>; runtime: RuntimeDifference[] } {
  const embeddings = o.embeddings ? embeddingChanges(m, o.embeddings) : { changes: [], unknown: [] };
  if (embeddings.changes.length && !o.allowEmbeddingChange)
    throw policyError(`drill of ${m.snapshot_id} refused: ${embeddings.changes[0]}; pass --allow-embedding-change to drill it anyway`);
  const sourceFlags = parseSourceFlags(o.sources, m);
  const runtime = o.config ? runtimeDifferences(m.runtime, o.config.runtime) : [];
  const changed = runtime.filter((d) => !d.compatible);
  if (changed.length && !o.allowRuntimeChange)
    throw policyError(`drill of ${m.snapshot_id} refused: runtime differs from the snapshot's: ${changed.map(describeDifference).join(", ")}; declare it in runtime.compatible, or pass --allow-runtime-change`);
  return { embeddingNotes: [...embeddings.changes, ...embeddings.unknown], sourceFlags, runtime };
}

/** What the steps found; a step that did not run (extraction failed) leaves its default. */
interface Findings extends ScenarioOutcome {
  integrity: Record<string, string>;
  /** the restored user_version of each database */
  schemas: Record<string, number>;
  credentials: DrillResult["credentials"];
  cursors: DrillResult["cursors"];
  /** the time to a restored, checked agent */
  recoverySeconds: number;
  recall: StoreRecall[];
  network: NetworkReport | null;
  upgrade: UpgradeReport | null;
  nemeses: NemesisCell[];
}

const nothingFound = (operations: OpenOperation[]): Findings => ({
  integrity: {},
  schemas: {},
  credentials: [],
  cursors: [],
  recoverySeconds: 0,
  recall: [],
  network: null,
  scenarios: [],
  receipts: {},
  operations: operations.map((op) => ({ ...op, outcomes: [] })),
  reconcileSeconds: null,
  upgrade: null,
  nemeses: [],
});

/** The drill's result: the objectives checked against what it measured, then the log's verdict. */
function drillResult(d: { o: DrillOptions; v: VerifiedBundle; t0: number; runtime: RuntimeDifference[]; log: CheckLog }, f: Findings): DrillResult {
  const { o, v, log } = d;
  const m = v.manifest;
  const total = Math.round((Date.now() - d.t0) / 10) / 100;
  const rpo = Math.round((d.t0 - Date.parse(m.created_at)) / 100) / 10;
  const rto = f.reconcileSeconds === null ? f.recoverySeconds : Math.round((f.recoverySeconds + f.reconcileSeconds) * 100) / 100;
  objectiveChecks(o.config?.objectives, { rpo_seconds: rpo, rto_seconds: rto }, log);
  const { ok, warnings } = log.verdict();
  return {
    ok,
    warnings,
    spec: o.spec.spec.name,
    snapshot_id: m.snapshot_id,
    agent_id: m.agent_id,
    tenant: m.tenant,
    sequence: m.sequence,
    manifest_sha256: v.manifestSha256,
    runtime: m.runtime,
    schema: { manifest: m.schema_version, restored: f.schemas },
    integrity: f.integrity,
    credentials: f.credentials,
    cursors: f.cursors,
    test_task_id: o.spec.spec.inject?.taskId ?? null,
    receipts: f.receipts,
    recovery_seconds: f.recoverySeconds,
    total_seconds: total,
    checks: log.checks,
    scenarios: f.scenarios,
    unresolved: log.unresolved,
    unresolved_owners: log.unresolvedOwners,
    open_operations: f.operations,
    runtime_differences: d.runtime,
    upgrade: f.upgrade,
    nemeses: f.nemeses,
    rpo_seconds: rpo,
    rto_seconds: rto,
    objectives: o.config?.objectives ?? null,
    recall: f.recall,
    network: f.network,
  };
}
