/**
 * The `eio` restore nemesis: the snapshot restored again by the real
 * `agentbak restore`, in a child process with an LD_PRELOAD shim that fails
 * every write (write, pwrite, writev, pwritev: what node's fs and SQLite use)
 * to a file under the placement folder with EIO once half the restored tree's
 * bytes are written there. No device-mapper is needed (no dm-error here). The
 * child restores into a throwaway repository of its own (`init --repo`) with a
 * copy of AGENTBAK_HOME, so neither the agent's repository (generation, lock,
 * receipt) nor this host's trusted state is touched by a drill.
 * Contained: the restore exits non-zero naming EIO and the placement folder
 * holds nothing (no half-placed tree); anything else fails the cell.
 */
import { execa } from "execa";
import { cpSync, existsSync, mkdirSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { agentbakHome } from "../home.js";
import { childCli } from "../version.js";
import { buildShim, restoreCell, type NemesisCell } from "./matrix.js";


/** The EIO shim: writes to files under $AGENTBAK_EIO_ROOT pass until $AGENTBAK_EIO_AFTER bytes, then fail with EIO (the first one touches $AGENTBAK_EIO_MARK). */
const SHIM = String.raw`#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>
static long long budget = -1; static int ready;
static int faulty(int fd, size_t n) {
  const char *root = getenv("AGENTBAK_EIO_ROOT"), *mark = getenv("AGENTBAK_EIO_MARK"); char link[64], path[PATH_MAX];
  if (!root) return 0;
  if (!ready) { const char *a = getenv("AGENTBAK_EIO_AFTER"); budget = a ? atoll(a) : 0; ready = 1; }
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t l = readlink(link, path, sizeof path - 1); if (l <= 0) return 0; path[l] = 0;
  size_t rl = strlen(root);
  if (strncmp(path, root, rl) != 0 || path[rl] != '/') return 0;
  if ((long long)n <= budget) { budget -= (long long)n; return 0; }
  budget = 0;
  if (mark) { int m = open(mark, O_WRONLY | O_CREAT, 0600); if (m >= 0) close(m); }
  errno = EIO; return 1;
}
static size_t iovlen(const struct iovec *v, int c) { size_t t = 0; for (int i = 0; i < c; i++) t += v[i].iov_len; return t; }
typedef ssize_t (*w_t)(int, const void *, size_t); typedef ssize_t (*pw_t)(int, const void *, size_t, off_t);
typedef ssize_t (*wv_t)(int, const struct iovec *, int); typedef ssize_t (*pwv_t)(int, const struct iovec *, int, off_t);
#define REAL(name, type) static type real; if (!real) real = (type)dlsym(RTLD_NEXT, name)
ssize_t write(int fd, const void *b, size_t n) { REAL("write", w_t); return faulty(fd, n) ? -1 : real(fd, b, n); }
ssize_t pwrite(int fd, const void *b, size_t n, off_t o) { REAL("pwrite", pw_t); return faulty(fd, n) ? -1 : real(fd, b, n, o); }
ssize_t pwrite64(int fd, const void *b, size_t n, off_t o) { REAL("pwrite64", pw_t); return faulty(fd, n) ? -1 : real(fd, b, n, o); }
ssize_t writev(int fd, const struct iovec *v, int c) { REAL("writev", wv_t); return faulty(fd, iovlen(v, c)) ? -1 : real(fd, v, c); }
ssize_t pwritev(int fd, const struct iovec *v, int c, off_t o) { REAL("pwritev", pwv_t); return faulty(fd, iovlen(v, c)) ? -1 : real(fd, v, c, o); }
ssize_t pwritev64(int fd, const struct iovec *v, int c, off_t o) { REAL("pwritev64", pwv_t); return faulty(fd, iovlen(v, c)) ? -1 : real(fd, v, c, o); }
`;

/** What the child `agentbak restore` is given besides its target and repository. */
export interface RestoreChild {
  bundle: string;
  identity?: string;
  config?: string;
}

/** The last line a child said, for a cell's detail. */
const lastLine = (s: string): string => s.trim().split("\n").at(-1)?.slice(0, 300) ?? "";

/**
 * Runs the cell. `tools`: the drill's folder for built shims; `dir`: an empty folder of its own; `bytes`: the restored tree's size.
 * @returns its cell (never throws for a fault)
 */
export async function eioCell(child: RestoreChild | null, tools: string, dir: string, bytes: number): Promise<NemesisCell> {
  const cell = restoreCell("eio");
  if (!child) return cell("failed", "nemesis eio", "eio: needs a bundle file to restore; not run");
  const shim = await buildShim(tools, "eio", SHIM, ["-ldl"]);
  if ("error" in shim) return cell("failed", "nemesis eio", `eio: the EIO shim ${shim.error}`);
  const { so } = shim;
  const place = join(dir, "place");
  const mark = join(dir, "faulted");
  mkdirSync(place, { recursive: true });
  // the same binary, as capture-child.ts runs it
  const cli = childCli();
  const home = join(dir, "home");
  try {
    cpSync(agentbakHome(), home, { recursive: true });
  } catch (e) {
    return cell("failed", "nemesis eio", `eio: could not copy AGENTBAK_HOME for the child: ${(e as Error).message}`);
  }
  const env = { NO_COLOR: "1", AGENTBAK_HOME: home };
  const config = child.config ? ["-c", child.config] : [];
  const init = await execa(process.execPath, [...cli, "init", "--repo", join(dir, "repo"), ...config], { reject: false, env });
  if (init.exitCode !== 0) return cell("failed", "nemesis eio", `eio: could not make the throwaway repository: ${lastLine(init.stderr)}`);
  const after = Math.floor(bytes / 2);
  const r = await execa(process.execPath, [...cli, "restore", child.bundle, ...config, ...(child.identity ? ["--identity", child.identity] : []), "--target", join(place, "root"), "--repo", join(dir, "repo"), "--yes"], {
    reject: false,
    env: { ...env, LD_PRELOAD: so, AGENTBAK_EIO_ROOT: place, AGENTBAK_EIO_AFTER: String(after), AGENTBAK_EIO_MARK: mark },
  });
  const faulted = existsSync(mark);
  const left = readdirSync(place);
  const said = lastLine(r.stderr);
  if (r.exitCode === 0) return cell("failed", "nemesis eio", faulted ? `eio: the restore exited 0 although a write failed with EIO (a silent pass)` : `eio: no write was faulted (the shim did not load, or the tree is under ${after} bytes); not tested`);
  if (!faulted || !/\bEIO\b|i\/o error/i.test(said)) return cell("failed", "extract", `eio: extract: exit ${r.exitCode}, not naming EIO: ${said}`);
  if (left.length) return cell("failed", "half-placed", `eio: half-placed: ${left.join(", ")} left in the placement folder after: ${said}`);
  return cell("contained", null, `the restore stopped after ${after} bytes naming it (exit ${r.exitCode}), nothing left in the placement folder: ${said}`);
}
