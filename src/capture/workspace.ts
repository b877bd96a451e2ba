/**
 * The workspace stage: the agent's git workspace captured as a git bundle and patch, proven to rebuild the tree
 * and scanned; or the last proven capture of the same state, reused.
 */
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join, relative, sep } from "node:path";
import type { Manifest, NotCaptured } from "../bundle/manifest.js";
import type { StagedFile } from "../bundle/writer.js";
import { atPath, ensureDir, ensureDirIn, isInside, writeCacheFile } from "../fsutil.js";
import { homePaths } from "../home.js";
import type { SecretFinding } from "../state/secrets/scan.js";
import { captureProven, workspaceState } from "../state/workspace/workspace.js";
import type { CaptureScope } from "./scope.js";

/**
 * Captures the workspace into staging (git bundle and patch, without what
 * stays out), proven to rebuild the tree and scanned (state/workspace: captureProven).
 */
async function captureWorkspaceInto(s: CaptureScope, live: string, repoDir: string | null): Promise<{ staged: StagedFile[]; manifest: Manifest["workspace"] }> {
  const { lc } = s;
  const cfg = lc.config.workspace!;
  const wsDir = join(s.staging, "workspace");
  mkdirSync(wsDir);
  const target = s.targets.workspace!;
  // the repository, when it lies inside the workspace, is never read into its own bundle
  const skipDirs = repoDir && isInside(repoDir, live) && repoDir !== live ? [relative(live, repoDir).split(sep).join("/")] : [];
  const leave = { credentials: s.credentialFiles, exclude: lc.config.secretScan.exclude };
  const cap = await captureProven(live, cfg.uncommitted, wsDir, join(s.staging, "ws-check"), { skipDirs, leave, scan: lc.config.secretScan.workspace !== "off" });
  s.notCaptured.push(...cap.skipped.map((x) => ({ ...x, path: `${target}/${x.path}` })));
  for (const f of cap.notUtf8) s.warnings.push(`workspace: ${target}/${f}: its name is not UTF-8 (shown with U+FFFD): not captured`);
  const staged: StagedFile[] = [{ path: "workspace/repo.bundle", kind: "git-bundle", name: "workspace", file: cap.bundleFile }];
  if (cap.patchFile) staged.push({ path: "workspace/changes.patch", kind: "git-patch", name: "workspace", file: cap.patchFile });
  if (cap.changedMeanwhile) s.warnings.push("workspace changed while it was being captured; the bundle holds a consistent earlier state");
  s.findings.workspace.push(...cap.findings);
  return { staged, manifest: { path: target, commit: cap.commit, branch: cap.branch, dirty: cap.dirty, uncommitted: cap.uncommitted, tree_sha256: cap.tree.sha256, files: cap.tree.files } };
}

export type WorkspaceCaptured = { staged: StagedFile[]; manifest: Manifest["workspace"]; notCaptured: NotCaptured[]; findings: SecretFinding[] };

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
export async function captureWs(s: CaptureScope, live: string, repoDir: string | null): Promise<WorkspaceCaptured> {
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

