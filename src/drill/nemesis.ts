/**
 * Fault nemeses: a crash scenario replayed with a fault on its worker
 * (scenario `<point>~<nemesis>`), one cell of the nemesis matrix each:
 * - `clock_ahead_1h` / `clock_behind_1h`: every restart after the crash runs
 *   under libfaketime with its clock an hour off (the crash run and the sink,
 *   invariants and checks keep the real clock);
 * - `lost_write`: the run that dies at the crash point has an LD_PRELOAD shim
 *   that copies a file aside each time the worker fsyncs it; after the crash
 *   every file under the copy becomes its content at its last fsync, else at
 *   the run's start, and one created and never fsynced is removed: what a
 *   power cut would have left.
 * and the drill's restore repeated under a fault (key `restore`):
 * - `enospc`: the bundle placed again into a tmpfs half the restored tree's size;
 * - `eio`: `agentbak restore` run again in a child whose writes under its target fail with EIO halfway (eio.ts);
 * - `s3_503`, `s3_reset`, `s3_drop_part`: the bundle read again from the S3
 *   repository through a fault proxy (faultproxy.ts), verified and placed.
 * A cell ends recovered (every check of the scenario held), contained (a
 * restore fault stopped the restore with an error naming it: no silent,
 * partial success) or failed, naming the nemesis and the first failed check.
 */
