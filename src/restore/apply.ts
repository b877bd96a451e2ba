/**
 * The restore stage: verify, decide, plan, approve, then extract into a temp
 * folder beside the target, check, place it with one rename, and leave the
 * agent suspended behind a new fencing generation.
 */
import { existsSync, lstatSync, readdirSync, renameSync, rmdirSync, rmSync, statSync } from "node:fs";
import { basename, dirname, join, relative, resolve } from "node:path";
import type { LinkSource } from "../bundle/chain.js";
import type { ChunkSource } from "../bundle/chunked.js";
import { extractAndCheck, type Check, type IntegrityPolicy } from "../bundle/extract.js";
import { verifyBundle } from "../bundle/reader.js";
import type { LoadedConfig } from "../config/load.js";
import type { AgeIdentity } from "../crypto/age.js";
import { NS, type SigningKey } from "../crypto/sshsig.js";
import { signRecord, verifyRecord } from "../crypto/signed.js";
import type { Trust } from "../crypto/trust.js";
import { crashStep } from "../crashpoint.js";
import { noKey, placeError, policyError, usageError, verifyError } from "../errors.js";
import { ensureDir, fsyncDir, fsyncTree, pidDir, sweepDead, writeFileAtomic } from "../fsutil.js";
import type { Repository } from "../repository/repository.js";
import { keys } from "../repository/layout.js";
import { unreachableWarning } from "../repository/generation.js";
import type { checkCredentials } from "../state/secrets/credentials.js";
import { isSource, embeddingChanges, type Manifest } from "../bundle/manifest.js";
import { manifestSources, parseSourceFlags, restoreSources, type SourceOutcome } from "../bundle/sources.js";
import { configuredEmbeddings } from "../config/schema.js";
import type { OpenOperation } from "../reconcile/operations.js";
import { buildPlan, type PlannedSource, type RestorePlan } from "./plan.js";
import { appendReceipt } from "./receipt.js";
import { applyTimers, planTimers } from "./timers.js";
import { evaluatePolicy } from "./policy.js";
import { MARKER_DIR, restoredFolder, SUSPENDED, writeTargetRecord, type TargetRecord } from "./state.js";
import { raiseTrustedState, readTrustedState } from "../state/watermark.js";
import { doneBeforeInterrupt, letInterruptsIn, removeOnInterrupt, removeTree } from "../cleanup.js";
import { agentbakHome } from "../home.js";
import { SQLITE_SIDECAR, type AgentRef } from "../facts.js";
import type { Progress } from "../progress.js";

export interface RestoreOptions {
  /** the bundle to restore, as a local file, and where its chain's links come from */
  bundle: { path: string; links: LinkSource; chunks?: ChunkSource | null };
  target: string;
  /** where generations, request ids, the lock and the receipt go */
  repo?: Repository;
  lc?: LoadedConfig;
  trust: Trust;
  identities: () => AgeIdentity[];
  signingKey: () => SigningKey | null;
  dryRun?: boolean;
  /**
   * a plan for someone who may not learn what exists on this host (an agent's plan_restore): no credential is checked
   * (no file read, no variable looked up, no check command run at a target it named), each is `unchecked` with this reason
   */
  uncheckedCredentials?: string;
  /** asks the operator; resolves true to go ahead (the command supplies --yes or a TTY prompt) */
  approve: (plan: RestorePlan) => Promise<boolean>;
  allowRollback?: boolean;
  allowOtherAgent?: boolean;
  allowRuntimeChange?: boolean;
  expectAgent?: string;
  expectTenant?: string;
  requestId?: string;
  /** how long to wait for another restore of the same agent to finish (0: refuse at once with 11) */
  waitMs?: number;
  now?: Date;
  /** `--source NAME=URL` values: a source's target instead of its recorded reference resolved here */
  sources?: string[];
  /** redis sources that may be restored into a keyspace holding other keys */
  allowNonEmptySource?: string[];
  allowEmbeddingChange?: boolean;
  /** how much of each database is checked beyond its signed digest (default attested: full where the backup's check does not cover the image) */
  integrity?: IntegrityPolicy;
  /** where long work reports how far it has got (src/progress.ts) */
  progress?: Progress;
}

