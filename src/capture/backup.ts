/**
 * The backup stage, a forward pipeline: lock → choose the parent → quiesce,
 * capture every state layer, resume → one record per database flows through
 * parent index, new index, delta and inspection → payload → manifest (one
 * pure function) → signed bundle → published through the repository.
 */
import { execa } from "execa";
import { randomBytes } from "node:crypto";
import { copyFileSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { rm } from "node:fs/promises";
import { hostname } from "node:os";
import { join, relative, resolve, sep } from "node:path";
import { globSync, isDynamicPattern } from "tinyglobby";
import { buildManifest, componentPath, isDatabase, sha256hex, type CapturedDatabase, type Manifest } from "../bundle/manifest.js";
import { verifyBundle, type VerifiedBundle } from "../bundle/reader.js";
import { verifyChain } from "../bundle/chain.js";
import { writeBundleFile, writePayload, type StagedComponent } from "../bundle/writer.js";
import type { LoadedConfig } from "../config/load.js";
import { strategyFor } from "../config/recovery.js";
import { fingerprint, type SigningKey } from "../crypto/sshsig.js";
import type { Trust } from "../crypto/trust.js";
import { crashStep } from "../crashpoint.js";
import { onInterrupt } from "../cleanup.js";
import { AgentbakError, ConflictError, Exit, policyError, usageError, verifyError, wrap } from "../errors.js";
import type { AgentRef, Repository, Snapshot } from "../repository/repository.js";
import { inspectInWorker, scanChangedPages, type InspectResult } from "../state/inspect.js";
import { changedPages, decodeIndex, encodeIndex, indexPages, pageIndexKey, writeDelta, type PageIndex } from "../state/pages.js";
import { scanValue, type SecretFinding } from "../state/secrets.js";
import { snapshotDatabases, type Cut } from "../state/sqlite.js";
import { captureWorkspace, rebuildWorkspace, treeDigest, workspaceState } from "../state/workspace.js";
import { driverFor, resolveReference, targetIsFolder } from "../state/sources/index.js";

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
  path: string;
  repeated: boolean;
  /** committed in the repository, or kept in the local spool until it can be uploaded (capture/spool.ts) */
  status: "committed" | "spooled";
  /** the request's parameters (label, incremental): an idempotency key used again with others is refused */
  params_sha256: string;
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
  progress?: (phase: string) => void;
}

/** A time-sortable snapshot id: UTC time to the millisecond plus 32 random bits. */
export const newSnapshotId = (d: Date) => d.toISOString().replace(/[-:.]/g, "") + "-" + randomBytes(4).toString("hex");

/** One database on its way through the pipeline; each stage fills in its part. */
interface DbRecord {
  name: string;
  /** where it goes in a restored root */
  target: string;
  /** the consistent copy in staging */
  copy: string;
  /** the parent's page index, verified against the parent's manifest (incrementals) */
  parentIndex: PageIndex | null;
  /** this copy's page index, encoded */
  index: Buffer | null;
  delta: { file: string; pages: number[]; meta: NonNullable<CapturedDatabase["delta"]> } | null;
  inspected: InspectResult["dbs"][number] | null;
}

/** A config path as a path inside a restored root; paths outside the config folder fall back to `fallback`. */
function restoreTarget(lc: LoadedConfig, p: string, fallback: string): string {
  const rel = relative(lc.dir, lc.resolve(p)).split(sep).join("/");
  return rel === "" || rel.startsWith("..") || rel.startsWith("/") ? fallback : rel;
}

async function runHooks(cmds: string[], cwd: string, timeoutSeconds: number, phase: string): Promise<void> {
  for (const cmd of cmds) {
    // own process group, so a timeout kills the hook and everything it started
    const child = execa(cmd, { shell: true, cwd, detached: true, reject: false, env: { AGENTBAK_HOOK: phase }, stdio: ["ignore", "ignore", "pipe"] });
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch {
        /* already gone */
      }
    }, timeoutSeconds * 1000);
    const r = await child;
    clearTimeout(timer);
    if (timedOut || r.exitCode !== 0) {
      const first = String(r.stderr ?? "").trim().split("\n")[0];
      const why = timedOut ? `timed out after ${timeoutSeconds}s` : `exited ${r.exitCode ?? r.signal ?? "?"}${first ? ": " + first : ""}`;
      throw new AgentbakError(Exit.failure, `${phase} hook "${cmd}" ${why}`);
    }
  }
}

