/**
 * The backup stage after the unchanged check (backup.ts): read plan, the parent included (plan.ts) → the instant
 * between the hooks (instant.ts) → payload beside the inspection (databases.ts) → manifest → signed bundle →
 * published through the repository. The caller holds the agent's lock and owns `staging`.
 */
import { createHash } from "node:crypto";
import { readFileSync, rmSync, statSync } from "node:fs";
import { rm } from "node:fs/promises";
import { hostname } from "node:os";
import { dirname, join } from "node:path";
import { checkedManifest, type Manifest, type ManifestInput, type NotCaptured } from "../bundle/manifest.js";
import { writeBundleFile, type BundlePlan } from "../bundle/writer.js";
import type { LoadedConfig } from "../config/load.js";
import { crashStep } from "../crashpoint.js";
import { policyError, usageError } from "../errors.js";
import { ensureDir, writeCacheFile } from "../fsutil.js";
import { type AgentRef, newSnapshotId, strategyFor } from "../facts.js";
import { warmInspection, type InspectResult } from "../state/inspect/inspect.js";
import { scanValue, type SecretFinding } from "../state/secrets/scan.js";
import { releasePinned, writeBesideInspection, type DbRecord, type Taken } from "./databases.js";
import { storeSourceFiles, type ListedFile } from "./files.js";
import { captureInstant, type Captured } from "./instant.js";
import { planDatabases, type DbPlan, type ParentChoice } from "./plan.js";
import type { BackupStart } from "../repository/repository.js";
import type { BackupOptions, BackupReceipt } from "./receipt.js";
import { captureScope } from "./scope.js";
import { rememberState } from "./unchanged.js";

/** What the payload writer returns: each component's digest and size, and the payload's (`written`), and the block sums to keep. */
type WrittenPayload = Awaited<ReturnType<typeof writeBesideInspection>>;

/**
 * Takes the snapshot: captures the state, writes and checks the bundle, publishes it, and records the state's
 * fingerprint (`other`, from the unchanged check) for the next --skip-if-unchanged.
 * @throws AgentbakError: 10 database missing, 13 snapshot failed integrity_check, 14 secrets or refused dirty workspace, 1 hook failures
 */
