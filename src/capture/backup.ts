/**
 * The backup stage, a forward pipeline of small stages, each in its own file:
 * unchanged? (unchanged.ts) → lock → parent (parent.ts) → read plan (plan.ts) →
 * the instant between the hooks: databases, sources, files, workspace (instant.ts,
 * databases.ts, sources.ts, files.ts, workspace.ts, hooks.ts) → payload beside the
 * inspection (databases.ts) → manifest (one pure function) → signed bundle →
 * published through the repository.
 */
import { existsSync, statSync } from "node:fs";
import { rm } from "node:fs/promises";
import { hostname } from "node:os";
import { join } from "node:path";
import { buildManifest, encodeManifest, parseManifest, sha256hex, type Manifest, type NotCaptured } from "../bundle/manifest.js";
import { checkedPayloads } from "../bundle/chain.js";
import { planBundle, writeBundleFile, writePayload, type BundlePlan } from "../bundle/writer.js";
import type { LoadedConfig } from "../config/load.js";
import { strategyFor } from "../config/recovery.js";
import { fingerprint, type SigningKey } from "../crypto/sshsig.js";
import type { Trust } from "../crypto/trust.js";
import { crashStep } from "../crashpoint.js";
import { doneBeforeInterrupt, removeOnInterrupt, removeTree } from "../cleanup.js";
import { AgentbakError, ConflictError, Exit, usageError } from "../errors.js";
import { type AgentRef, hasUnsafeText, newSnapshotId } from "../facts.js";
import type { Repository } from "../repository/repository.js";
import type { Progress } from "../progress.js";
import { warmInspection, type InspectResult } from "../state/inspect/inspect.js";
import { scanValue } from "../state/secrets/scan.js";
import { commitSums, finishDatabases, releasePinned, stageDatabases, type DbRecord, type Taken } from "./databases.js";
import { listFiles, readableFiles } from "./files.js";
import { captureInstant, type Captured } from "./instant.js";
import { chooseParent, NO_PARENT, type ParentChoice } from "./parent.js";
import { planDatabases, type DbPlan } from "./plan.js";
import { applyScanPolicy, captureScope } from "./scope.js";
import { databasesState, otherState, rememberBackup, stateKey, unchangedSince } from "./unchanged.js";

/** What a backup returns (and what `--idempotency-key` replays). */
export interface BackupReceipt {
  snapshot_id: string;
  tenant: string;
  agent_id: string;
  sequence: number;
  created_at: string;
  manifest_sha256: string;
  payload_sha256: string;
  size: number;
  kind: "full" | "incremental";
  parent: string | null;
  /**
   * how the databases were read and checked: "copy" (copied at the instant, integrity_check on the copy) or
   * "in-place" (an incremental the integrity policy does not check: changed pages read in place, counts checked);
   * null when nothing new was written
   */
  databases_read: "copy" | "in-place" | null;
  /** why an incremental backup made a full snapshot (the first one, fullEvery, or a chain that does not verify), else null */
  full_reason: string | null;
  path: string;
  repeated: boolean;
  /** committed in the repository, kept in the local spool until it can be uploaded (capture/spool.ts), or
   * "unchanged": nothing changed since the snapshot named here, and no bundle was written (capture/unchanged.ts) */
  status: "committed" | "spooled" | "unchanged";
  /** the request's parameters (label, incremental): an idempotency key used again with others is refused */
  params_sha256: string;
  /** what was deliberately left out (credential files, excluded names, nested repositories' history) */
  not_captured: NotCaptured[];
  warnings: string[];
}

export interface BackupOptions {
  repo: Repository;
  trust: Trust;
  /** AGENTBAK_HOME: the page-index key lives there */
  home: string;
  signingKey: SigningKey;
  principal: string;
  /** page-level incremental against the latest verified snapshot (config incremental.enabled by default) */
  incremental?: boolean;
  idempotencyKey?: string;
  label?: string;
  waitMs?: number;
  /** the lowest sequence this host will accept (its watermark) */
  sequenceFloor?: number;
  /** no new snapshot when nothing changed since this host's last one (capture/unchanged.ts), as restic's --skip-if-unchanged */
  skipUnchanged?: boolean;
  /** where long work reports how far it has got (src/progress.ts) */
  progress?: Progress;
  /**
   * Called with the receipt the moment the commit marker is written: from then on the snapshot exists, whatever
   * fails after it (the audit entry, the lock's release), and the caller must not report it lost or take it again.
   */
  onCommitted?: (receipt: BackupReceipt) => void;
}