export interface RestoreResult {
  plan: RestorePlan;
  restored: boolean;
  repeated: boolean;
  generation: number | null;
  checks: Check[];
  warnings: string[];
  receipt_signed: boolean;
  sources: SourceOutcome[];
}

/**
 * Refuses a target that is a symbolic link (even a dangling one): what it
 * points to is not what the operator named.
 * @throws AgentbakError(2).
 */
function refuseSymlink(target: string): void {
  let st;
  try {
    st = lstatSync(target);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return;
    throw placeError(e, `target ${target}`);
  }
  if (st.isSymbolicLink()) throw usageError(`target ${target} is a symbolic link${existsSync(target) ? "" : " to nothing"}; pass the folder it should be`);
}

/**
 * The target must be absent or an empty folder. Stale SQLite sidecar files
 * (-wal, -shm, -journal) left by another database may be there: they are
 * listed, and moved aside only when the restore is placed.
 * @returns the sidecar files in the target.
 * @throws AgentbakError(2) when the target is a file or holds anything else.
 */
function checkTarget(target: string): string[] {
  if (!existsSync(target)) return [];
  if (!statSync(target).isDirectory()) throw usageError(`target ${target} exists and is not a folder`);
  // walked by hand, stopping at the first file that is not a sidecar: "/" or a large mount is refused at once
  const files: string[] = [];
  const walk = (dir: string): void => {
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch (e) {
      throw placeError(e, `target ${target}`);
    }
    // this folder's files first, then its folders
    for (const e of entries) {
      const p = join(dir, e.name);
      if (e.isDirectory()) continue;
      if (SQLITE_SIDECAR.test(e.name)) files.push(p);
      else throw usageError(`target ${target} is not empty (${relative(target, p)} ...); restore only into an empty or absent folder`);
    }
    for (const e of entries) if (e.isDirectory()) walk(join(dir, e.name));
  };
  walk(target);
  return files;
}

/**
 * Moves sidecar files out of the target into `<target>.quarantine-<time>`
 * (never paired with the restored database) and removes the folders they
 * leave empty. @returns the quarantine folder and a function that moves them back.
 */
function quarantine(target: string, files: string[]): { folder: string; undo: () => void } | null {
  if (!files.length) return null;
  const folder = `${target}.quarantine-${Date.now()}`;
  const moved: [string, string][] = [];
  const undo = () => {
    for (const [from, to] of moved.reverse()) {
      ensureDir(dirname(from));
      renameSync(to, from);
    }
  };
  try {
    for (const f of files) {
      const dest = join(folder, relative(target, f));
      ensureDir(dirname(dest));
      renameSync(f, dest);
      moved.push([f, dest]);
    }
  } catch (e) {
    undo();
    throw e;
  }
  removeEmptyDirs(target);
  return { folder, undo };
}

/** Removes the now-empty folders under `dir` (rmdir fails on anything that is not empty). */
function removeEmptyDirs(dir: string): void {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (!e.isDirectory()) continue;
    removeEmptyDirs(join(dir, e.name));
    rmdirSync(join(dir, e.name));
  }
}

/**
 * Where each of a bundle's sources goes: a `--source` flag, else its recorded
 * credential reference resolved here (relative files against `refRoot`);
 * LanceDB folders go inside the restored root. URLs stay out of the plan.
 */
async function sourceTargets(m: Manifest, flags: Map<string, string>, target: string, refRoot: string) {
  const urls = new Map<string, string>();
  // the source drivers load only for a snapshot with a source to resolve (restore's fixed cost: docs/performance.md)
  const resolveReference = manifestSources(m).some((s) => s.path === null && !flags.has(s.name)) ? (await import("../state/sources/index.js")).resolveReference : null;
  const planned: PlannedSource[] = manifestSources(m).map((s) => {
    const records = m.components.filter((c) => c.name === s.name && isSource(c)).reduce((n, c) => n + Object.values(c.records ?? {}).reduce((a, b) => a + b, 0), 0);
    const base = { name: s.name, kind: s.kind, records, snapshot_at: s.snapshot_at };
    if (s.path !== null) return { ...base, into: join(target, s.path), resolved: true };
    const flag = flags.get(s.name);
    if (flag) urls.set(s.name, flag);
    else {
      try {
        urls.set(s.name, resolveReference!(s.ref ?? "", refRoot));
      } catch {
        return { ...base, into: s.ref ?? "(no reference)", resolved: false };
      }
    }
    return { ...base, into: flag ? `--source ${s.name}` : s.ref!, resolved: true };
  });
  const targets = (root: string) => new Map(manifestSources(m).map((s) => [s.name, s.path !== null ? join(root, s.path) : urls.get(s.name)!]));
  return { planned, targets };
}