export async function takeSnapshot(
  lc: LoadedConfig,
  o: BackupOptions,
  a: AgentRef,
  x: { staging: string; repoDir: string | null; listed: ListedFile[] | null; other: string | null; signer: string; begun: BackupStart<BackupReceipt>; incremental: boolean; params: string },
): Promise<BackupReceipt> {
  const { staging, repoDir, listed, other } = x;
  const { sequence, newest, head, writer, reusable } = x.begun;
  const cfg = lc.config;
  const removals: Promise<void>[] = [];
  /** this snapshot's block sums (the plan opened them): ended whatever happened, kept only once it is published */
  const sums: { of: DbPlan["sums"] | null; kept: WrittenPayload["kept"] | null } = { of: null, kept: null };
  /** how the instant read the databases: snapshots kept open (pinned) are released at the end whatever happened */
  const held: { taken: Taken } = { taken: { kind: "copy" } };
  // the agent's chunk writer (beginBackup), opened when the first large file is met (an agent without one never opens it)
  // the stat cache answers (a large file not read, so not scanned) only after a backup that finished under this scan policy
  const scanned = scanRecord(o.home, o.repo.location, a);
  const chunks = writer ? { writer, statCache: scanned.trusted(cfg.secretScan.files) } : null;
  try {
    // the inspection worker starts now, beside the choice of a parent and the reading of its page indexes, and before
    // the write locks are taken: they are held while it joins the instant, not while it loads
    const warmed = warmInspection(cfg.databases.reduce((n, d) => n + (statSync(lc.resolve(d.path), { throwIfNoEntry: false })?.size ?? 0), 0));
    warmed.catch(() => undefined); // awaited before a pinned read; a worker that failed to start is not used
    const warnings: string[] = [];
    const created = new Date();
    const snapshotId = newSnapshotId(created);
    const plan = planDatabases(lc, { home: o.home, location: o.repo.location, incremental: x.incremental }, a, { snapshotId, staging, warnings, head });
    sums.of = plan.sums;
    if (plan.mode === "pinned") await warmed;
    const scope = captureScope(lc, staging, o.home, warnings);
    const got = await captureInstant(lc, plan, scope, { repoDir, listed, waitMs: o.waitMs ?? 0, fingerprint: !!other, progress: o.progress, chunks, priorSources: chunks && cfg.sources.length ? reusable : null, held });
    // large source files (a dump, a table) go into the chunk store as well, as the files stage stores a large file
    if (chunks && got.sources.staged.length) {
      const c = await storeSourceFiles(got.sources.staged, chunks.writer);
      got.sources.staged = c.staged;
      got.chunked.push(...c.chunked);
    }
    got.chunked.push(...got.sources.reused);
    const { dbs, sources, files, ws } = got;
    // an empty snapshot would become "latest" and restore nothing: refused, nothing written (restic: "nothing to backup")
    if (!dbs.length && !sources.staged.length && !files.length && !got.chunked.length && !ws.manifest)
      throw usageError(`nothing to back up: ${lc.path} names no database, no state source, no file that exists and no workspace; no snapshot was written`);
    applyScanPolicy(cfg.secretScan.workspace, scope.findings.workspace, warnings);
    applyScanPolicy(cfg.secretScan.files, scope.findings.files, warnings);
    crashStep("snapshotted");

    o.progress?.stage("checking snapshot and writing bundle");
    const others = [...got.sources.staged, ...got.files, ...got.ws.staged];
    const { staged, bundle, written, ins, findings, kept } = await writeBesideInspection(plan, got.dbs, got.taken, others, { ...o, prior: newest, recipients: cfg.recipients, scan: cfg.secretScan.databases !== "off", chunked: got.chunked });
    applyScanPolicy("refuse", scanValue(cfg, "config"), warnings);
    applyScanPolicy(cfg.secretScan.databases, findings, warnings);
    warnings.push(...ins.timerWarnings);
    crashStep("payload-written");

    const manifest = manifestFor(lc, o, a, { signer: x.signer, sequence, snapshotId, created, chosen: plan.chosen, got, written, ins, notCaptured: scope.notCaptured });
    applyScanPolicy("refuse", scanValue(manifest, "manifest"), warnings);
    o.progress?.stage("signing and writing bundle");
    // staged copies are no longer needed: removed in the background now, so their unflushed pages are dropped
    // rather than written back during the bundle's fsync
    removals.push(...staged.flatMap((c) => (c.file ? [rm(c.file, { force: true })] : [])), ...dbs.map((d) => rm(d.copy, { force: true })));
    const signed = await writeBundleFile(manifest, o.signingKey, bundle);
    crashStep("bundle-written");
    const receipt: Omit<BackupReceipt, "path"> = {
      ...receiptOf(manifest, signed.sha256, bundle.path),
      databases_read: dbs.length ? (held.taken.kind === "copy" ? "copy" : "in-place") : null,
      full_reason: plan.incremental && !manifest.parent ? plan.chosen.reason || plan.unindexed?.reason || null : null,
      params_sha256: x.params,
      not_captured: scope.notCaptured,
      warnings,
    };
    const path = await publish(lc, o, a, { receipt, manifest, bundle, dbs });
    sums.kept = kept;
    scanned.finished(cfg.secretScan.files);
    if (other) rememberState(lc, o.home, o.repo.location, a, { other, databases: got.dbState }, { sequence: manifest.sequence, expires_at: manifest.expires_at, receipt: { ...receipt, path } });
    return { ...receipt, path };
  } finally {
    // what was uploaded is known to the next run, published or not (a cache: its failure costs time, never data)
    await writer?.save();
    await releasePinned(held.taken);
    await Promise.allSettled(removals);
    try {
      sums.of?.finish(sums.kept);
    } catch {
      /* the block sums are a cache: nothing of theirs may keep the staging folder or the lock */
    }
  }
}

/**
 * Applies a source's secretScan policy to its findings: refuse throws,
 * warn adds one warning per finding.
 * @throws AgentbakError(14) naming where (never what) when the policy is refuse.
 */
export function applyScanPolicy(policy: "refuse" | "warn" | "off", findings: SecretFinding[], warnings: string[]): void {
  if (!findings.length || policy === "off") return;
  if (policy === "warn") return void warnings.push(...findings.map((f) => `possible secret (${f.kind}) in ${f.where}`));
  const where = findings.slice(0, 10).map((f) => f.where).join(", ") + (findings.length > 10 ? ` and ${findings.length - 10} more` : "");
  throw policyError(`refusing to back up: possible secret (${findings[0]!.kind}) in ${where}`);
}

