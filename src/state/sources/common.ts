/**
 * The one interface every state source kind implements (capture at one
 * instant into staged files, check them offline, restore into an empty
 * target, start a throwaway target for a drill), and what the kinds share:
 * resolving a credential reference at connect time, redacting errors, and
 * running a throwaway server that dies with us.
 */
import { execa, type ResultPromise } from "execa";
import { chmodSync, chownSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { AgentbakError, Exit, usageError } from "../../errors.js";
import { redactUrls } from "../../facts.js";
import { ensureDir, pidDir, readFileRegular } from "../../fsutil.js";
import { stopOnInterrupt } from "../../cleanup.js";

export { SOURCE_KINDS, type SourceKind } from "./kinds.js";
import type { SourceKind } from "./kinds.js";

/** A source as the config names it. */
export interface SourceSpec {
  name: string;
  kind: SourceKind;
  /** postgres: the schemas to capture (default public) */
  schemas?: string[];
  /** redis: the key patterns to capture (default every key) */
  patterns?: string[];
  /** postgres: how long the capture waits for a table another session holds locked (default 10 s) */
  lockTimeoutSeconds?: number;
}

/** One captured file: a payload component of the source's kind. */
export interface CapturedFile {
  /** payload path, `sources/<name>/...` */
  path: string;
  /** the staged file */
  file: string;
  records: Record<string, number>;
  /** lancedb: the table version read and its vector column's dimension */
  table_version?: number;
  dimension?: number;
  /**
   * a cheap digest of what the file holds, read at the capture's instant without reading the state (a PostgreSQL
   * snapshot, a LanceDB table version): equal fingerprints, equal content. Absent when it could not be read.
   */
  fingerprint?: string;
  /** the fingerprint is the one `prior` gave for this path: nothing was captured (`file` is ""); the caller reuses what it stored */
  unchanged?: boolean;
}

/** A source captured at one instant. */
export interface SourceCapture {
  snapshotAt: Date;
  serverVersion: string | null;
  files: CapturedFile[];
  /** why no fingerprint could be read (an old server, no permission): captured in full, said once in the backup's warnings */
  noFingerprint?: string;
}

/** The fingerprints of what a parent snapshot stored (and the chunk store still holds), by payload path. */
export type PriorFingerprints = ReadonlyMap<string, string>;

/** A captured file as a bundle lists it, once extracted and digest-checked. */
export interface SourceFile {
  path: string;
  file: string;
  records: Record<string, number>;
  dimension?: number;
}

/** What a restore into a target did. */
export interface SourceRestore {
  /** records counted in the target after the restore, per table / key type */
  records: Record<string, number>;
  /** redis: keys not written because their TTL ran out since the snapshot */
  skipped: string[];
  /** lancedb: the vector dimension of each restored table */
  dimensions: Record<string, number>;
  detail: string;
}

/** A server the drill started for itself; `stop` always stops it and removes its files. */
export interface Throwaway {
  target: string;
  stop(): Promise<void>;
}

/**
 * One source kind. A target is a connection URL (postgres, redis) or an
 * absolute folder (lancedb); URLs are never logged or put in an error.
 */
export interface SourceDriver {
  /**
   * Captures `spec` at one instant into files under `dir`; a file whose fingerprint is the one `prior` holds for its
   * path is not captured again (`unchanged`). @throws AgentbakError naming the source.
   */
  capture(spec: SourceSpec, target: string, dir: string, prior?: PriorFingerprints): Promise<SourceCapture>;
  /**
   * The whole source's fingerprint now, read without reading its state (`backup --skip-if-unchanged`): equal only
   * when a capture would store the same. Absent for a kind that has none (redis); null when it can not be read.
   */
  fingerprint?(spec: SourceSpec, target: string): Promise<string | null>;
  /** Checks captured files without a server (verify): they parse and hold the recorded counts. @returns a detail line. @throws AgentbakError(13). */
  check(name: string, files: SourceFile[]): Promise<string>;
  /**
   * What the target already holds that a restore would collide with, or null
   * when it may be restored into (empty; for redis with `allowNonEmpty`, none of the captured keys exist).
   */
  occupant(target: string, files: SourceFile[], allowNonEmpty: boolean): Promise<string | null>;
  /**
   * Restores captured files into `target` and checks the counts there.
   * `elapsedMs` is the time since the snapshot (redis TTLs are reduced by it).
   * A failure leaves the target as it was. @throws AgentbakError(13) when the counts differ.
   */
  restore(name: string, files: SourceFile[], target: string, elapsedMs: number): Promise<SourceRestore>;
  /** Runs a read-only query in the target (invariants naming this source); undefined when the kind has no query language. */
  query?(target: string, sql: string): Promise<unknown[]>;
  /** Starts an empty throwaway target under `dir` (drills). @throws AgentbakError(1) when the server can not be found or started. */
  throwaway(dir: string): Promise<Throwaway>;
}

/** Whether a kind's target is a folder (inside the agent's root) rather than a server. */
export const targetIsFolder = (kind: SourceKind) => kind === "lancedb";

/**
 * The value behind a credential reference (`env:NAME`, `file:PATH` relative
 * to `root`), read only at the moment of connecting; never logged.
 * @throws AgentbakError(2) naming the reference (never a value) when it does not resolve.
 */
export function resolveReference(ref: string, root: string, env: NodeJS.ProcessEnv = process.env): string {
  const scheme = ref.slice(0, ref.indexOf(":"));
  const rest = ref.slice(scheme.length + 1);
  if (scheme === "env") {
    const v = env[rest];
    if (!v) throw usageError(`${ref}: environment variable ${rest} is not set`);
    return v.trim();
  }
  if (scheme === "file") {
    try {
      return readFileRegular(isAbsolute(rest) ? rest : resolve(root, rest), "utf8").trim();
    } catch (e) {
      throw usageError(`${ref}: ${(e as NodeJS.ErrnoException).code ?? "unreadable"}`);
    }
  }
  throw usageError(`${ref}: only env: and file: references can hold a source's connection`);
}

/**
 * An error from a source, in one line: the connection URL (and any URL's
 * password) taken out of the message, the client's error code (ECONNREFUSED,
 * ENOTFOUND, a SQLSTATE) named, and the exit code kept when it had one.
 * @param doing what was being done, said after the source's name ("checking its target")
 */
export function sourceError(name: string, e: unknown, url?: string, doing?: string): AgentbakError {
  // a refused connection to a host with several addresses is an AggregateError with an empty message
  let msg = (e as Error)?.message || (e as AggregateError)?.errors?.[0]?.message || String(e);
  const code = (e as { code?: unknown })?.code;
  if (!(e instanceof AgentbakError) && typeof code === "string" && code && !msg.includes(code)) msg = `${msg} (${code})`;
  if (url) {
    msg = msg.split(url).join("<url>");
    try {
      const pw = decodeURIComponent(new URL(url).password);
      if (pw) msg = msg.split(pw).join("***");
    } catch {
      /* not a URL: nothing more to take out */
    }
  }
  return new AgentbakError(e instanceof AgentbakError ? e.code : Exit.failure, `source ${name}: ${doing ? `${doing}: ` : ""}${redactUrls(e instanceof AgentbakError ? msg : msg.split("\n")[0]!)}`, { cause: e });
}

/** A free TCP port on 127.0.0.1 (the kernel's choice). */
export function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => ok(port));
    });
  });
}