/** The parent for an incremental: the latest snapshot, if its whole chain verifies and is short enough; or why not. */
async function chooseParent(o: BackupOptions, a: AgentRef, fullEvery: number): Promise<{ parent: { snapshot: Snapshot; header: VerifiedBundle } | null; reason: string }> {
  let latest: Snapshot;
  try {
    latest = await o.repo.resolve("latest", o.trust, a);
  } catch (e) {
    if (e instanceof AgentbakError) return { parent: null, reason: "no verified snapshot to build on" };
    throw e;
  }
  const opened = await o.repo.open(latest, o.trust);
  try {
    const v = await verifyBundle(opened.path, o.trust);
    const chain = await verifyChain(v, opened.links, o.trust);
    if (chain.length + 1 > fullEvery) return { parent: null, reason: `a full snapshot is due after ${fullEvery} incrementals` };
    return { parent: { snapshot: latest, header: v }, reason: "" };
  } catch (e) {
    if (!(e instanceof AgentbakError)) throw e;
    return { parent: null, reason: `chain of ${latest.snapshot_id} is not usable (${e.message})` };
  } finally {
    opened.release();
  }
}

/** The parent's page index for `db`, if it is stored and matches the digest the parent's manifest signed. */
async function parentIndex(o: BackupOptions, parent: { snapshot: Snapshot; header: VerifiedBundle }, db: string): Promise<PageIndex | null> {
  const c = parent.header.manifest.components.find((x) => x.name === db && isDatabase(x));
  const b = c?.page_index_sha256 ? await o.repo.pageIndex(parent.snapshot, db) : null;
  if (!b || sha256hex(b) !== c!.page_index_sha256) return null;
  try {
    return decodeIndex(b);
  } catch {
    return null;
  }
}

/** The files a `files` pattern names: never the repository, `.git`, node_modules, or a configured database and its sidecars. */
function expandFiles(lc: LoadedConfig, pattern: string, exclude: string[]): string[] {
  if (!isDynamicPattern(pattern)) return [lc.resolve(pattern)];
  return globSync(pattern, { cwd: lc.dir, absolute: true, onlyFiles: true, dot: true, followSymbolicLinks: false, ignore: ["**/.git/**", "**/node_modules/**"] })
    .map((f) => resolve(f))
    .filter((f) => !exclude.some((x) => f === x || f.startsWith(x + sep) || /-(wal|shm|journal)$/.test(f) && f.replace(/-(wal|shm|journal)$/, "") === x))
    .sort();
}

type WorkspaceCaptured = { staged: StagedComponent[]; manifest: Manifest["workspace"] };

/**
 * The last workspace capture of each workspace this process made, by the
 * state it was made from (a server takes checkpoint after checkpoint of an
 * unchanged workspace): the same state gives the same bundle and patch, whose
 * rebuild was already proven, so they are reused instead of captured, rebuilt
 * and hashed again. Only small captures are kept.
 */
const lastCapture = new Map<string, { key: string; files: { path: string; kind: StagedComponent["kind"]; bytes: Buffer }[]; manifest: NonNullable<Manifest["workspace"]> }>();
const REUSE_MAX_BYTES = 8 << 20;