/** The receipt's facts of the signed bundle. */
function receiptOf(manifest: Manifest, manifestSha256: string, file: string) {
  return {
    snapshot_id: manifest.snapshot_id,
    tenant: manifest.tenant,
    agent_id: manifest.agent_id,
    sequence: manifest.sequence,
    created_at: manifest.created_at,
    manifest_sha256: manifestSha256,
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
function manifestFor(
  lc: LoadedConfig,
  o: BackupOptions,
  a: AgentRef,
  x: { signer: string; sequence: number; snapshotId: string; created: Date; chosen: ParentChoice; got: Captured; written: WrittenPayload["written"]; ins: InspectResult; notCaptured: NotCaptured[] },
): Manifest {
  const cfg = lc.config;
  const { dbs, ws, cut, sources } = x.got;
  const input: ManifestInput = {
    agent: { id: a.agent, tenant: a.tenant },
    snapshotId: x.snapshotId,
    created: x.created,
    expireDays: cfg.retention.expireDays,
    sequence: x.sequence,
    parent: dbs.some((d) => d.delta) && x.chosen.parent ? { snapshot_id: x.chosen.parent.snapshot.snapshot_id, manifest_sha256: x.chosen.parent.header.manifestSha256 } : null,
    label: o.label ?? null,
    idempotencyKey: o.idempotencyKey ?? null,
    signer: { fingerprint: x.signer, principal: o.principal },
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
      // the integrity check ran on the image this component restores (the copy, the pinned pages, or the copy a delta was made from)
      integrityChecked: d.inspected!.integrity.length === 1 && d.inspected!.integrity[0] === "ok" ? (d.delta?.meta.full_pages_sha256 ?? x.written.components[i]!.sha256) : undefined,
      integrityMethod: d.inspected!.integrityMethod,
      virtualTables: d.inspected!.virtualTables,
      embedding: cfg.databases.find((c) => c.name === d.name)?.embedding,
    })),
    // the payload's other components, then the files stored as chunks
    others: [...x.written.components.slice(dbs.length), ...x.got.chunked],
    payload: x.written.payload,
    workspace: ws.manifest,
    credentials: cfg.credentials.map((c) => ({ name: c.name, ref: c.ref })),
    cursors: x.ins.cursors,
    cursorQueries: Object.fromEntries(Object.entries(cfg.cursors).map(([k, c]) => [k, { database: c.database, sql: c.sql }])),
    openOperations: x.ins.openOperations.map((op) => ({ ...op, strategy: strategyFor(op.kind, cfg.openOperations) })),
    cut,
    captureInstant: sources.instant,
    notCaptured: x.notCaptured,
    recall: [...x.ins.recall, ...sources.recall],
  };
  // the reader's own checks (placement, sizes) before anything is signed
  try {
    return checkedManifest(input);
  } catch (e) {
    throw usageError(`backup would not be restorable: ${(e as Error).message}`);
  }
}

/**
 * Publishes the signed bundle through the repository (the commit marker makes it exist), which keeps the payload's
 * digest, already checked, for the next incremental on this host (the caller keeps the block sums the payload
 * writer named: `kept`).
 * @returns where the bundle is in the repository
 */
async function publish(
  lc: LoadedConfig,
  o: BackupOptions,
  a: AgentRef,
  x: { receipt: Omit<BackupReceipt, "path">; manifest: Manifest; bundle: BundlePlan; dbs: DbRecord[] },
): Promise<string> {
  const { receipt, manifest } = x;
  const ol = lc.config.objectLock;
  // the repository fills in the bundle's path the moment the commit marker is written; an interrupt from then on
  // exits 130 saying the snapshot was committed (it is complete and listed)
  const landed = o.landed ?? {};
  landed.receipt = receipt;
  const published = await o.repo.publish(a, {
    committed: Object.assign(landed, { note: `snapshot ${receipt.snapshot_id} was committed` }),
    snapshotId: receipt.snapshot_id,
    file: x.bundle.path,
    sequence: manifest.sequence,
    indexes: x.dbs.map((d) => [d.name, d.stored!]),
    idempotency: o.idempotencyKey ? { key: o.idempotencyKey, receipt: { ...receipt } } : undefined,
    ...(ol ? { lockMode: ol.mode === "compliance" ? "COMPLIANCE" : "GOVERNANCE", retainUntil: new Date(Date.now() + ol.days * 86_400_000) } : {}),
    trust: o.trust,
    audit: { manifest_sha256: receipt.manifest_sha256, signer: manifest.signer.fingerprint },
    signingKey: o.signingKey,
    // this host hashed that payload as it wrote it: the next incremental built on it need not read it again
    checkedPayload: { sha256: manifest.payload.sha256, home: o.home },
  });
  return published.path;
}

/**
 * The secret-scan policy this host's last finished backup of the agent ran under (AGENTBAK_HOME/cache/chunks): a
 * large file the stat cache answers was scanned when it was read, under that policy. A backup that starts removes the
 * record and one that finishes writes it, so after a failed run (a secret refused), or a change of policy, every file
 * is read and scanned again.
 */
function scanRecord(home: string, location: string, a: AgentRef): { trusted(policy: string): boolean; finished(policy: string): void } {
  const file = join(home, "cache", "chunks", `scan-${createHash("sha256").update([location, a.tenant, a.agent].join("\0")).digest("hex").slice(0, 32)}`);
  let before: string | null = null;
  try {
    before = readFileSync(file, "utf8");
    rmSync(file, { force: true });
  } catch {
    /* none: nothing is trusted */
  }
  return {
    trusted: (policy) => policy === "off" || before === policy,
    finished: (policy) => {
      try {
        ensureDir(dirname(file), 0o700);
        writeCacheFile(file, policy);
      } catch {
        /* a cache: the next backup reads every file again */
      }
    },
  };
}
