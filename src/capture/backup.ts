/**
 * The backup stage, a forward pipeline: lock → choose the parent → quiesce,
 * capture every state layer, resume → one record per database flows through
 * parent index, new index, delta and inspection → payload → manifest (one
 * pure function) → signed bundle → published through the repository.
 */
import { execa } from "execa";
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from "node:fs";
import { rm } from "node:fs/promises";
import { hostname } from "node:os";
import { join, relative, resolve, sep } from "node:path";
import { globSync, isDynamicPattern } from "tinyglobby";
import { buildManifest, componentPath, encodeManifest, isDatabase, parseManifest, sha256hex, type CapturedDatabase, type Manifest, type NotCaptured } from "../bundle/manifest.js";
import type { VerifiedBundle } from "../bundle/reader.js";
import { checkedPayloads, verifyChain, verifyRemembered } from "../bundle/chain.js";
import { planBundle, writeBundleFile, writePayload, type StagedComponent, type StagedFile } from "../bundle/writer.js";
import type { LoadedConfig } from "../config/load.js";
import { strategyFor } from "../config/recovery.js";
import { fingerprint, type SigningKey } from "../crypto/sshsig.js";
import type { Trust } from "../crypto/trust.js";
import { crashStep } from "../crashpoint.js";
import { doneBeforeInterrupt, removeOnInterrupt, removeTree } from "../cleanup.js";
import { AgentbakError, ConflictError, Exit, ioErrno, ioError, policyError, usageError, verifyError, wrap } from "../errors.js";
import { type AgentRef, hasUnsafeText, newSnapshotId, SQLITE_SIDECAR } from "../facts.js";
import type { Repository, Snapshot } from "../repository/repository.js";
import { inspectInWorker, inspectPinned, warmInspection, type InspectResult } from "../state/inspect/inspect.js";
import { deltaMeta, deltasInPlace, writeDeltaOf, type Delta } from "../state/inspect/incremental.js";
import { blockSeed, BlockSumsStore, decodeIndex, encodeIndex, encodeIndexChanges, indexPages, pageIndexKey, PageHasher, pagesRoot, type DeltaBase, type PageIndex } from "../state/pages/index.js";
import { splitPage, type PageSource } from "../state/sqlite/pagefile.js";
import { nameMatcher, scanText, scanValue, type SecretFinding } from "../state/secrets/scan.js";
import { namedSource } from "../state/sqlite/livesnap.js";
import { snapshotDatabases, type Cut, type Hold, type InPlace, type InPlaceViews } from "../state/sqlite/cut.js";
import { databasesState, lastBackup, otherState, rememberBackup, stateKey } from "./unchanged.js";
import { atPath, ensureDir, ensureDirIn, writeCacheFile } from "../fsutil.js";
import { captureWorkspace, committedPaths, rebuildWorkspace, scanWorkspace, treeDigest, workspaceState } from "../state/workspace/workspace.js";
import { driverFor, resolveReference, targetIsFolder } from "../state/sources/index.js";
import { agentbakHome, homePaths } from "../home.js";
import type { Progress } from "../progress.js";

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

/** A time-sortable snapshot id: UTC time to the millisecond plus 32 random bits. */
/** An unchanged state is backed up again anyway when its last snapshot expires within this. */
const UNCHANGED_EXPIRY_MARGIN_MS = 86_400_000;

/**
 * Of a full snapshot read in place, the share of the keyed page hashes made on the thread that streams the
 * payload; the inspection worker makes the rest. Measured on the 1194 MiB bench database (commit message).
 */
const FULL_MAIN_SHARE = 0.35;

/** Snapshots a full backup keeps open at its instant (snapshotDatabases' Hold), and their inspection. */
interface Pinned {
  views: InPlaceViews;
  live: Awaited<ReturnType<typeof inspectPinned>>;
  release(): void;
}