/** A file's identity: a rename keeps device, inode, size and mtime. */
function fileIdentity(p: string): string {
  const st = statSync(p, { bigint: true });
  return `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}`;
}

/** Writes a restore's markers into the staged root: its signed record, its generation, and SUSPENDED (a restored agent starts suspended). @returns the record's sha256. */
async function writeMarkers(root: string, target: string, record: Omit<TargetRecord, "kind">, key: SigningKey | null): Promise<string> {
  // the folder itself, not a path through a link that may later point at a copy of it
  const sha = writeTargetRecord(root, { ...record, target: restoredFolder(target) }, key);
  writeFileAtomic(join(root, MARKER_DIR, "generation"), `${record.generation}\n`);
  writeFileAtomic(
    join(root, MARKER_DIR, SUSPENDED),
    `suspended by agentbak restore of ${record.snapshot_id} at generation ${record.generation}; run "agentbak activate --target ${target}" once the original runtime is stopped\n`,
  );
  await fsyncTree(root);
  return sha;
}

/**
 * Places the staged `root` at `target` with one rename (stale sidecars moved
 * aside only now, when nothing can fail before the target is replaced; back
 * again if the rename fails), then checks each database where it now lives:
 * the same file as the staged one that passed the checks (so neither its
 * sha256 nor its integrity needs a second run). A failure removes what was placed.
 * @param checked each database: its path inside the root and its identity when checked
 * @returns the quarantine folder the sidecars went to, if any.
 * @throws AgentbakError(13) when a placed database is not the file that was checked; the rename's error.
 */
function place(root: string, target: string, checked: { name: string; path: string; identity: string }[]): string | null {
  const q = quarantine(target, checkTarget(target));
  try {
    if (existsSync(target)) rmdirSync(target); // empty (checked before)
    renameSync(root, target);
  } catch (e) {
    q?.undo();
    throw e;
  }
  fsyncDir(dirname(target));
  crashStep("placed");
  try {
    for (const d of checked) {
      const placed = join(target, d.path);
      if (fileIdentity(placed) !== d.identity) throw verifyError(`post-restore check of ${d.name}: ${placed} is not the file that was checked (replaced or changed after its check)`);
    }
  } catch (e) {
    rmSync(target, { recursive: true, force: true });
    throw e;
  }
  return q?.folder ?? null;
}

/** The kind of the signed record that answers a repeated request id. */
const RESTORE_RECORD = "restore-record";

/**
 * The first result of request id `id`, when one was recorded. The record is
 * signed and bound to the id and the agent: one an attacker wrote would make a
 * restore answer "already done" (and an approval record it as restored) while
 * nothing was restored.
 * @throws AgentbakError(13) naming the record when it is unsigned, edited, signed by an untrusted key or moved in.
 */
async function priorResult(repo: Repository, trust: Trust, a: AgentRef, id: string): Promise<RestoreResult | undefined> {
  const raw = await repo.restoreRecord<unknown>(a, id);
  if (raw === undefined) return undefined;
  const what = `restore record ${keys.idempotency(a, "restore", id)} (request id ${id}) in ${repo.location}`;
  const r = verifyRecord(raw, trust, NS.receipt, RESTORE_RECORD, what);
  if (r.request_id !== id || r.tenant !== a.tenant || r.agent_id !== a.agent) throw verifyError(`${what}: recorded for another request id or agent (moved in)`);
  return r.result as RestoreResult;
}

/**
 * The first result of a request id, returned again: nothing is restored a
 * second time. A different target (or snapshot) in the repeat is named in a
 * warning, since it was not used.
 */