/** Captures the workspace into `staging`, proving the capture rebuilds the tree (or reusing the last proven capture of the same state). */
async function captureWs(lc: LoadedConfig, w: NonNullable<LoadedConfig["config"]["workspace"]>, staging: string, warnings: string[]): Promise<WorkspaceCaptured> {
  const wsDir = join(staging, "workspace");
  mkdirSync(wsDir);
  const live = lc.resolve(w.path);
  const state = await workspaceState(live);
  const key = `${w.uncommitted}:${state.key}`;
  const known = lastCapture.get(live);
  const stage = (f: { path: string; kind: StagedComponent["kind"] }, file: string): StagedComponent => ({ path: f.path, kind: f.kind, name: "workspace", file });
  if (known?.key === key) {
    const staged = known.files.map((f) => (writeFileSync(join(staging, f.path), f.bytes), stage(f, join(staging, f.path))));
    return { staged, manifest: known.manifest };
  }
  const cap = await captureWorkspace(live, w.uncommitted, wsDir);
  const staged = [stage({ path: "workspace/repo.bundle", kind: "git-bundle" }, cap.bundleFile)];
  if (cap.patchFile) staged.push(stage({ path: "workspace/changes.patch", kind: "git-patch" }, cap.patchFile));
  // prove the capture reproduces the tree before trusting it
  const check = join(staging, "ws-check");
  await rebuildWorkspace(cap.bundleFile, cap.patchFile, cap.commit, cap.branch, check);
  const digest = await treeDigest(check);
  rmSync(check, { recursive: true, force: true });
  const manifest = { path: restoreTarget(lc, w.path, "workspace"), commit: cap.commit, branch: cap.branch, dirty: cap.dirty, uncommitted: cap.uncommitted, tree_sha256: digest.sha256, files: digest.files };
  // the tree as it was when the capture began must be the tree the capture rebuilds
  const consistent = cap.uncommitted !== "include" || state.tree.sha256 === digest.sha256;
  if (!consistent) warnings.push("workspace changed while it was being captured; the bundle holds a consistent earlier state");
  const size = staged.reduce((n, c) => n + statSync(c.file).size, 0);
  if (consistent && size <= REUSE_MAX_BYTES) lastCapture.set(live, { key, manifest, files: staged.map((c) => ({ path: c.path, kind: c.kind, bytes: readFileSync(c.file) })) });
  return { staged, manifest };
}

/** Captures databases, files and workspace between the pre and post hooks. */
async function capture(lc: LoadedConfig, repoDir: string | null, staging: string, o: BackupOptions, warnings: string[]) {
  const cfg = lc.config;
  const dbs: DbRecord[] = [];
  let cut: Cut | undefined;
  const files: StagedComponent[] = [];
  const ws: { staged: StagedComponent[]; manifest: Manifest["workspace"] } = { staged: [], manifest: null };
  let sources: Awaited<ReturnType<typeof captureSources>> = { staged: [], instant: undefined };
  let failure: unknown;
  let wsCapture: Promise<WorkspaceCaptured> | null = null;
  try {
    o.progress?.("quiescing agent");
    await runHooks(cfg.hooks.pre, lc.dir, cfg.hooks.timeoutSeconds, "pre");
    o.progress?.("snapshotting databases");
    // the workspace's git commands run in child processes while the databases are copied here
    wsCapture = cfg.workspace ? captureWs(lc, cfg.workspace, staging, warnings) : null;
    wsCapture?.catch(() => undefined); // awaited below (or, on failure, before the post hook)
    mkdirSync(join(staging, "db"), { recursive: true });
    // every database at one instant, then one record each
    if (cfg.databases.length)
      cut = await snapshotDatabases(cfg.databases.map((d) => ({ name: d.name, src: lc.resolve(d.path), dest: join(staging, "db", `${d.name}.sqlite`) })), cfg.cut.waitSeconds * 1000);
    for (const d of cfg.databases) {
      const copy = join(staging, "db", `${d.name}.sqlite`);
      dbs.push({ name: d.name, target: restoreTarget(lc, d.path, `db/${d.name}.sqlite`), copy, parentIndex: null, index: null, delta: null, inspected: null });
    }
    if (cfg.sources.length) {
      o.progress?.("capturing state sources");
      sources = await captureSources(lc, staging, warnings);
    }
    const exclude = [...cfg.databases.map((d) => lc.resolve(d.path)), ...cfg.sources.flatMap((x) => (x.path ? [lc.resolve(x.path)] : [])), ...(repoDir ? [repoDir] : [])];
    for (const pattern of cfg.files) {
      for (const f of expandFiles(lc, pattern, exclude)) {
        const rel = relative(lc.dir, f).split(sep).join("/");
        const path = `files/${rel}`;
        if (rel.startsWith("..") || !componentPath.safeParse(path).success) throw usageError(`files: ${rel} is outside the config folder or has characters a bundle path cannot hold`);
        const dest = join(staging, path);
        mkdirSync(join(dest, ".."), { recursive: true });
        try {
          copyFileSync(f, dest);
        } catch (e) {
          throw wrap(e, `files: ${pattern}`);
        }
        files.push({ path, kind: "file", name: rel, file: dest, target: rel });
      }
    }
    if (wsCapture) {
      o.progress?.("capturing workspace");
      Object.assign(ws, await wsCapture);
    }
  } catch (e) {
    failure = e;
  } finally {
    await wsCapture?.catch(() => undefined);
    try {
      await runHooks(cfg.hooks.post, lc.dir, cfg.hooks.timeoutSeconds, "post");
    } catch (e) {
      if (failure) warnings.push((e as Error).message);
      else failure = e;
    }
  }
  if (failure) throw failure;
  return { dbs, sources, files, ws, cut };
}