/** One database on its way through the pipeline; each stage fills in its part. */
interface DbRecord {
  name: string;
  /** where it goes in a restored root */
  target: string;
  /** the consistent copy in staging (none is written when `pages` is set) */
  copy: string;
  /** a full snapshot read in place: the live pages, pinned at the instant by a read transaction */
  pages: PageSource | null;
  /** the parent's page index, verified against the parent's manifest (incrementals) */
  parentIndex: PageIndex | null;
  /** the pages root of this copy's page index (the manifest signs it) */
  indexRoot: string | null;
  /** the index as stored: encoded whole, or an incremental's as the changes since its parent's */
  stored: Buffer | null;
  delta: { file: string; pages: number[]; meta: NonNullable<CapturedDatabase["delta"]> } | null;
  inspected: InspectResult["dbs"][number] | null;
  /** this snapshot's block sums were written (kept on this host for the next incremental once the snapshot is published) */
  sums: boolean;
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
async function chooseParent(o: BackupOptions, a: AgentRef, fullEvery: number): Promise<{ parent: { snapshot: Snapshot; header: VerifiedBundle } | null; reason: string; link: number; routine?: boolean }> {
  // the newest snapshot is the chain's head: one that does not verify (itself, or a link below it) is not skipped
  // for an older one, silently; a full snapshot starts a sound chain and the warning names the link
  const newest = (await o.repo.list(o.trust, a)).at(-1);
  if (newest?.status === "invalid") return { parent: null, reason: `chain of ${newest.snapshot_id} is not usable (${newest.problem})`, link: 0 };
  let latest: Snapshot;
  try {
    latest = await o.repo.resolve("latest", o.trust, a);
  } catch (e) {
    if (e instanceof AgentbakError) return { parent: null, reason: "no verified snapshot to build on", link: 0, routine: true };
    throw e;
  }
  const opened = await o.repo.open(latest, o.trust);
  try {
    // every link's payload digest, each read once on this host (by file identity): a large full snapshot is not
    // read again at every incremental built on it
    const checked = checkedPayloads(o.home);
    const v = await verifyRemembered(opened.path, o.trust, checked);
    const chain = await verifyChain(v, opened.links, o.trust, checked);
    checked.save();
    if (chain.length + 1 > fullEvery) return { parent: null, reason: `a full snapshot is due after ${fullEvery} incrementals`, link: 0, routine: true };
    // the new snapshot's place in its chain: 1 for the first incremental after a full one
    return { parent: { snapshot: latest, header: v }, reason: "", link: chain.length + 1 };
  } catch (e) {
    if (!(e instanceof AgentbakError)) throw e;
    return { parent: null, reason: `chain of ${latest.snapshot_id} is not usable (${e.message})`, link: 0 };
  } finally {
    opened.release();
  }
}

/**
 * The parent's page index for `db`, if it is stored and matches the digest the parent's manifest signed.
 * @returns it, or why it can not be used
 */
async function parentIndex(o: BackupOptions, parent: { snapshot: Snapshot; header: VerifiedBundle }, db: string, key: Buffer): Promise<PageIndex | Unindexed> {
  const m = parent.header.manifest;
  const id = m.snapshot_id;
  // before format 4 an index held keyed page hashes, which no pages root is made of: a full snapshot after upgrading is routine
  if (m.format_version < 4) return { reason: `${id} was made by an earlier agentbak (bundle format ${m.format_version}), whose page index an incremental can not build on`, routine: true };
  const c = m.components.find((x) => x.name === db && isDatabase(x));
  // a database added to the config since the parent: stored whole, as expected
  if (!c) return { reason: `database ${db} is not in ${id} (added since)`, routine: true };
  const b = c.page_index_sha256 ? await o.repo.pageIndex(parent.snapshot, db) : null;
  const missing = { reason: `the page index of database ${db} in ${id} is missing or does not match its manifest`, routine: false };
  if (!b) return missing;
  try {
    const ix = decodeIndex(b, key);
    // sealed under another key (another host made the parent, or this host's key was replaced): its digests can not be
    // read here, so every page is taken as changed (an index of page size 0 matches no page) and no sums are used
    if (!ix) return { pageSize: 0, pageCount: 0, hashes: Buffer.alloc(0) };
    // the manifest signs the pages root of the index's digests
    return pagesRoot(ix) === c.page_index_sha256 ? ix : missing;
  } catch {
    return missing;
  }
}

/** Why a database is stored whole in an incremental; `routine`: expected (an upgrade), not a warning. */
interface Unindexed {
  reason: string;
  routine: boolean;
}

/** Whether `p` is `dir` or inside it. */
const isInside = (p: string, dir: string) => p === dir || p.startsWith(dir + sep);

/** Paths a `files` entry may never take, and what each is. */
interface Reserved {
  databases: string[];
  /** folders captured otherwise or never: the repository, the workspace */
  dirs: [string, string][];
}

/** What a `files` glob never takes for this config: its databases, the repository, agentbak's keys, the workspace, source folders. */
function reservedPaths(lc: LoadedConfig, repoDir: string | null): Reserved {
  const cfg = lc.config;
  const dirs: [string, string][] = [];
  if (repoDir) dirs.push([repoDir, "the repository"]);
  const home = agentbakHome();
  dirs.push([home, "agentbak's key folder (AGENTBAK_HOME)"]);
  if (existsSync(home)) dirs.push([realpathSync(home), "agentbak's key folder (AGENTBAK_HOME)"]);
  if (cfg.workspace) dirs.push([lc.resolve(cfg.workspace.path), "the workspace"]);
  for (const x of cfg.sources) if (x.path) dirs.push([lc.resolve(x.path), `state source ${x.name}`]);
  return { databases: cfg.databases.map((d) => lc.resolve(d.path)), dirs };
}

/** A credential's file is a secret by definition: by absolute path, which credential it is. */
const credentialFiles = (lc: LoadedConfig) => new Map(lc.config.credentials.filter((c) => c.ref.startsWith("file:")).map((c) => [lc.resolve(c.ref.slice(5)), c]));

/** The files the `files` patterns name now, without credential files (never read here). */
function filePaths(lc: LoadedConfig, repoDir: string | null): string[] {
  const reserved = reservedPaths(lc, repoDir);
  const realRoot = realpathSync(lc.dir);
  const credentials = credentialFiles(lc);
  return lc.config.files.flatMap((p) => expandFiles(lc, p, reserved, realRoot)).filter((f) => !credentials.has(f) && !credentials.has(realpathSync(f)));
}

function reservedBy(p: string, r: Reserved): string | null {
  if (r.databases.includes(p)) return "a configured database";
  if (SQLITE_SIDECAR.test(p) && r.databases.includes(p.replace(SQLITE_SIDECAR, ""))) return "a SQLite sidecar of a configured database";
  const dir = r.dirs.find(([d]) => isInside(p, d));
  if (dir) return dir[1];
  return p.split(sep).includes(".git") ? "a .git folder" : null;
}

/**
 * The files a `files` pattern names. A glob never takes a configured
 * database or its sidecars, the repository, the workspace (captured with its
 * own history), `.git` or node_modules; a literal path naming one of those is
 * a config error, and so is any match whose real path leaves the config
 * folder (through a symbolic link, to a file or a folder).
 * @throws AgentbakError(2) as above, (10) for a literal path that does not exist.
 */
function expandFiles(lc: LoadedConfig, pattern: string, reserved: Reserved, realRoot: string): string[] {
  const literal = !isDynamicPattern(pattern);
  const found = literal
    ? [lc.resolve(pattern)]
    : // links are followed, so that every match is judged by where it really is (below)
      globSync(pattern, { cwd: lc.dir, absolute: true, onlyFiles: true, dot: true, followSymbolicLinks: true, ignore: ["**/.git/**", "**/node_modules/**"] }).map((f) => resolve(f)).sort();
  const out: string[] = [];
  for (const f of found) {
    let real: string;
    try {
      real = realpathSync(f);
    } catch (e) {
      throw wrap(e, `files: ${pattern}`);
    }
    const rel = relative(lc.dir, f).split(sep).join("/") || ".";
    const st = statSync(real);
    if (literal && st.isDirectory()) throw usageError(`files: ${pattern} is a folder; name its files, or a glob such as ${rel}/**`);
    // a FIFO would block the backup forever, a device never ends: only regular files are captured
    if (!st.isFile()) {
      if (literal) throw usageError(`files: ${pattern} is ${st.isFIFO() ? "a FIFO" : st.isSocket() ? "a socket" : "a device"}, not a regular file`);
      continue;
    }
    if (!isInside(real, realRoot)) throw usageError(`files: ${rel} ${real !== f ? `is a symbolic link to ${real}, ` : "is "}outside the config folder ${lc.dir}`);
    const why = reservedBy(f, reserved) ?? reservedBy(real, reserved);
    if (why && literal) throw usageError(`files: ${pattern} names ${why}; it is captured otherwise or never`);
    if (!why) out.push(f);
  }
  return out;
}

/**
 * Applies a source's secretScan policy to its findings: refuse throws,
 * warn adds one warning per finding.
 * @throws AgentbakError(14) naming where (never what) when the policy is refuse.
 */
function applyScanPolicy(policy: "refuse" | "warn" | "off", findings: SecretFinding[], warnings: string[]): void {
  if (!findings.length || policy === "off") return;
  if (policy === "warn") return void warnings.push(...findings.map((f) => `possible secret (${f.kind}) in ${f.where}`));
  const where = findings.slice(0, 10).map((f) => f.where).join(", ") + (findings.length > 10 ? ` and ${findings.length - 10} more` : "");
  throw policyError(`refusing to back up: possible secret (${findings[0]!.kind}) in ${where}`);
}

/** What a capture keeps out of the bundle and collects, across `files` and the workspace. */
interface CaptureScope {
  lc: LoadedConfig;
  staging: string;
  /** AGENTBAK_HOME: the last proven workspace capture is kept in its cache folder */
  home: string;
  /** why a file (absolute, and relative to its root) stays out, or null */
  leaveOut: (abs: string, rel: string) => Omit<NotCaptured, "path"> | null;
  /** a credential's file, by absolute path */
  credentialFiles: Map<string, { name: string; ref: string }>;
  notCaptured: NotCaptured[];
  findings: { workspace: SecretFinding[]; files: SecretFinding[] };
  warnings: string[];
}

/** Copies the `files` components into staging: what must never be captured stays out (and is recorded), the rest is scanned. */
function captureFiles(s: CaptureScope, reserved: Reserved): StagedFile[] {
  const { lc } = s;
  const out: StagedFile[] = [];
  const realRoot = realpathSync(lc.dir);
  for (const pattern of lc.config.files) {
    for (const f of expandFiles(lc, pattern, reserved, realRoot)) {
      const rel = relative(lc.dir, f).split(sep).join("/");
      const path = `files/${rel}`;
      if (rel.startsWith("..") || !componentPath.safeParse(path).success) throw usageError(`files: ${rel} is outside the config folder or has characters a bundle path cannot hold`);
      const why = s.leaveOut(f, rel) ?? s.leaveOut(realpathSync(f), rel);
      if (why) {
        s.notCaptured.push({ path: rel, ...why });
        continue;
      }
      const dest = join(s.staging, path);
      ensureDirIn(s.staging, join(dest, ".."));
      try {
        copyFileSync(f, dest);
      } catch (e) {
        throw ioErrno(e) ? ioError(e, dest) : wrap(e, `files: ${pattern}`);
      }
      if (lc.config.secretScan.files !== "off") s.findings.files.push(...scanText(atPath(dest, () => readFileSync(dest)), `files: ${rel}`));
      out.push({ path, kind: "file", name: rel, file: dest, target: rel });
    }
  }
  return out;
}

/**
 * Captures the workspace into staging (git bundle and patch, without what
 * stays out), proves it rebuilds the tree, and scans what it holds.
 */
async function captureWorkspaceInto(s: CaptureScope, live: string, repoDir: string | null): Promise<{ staged: StagedFile[]; manifest: Manifest["workspace"] }> {
  const { lc } = s;
  const cfg = lc.config.workspace!;
  const wsDir = join(s.staging, "workspace");
  mkdirSync(wsDir);
  const target = restoreTarget(lc, cfg.path, "workspace");
  // the repository, when it lies inside the workspace, is never read into its own bundle
  const skipDirs = repoDir && isInside(repoDir, live) && repoDir !== live ? [relative(live, repoDir).split(sep).join("/")] : [];
  const cap = await captureWorkspace(live, cfg.uncommitted, wsDir, { skipDirs, skip: (rel) => s.leaveOut(join(live, rel), rel) });
  s.notCaptured.push(...cap.skipped.map((x) => ({ ...x, path: `${target}/${x.path}` })));
  const staged: StagedFile[] = [{ path: "workspace/repo.bundle", kind: "git-bundle", name: "workspace", file: cap.bundleFile }];
  if (cap.patchFile) staged.push({ path: "workspace/changes.patch", kind: "git-patch", name: "workspace", file: cap.patchFile });
  // prove the capture reproduces the tree before trusting it
  const check = join(s.staging, "ws-check");
  await rebuildWorkspace(cap.bundleFile, cap.patchFile, cap.commit, cap.branch, check);
  const digest = await treeDigest(check);
  if (cap.uncommitted === "include") {
    const left = new Set(cap.skipped.map((x) => x.path));
    const skip = (rel: string) => left.has(rel);
    const rebuilt = left.size ? await treeDigest(check, { skip }) : digest;
    if ((await treeDigest(live, { skipDirs, skip })).sha256 !== rebuilt.sha256) s.warnings.push("workspace changed while it was being captured; the bundle holds a consistent earlier state");
  }
  if (lc.config.secretScan.workspace !== "off") {
    s.findings.workspace.push(...(await scanWorkspace(check, cap.commit, cap.changed)));
    // a credential's file that is committed can not be left out of the git bundle
    const inside = [...s.credentialFiles].filter(([abs]) => isInside(abs, live)).map(([abs, c]) => [relative(live, abs).split(sep).join("/"), c] as const);
    const committed = await committedPaths(check, cap.commit, inside.map(([rel]) => rel));
    for (const [rel, c] of inside) if (committed.includes(rel)) s.findings.workspace.push({ where: `workspace: ${rel} (committed), the file of credential ${c.name} (${c.ref})`, kind: "credential file" });
  }
  rmSync(check, { recursive: true, force: true });
  return { staged, manifest: { path: target, commit: cap.commit, branch: cap.branch, dirty: cap.dirty, uncommitted: cap.uncommitted, tree_sha256: digest.sha256, files: digest.files } };
}

type WorkspaceCaptured = { staged: StagedFile[]; manifest: Manifest["workspace"]; notCaptured: NotCaptured[]; findings: SecretFinding[] };

/**
 * The last workspace capture of each workspace, by the state it was made from
 * (checkpoint after checkpoint of an unchanged workspace): the same state
 * gives the same bundle and patch, whose rebuild was already proven and whose
 * scan already ran (and found nothing: captures with warnings are not kept),
 * so they are reused instead of captured, rebuilt, hashed and scanned again.
 * Kept in this process and in AGENTBAK_HOME/cache (0600), so that one CLI
 * run reuses the last one's. Only small captures are kept.
 */
type KnownCapture = { key: string; files: { path: string; kind: StagedFile["kind"]; bytes: Buffer }[]; result: Omit<WorkspaceCaptured, "staged"> };
const lastCapture = new Map<string, KnownCapture>();
const REUSE_MAX_BYTES = 8 << 20;
const captureCacheFile = (home: string, live: string) => homePaths(home).cache.workspaceCapture(createHash("sha256").update(live).digest("hex").slice(0, 16));

function knownCapture(home: string, live: string): KnownCapture | undefined {
  const mem = lastCapture.get(live);
  if (mem) return mem;
  try {
    const c = JSON.parse(readFileSync(captureCacheFile(home, live), "utf8")) as Omit<KnownCapture, "files"> & { live: string; files: { path: string; kind: StagedFile["kind"]; base64: string }[] };
    if (c.live !== live) return undefined;
    return { key: c.key, result: c.result, files: c.files.map((f) => ({ path: f.path, kind: f.kind, bytes: Buffer.from(f.base64, "base64") })) };
  } catch {
    return undefined; // none yet, or unreadable: capture afresh
  }
}

function rememberCapture(home: string, live: string, c: KnownCapture): void {
  lastCapture.set(live, c);
  try {
    ensureDir(homePaths(home).cache.dir, 0o700);
    writeCacheFile(captureCacheFile(home, live), JSON.stringify({ live, key: c.key, result: c.result, files: c.files.map((f) => ({ path: f.path, kind: f.kind, base64: f.bytes.toString("base64") })) }));
  } catch {
    /* a cache that can not be written only costs the next run a capture */
  }
}

/** Captures the workspace (or reuses the last proven capture of the same state and settings). */
async function captureWs(s: CaptureScope, live: string, repoDir: string | null): Promise<WorkspaceCaptured> {
  const w = s.lc.config.workspace!;
  // a folder git can not read gets no reuse key: the capture below says what is wrong with it
  const state = await workspaceState(live).catch(() => null);
  const key = state && createHash("sha256").update(JSON.stringify([w.uncommitted, s.lc.config.secretScan, [...s.credentialFiles.keys()], repoDir, state.key])).digest("hex");
  const known = key ? knownCapture(s.home, live) : undefined;
  if (key && known && known.key === key) {
    ensureDirIn(s.staging, join(s.staging, "workspace"));
    const staged = known.files.map((f): StagedFile => (atPath(join(s.staging, f.path), () => writeFileSync(join(s.staging, f.path), f.bytes)), { path: f.path, kind: f.kind, name: "workspace", file: join(s.staging, f.path) }));
    return { staged, ...known.result };
  }
  const findings: SecretFinding[] = [];
  const notCaptured: NotCaptured[] = [];
  const own: CaptureScope = { ...s, notCaptured, findings: { workspace: findings, files: [] } };
  const r = await captureWorkspaceInto(own, live, repoDir);
  const size = r.staged.reduce((n, c) => n + statSync(c.file).size, 0);
  if (key && !s.warnings.length && size <= REUSE_MAX_BYTES)
    rememberCapture(s.home, live, { key, files: r.staged.map((c) => ({ path: c.path, kind: c.kind, bytes: readFileSync(c.file) })), result: { manifest: r.manifest, notCaptured, findings } });
  return { ...r, notCaptured, findings };
}

/** Captures databases (at one instant), state sources, files and workspace between the pre and post hooks. */
async function capture(lc: LoadedConfig, repoDir: string | null, staging: string, o: BackupOptions & { atInstant?: (allLocked: boolean) => void; inPlace?: InPlace; hold?: Hold }, warnings: string[]) {
  const cfg = lc.config;
  const dbs: DbRecord[] = [];
  let cut: Cut | undefined;
  let files: StagedFile[] = [];
  let ws: { staged: StagedFile[]; manifest: Manifest["workspace"] } = { staged: [], manifest: null };
  let sources: Awaited<ReturnType<typeof captureSources>> = { staged: [], instant: undefined };
  // a credential's file is a secret by definition, and names like .env usually hold one
  const credentials = credentialFiles(lc);
  const excluded = nameMatcher(cfg.secretScan.exclude);
  const scope: CaptureScope = {
    lc,
    staging,
    home: o.home,
    credentialFiles: credentials,
    leaveOut: (abs, rel) => {
      const cred = credentials.get(abs);
      if (cred) return { reason: "credential", detail: `${cred.name} (${cred.ref})` };
      const pattern = excluded(rel);
      return pattern ? { reason: "exclude", detail: `secretScan.exclude "${pattern}"` } : null;
    },
    notCaptured: [],
    findings: { workspace: [], files: [] },
    warnings,
  };
  const live = cfg.workspace ? lc.resolve(cfg.workspace.path) : null;
  let failure: unknown;
  let wsCapture: Promise<WorkspaceCaptured> | null = null;
  try {
    o.progress?.stage("quiescing agent");
    await runHooks(cfg.hooks.pre, lc.dir, cfg.hooks.timeoutSeconds, "pre");
    o.progress?.stage("snapshotting databases");
    // the workspace's git commands run in child processes while the databases are copied here
    wsCapture = live ? captureWs(scope, live, repoDir) : null;
    wsCapture?.catch(() => undefined); // awaited below (or, on failure, before the post hook)
    ensureDirIn(staging, join(staging, "db"));
    // every database at one instant, then one record each
    if (cfg.databases.length)
      cut = await snapshotDatabases(
        cfg.databases.map((d) => ({ name: d.name, src: lc.resolve(d.path), dest: join(staging, "db", `${d.name}.sqlite`) })),
        o.waitMs || cfg.cut.waitSeconds * 1000,
        o.atInstant,
        o.inPlace,
        o.hold,
      );
    for (const d of cfg.databases) {
      const copy = join(staging, "db", `${d.name}.sqlite`);
      dbs.push({ name: d.name, target: restoreTarget(lc, d.path, `db/${d.name}.sqlite`), copy, pages: null, parentIndex: null, indexRoot: null, stored: null, delta: null, inspected: null, sums: false });
    }
    if (cfg.sources.length) {
      o.progress?.stage("capturing state sources");
      sources = await captureSources(lc, staging, warnings);
    }
    files = captureFiles(scope, reservedPaths(lc, repoDir));
    if (wsCapture) {
      o.progress?.stage("capturing workspace");
      const w = await wsCapture;
      ws = { staged: w.staged, manifest: w.manifest };
      scope.notCaptured.push(...w.notCaptured);
      scope.findings.workspace.push(...w.findings);
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
  return { dbs, sources, files, ws, cut, notCaptured: scope.notCaptured, findings: scope.findings };
}

/**
 * Captures every state source (side by side, each at its own single instant)
 * into `staging/sources/<name>/`; connections come from credential references
 * resolved only now.
 */
async function captureSources(lc: LoadedConfig, staging: string, warnings: string[]): Promise<{ staged: StagedFile[]; instant: Manifest["capture_instant"] }> {
  const started = new Date();
  const caps = await Promise.all(
    lc.config.sources.map(async (s) => {
      const dir = join(staging, "sources", s.name);
      ensureDirIn(staging, dir);
      const target = targetIsFolder(s.kind) ? lc.resolve(s.path!) : resolveReference(s.url!, lc.dir);
      return { s, cap: await driverFor(s.kind).capture(s, target, dir) };
    }),
  );
  const staged: StagedFile[] = [];
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
  // a label is shown in listings and logs: a line break, escape sequence or bidi control there could forge a row
  if (o.label !== undefined && (hasUnsafeText(o.label) || o.label.length > 200))
    throw usageError("--label: at most 200 characters, none of them control characters, escape sequences or Unicode bidi/format controls");
  const cfg = lc.config;
  const a: AgentRef = { tenant: cfg.agent.tenant, agent: cfg.agent.id };
  const lock = await o.repo.lock(a, "agent", o.waitMs ?? 0);
  const staging = o.repo.store.tempDir(`backup-${a.agent}`);
  const unregister = removeOnInterrupt(staging);
  const removals: Promise<void>[] = [];
  /** run at the end whatever happened: open block sums closed, and those of a snapshot not published removed */
  const closers: (() => void)[] = [];
  /** a full snapshot's databases held open at the instant (read in place), with their inspection */
  let pinned: Pinned | null = null;
  // the inspection worker reads the pinned snapshots' descriptors: they close only after it finished
  const releasePinned = async () => {
    const p = pinned as Pinned | null;
    pinned = null;
    if (!p) return;
    await p.live.settled();
    p.release();
  };
  try {
    crashStep("locked");
    await o.repo.sweep(a);
    if (o.idempotencyKey) {
      const prior = await o.repo.idempotent<BackupReceipt>(a, o.idempotencyKey, o.trust);
      if (prior) return replay(prior, o);
    }
    // nothing changed since this host's last snapshot, which is still the newest and far from expiring: no bundle
    const skippable = o.skipUnchanged && !o.label && !o.idempotencyKey && !cfg.hooks.pre.length && !cfg.hooks.post.length && !cfg.sources.length;
    const repoDir = o.repo.store.inPlace ? o.repo.location : null;
    const other = skippable ? await otherState(lc, filePaths(lc, repoDir), fingerprint(o.signingKey.publicKey)).catch(() => null) : null;
    const last = other ? lastBackup<BackupReceipt>(o.home, o.repo.location, a) : null;
    if (
      last &&
      last.fingerprint === stateKey(other!, databasesState(lc)) &&
      Date.parse(last.expires_at) - Date.now() > UNCHANGED_EXPIRY_MARGIN_MS &&
      (await o.repo.recordedSequence(a)) === last.sequence &&
      (await o.repo.committed(a, last.receipt.snapshot_id))
    )
      return { ...last.receipt, repeated: false, status: "unchanged", warnings: [] };
    // the inspection worker starts now, beside the choice of a parent and the reading of its page indexes (an in-place
    // incremental hashes in it as soon as the snapshot is pinned), and before the write locks are taken: they are
    // held while it joins the instant, not while it loads
    const warmed = warmInspection(cfg.databases.reduce((n, d) => n + (statSync(lc.resolve(d.path), { throwIfNoEntry: false })?.size ?? 0), 0));
    warmed.catch(() => undefined); // awaited before a capture that holds the snapshots; a worker that failed to start is not used
    const warnings: string[] = [];
    const created = new Date();
    const snapshotId = newSnapshotId(created);
    const wantIncremental = o.incremental ?? cfg.incremental.enabled;
    const chosen = wantIncremental ? await chooseParent(o, a, cfg.incremental.fullEvery) : { parent: null, reason: "", link: 0 };
    // a full snapshot that fullEvery asks for, or the first one, is routine (in the receipt); one forced by a chain that
    // does not verify is a warning
    if (wantIncremental && !chosen.parent && !chosen.routine) warnings.push(`full snapshot instead of an incremental: ${chosen.reason}`);

    // the databases' part of the fingerprint, read at the snapshot instant (only when every write lock was held)
    let dbState: string | null = null;
    const atInstant = other ? (allLocked: boolean) => void (dbState = allLocked ? databasesState(lc) : null) : undefined;
    const pageKey = pageIndexKey(o.home);
    // the parents' page indexes, before the capture: an incremental the integrity policy does not check reads
    // the live pages in place, inside the snapshot's read transactions, and copies only what changed
    const parents = new Map<string, PageIndex>();
    let unindexed: Unindexed | null = null;
    for (const d of chosen.parent ? cfg.databases : []) {
      const ix = await parentIndex(o, chosen.parent!, d.name, pageKey);
      if ("hashes" in ix) parents.set(d.name, ix);
      else if (!unindexed || (unindexed.routine && !ix.routine)) unindexed = ix; // a warning's reason before a routine one
    }
    // that database is stored whole: after an upgrade routinely (in the receipt), a damaged or missing index with a warning
    if (unindexed && !unindexed.routine) warnings.push(`${unindexed.reason}: stored whole`);
    // this host's block sums of the parent's databases, when it made that parent: the deltas then hold changed blocks
    const seed = blockSeed(pageKey);
    const sumStores = new Map(cfg.databases.map((d) => [d.name, new BlockSumsStore(o.home, o.repo.location, a.tenant, a.agent, d.name)]));
    const bases = new Map<string, DeltaBase>();
    for (const [name, ix] of parents) {
      const c = chosen.parent!.header.manifest.components.find((x) => x.name === name && isDatabase(x))!;
      const sums = sumStores.get(name)!.open(chosen.parent!.snapshot.snapshot_id, c.full_pages_sha256 ?? c.full_sha256 ?? c.sha256, ix.pageSize, ix.pageCount);
      const out = sums && sumStores.get(name)!.partial(snapshotId);
      if (sums && out) bases.set(name, { sums, seed, out });
      else sums?.close();
    }
    closers.push(() => bases.forEach((b) => b.sums.close()), () => sumStores.forEach((st) => st.discard(snapshotId)));
    const integrityChecked = !chosen.parent || chosen.link % cfg.incremental.integrityEvery === 0;
    const inspectInput = { cursors: cfg.cursors, openOperations: cfg.openOperations, timers: cfg.timers, scan: cfg.secretScan.databases };
    let inPlaceDone: Awaited<ReturnType<typeof deltasInPlace>> | null = null;
    const inPlace: InPlace | undefined =
      !integrityChecked && cfg.databases.length && cfg.databases.every((d) => parents.has(d.name))
        ? async (views) => {
            inPlaceDone = await deltasInPlace(views, { parents, bases, key: pageKey, dir: join(staging, "db"), inspect: inspectInput });
            return true;
          }
        : undefined;
    // a full snapshot (every database in WAL mode and locked here) is read in place too: the payload streams the
    // pinned pages, and the inspection worker checks them through its own read transactions at the same instant;
    // no copy of the databases is written and read back
    const hold: Hold | undefined =
      !inPlace && !parents.size && cfg.databases.length
        ? async (views, release) => {
            const live = await inspectPinned(
              { ...inspectInput, dbs: [...views].map(([name, v]) => ({ name, file: v.src, pages: v.snap.pinned(), indexKey: pageKey, indexAfter: splitPage(v.snap.pageCount, v.snap.pageSize, FULL_MAIN_SHARE), sumsFile: sumStores.get(name)!.partial(snapshotId) ?? undefined })) },
              new Map([...views].map(([n, v]) => [n, v.db])),
            );
            pinned = { views, live, release };
            return true;
          }
        : undefined;
    if (hold) await warmed;
    const { dbs, sources, files, ws, cut, notCaptured, findings: captured } = await capture(lc, repoDir, staging, { ...o, atInstant, inPlace, hold }, warnings);
    // an empty snapshot would become "latest" and restore nothing: refused, nothing written (restic: "nothing to backup")
    if (!dbs.length && !sources.staged.length && !files.length && !ws.manifest)
      throw usageError(`nothing to back up: ${lc.path} names no database, no state source, no file that exists and no workspace; no snapshot was written`);
    applyScanPolicy(cfg.secretScan.workspace, captured.workspace, warnings);
    applyScanPolicy(cfg.secretScan.files, captured.files, warnings);
    crashStep("snapshotted");

    // an incremental's page index decides what goes in, so it is made here, before the payload, beside the
    // inspection worker's integrity_check; a whole copy gets its index from the worker's own read
    o.progress?.stage("checking snapshot and writing bundle");
    for (const d of dbs) d.parentIndex = parents.get(d.name) ?? null;
    const deltaFindings: SecretFinding[] = [];
    const done = inPlaceDone as Awaited<ReturnType<typeof deltasInPlace>> | null; // set by the capture's callback when it read the pages in place
    const takeDelta = (d: DbRecord, x: Delta) => {
      d.indexRoot = x.ix.root;
      d.stored = d.parentIndex!.pageSize === x.ix.pageSize ? encodeIndexChanges(x.ix, x.pages, chosen.parent!.snapshot.snapshot_id, pageKey) : encodeIndex(x.ix, pageKey);
      d.delta = { file: x.file, pages: x.pages, meta: deltaMeta(x) };
      d.sums = x.sums;
      deltaFindings.push(...x.findings);
    };
    if (done) for (const d of dbs) takeDelta(d, done.deltas.get(d.name)!);
    // integrity, counts, cursors, open operations and the secret scan read the copies (one instant) in a
    // worker thread while the payload is written here; nothing is published unless they pass
    const held = pinned as Pinned | null; // set by the capture's callback when it kept the snapshots open
    // the page index of pages read in place is shared: its first pages are hashed here as the payload streams
    // them, the rest by the worker (which has the integrity_check, the scan and the block sums)
    const heads = new Map<string, PageHasher>();
    if (held)
      for (const d of dbs) {
        const v = held.views.get(d.name)!;
        const named = namedSource(v.snap, `database ${d.name}: reading ${v.src}`);
        const ps = named.pageSize;
        const last = splitPage(named.pageCount, ps, FULL_MAIN_SHARE);
        const head = new PageHasher(ps);
        heads.set(d.name, head);
        d.pages = {
          pageSize: ps,
          pageCount: named.pageCount,
          read(first, n, buf) {
            named.read(first, n, buf);
            const mine = Math.min(n, Math.max(0, last - first + 1));
            if (mine) head.update(buf.subarray(0, mine * ps));
          },
        };
      }
    const inspection = done
      ? Promise.resolve(done.inspected)
      : held
        ? held.live.start()
        : inspectInWorker({
            ...inspectInput,
            dbs: dbs.map((d) => (d.parentIndex ? { name: d.name, file: d.copy, scan: false } : { name: d.name, file: d.copy, indexKey: pageKey, sumsFile: sumStores.get(d.name)!.partial(snapshotId) ?? undefined })),
          });
    inspection.catch(() => undefined); // awaited below; no unhandled rejection meanwhile
    for (const d of dbs)
      if (d.parentIndex && !d.delta) takeDelta(d, writeDeltaOf(d.copy, d.name, indexPages(d.copy), d.parentIndex, bases.get(d.name) ?? null, join(staging, "db", `${d.name}.delta`), cfg.secretScan.databases !== "off"));
    const staged: StagedComponent[] = [
      ...dbs.map((d): StagedComponent => (d.delta ? { path: `db/${d.name}.delta`, kind: "sqlite-delta", name: d.name, file: d.delta.file } : d.pages ? { path: `db/${d.name}.sqlite`, kind: "sqlite", name: d.name, pages: d.pages } : { path: `db/${d.name}.sqlite`, kind: "sqlite", name: d.name, file: d.copy })),
      ...sources.staged,
      ...files,
      ...ws.staged,
    ];
    // the agent's newest manifest sizes the room kept for this one's (the listing is read once per process)
    const prior = (await o.repo.list(o.trust, a)).filter((e) => e.header).at(-1)?.header?.manifest;
    const plan = planBundle(join(staging, `${snapshotId}.agentbak`), o.signingKey, staged, prior);
    let written: Awaited<ReturnType<typeof writePayload>>;
    try {
      written = await writePayload(staged, cfg.recipients, plan, o.progress);
    } finally {
      await inspection.catch(() => undefined);
    }
    o.progress?.stage("finishing snapshot checks");
    const ins = await inspection;
    await releasePinned(); // the instant is no longer needed: the WAL can be checkpointed past it
    dbs.forEach((d) => {
      d.inspected = ins.dbs.find((x) => x.name === d.name)!;
      const head = heads.get(d.name)?.index();
      const ix = d.inspected.index && head ? { ...d.inspected.index, pageCount: head.pageCount + d.inspected.index.pageCount, hashes: Buffer.concat([head.hashes, d.inspected.index.hashes]) } : d.inspected.index;
      if (ix && !d.stored) {
        d.stored = encodeIndex(ix, pageKey);
        d.indexRoot = pagesRoot(ix);
      }
      if (!d.delta) d.sums = d.inspected.sumsWritten === true;
      const ic = d.inspected.integrity;
      if (ic.length !== 1 || (ic[0] !== "ok" && ic[0] !== "skipped")) throw verifyError(`database ${d.name}: snapshot failed integrity_check: ${ic.slice(0, 3).join("; ")}`);
    });
    applyScanPolicy("refuse", scanValue(cfg, "config"), warnings);
    applyScanPolicy(cfg.secretScan.databases, [...ins.findings, ...deltaFindings], warnings);
    warnings.push(...ins.timerWarnings);
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
        pageIndexSha256: d.indexRoot!,
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
      notCaptured,
    });
    applyScanPolicy("refuse", scanValue(manifest, "manifest"), warnings);
    // the reader's own checks (placement, sizes) before anything is signed: a bundle that can never be restored is not published
    try {
      parseManifest(encodeManifest(manifest));
    } catch (e) {
      throw usageError(`backup would not be restorable: ${(e as Error).message}`);
    }
    o.progress?.stage("signing and writing bundle");
    // staged copies are no longer needed: removed in the background now, so their unflushed pages are dropped
    // rather than written back during the bundle's fsync
    removals.push(...staged.flatMap((c) => (c.file ? [rm(c.file, { force: true })] : [])), ...dbs.map((d) => rm(d.copy, { force: true })));
    const bundleFile = plan.path;
    const mbytes = await writeBundleFile(manifest, o.signingKey, plan);
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
      databases_read: dbs.length ? (done || held ? "in-place" : "copy") : null,
      full_reason: wantIncremental && !manifest.parent ? chosen.reason || unindexed?.reason || null : null,
      repeated: false,
      status: "committed",
      params_sha256: paramsDigest(o),
      not_captured: notCaptured,
      warnings,
    };
    const ol = cfg.objectLock;
    const published = await o.repo.publish(a, {
      // an interrupt from here on exits 130 saying the snapshot was committed (it is complete and listed)
      committed: (path) => (doneBeforeInterrupt(`snapshot ${snapshotId} was committed`), o.onCommitted?.({ ...receipt, path })),
      snapshotId,
      file: bundleFile,
      sequence: manifest.sequence,
      indexes: dbs.map((d) => [d.name, d.stored!]),
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
    dbs.forEach((d, i) => d.sums && sumStores.get(d.name)!.commit(snapshotId, d.delta?.meta.full_pages_sha256 ?? written.components[i]!.sha256, d.delta?.meta.page_size ?? d.pages?.pageSize ?? d.inspected!.index!.pageSize));
    if (other && (dbState || !cfg.databases.length)) rememberBackup(o.home, o.repo.location, a, { fingerprint: stateKey(other, dbState ?? databasesState(lc)), sequence: manifest.sequence, expires_at: manifest.expires_at, receipt: { ...receipt, path: published.path } });
    return { ...receipt, path: published.path };
  } catch (e) {
    // a repository renamed, deleted or unmounted under the run failed it at whatever step came next: say that (10)
    await o.repo.recheck().catch((gone: unknown) => {
      if (gone instanceof AgentbakError && gone.code === Exit.notFound) throw gone;
    });
    throw e;
  } finally {
    await releasePinned();
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