function repeated(prior: RestoreResult, requestId: string, target: string): RestoreResult {
  const warnings = [...prior.warnings];
  if (prior.plan.target !== target) warnings.push(`request ${requestId} was already restored into ${prior.plan.target}; --target ${target} was not used (a new restore needs a new --request-id)`);
  return { ...prior, warnings, repeated: true };
}

/**
 * A fresh staging folder beside `target`, after sweeping those of restores whose process is gone.
 * @throws AgentbakError naming the target: 2 when the folder can not be made there, 1 when the disk fails
 */
function stagingBeside(target: string): string {
  const parent = dirname(target);
  try {
    ensureDir(parent);
    sweepDead(parent, ".agentbak-restore-");
    return pidDir(parent, `.agentbak-restore-${basename(target)}`);
  } catch (e) {
    throw placeError(e, `target ${target}`);
  }
}

/** The snapshot's credential references as checked at `target`, or all "unchecked" (`unchecked`: why, e.g. an agent's plan). */
async function credentialsAt(refs: Manifest["credentials"], target: string, unchecked: string | undefined, how: Parameters<typeof checkCredentials>[2]) {
  if (unchecked) return refs.map((c) => ({ name: c.name, ref: c.ref, status: "unchecked" as const, detail: unchecked }));
  // the checker (and the programs a `command:` check runs) loads only for a snapshot that names credentials
  return refs.length ? (await import("../state/secrets/credentials.js")).checkCredentials(refs, target, how) : [];
}

/** The warning for a source's keys that expired since the snapshot (not restored). */
function expiredKeys(r: { name: string; skipped: string[] }): string {
  return `source ${r.name}: ${r.skipped.length} key(s) expired since the snapshot and were not restored: ${r.skipped.slice(0, 10).join(", ")}${r.skipped.length > 10 ? " ..." : ""}`;
}

/**
 * Restores a snapshot into `target`.
 * State sources go into their targets (each must be empty) before the folder is placed.
 * @throws AgentbakError: 2 target a symbolic link or not empty, a source's target not empty or unresolved, no approval without TTY; 10 not found, 11 locked,
 *   12 no key (an identity, or the signing key a request id needs), 13 verification (a request id's record too), 14 policy; 1 naming path and errno when the disk fails.
 */
