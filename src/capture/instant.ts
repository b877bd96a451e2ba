/**
 * The instant: between the pre and post hooks (run here), every database read at one instant (databases.ts), the
 * state sources, the `files` and the workspace (whose git commands run in child processes meanwhile).
 */
import { join } from "node:path";
import { execa } from "execa";
import type { Component, Manifest } from "../bundle/manifest.js";
import type { StagedFile } from "../bundle/writer.js";
import type { LoadedConfig } from "../config/load.js";
import { AgentbakError, Exit } from "../errors.js";
import { ensureDirIn } from "../fsutil.js";
import type { Cut } from "../state/sqlite/cut.js";
import { readAtInstant, type DbRecord, type Taken } from "./databases.js";
import { captureFiles, type ChunkedFiles, type ListedFile } from "./files.js";
import type { DbPlan } from "./plan.js";
import type { Progress } from "../progress.js";
import type { CaptureScope } from "./scope.js";
import { captureSources, type CapturedSources, type PriorSources } from "./sources.js";
import { captureWs, type WorkspaceCaptured } from "./workspace.js";

/** What the instant took, staged; `taken` says how the databases were read (a "pinned" one must be released). */
export interface Captured {
  dbs: DbRecord[];
  taken: Taken;
  cut: Cut | undefined;
  sources: CapturedSources;
  files: StagedFile[];
  /** large files stored as chunks: their manifest entries */
  chunked: Component[];
  ws: { staged: StagedFile[]; manifest: Manifest["workspace"] };
  /** the databases' part of the unchanged fingerprint, read at the instant when every write lock was held */
  dbState: string | null;
}

export interface InstantOptions {
  /** the repository's folder, when it is one: never captured */
  repoDir: string | null;
  /** the `files` list, when it was made before the pre hook (else it is made after it) */
  listed: ListedFile[] | null;
  waitMs: number;
  /** read the databases' part of the unchanged fingerprint at the instant (Captured.dbState) */
  fingerprint: boolean;
  /** where long work reports how far it has got (src/progress.ts) */
  progress?: Progress;
  /** the agent's chunk writer, opened on first use: large files are stored as chunks (null: every file in the payload) */
  chunks: ChunkedFiles | null;
  /** the newest snapshot's chunked source entries a source whose fingerprint did not change reuses (priorSources) */
  priorSources: PriorSources | null;
  /**
   * how the databases were read, filled in the moment they are: the caller releases a "pinned" read (releasePinned)
   * whatever happens, this stage's failure included
   */
  held: { taken: Taken };
}

/**
 * Captures databases (at one instant), state sources, files and workspace between the pre and post hooks; the post
 * hook runs whatever failed (its own failure is then a warning).
 * @throws the first failure, after the post hook ran (the databases' read, if any, is in `o.held`)
 */
export async function captureInstant(lc: LoadedConfig, plan: DbPlan, scope: CaptureScope, o: InstantOptions): Promise<Captured> {
  const cfg = lc.config;
  const { staging, warnings } = scope;
  const got: Captured = { dbs: [], taken: { kind: "copy" }, cut: undefined, sources: { staged: [], instant: undefined, reused: [], recall: [] }, files: [], chunked: [], ws: { staged: [], manifest: null }, dbState: null };
  const live = cfg.workspace ? lc.resolve(cfg.workspace.path) : null;
  let failure: unknown;
  let wsCapture: Promise<WorkspaceCaptured> | null = null;
  try {
    o.progress?.stage("quiescing agent");
    await runHooks(cfg.hooks.pre, lc.dir, cfg.hooks.timeoutSeconds, "pre");
    o.progress?.stage("snapshotting databases");
    // the workspace's git commands run in child processes while the databases are copied here
    wsCapture = live ? captureWs(scope, live, o.repoDir) : null;
    wsCapture?.catch(() => undefined); // awaited below (or, on failure, before the post hook)
    ensureDirIn(staging, join(staging, "db"));
    if (cfg.databases.length) {
      const jobs = cfg.databases.map((d) => ({ name: d.name, src: lc.resolve(d.path), dest: join(staging, "db", `${d.name}.sqlite`), target: scope.targets.databases.get(d.name)! }));
      Object.assign(got, await readAtInstant(plan, jobs, o.waitMs || cfg.cut.waitSeconds * 1000, o.fingerprint));
      o.held.taken = got.taken;
    }
    if (cfg.sources.length) {
      o.progress?.stage("capturing state sources");
      got.sources = await captureSources(lc, staging, warnings, scope.targets.sources, o.priorSources);
    }
    const files = await captureFiles(scope, o.listed, o.chunks, o.repoDir);
    got.files = files.staged;
    got.chunked = files.chunked;
    if (wsCapture) {
      o.progress?.stage("capturing workspace");
      const w = await wsCapture;
      got.ws = { staged: w.staged, manifest: w.manifest };
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
  if (failure) throw failure; // a pinned read is released by the caller (held)
  return got;
}

/**
 * Runs the agent's pre or post hook commands `cmds` (shell commands run around the capture), one after the other in
 * `cwd`, each in its own process group.
 * @throws AgentbakError(1) naming the hook that failed or timed out, with the first line of its stderr.
 */
export async function runHooks(cmds: string[], cwd: string, timeoutSeconds: number, phase: "pre" | "post"): Promise<void> {
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