/** What the payload writer returns: each component's digest and size, and the payload's. */
type WrittenPayload = Awaited<ReturnType<typeof writePayload>>;

/** The digest of what a backup request asked for, beside its idempotency key. */
const paramsDigest = (o: Pick<BackupOptions, "label" | "incremental">) => sha256hex(Buffer.from(JSON.stringify({ label: o.label ?? null, incremental: o.incremental ?? null })));

/**
 * The answer to a repeated idempotency key: the first receipt, marked repeated.
 * @throws ConflictError (2) when the key was first used with another label or incremental choice.
 */
export function replay(prior: BackupReceipt, o: Pick<BackupOptions, "label" | "incremental" | "idempotencyKey">): BackupReceipt {
  if (prior.params_sha256 && prior.params_sha256 !== paramsDigest(o))
    throw new ConflictError(`idempotency key ${o.idempotencyKey} was first used with another label or incremental choice (snapshot ${prior.snapshot_id})`);
  return { ...prior, repeated: true, status: "committed" };
}

/**
 * Runs one backup of the configured agent.
 * @throws AgentbakError: 10 repository/database missing, 11 locked, 13 snapshot failed integrity_check, 14 secrets or refused dirty workspace, 1 hook failures;
 *   ConflictError (2) when the idempotency key was first used with another label or incremental choice.
 */