export async function runRestore(o: RestoreOptions): Promise<RestoreResult> {
  const now = o.now ?? new Date();
  if (!o.target.trim()) throw usageError("--target is empty: name the folder to restore into");
  const target = resolve(o.target);
  refuseSymlink(target);
  const cfg = o.lc?.config;
  const expectAgent = o.expectAgent ?? cfg?.agent.id;
  // a restore decrypts the payload (a dry run does not): a format-7 payload is checked chunk by chunk as it is read
  const v = await verifyBundle(o.bundle.path, o.trust, now, o.progress, { decrypting: !o.dryRun });
  const m = v.manifest, a = { tenant: m.tenant, agent: m.agent_id };
  const seen = readTrustedState(agentbakHome(), a);
  const policy = evaluatePolicy({
    manifest: m,
    now,
    expectAgent,
    expectTenant: o.expectTenant ?? cfg?.agent.tenant,
    allowOtherAgent: o.allowOtherAgent,
    maxSchemaVersion: cfg?.runtime.maxSchemaVersion,
    seen,
    allowRollback: o.allowRollback,
    staleAfterHours: cfg?.restore.staleAfterHours,
    embeddings: cfg ? embeddingChanges(m, configuredEmbeddings(cfg)) : undefined,
    allowEmbeddingChange: o.allowEmbeddingChange,
    runtime: cfg?.runtime,
    allowRuntimeChange: o.allowRuntimeChange,
  });
  const repo = o.repo;
  /** a refused restore is logged too (who, what, why; never state contents) */
  const refuse = async (why: string) => {
    if (!o.dryRun) await appendReceipt(repo, a, "restore-refused", { kind: "restore-refusal", snapshot_id: m.snapshot_id, manifest_sha256: v.manifestSha256, target, reason: why, at: now.toISOString() }, o.signingKey());
    return policyError(why);
  };
  // a dry run shows the plan with its refusals (the command exits 14); anything else stops here
  if (policy.refusals.length && !o.dryRun) throw await refuse(`restore of ${m.snapshot_id} refused: ${policy.refusals.join("; ")}`);
  const credentials = await credentialsAt(m.credentials, target, o.uncheckedCredentials, cfg?.restore.credentialCheck);
  // the agent's generation: the repository's record, the replicas copy linked it with, and this host's trusted state
  const gens = repo ? await repo.generations(a, o.trust) : null;
  const nextGen = Math.max(gens?.highest ?? 0, seen.generation) + 1;
  const sources = await sourceTargets(m, parseSourceFlags(o.sources, m), target, o.lc?.dir ?? process.cwd());
  // reconcile's module (its probes start programs) loads only for a snapshot with open operations
  const operations: OpenOperation[] = m.open_operations.length ? (await import("../reconcile/operations.js")).settleOperations(m.open_operations, cfg?.openOperations) : [];
  const plan = buildPlan(m, o.bundle.path, target, credentials, policy, nextGen, now, { operations, timers: planTimers(cfg?.timers ?? [], new Date(m.created_at), now), sources: sources.planned });
  const missing = credentials.filter((c) => c.status === "missing").map((c) => `credential ${c.name} (${c.ref}) is missing here`);
  const warnings = [...policy.warnings, ...policy.needs_approval, ...missing, ...(gens?.unreachable ?? []).map(unreachableWarning), ...(gens?.warnings ?? [])];
  const result = (x: Partial<RestoreResult>): RestoreResult => ({ plan, restored: false, repeated: false, generation: null, checks: [], warnings, receipt_signed: false, sources: [], ...x });
  if (o.dryRun) return result({});
  const unresolved = sources.planned.find((p) => !p.resolved);
  if (unresolved) throw usageError(`source ${unresolved.name}: ${unresolved.into} does not resolve here; set it, or pass --source ${unresolved.name}=URL`);

  // the record that answers a repeat is signed: without a key there could be none an attacker can not forge
  const requestKey = o.requestId && repo ? o.signingKey() : null;
  if (o.requestId && repo && !requestKey) throw noKey(`--request-id needs a signing key: the record that answers a repeat of ${o.requestId} is signed (set AGENTBAK_SIGNING_KEY_FILE, or run agentbak keygen)`);
  const prior = o.requestId && repo ? await priorResult(repo, o.trust, a, o.requestId) : undefined;
  if (prior) return repeated(prior, o.requestId!, target);
  if (!(await o.approve(plan))) throw await refuse(`restore of ${m.snapshot_id} not approved`);

  checkTarget(target);
  let staging: string | null = null;
  let unregister: () => void = () => undefined;
  const lock = repo ? await repo.lock(a, "restore", o.waitMs ?? 0) : null;
  try {
    crashStep("locked");
    const again = o.requestId && repo ? await priorResult(repo, o.trust, a, o.requestId) : undefined;
    if (again) return repeated(again, o.requestId!, target);
    staging = stagingBeside(target);
    // the staging folder holds decrypted state: Ctrl-C or SIGTERM removes it too
    unregister = removeOnInterrupt(staging);
    const ids = o.identities();
    const root = join(staging, "root");
    const x = await extractAndCheck(v, ids, root, o.trust, o.bundle, o.integrity ?? "attested", o.progress);
    o.progress?.stage("placing restored state");
    const { moves: timers, warnings: timerWarnings } = applyTimers(plan.timers, new Map(x.databases.map((d) => [d.name, d.path])));
    warnings.push(...timerWarnings);
    // what the post-placement check expects: the very file whose bytes were checked (the signed sha256, and
    // SQLite's own writes of the timer moves since), by identity
    const checked = x.databases.map((d) => ({ name: d.name, path: relative(root, d.path), identity: fileIdentity(d.path) }));
    crashStep("extracted");
    // servers first, then the folder: a source that can not be restored stops the restore before anything is placed
    const restoredSources = await restoreSources(m, x.sources, sources.targets(root), o.allowNonEmptySource);
    warnings.push(...restoredSources.filter((r) => r.skipped.length).map(expiredKeys));
    const key = o.signingKey();
    // its log entry is signed with the key the receipt is, and entries already there are checked against the signers
    checkTarget(target); // one that appeared meanwhile: refused before a generation (which only rises) is issued for it
    const info = { snapshot_id: m.snapshot_id, target, at: now.toISOString() };
    const { generation, unreachable } = repo ? await repo.reserveGeneration(a, seen.generation, info, { trust: o.trust, key }) : { generation: nextGen, unreachable: [] };
    warnings.push(...unreachable.map(unreachableWarning).filter((w) => !warnings.includes(w)));
    crashStep("generation-reserved");
    const record: Omit<TargetRecord, "kind"> = {
      agent_id: m.agent_id,
      tenant: m.tenant,
      snapshot_id: m.snapshot_id,
      sequence: m.sequence,
      generation,
      repository: repo?.location ?? "",
      restored_at: now.toISOString(),
      open_operations: operations,
      databases: x.databases.map((d) => ({ name: d.name, path: relative(root, d.path) })),
      config: o.lc?.path ?? null,
    };
    // signed: reconcile and activate act only on a record agentbak wrote (an edited list of open operations, or config, is refused)
    const recordSha256 = await writeMarkers(root, target, record, key);
    crashStep("markers-written");
    await letInterruptsIn(); // a Ctrl-C that came during extraction ends the run here, with nothing placed
    const quarantined = place(root, target, checked);
    if (quarantined) warnings.push(`stale SQLite sidecar files in the target were moved to ${quarantined}`);
    crashStep("checked");
    // an interrupt from here on exits 130 saying the restore is in place (it is complete; a re-run finds the target taken)
    doneBeforeInterrupt(`the restore of ${m.snapshot_id} was placed at ${target} (suspended, generation ${generation})`);
    raiseTrustedState(agentbakHome(), a, { highest_sequence: m.sequence, generation });
    crashStep("trusted-state-raised");
    const checks: Check[] = [
      ...x.checks,
      ...restoredSources.map((r) => ({ name: `source-restore:${r.name}`, ok: true, detail: r.detail })),
      { name: "placement", ok: true, detail: `placed at ${target}; each database is the file that passed the checks above (device, inode, size, mtime)` },
    ];
    const receipt = {
      kind: "restore-receipt",
      snapshot_id: m.snapshot_id,
      manifest_sha256: v.manifestSha256,
      agent_id: m.agent_id,
      tenant: m.tenant,
      sequence: m.sequence,
      target,
      generation,
      schema: { version: m.schema_version, max_supported: cfg?.runtime.maxSchemaVersion ?? null, migration: "none" },
      checks: checks.map((c) => ({ name: c.name, ok: c.ok })),
      // which check established each database's integrity: integrity_check (or quick_check) re-run here, or attested at backup for these bytes
      integrity: Object.fromEntries(x.databases.map((d) => [d.name, d.integrity ?? null])),
      credentials: credentials.map((c) => ({ name: c.name, ref: c.ref, status: c.status })),
      open_operations: operations,
      record_sha256: recordSha256,
      sources: restoredSources.map((r) => ({ name: r.name, kind: r.kind, into: plan.sources.find((p) => p.name === r.name)?.into ?? null, records: r.records, expired_keys_skipped: r.skipped })),
      timers,
      runtime: policy.runtime,
      activation: "suspended",
      request_id: o.requestId ?? null,
      at: now.toISOString(),
    };
    if (!key) warnings.push("no signing key: the restore receipt and the target's restore record are unsigned; reconcile and activate refuse an unsigned target");
    await appendReceipt(repo, a, "restore", receipt, key);
    const res = result({ restored: true, generation, checks, receipt_signed: Boolean(key), sources: restoredSources });
    if (o.requestId && repo) await repo.writeRestoreRecord(a, o.requestId, signRecord({ kind: RESTORE_RECORD, request_id: o.requestId, tenant: a.tenant, agent_id: a.agent, result: res }, requestKey!, NS.receipt));
    return res;
  } finally {
    // never throws: an error here would replace the one being reported, and skip the lock's release
    if (staging) removeTree(staging);
    unregister();
    await lock?.release();
  }
}