/**
 * Captures every state source (side by side, each at its own single instant)
 * into `staging/sources/<name>/`; connections come from credential references
 * resolved only now.
 */
async function captureSources(lc: LoadedConfig, staging: string, warnings: string[]): Promise<{ staged: StagedComponent[]; instant: Manifest["capture_instant"] }> {
  const started = new Date();
  const caps = await Promise.all(
    lc.config.sources.map(async (s) => {
      const dir = join(staging, "sources", s.name);
      mkdirSync(dir, { recursive: true });
      const target = targetIsFolder(s.kind) ? lc.resolve(s.path!) : resolveReference(s.url!, lc.dir);
      return { s, cap: await driverFor(s.kind).capture(s, target, dir) };
    }),
  );
  const staged: StagedComponent[] = [];
  for (const { s, cap } of caps)
    for (const f of cap.files) {
      if (s.embedding && f.dimension !== undefined && f.dimension !== s.embedding.dimension)
        warnings.push(`source ${s.name}: ${f.path} holds vectors of dimension ${f.dimension}, the config's embedding ${s.embedding.model} has ${s.embedding.dimension}`);
      const { file, path, records, table_version, dimension } = f;
      // the model is recorded on the tables that hold vectors
      staged.push({ path, kind: s.kind, name: s.name, file, records, table_version, dimension, ...(s.embedding && dimension !== undefined ? { embedding: s.embedding } : {}) });
    }
  const instant = {
    started_at: started.toISOString(),
    finished_at: new Date().toISOString(),
    sources: caps.map(({ s, cap }) => ({
      name: s.name,
      kind: s.kind,
      ref: s.url ?? null,
      path: s.path ? restoreTarget(lc, s.path, `sources/${s.name}`) : null,
      snapshot_at: cap.snapshotAt.toISOString(),
      server_version: cap.serverVersion,
    })),
  };
  return { staged, instant };
}

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
  const cfg = lc.config;
  const a: AgentRef = { tenant: cfg.agent.tenant, agent: cfg.agent.id };
  const lock = await o.repo.lock(a, "agent", o.waitMs ?? 0);
  const staging = o.repo.store.tempDir(`backup-${a.agent}`);
  const unregister = onInterrupt(() => rmSync(staging, { recursive: true, force: true }));
  const removals: Promise<void>[] = [];
  try {
    crashStep("locked");
    await o.repo.sweep(a);
    if (o.idempotencyKey) {
      const prior = await o.repo.idempotent<BackupReceipt>(a, o.idempotencyKey);
      if (prior) return replay(prior, o);
    }
    const warnings: string[] = [];
    const created = new Date();
    const snapshotId = newSnapshotId(created);
    const wantIncremental = o.incremental ?? cfg.incremental.enabled;
    const chosen = wantIncremental ? await chooseParent(o, a, cfg.incremental.fullEvery) : { parent: null, reason: "" };
    if (wantIncremental && !chosen.parent) warnings.push(`full snapshot instead of an incremental: ${chosen.reason}`);

    const repoDir = o.repo.store.inPlace ? o.repo.location : null;
    const { dbs, sources, files, ws, cut } = await capture(lc, repoDir, staging, o, warnings);
    if (!dbs.length && !sources.staged.length && !files.length && !ws.manifest)
      warnings.push(`this snapshot captures no state: ${lc.path} names no database, no state source, no file that exists and no workspace`);
    crashStep("snapshotted");

    // an incremental's page index decides what goes in, so it is made here, before the payload, beside the
    // inspection worker's integrity_check; a whole copy gets its index from the worker's own read
    o.progress?.("checking snapshot and writing bundle");
    const pageKey = pageIndexKey(o.home);
    const scanning = cfg.secretScan.databases !== "off";
    for (const d of dbs) d.parentIndex = chosen.parent ? await parentIndex(o, chosen.parent, d.name) : null;
    // integrity, counts, cursors, open operations and the secret scan read the copies (one instant) in a
    // worker thread while the payload is written here; nothing is published unless they pass
    const inspection = inspectInWorker({
      dbs: dbs.map((d) => (d.parentIndex ? { name: d.name, file: d.copy, scan: false } : { name: d.name, file: d.copy, indexKey: pageKey })),
      cursors: cfg.cursors,
      openOperations: cfg.openOperations,
      scan: cfg.secretScan.databases,
    });
    inspection.catch(() => undefined); // awaited below; no unhandled rejection meanwhile
    const deltaFindings: SecretFinding[] = [];
    for (const d of dbs) {
      if (!d.parentIndex) continue;
      const ix = indexPages(d.copy, pageKey);
      d.index = encodeIndex(ix);
      const pages = changedPages(d.parentIndex, ix);
      const file = join(staging, "db", `${d.name}.delta`);
      writeDelta(d.copy, pages, ix, file);
      d.delta = { file, pages, meta: { full_sha256: ix.sha256, full_size: ix.size, page_size: ix.pageSize, page_count: ix.pageCount, changed_pages: pages.length } };
      // pages that did not change were scanned when their snapshot was made
      if (scanning) deltaFindings.push(...scanChangedPages(d.copy, d.name, pages));
    }
    const staged: StagedComponent[] = [
      ...dbs.map((d): StagedComponent => (d.delta ? { path: `db/${d.name}.delta`, kind: "sqlite-delta", name: d.name, file: d.delta.file } : { path: `db/${d.name}.sqlite`, kind: "sqlite", name: d.name, file: d.copy })),
      ...sources.staged,
      ...files,
      ...ws.staged,
    ];
    const payloadFile = join(staging, "payload.age");
    let written: Awaited<ReturnType<typeof writePayload>>;
    try {
      written = await writePayload(staged, cfg.recipients, payloadFile);
    } finally {
      await inspection.catch(() => undefined);
    }
    o.progress?.("finishing snapshot checks");
    const ins = await inspection;
    dbs.forEach((d, i) => {
      d.inspected = ins.dbs[i]!;
      d.index ??= d.inspected.index ? encodeIndex(d.inspected.index) : null;
      const ic = d.inspected.integrity;
      if (ic.length !== 1 || ic[0] !== "ok") throw verifyError(`database ${d.name}: snapshot failed integrity_check: ${ic.slice(0, 3).join("; ")}`);
    });
    const findings: SecretFinding[] = scanValue(cfg, "config");
    const dbFindings = [...ins.findings, ...deltaFindings];
    if (cfg.secretScan.databases === "refuse") findings.push(...dbFindings);
    else warnings.push(...dbFindings.map((f) => `possible secret (${f.kind}) in ${f.where}`));
    if (findings.length) throw policyError(`refusing to back up: possible secret (${findings[0]!.kind}) in ${findings.map((f) => f.where).join(", ")}`);
    crashStep("payload-written");

    const manifest = buildManifest({
      agent: { id: a.agent, tenant: a.tenant },
      snapshotId,
      created,
      expireDays: cfg.retention.expireDays,
      sequence: await o.repo.nextSequence(a, o.trust, o.sequenceFloor),
      parent: dbs.some((d) => d.delta) && chosen.parent ? { snapshot_id: chosen.parent.snapshot.snapshot_id, manifest_sha256: chosen.parent.header.manifestSha256 } : null,
      label: o.label ?? null,
      idempotencyKey: o.idempotencyKey ?? null,
      signer: { fingerprint: fingerprint(o.signingKey.publicKey), principal: o.principal },
      recipients: cfg.recipients,
      runtime: { image_digest: cfg.runtime.imageDigest ?? null, agent_version: cfg.runtime.agentVersion ?? null, models: cfg.runtime.models ?? {}, host: hostname() },
      databases: dbs.map((d, i) => ({
        name: d.name,
        target: d.target,
        written: written.components[i]!,
        delta: d.delta?.meta ?? null,
        records: d.inspected!.records,
        schemaVersion: d.inspected!.schemaVersion,
        pageIndexSha256: sha256hex(d.index!),
        virtualTables: d.inspected!.virtualTables,
        embedding: cfg.databases.find((c) => c.name === d.name)?.embedding,
      })),
      others: written.components.slice(dbs.length),
      payload: written.payload,
      workspace: ws.manifest,
      credentials: cfg.credentials.map((c) => ({ name: c.name, ref: c.ref })),
      cursors: ins.cursors,
      cursorQueries: Object.fromEntries(Object.entries(cfg.cursors).map(([k, c]) => [k, { database: c.database, sql: c.sql }])),
      openOperations: ins.openOperations.map((op) => ({ ...op, strategy: strategyFor(op.kind, cfg.openOperations) })),
      cut,
      captureInstant: sources.instant,
    });
    const mfind = scanValue(manifest, "manifest");
    if (mfind.length) throw policyError(`refusing to back up: possible secret (${mfind[0]!.kind}) in ${mfind.map((f) => f.where).join(", ")}`);
    o.progress?.("signing and writing bundle");
    // staged copies are no longer needed: removed in the background now, so their unflushed pages are dropped
    // rather than written back during the bundle's fsync
    removals.push(...staged.map((c) => rm(c.file, { force: true })), ...dbs.map((d) => rm(d.copy, { force: true })));
    const bundleFile = join(staging, `${snapshotId}.agentbak`);
    const mbytes = await writeBundleFile(manifest, o.signingKey, payloadFile, bundleFile);
    crashStep("bundle-written");
    const receipt: Omit<BackupReceipt, "path"> = {
      snapshot_id: snapshotId,
      tenant: a.tenant,
      agent_id: a.agent,
      sequence: manifest.sequence,
      created_at: manifest.created_at,
      manifest_sha256: sha256hex(mbytes),
      payload_sha256: manifest.payload.sha256,
      size: statSync(bundleFile).size,
      kind: manifest.parent ? "incremental" : "full",
      parent: manifest.parent?.snapshot_id ?? null,
      repeated: false,
      status: "committed",
      params_sha256: paramsDigest(o),
      warnings,
    };
    const ol = cfg.objectLock;
    const published = await o.repo.publish(a, {
      snapshotId,
      file: bundleFile,
      sequence: manifest.sequence,
      indexes: dbs.map((d) => [d.name, d.index!]),
      idempotency: o.idempotencyKey ? { key: o.idempotencyKey, receipt: (path) => ({ ...receipt, path }) } : undefined,
      ...(ol ? { lockMode: ol.mode === "compliance" ? "COMPLIANCE" : "GOVERNANCE", retainUntil: new Date(Date.now() + ol.days * 86_400_000) } : {}),
      trust: o.trust,
      audit: { manifest_sha256: receipt.manifest_sha256, signer: manifest.signer.fingerprint },
      signingKey: o.signingKey,
    });
    return { ...receipt, path: published.path };
  } finally {
    await Promise.allSettled(removals);
    rmSync(staging, { recursive: true, force: true });
    unregister();
    await lock.release();
  }
}