export async function runBackup(lc: LoadedConfig, o: BackupOptions): Promise<BackupReceipt> {
  // a label is shown in listings and logs: a line break, escape sequence or bidi control there could forge a row
  if (o.label !== undefined && (hasUnsafeText(o.label) || o.label.length > 200))
    throw usageError("--label: at most 200 characters, none of them control characters, escape sequences or Unicode bidi/format controls");
  const cfg = lc.config;
  const a: AgentRef = { tenant: cfg.agent.tenant, agent: cfg.agent.id };
  const repoDir = o.repo.store.inPlace ? o.repo.location : null;
  // before the lease: an agent whose state did not change costs reads only, no lease grant written (docs/fleet.md)
  const { listed, other, last } = await unchanged(lc, o, a, repoDir);
  if (last) return { ...last.receipt, repeated: false, status: "unchanged", warnings: [] };
  const lock = await o.repo.lock(a, "agent", o.waitMs ?? 0);
  const staging = o.repo.store.tempDir(`backup-${a.agent}`);
  const unregister = removeOnInterrupt(staging);
  const removals: Promise<void>[] = [];
  /** run at the end whatever happened: open block sums closed, and those of a snapshot not published removed */
  const closers: (() => void)[] = [];
  /** how the instant read the databases: snapshots kept open (pinned) are released at the end whatever happened */
  let taken: Taken = { kind: "copy" };
  try {
    crashStep("locked");
    await o.repo.sweep(a);
    if (o.idempotencyKey) {
      const prior = await o.repo.idempotent<BackupReceipt>(a, o.idempotencyKey, o.trust);
      if (prior) return replay(prior, o);
    }
    // the inspection worker starts now, beside the choice of a parent and the reading of its page indexes, and before
    // the write locks are taken: they are held while it joins the instant, not while it loads
    const warmed = warmInspection(cfg.databases.reduce((n, d) => n + (statSync(lc.resolve(d.path), { throwIfNoEntry: false })?.size ?? 0), 0));
    warmed.catch(() => undefined); // awaited before a pinned read; a worker that failed to start is not used
    const warnings: string[] = [];
    const created = new Date();
    const snapshotId = newSnapshotId(created);
    const wantIncremental = o.incremental ?? cfg.incremental.enabled;
    const chosen = wantIncremental ? await chooseParent(o, a, cfg.incremental.fullEvery) : NO_PARENT;
    // a full snapshot that fullEvery asks for, or the first one, is routine (in the receipt); one forced by a chain that does not verify is a warning
    if (wantIncremental && !chosen.parent && !chosen.routine) warnings.push(`full snapshot instead of an incremental: ${chosen.reason}`);
    const plan = await planDatabases(lc, o, a, chosen, snapshotId, staging, closers);
    // a database stored whole: after an upgrade routinely (in the receipt), a damaged or missing index with a warning
    if (plan.unindexed && !plan.unindexed.routine) warnings.push(`${plan.unindexed.reason}: stored whole`);
    if (plan.mode === "pinned") await warmed;
    const scope = captureScope(lc, staging, o.home, warnings);
    const got = await captureInstant(lc, plan, scope, { repoDir, listed, waitMs: o.waitMs ?? 0, fingerprint: !!other, progress: o.progress });
    taken = got.taken;
    const { dbs, sources, files, ws } = got;
    // an empty snapshot would become "latest" and restore nothing: refused, nothing written (restic: "nothing to backup")
    if (!dbs.length && !sources.staged.length && !files.length && !ws.manifest)
      throw usageError(`nothing to back up: ${lc.path} names no database, no state source, no file that exists and no workspace; no snapshot was written`);
    applyScanPolicy(cfg.secretScan.workspace, scope.findings.workspace, warnings);
    applyScanPolicy(cfg.secretScan.files, scope.findings.files, warnings);
    crashStep("snapshotted");

    const { staged, bundle, written, ins } = await writeChecked(lc, o, a, plan, got, warnings);
    crashStep("payload-written");

    const manifest = await manifestFor(lc, o, a, { snapshotId, created, chosen, got, written, ins, notCaptured: scope.notCaptured });
    applyScanPolicy("refuse", scanValue(manifest, "manifest"), warnings);
    o.progress?.stage("signing and writing bundle");
    // staged copies are no longer needed: removed in the background now, so their unflushed pages are dropped
    // rather than written back during the bundle's fsync
    removals.push(...staged.flatMap((c) => (c.file ? [rm(c.file, { force: true })] : [])), ...dbs.map((d) => rm(d.copy, { force: true })));
    const mbytes = await writeBundleFile(manifest, o.signingKey, bundle);
    crashStep("bundle-written");
    const receipt: Omit<BackupReceipt, "path"> = {
      ...receiptOf(manifest, mbytes, bundle.path),
      databases_read: dbs.length ? (taken.kind === "copy" ? "copy" : "in-place") : null,
      full_reason: wantIncremental && !manifest.parent ? chosen.reason || plan.unindexed?.reason || null : null,
      params_sha256: paramsDigest(o),
      not_captured: scope.notCaptured,
      warnings,
    };
    const path = await publish(lc, o, a, { receipt, manifest, bundle, plan, dbs, written });
    // the databases' part of the fingerprint was read at the instant (only when every write lock was held)
    if (other && (got.dbState || !cfg.databases.length)) rememberBackup(o.home, o.repo.location, a, { fingerprint: stateKey(other, got.dbState ?? databasesState(lc)), sequence: manifest.sequence, expires_at: manifest.expires_at, receipt: { ...receipt, path } });
    return { ...receipt, path };
  } catch (e) {
    // a repository renamed, deleted or unmounted under the run failed it at whatever step came next: say that (10)
    await o.repo.recheck().catch((gone: unknown) => {
      if (gone instanceof AgentbakError && gone.code === Exit.notFound) throw gone;
    });
    throw e;
  } finally {
    await releasePinned(taken);
    await Promise.allSettled(removals);
    for (const c of closers)
      try {
        c();
      } catch {
        /* the block sums are a cache: nothing of theirs may keep the staging folder or the lock */
      }
    removeTree(staging);
    unregister();
    await lock.release();
  }
}

/**
 * Writes the payload while the inspection (integrity, counts, cursors, open operations, the secret scan) reads the
 * databases at their instant in a worker thread; nothing is published unless it passes.
 * @throws AgentbakError(13) for a failed integrity_check, (14) for secrets the policy refuses
 */