import { execa } from "execa";
import { copyFileSync, cpSync, existsSync, mkdirSync, readdirSync, rmSync, statSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { openDefensive } from "../state/sqlite/open.js";
import { crashScenario, type ScenarioPlan } from "./scenarios.js";
import { CheckLog } from "./checklog.js";
import { eioCell, type RestoreChild } from "./eio.js";
import { startFaultProxy, type StoreNemesis } from "./faultproxy.js";
import { buildShim, restoreCell, type NemesisCell } from "./matrix.js";
import type { CrashPoint, WORKER_NEMESES } from "./spec.js";
import type { Bench, Copy, ScenarioResult, WorkerFault } from "./worker.js";

type WorkerNemesis = (typeof WORKER_NEMESES)[number];

/** Where Debian and others put libfaketime. */
const LIBFAKETIME = ["/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1", "/usr/local/lib/faketime/libfaketime.so.1"];

/** The fsync shim: after a successful fsync/fdatasync of a regular file under $AGENTBAK_FSYNC_ROOT, its content is copied to the same path under $AGENTBAK_FSYNC_SHADOW. */
const SHIM = String.raw`#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void mkparents(char *p) { for (char *s = p + 1; *s; s++) if (*s == '/') { *s = 0; mkdir(p, 0700); *s = '/'; } }
static void note(const char *name) {
  const char *shadow = getenv("AGENTBAK_FSYNC_SHADOW"); char p[PATH_MAX];
  if (!shadow) return;
  snprintf(p, sizeof p, "%s/%s", shadow, name); mkparents(p);
  int fd = open(p, O_WRONLY | O_CREAT | O_APPEND, 0600); if (fd >= 0) { if (write(fd, "x", 1) < 0) {} close(fd); }
}
__attribute__((constructor)) static void loaded(void) { note(".agentbak-shim-loaded"); }
static void snap(int fd) {
  const char *root = getenv("AGENTBAK_FSYNC_ROOT"), *shadow = getenv("AGENTBAK_FSYNC_SHADOW");
  if (!root || !shadow) return;
  char link[64], path[PATH_MAX], dest[PATH_MAX], tmp[PATH_MAX + 32];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1); if (n <= 0) return; path[n] = 0;
  size_t rl = strlen(root);
  struct stat st;
  if (strncmp(path, root, rl) != 0 || path[rl] != '/' || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return;
  snprintf(dest, sizeof dest, "%s%s", shadow, path + rl);
  pthread_mutex_lock(&mu);
  snprintf(tmp, sizeof tmp, "%s.agentbak-tmp", dest);
  mkparents(dest);
  int in = open(path, O_RDONLY), out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600), ok = in >= 0 && out >= 0;
  char buf[65536]; ssize_t r = 0;
  while (ok && (r = read(in, buf, sizeof buf)) > 0) if (write(out, buf, r) != r) ok = 0;
  if (r < 0) ok = 0;
  if (in >= 0) close(in);
  if (out >= 0) close(out);
  if (ok) rename(tmp, dest); else { unlink(tmp); note(".agentbak-shim-failed"); }
  pthread_mutex_unlock(&mu);
}
int fsync(int fd) { static int (*real)(int); if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync"); int r = real(fd); if (r == 0) snap(fd); return r; }
int fdatasync(int fd) { static int (*real)(int); if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync"); int r = real(fd); if (r == 0) snap(fd); return r; }
`;

/** Every regular file under `dir`, relative. */
const filesUnder = (dir: string): string[] =>
  existsSync(dir)
    ? readdirSync(dir, { withFileTypes: true, recursive: true })
        .filter((e) => e.isFile())
        .map((e) => relative(dir, join(e.parentPath, e.name)))
    : [];

/**
 * After the crash, each file of the copy becomes what a power cut leaves: its last fsynced content, else its
 * content at the run's start, else nothing. @returns the log's detail ("error: ..." when the shim did not run)
 */
function dropUnsynced(copy: Copy, base: string, shadow: string): string {
  if (!existsSync(join(shadow, ".agentbak-shim-loaded"))) return "error: the fsync shim was not loaded into the worker (LD_PRELOAD ignored: a static binary?); un-fsynced writes can not be told apart";
  if (existsSync(join(shadow, ".agentbak-shim-failed"))) return "error: the fsync shim could not copy a file the worker fsynced";
  const synced = new Set(filesUnder(shadow).filter((f) => !f.startsWith(".agentbak-shim-")));
  const atStart = new Set(filesUnder(base));
  let kept = 0;
  let reverted = 0;
  let removed = 0;
  for (const f of new Set([...filesUnder(copy.dir), ...synced, ...atStart])) {
    const dest = join(copy.dir, f);
    if (synced.has(f)) {
      putBack(join(shadow, f), dest);
      kept++;
    } else if (atStart.has(f)) {
      putBack(join(base, f), dest);
      reverted++;
    } else {
      rmSync(dest, { force: true });
      removed++;
    }
  }
  // the first open after a power cut recovers the WAL and rebuilds its index (-shm, never fsynced): done here once, read-write,
  // as the restart would, so the invariants' read-only connections can read the state right after the crash
  for (const file of copy.dbs.values()) {
    try {
      const db = openDefensive(file, { readonly: false });
      db.prepare("SELECT count(*) FROM sqlite_schema").get();
      db.close();
    } catch (e) {
      return `error: ${file} does not open after the un-fsynced writes were dropped: ${(e as Error).message}`;
    }
  }
  return `un-fsynced writes dropped: ${kept} file(s) at their last fsync, ${reverted} back to the run's start, ${removed} never fsynced removed`;
}

/**
 * A file of the copy replaced by its earlier content: the name is removed first, as a read-only file (git's packs,
 * 0444) can not be opened for writing by its owner when not root; copyFileSync keeps the source's mode.
 */
function putBack(from: string, to: string): void {
  mkdirSync(dirname(to), { recursive: true });
  rmSync(to, { force: true });
  copyFileSync(from, to);
}

/** The fault for a nemesis. `tools`: a folder for the built shim (shared by the drill's cells). */
async function workerFault(nemesis: WorkerNemesis, tools: string): Promise<WorkerFault> {
  if (nemesis === "lost_write") {
    const shim = await buildShim(tools, "fsync-shadow", SHIM, ["-ldl", "-lpthread"]);
    return {
      name: nemesis,
      arm(copy): ReturnType<WorkerFault["arm"]> {
        const base = `${copy.dir}.at-start`;
        const shadow = `${copy.dir}.synced`;
        cpSync(copy.dir, base, { recursive: true });
        mkdirSync(shadow);
        if ("error" in shim) return { crashEnv: {}, restartEnv: {}, afterCrash: () => `error: the fsync shim ${shim.error}` };
        // a file that can not be put back fails the cell naming it, never the whole drill
        const afterCrash = () => {
          try {
            return dropUnsynced(copy, base, shadow);
          } catch (e) {
            return `error: the un-fsynced writes could not be dropped: ${(e as Error).message}`;
          }
        };
        return { crashEnv: { LD_PRELOAD: shim.so, AGENTBAK_FSYNC_ROOT: copy.dir, AGENTBAK_FSYNC_SHADOW: shadow }, restartEnv: {}, afterCrash };
      },
    };
  }
  const shift = nemesis === "clock_ahead_1h" ? "+1h" : "-1h";
  const lib = LIBFAKETIME.find((p) => existsSync(p));
  const env = { LD_PRELOAD: lib ?? "", FAKETIME: shift, FAKETIME_DONT_FAKE_MONOTONIC: "1", FAKETIME_DONT_RESET: "1" };
  // the shift is proven on this host (date under the same preload) before any cell relies on it
  const probe = lib ? await execa("date", ["+%s"], { env, extendEnv: false, reject: false }) : null;
  const off = probe?.exitCode === 0 ? Number(probe.stdout) - Math.round(Date.now() / 1000) : NaN;
  const works = Math.abs(off - (shift === "+1h" ? 3600 : -3600)) < 60;
  const why = !lib ? "error: libfaketime not found (install faketime)" : works ? `restarts ran with the clock ${shift} (libfaketime)` : `error: libfaketime did not shift the clock (date was ${off}s off)`;
  return { name: nemesis, arm: () => ({ crashEnv: {}, restartEnv: works ? env : {}, afterCrash: () => why }) };
}

/**
 * Runs every cell the spec's `nemeses` asks for. Never throws for a failed check (the log says so).
 * @returns the scenarios and the matrix
 */
export async function nemesisScenarios(b: Bench, p: ScenarioPlan): Promise<{ scenarios: ScenarioResult[]; cells: NemesisCell[] }> {
  const scenarios: ScenarioResult[] = [];
  const cells: NemesisCell[] = [];
  const faults = new Map<WorkerNemesis, WorkerFault>();
  for (const [sc, list] of Object.entries(b.spec.spec.nemeses)) {
    if (sc === "restore") continue;
    for (const nemesis of (list ?? []) as WorkerNemesis[]) {
      const name = `${sc}~${nemesis}`;
      p.progress?.stage(`scenario ${name}`);
      if (!faults.has(nemesis)) faults.set(nemesis, await workerFault(nemesis, join(b.tmp, "nemesis-tools")));
      const r = await crashScenario(b, sc as CrashPoint | "sink_kill", join(b.tmp, `nemesis-${cells.length}`), p, { name, fault: faults.get(nemesis)! });
      scenarios.push(r.result);
      const failed = b.log.checks.find((c) => c.scenario === name && !c.ok && c.severity === "error");
      cells.push(
        failed
          ? { scenario: sc, nemesis, result: "failed", check: failed.name, detail: `${nemesis}: ${failed.name}: ${failed.detail}` }
          : { scenario: sc, nemesis, result: "recovered", check: null, detail: `task complete, ${r.result.effects} effect(s), after ${r.result.restarts} restart(s)` },
      );
    }
  }
  return { scenarios, cells };
}

/**
 * Places the bundle again into `root`, recording its checks in `log`: the drill's own verified bundle, or the bundle
 * `file` (verified first; throws what verification throws). @returns whether it landed
 */
export type Placement = (root: string, log: CheckLog, file?: string) => Promise<boolean>;

/** How the bundle is read again from its S3 repository (the object-store nemeses); absent for a folder or a file. */
export interface StoreReads {
  /** the repository's own endpoint (AGENTBAK_S3_ENDPOINT) */
  endpoint: string;
  /** the bundle read through `endpoint` into `file`; throws what the read throws */
  fetch(endpoint: string, file: string): Promise<void>;
}

/** What an error must name for a store fault to count as contained. */
const NAMES: Record<StoreNemesis, RegExp> = {
  s3_503: /\b503\b|SlowDown|unreachable/i,
  s3_reset: /ECONNRESET|reset|aborted|premature|socket hang up|unreachable/i,
  s3_drop_part: /hash|sha-?256|digest|checksum|verif|truncat|corrupt|mismatch/i,
};

/** The bundle read again through a fault proxy in front of the repository's endpoint. */
async function storeFault(b: Bench, nemesis: StoreNemesis, place: Placement, reads: StoreReads | null): Promise<NemesisCell> {
  const cell = restoreCell(nemesis);
  if (!reads) return cell("failed", `nemesis ${nemesis}`, `${nemesis}: needs a snapshot in an S3 repository with AGENTBAK_S3_ENDPOINT (plain http); not run`);
  const dir = join(b.tmp, `nemesis-${nemesis}`);
  mkdirSync(dir);
  const proxy = await startFaultProxy(reads.endpoint, nemesis);
  const log = new CheckLog(Date.now(), {});
  try {
    const file = join(dir, "bundle.agentbak");
    await reads.fetch(proxy.url, file);
    const landed = await place(join(dir, "root"), log, file);
    const failed = log.checks.find((c) => !c.ok && c.severity === "error");
    const seen = `${proxy.faulted} of ${proxy.seen} request(s) faulted`;
    if (landed && !failed) return proxy.faulted ? cell("recovered", null, `read, verified and placed through the fault (${seen})`) : cell("failed", `nemesis ${nemesis}`, `${nemesis}: the proxy saw no read to fault (${seen})`);
    if (failed && NAMES[nemesis].test(failed.detail)) return cell("contained", null, `the restore stopped naming it (${seen}): ${failed.detail.slice(0, 300)}`);
    return cell("failed", failed?.name ?? "extract", `${nemesis}: ${failed?.name ?? "extract"}: ${failed?.detail.slice(0, 300) ?? "the restore neither landed nor said why"}`);
  } catch (e) {
    const msg = (e as Error).message ?? String(e);
    if (NAMES[nemesis].test(msg)) return cell("contained", null, `the restore stopped naming it (${proxy.faulted} of ${proxy.seen} request(s) faulted): ${msg.slice(0, 300)}`);
    return cell("failed", "read", `${nemesis}: read: ${msg.slice(0, 300)}`);
  } finally {
    await proxy.stop();
  }
}

const treeBytes = (dir: string): number => filesUnder(dir).reduce((t, f) => t + statSync(join(dir, f)).size, 0);

/**
 * The restore nemeses the spec asks for (`nemeses.restore`), each recorded as the check `nemesis <name>` of scenario
 * `restore~<name>`. Never throws for a failed check. @returns their cells
 */
export async function restoreNemeses(b: Bench, place: Placement, reads: StoreReads | null, child: RestoreChild | null): Promise<NemesisCell[]> {
  const cells: NemesisCell[] = [];
  for (const nemesis of b.spec.spec.nemeses.restore ?? []) {
    const cell =
      nemesis === "enospc"
        ? await enospc(b, place)
        : nemesis === "eio"
          ? await eioCell(child, join(b.tmp, "nemesis-tools"), join(b.tmp, "nemesis-eio"), treeBytes(b.restored))
          : await storeFault(b, nemesis as StoreNemesis, place, reads);
    cells.push(cell);
    b.log.add({ scenario: `restore~${nemesis}`, phase: "placement", name: `nemesis ${nemesis}`, ok: cell.result !== "failed", severity: "error", detail: cell.detail });
  }
  return cells;
}

/** The bundle placed again into a tmpfs half the size of the restored tree (root only: mount). */
async function enospc(b: Bench, place: Placement): Promise<NemesisCell> {
  const cell = restoreCell("enospc");
  if (process.getuid?.() !== 0) return cell("failed", "nemesis enospc", "enospc: needs root to mount a small tmpfs; not run");
  const size = Math.max(64 * 1024, Math.floor(treeBytes(b.restored) / 2));
  const dir = join(b.tmp, "nemesis-enospc");
  mkdirSync(dir);
  const mounted = await execa("mount", ["-t", "tmpfs", "-o", `size=${size},mode=0700`, "tmpfs", dir], { reject: false });
  if (mounted.exitCode !== 0) return cell("failed", "nemesis enospc", `enospc: could not mount a tmpfs: ${String(mounted.stderr).trim().slice(0, 200)}`);
  try {
    const log = new CheckLog(Date.now(), {});
    const landed = await place(join(dir, "root"), log);
    const failed = log.checks.find((c) => !c.ok && c.severity === "error");
    if (landed && !failed) return cell("recovered", null, `the restore fitted in ${size} bytes and every check held`);
    if (failed?.name === "extract" && /ENOSPC|no space left|disk is full/i.test(failed.detail)) return cell("contained", null, `the restore stopped in ${size} bytes naming it: ${failed.detail.slice(0, 300)}`);
    return cell("failed", failed?.name ?? "extract", `enospc: ${failed?.name ?? "extract"}: ${failed?.detail.slice(0, 300) ?? "the restore neither landed nor said why"}`);
  } finally {
    await execa("umount", ["-l", dir], { reject: false });
    rmSync(dir, { recursive: true, force: true });
  }
}
