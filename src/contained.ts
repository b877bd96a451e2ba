/**
 * Running a command the config names (a reconcile probe, a liveness check)
 * contained: its own process group, an environment of the basics plus what
 * the caller passes (never this process's, so never AGENTBAK_IDENTITY), a
 * deadline that kills the whole group, and a cap on what it may print.
 */
import { isUtf8 } from "node:buffer";
import { execa } from "execa";
import { stopOnInterrupt } from "./cleanup.js";

/** The variables of this process a contained command sees: enough to find programs and a home, nothing else. */
export const BASIC_ENV = ["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"] as const;

/** This process's values of BASIC_ENV (those that are set). */
export const basicEnv = (): Record<string, string> => Object.fromEntries(BASIC_ENV.flatMap((k) => (process.env[k] === undefined ? [] : [[k, process.env[k]!]])));

export interface ContainedOptions {
  /** written to its stdin */
  input?: string;
  /** the whole environment it gets (start from basicEnv()) */
  env: Record<string, string>;
  timeoutMs: number;
  /** stdout beyond this many bytes stops it and sets `tooLarge` (default 64 KiB) */
  maxBytes?: number;
}

export interface ContainedResult {
  exitCode: number | null;
  signal: string | null;
  stdout: string;
  /** stdout's bytes are not UTF-8 (`stdout` then holds U+FFFD where they were): not what the command wrote */
  notUtf8: boolean;
  /** the deadline passed: its process group was killed */
  timedOut: boolean;
  /** it printed more than maxBytes: its process group was killed */
  tooLarge: boolean;
  /** it could not be started (the errno, e.g. ENOENT) */
  startError: string | null;
}

/** What a contained command may print unless told otherwise. */
export const CONTAINED_MAX_BYTES = 64 * 1024;

/**
 * Runs `command` in a new process group. When the deadline passes, when it
 * prints too much, when it exits, and when agentbak is interrupted, every
 * process left in its group is killed (SIGKILL): a grandchild that ignores
 * SIGTERM or holds stdout open outlives neither the deadline nor the command.
 * Never throws for the command's own failures; they are in the result.
 */
export async function runContained(command: string[], o: ContainedOptions): Promise<ContainedResult> {
  const maxBytes = o.maxBytes ?? CONTAINED_MAX_BYTES;
  const child = execa(command[0]!, command.slice(1), {
    input: o.input ?? "",
    env: o.env,
    extendEnv: false,
    detached: true,
    reject: false,
    // bytes, not characters: with a text encoding execa counts characters, and 64 K of a three-byte character is 192 KiB
    encoding: "buffer",
    maxBuffer: maxBytes,
    stderr: "ignore",
  });
  const killGroup = () => {
    try {
      if (child.pid) process.kill(-child.pid, "SIGKILL");
    } catch {
      /* the group is gone */
    }
  };
  stopOnInterrupt(child, { group: true });
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = child.exitCode === null && child.signalCode === null;
    killGroup();
    // a process that left the group (setsid) and holds stdout open is out of reach of the kill: stop waiting
    // for its end of the pipe, so that the deadline holds all the same
    child.stdout?.destroy();
  }, o.timeoutMs);
  // the command exited: whatever it left behind in its group (and holding its stdout open) goes too
  child.once("exit", killGroup);
  try {
    const r = await child;
    const startError = r.exitCode === undefined && !r.signal && !timedOut && !r.isMaxBuffer ? ((r as { code?: string }).code ?? "could not start") : null;
    const out = Buffer.from(r.stdout ?? new Uint8Array());
    return { exitCode: r.exitCode ?? null, signal: r.signal ?? null, stdout: out.toString("utf8"), notUtf8: !isUtf8(out), timedOut, tooLarge: Boolean(r.isMaxBuffer), startError };
  } finally {
    clearTimeout(timer);
    killGroup();
  }
}