async function writeChecked(lc: LoadedConfig, o: BackupOptions, a: AgentRef, plan: DbPlan, got: Captured, warnings: string[]) {
  const cfg = lc.config;
  o.progress?.stage("checking snapshot and writing bundle");
  const st = stageDatabases(plan, got.dbs, got.taken, cfg.secretScan.databases !== "off");
  const staged = [...st.staged, ...got.sources.staged, ...got.files, ...got.ws.staged];
  // the agent's newest manifest sizes the room kept for this one's (the listing is read once per process)
  const prior = (await o.repo.list(o.trust, a)).filter((e) => e.header).at(-1)?.header?.manifest;
  const bundle = planBundle(join(plan.dir, "..", `${plan.snapshotId}.agentbak`), o.signingKey, staged, prior);
  let written: WrittenPayload;
  try {
    written = await writePayload(staged, cfg.recipients, bundle, o.progress);
  } finally {
    await st.inspection.catch(() => undefined);
  }
  o.progress?.stage("finishing snapshot checks");
  const ins = await st.inspection;
  await releasePinned(got.taken); // the instant is no longer needed: the WAL can be checkpointed past it
  finishDatabases(plan, got.dbs, ins);
  applyScanPolicy("refuse", scanValue(cfg, "config"), warnings);
  applyScanPolicy(cfg.secretScan.databases, [...ins.findings, ...st.findings], warnings);
  warnings.push(...ins.timerWarnings);
  return { staged, bundle, written, ins };
}

/**
 * Whether nothing changed since this host's last snapshot, which is still the newest and far from expiring (then no
 * bundle is written). Without hooks nothing can change what the `files` patterns name before the capture: they are
 * listed once, here, and the capture takes that list.
 * @returns the files listed (or null: the capture lists them after the pre hook), the state's fingerprint without
 *   the databases (or null: not skippable), and the last backup when it holds this very state
 */
async function unchanged(lc: LoadedConfig, o: BackupOptions, a: AgentRef, repoDir: string | null) {
  const cfg = lc.config;
  const skippable = o.skipUnchanged && !o.label && !o.idempotencyKey && !cfg.hooks.pre.length && !cfg.hooks.post.length && !cfg.sources.length;
  const listed = skippable ? listFiles(lc, repoDir) : null;
  const other = listed ? await otherState(lc, readableFiles(lc, listed), fingerprint(o.signingKey.publicKey)).catch(() => null) : null;
  const last = other ? await unchangedSince<BackupReceipt>(lc, o.repo, o.home, a, other) : null;
  return { listed, other, last };
}

/** The receipt's facts of the signed bundle. */
function receiptOf(manifest: Manifest, mbytes: Buffer, file: string) {
  return {
    snapshot_id: manifest.snapshot_id,
    tenant: manifest.tenant,
    agent_id: manifest.agent_id,
    sequence: manifest.sequence,
    created_at: manifest.created_at,
    manifest_sha256: sha256hex(mbytes),
    payload_sha256: manifest.payload.sha256,
    size: statSync(file).size,
    kind: manifest.parent ? ("incremental" as const) : ("full" as const),
    parent: manifest.parent?.snapshot_id ?? null,
    repeated: false,
    status: "committed" as const,
  };
}

/**
 * The manifest of this snapshot (one pure function), checked as the reader will check it.
 * @throws AgentbakError(2) when the reader would refuse it: a bundle that can never be restored is not published
 */