const isRoot = () => process.getuid?.() === 0;
/** Servers that refuse to run as root (postgres) run as this user when we are root. */
const UNPRIVILEGED = "nobody";

/** Whether every folder from `dir` up to / lets others through (an unprivileged server must reach its files). */
function traversable(dir: string): boolean {
  for (let d = dir; ; d = dirname(d)) {
    if ((statSync(d).mode & 0o001) === 0) return false;
    if (dirname(d) === d) return true;
  }
}

/** The unprivileged user's uid and gid, from /etc/passwd. */
function unprivileged(): { uid: number; gid: number } {
  const line = readFileSync("/etc/passwd", "utf8").split("\n").find((l) => l.startsWith(`${UNPRIVILEGED}:`));
  if (!line) throw new AgentbakError(Exit.failure, `no user "${UNPRIVILEGED}" to run a throwaway server as (servers refuse to run as root)`);
  const [, , uid, gid] = line.split(":");
  return { uid: Number(uid), gid: Number(gid) };
}

/** A folder for a throwaway server and who it runs as (null: as we are). */
export interface ServerDir {
  dir: string;
  user: { uid: number; gid: number } | null;
}

/**
 * A private folder for a throwaway server under `dir`; as root, owned by the
 * unprivileged user (and in /tmp when `dir` is not reachable for it).
 */
export function serverDir(dir: string, tag: string): ServerDir {
  ensureDir(dir);
  if (!isRoot()) return { dir: mkdtempSync(join(dir, `${tag}-`)), user: null };
  // named with our pid, so a drill killed with -9 has it swept like its own temp folder
  const d = pidDir(traversable(dir) ? dir : "/tmp", `agentbak-drill-${tag}`);
  const user = unprivileged();
  chownSync(d, user.uid, user.gid);
  chmodSync(d, 0o700);
  return { dir: d, user };
}

/**
 * The command line that runs `cmd` as the server folder's user and dies with
 * this process (setpriv --pdeathsig), so a killed drill leaves no server behind.
 */
export function serverCommand(cmd: string, args: string[], sd: ServerDir): [string, string[]] {
  const as = sd.user ? ["--reuid", String(sd.user.uid), "--regid", String(sd.user.gid), "--clear-groups"] : [];
  return ["setpriv", [...as, "--pdeathsig", "KILL", "--", cmd, ...args]];
}

/**
 * Starts a throwaway server and waits until `ready` answers true.
 * @throws AgentbakError(1) naming the server when it exits or is not ready within 30 s.
 */
export async function startServer(what: string, cmd: [string, string[]], cwd: string, ready: () => Promise<boolean>): Promise<{ child: ResultPromise }> {
  const child = stopOnInterrupt(execa(cmd[0], cmd[1], { cwd, reject: false, stdin: "ignore", stdout: "ignore", stderr: "pipe", cleanup: true }));
  let exited = false;
  child.finally(() => (exited = true)).catch(() => undefined);
  const end = Date.now() + 30_000;
  while (Date.now() < end) {
    if (exited) {
      const r = await child;
      throw new AgentbakError(Exit.failure, `throwaway ${what} exited ${r.exitCode ?? r.signal}: ${String(r.stderr).trim().split("\n").slice(-2).join(" ")}`);
    }
    // wrapped: an async function returning the subprocess (a promise) would wait for it to exit
    if (await ready().catch(() => false)) return { child };
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill("SIGKILL");
  await child;
  throw new AgentbakError(Exit.failure, `throwaway ${what} did not start within 30 s`);
}

/** Stops a throwaway server (`signal`, then SIGKILL after 10 s) and removes its folder. */
export async function stopServer(child: ResultPromise, dir: string, signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
  if (child.exitCode === null) {
    child.kill(signal);
    const t = setTimeout(() => child.kill("SIGKILL"), 10_000);
    await child;
    clearTimeout(t);
  }
  rmSync(dir, { recursive: true, force: true });
}