async function manifestFor(
  lc: LoadedConfig,
  o: BackupOptions,
  a: AgentRef,
  x: { snapshotId: string; created: Date; chosen: ParentChoice; got: Captured; written: WrittenPayload; ins: InspectResult; notCaptured: NotCaptured[] },
): Promise<Manifest> {
  const cfg = lc.config;
  const { dbs, ws, cut, sources } = x.got;
  const manifest = buildManifest({
    agent: { id: a.agent, tenant: a.tenant },
    snapshotId: x.snapshotId,
    created: x.created,
    expireDays: cfg.retention.expireDays,
    sequence: await o.repo.nextSequence(a, o.trust, o.sequenceFloor),
    parent: dbs.some((d) => d.delta) && x.chosen.parent ? { snapshot_id: x.chosen.parent.snapshot.snapshot_id, manifest_sha256: x.chosen.parent.header.manifestSha256 } : null,
    label: o.label ?? null,
    idempotencyKey: o.idempotencyKey ?? null,
    signer: { fingerprint: fingerprint(o.signingKey.publicKey), principal: o.principal },
    recipients: cfg.recipients,
    runtime: { image_digest: cfg.runtime.imageDigest ?? null, agent_version: cfg.runtime.agentVersion ?? null, models: cfg.runtime.models ?? {}, host: hostname() },
    databases: dbs.map((d, i) => ({
      name: d.name,
      target: d.target,
      written: x.written.components[i]!,
      delta: d.delta?.meta ?? null,
      records: d.inspected!.records,
      schemaVersion: d.inspected!.schemaVersion,
      pageIndexSha256: d.indexRoot!,
      virtualTables: d.inspected!.virtualTables,
      embedding: cfg.databases.find((c) => c.name === d.name)?.embedding,
    })),
    others: x.written.components.slice(dbs.length),
    payload: x.written.payload,
    workspace: ws.manifest,
    credentials: cfg.credentials.map((c) => ({ name: c.name, ref: c.ref })),
    cursors: x.ins.cursors,
    cursorQueries: Object.fromEntries(Object.entries(cfg.cursors).map(([k, c]) => [k, { database: c.database, sql: c.sql }])),
    openOperations: x.ins.openOperations.map((op) => ({ ...op, strategy: strategyFor(op.kind, cfg.openOperations) })),
    cut,
    captureInstant: sources.instant,
    notCaptured: x.notCaptured,
  });
  // the reader's own checks (placement, sizes) before anything is signed
  try {
    parseManifest(encodeManifest(manifest));
  } catch (e) {
    throw usageError(`backup would not be restorable: ${(e as Error).message}`);
  }
  return manifest;
}

/**
 * Publishes the signed bundle through the repository (the commit marker makes it exist), then keeps what the next
 * incremental on this host builds on: the payload's digest, already checked, and the block sums.
 * @returns where the bundle is in the repository
 */
async function publish(
  lc: LoadedConfig,
  o: BackupOptions,
  a: AgentRef,
  x: { receipt: Omit<BackupReceipt, "path">; manifest: Manifest; bundle: BundlePlan; plan: DbPlan; dbs: DbRecord[]; written: WrittenPayload },
): Promise<string> {
  const { receipt, manifest } = x;
  const ol = lc.config.objectLock;
  const published = await o.repo.publish(a, {
    // an interrupt from here on exits 130 saying the snapshot was committed (it is complete and listed)
    committed: (path) => (doneBeforeInterrupt(`snapshot ${receipt.snapshot_id} was committed`), o.onCommitted?.({ ...receipt, path })),
    snapshotId: receipt.snapshot_id,
    file: x.bundle.path,
    sequence: manifest.sequence,
    indexes: x.dbs.map((d) => [d.name, d.stored!]),
    idempotency: o.idempotencyKey ? { key: o.idempotencyKey, receipt: (path) => ({ ...receipt, path }) } : undefined,
    ...(ol ? { lockMode: ol.mode === "compliance" ? "COMPLIANCE" : "GOVERNANCE", retainUntil: new Date(Date.now() + ol.days * 86_400_000) } : {}),
    trust: o.trust,
    audit: { manifest_sha256: receipt.manifest_sha256, signer: manifest.signer.fingerprint },
    signingKey: o.signingKey,
  });
  // this host hashed that payload as it wrote it (a folder repository links the very file): the next incremental
  // built on it need not read it again
  if (o.repo.store.inPlace && existsSync(published.path)) {
    const checked = checkedPayloads(o.home);
    checked.add(published.path, manifest.payload.sha256);
    checked.save();
  }
  commitSums(x.plan, x.dbs, x.written.components);
  return published.path;
}
