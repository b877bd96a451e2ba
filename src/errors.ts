/**
 * Typed errors. Every failure the user should see is an AgentbakError carrying
 * its documented exit code; only src/main.ts turns one into a process exit.
 */

import type { core } from "zod/mini";

/** Exit codes from DESIGN.md; unknown codes mean failure. */
export const Exit = {
  ok: 0,
  failure: 1,
  usage: 2,
  warnings: 3,
  notFound: 10,
  locked: 11,
  noKey: 12,
  verify: 13,
  policy: 14,
  drillFailed: 15,
  interrupted: 130,
} as const;

export type ExitCode = (typeof Exit)[keyof typeof Exit];

/** A stable name for each exit code: the `code` of a `--json` error object. */
export const EXIT_NAMES: Record<ExitCode, string> = {
  0: "ok",
  1: "failure",
  2: "usage_error",
  3: "warnings",
  10: "not_found",
  11: "locked",
  12: "no_key",
  13: "verification_failed",
  14: "refused_by_policy",
  15: "drill_failed",
  130: "interrupted",
};

/** What each exit code means: the one table `agentbak help exit-codes`, the man page and docs print (DESIGN.md's). */
export const EXIT_MEANINGS: Record<ExitCode, string> = {
  0: "success",
  1: "failure (unexpected or internal)",
  2: "usage error: bad flags, bad config, prompt needed without a TTY, an optional package not installed",
  3: "completed with warnings",
  10: "repository, snapshot or file not found",
  11: "repository locked by another process",
  12: "no usable key: a key file missing or unreadable, or no identity matches",
  13: "verification failed: signature (an untrusted signer too), digest, format, integrity",
  14: "refused by policy: revoked signer, expired, rollback, tenant, schema or version incompatible, not approved, secret found",
  15: "drill ran and a check failed (drill --fleet: a sampled agent's drill failed or could not run)",
  130: "interrupted",
};

/** An error already phrased for the user: main prints the message and exits with `code`. */
export class AgentbakError extends Error {
  readonly code: ExitCode;
  constructor(code: ExitCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = "AgentbakError";
  }
}

export const usageError = (m: string) => new AgentbakError(Exit.usage, m);
export const notFound = (m: string) => new AgentbakError(Exit.notFound, m);
export const lockedError = (m: string) => new AgentbakError(Exit.locked, m);
export const noKey = (m: string) => new AgentbakError(Exit.noKey, m);
export const verifyError = (m: string) => new AgentbakError(Exit.verify, m);
export const policyError = (m: string) => new AgentbakError(Exit.policy, m);

/** An idempotency key used again with different parameters: a usage error (2); HTTP answers 409. */
export class ConflictError extends AgentbakError {
  constructor(message: string) {
    super(Exit.usage, message);
    this.name = "ConflictError";
  }
}

/** A repository that could not be reached (refused, timed out, no route, 5xx after retries): a failure (1); backups spool. */
export class UnreachableError extends AgentbakError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(Exit.failure, message, options);
    this.name = "UnreachableError";
  }
}

/**
 * A payload that is not the one its manifest signed (a chunk's digest or the whole one differs, or it is cut short):
 * a verification failure (13). A drill can not run on it, however far its read had gone when this was found.
 */
export class PayloadMismatch extends AgentbakError {
  constructor(message: string) {
    super(Exit.verify, message);
    this.name = "PayloadMismatch";
  }
}

/** Whether `err`, or an error it wraps, is an instance of `cls` (wrap() keeps the original as the cause). */
export function hasCause(err: unknown, cls: abstract new (...args: never[]) => Error): boolean {
  for (let e = err, depth = 0; e && depth < 10; e = (e as Error).cause, depth++) if (e instanceof cls) return true;
  return false;
}

/**
 * Adds context to an error while keeping its exit code: `wrap(e, "restore db state")`
 * gives "restore db state: <original message>".
 */
export function wrap(err: unknown, context: string): AgentbakError {
  if (err instanceof AgentbakError) return new AgentbakError(err.code, `${context}: ${err.message}`, { cause: err });
  const e = err as NodeJS.ErrnoException;
  // a context that already names the path is not followed by it again
  const detail = e?.code && e?.path ? (context.includes(e.path) ? (e.code === "ENOENT" ? "does not exist (ENOENT)" : e.code) : `${e.code} ${e.path}`) : e?.message ?? String(err);
  const code = e?.code === "ENOENT" ? Exit.notFound : Exit.failure;
  return new AgentbakError(code, `${context}: ${detail}`, { cause: err });
}

/** An operating-system error (ENOSPC, EIO, EROFS, EACCES, ...) as Node raises it: an errno code and a syscall. */
export function isSystemError(e: unknown): e is NodeJS.ErrnoException {
  const x = e as NodeJS.ErrnoException | null;
  return typeof x?.code === "string" && /^E[A-Z0-9]+$/.test(x.code) && typeof x.syscall === "string";
}

/** How git, SQLite and the C library spell storage failures in a message (with the errno each stands for). */
const IO_WORDS: [RegExp, string][] = [
  [/no space left on device|database or disk is full|\bENOSPC\b/i, "ENOSPC"],
  [/read-only file system|\bEROFS\b/i, "EROFS"],
  [/input\/output error|disk I\/O error|\bEIO\b/i, "EIO"],
  [/disk quota exceeded|\bEDQUOT\b/i, "EDQUOT"],
];

/**
 * The errno of a storage failure (a system error, or a tool's message that
 * spells one), or null. Such failures are the disk's, never the bundle's:
 * they must not be reported as a verification failure (13).
 */
export function ioErrno(e: unknown): string | null {
  if (isSystemError(e)) return e.code!;
  const m = String((e as Error)?.message ?? e);
  return IO_WORDS.find(([re]) => re.test(m))?.[1] ?? null;
}

/**
 * A storage failure while working on `path`, for the user: names the path and
 * the errno, exit 1. @returns the error to throw.
 */
export function ioError(e: unknown, path: string): AgentbakError {
  const errno = ioErrno(e) ?? "EIO";
  const msg = String((e as Error)?.message ?? e);
  return new AgentbakError(Exit.failure, `${path}: ${msg.includes(errno) ? msg : `${errno} (${msg})`}`, { cause: e });
}

/**
 * A folder the user named (a restore target, a key folder, a repository) that
 * can not be made or used here — under /proc, a file in the way, no
 * permission — is a usage error (2) naming it; a full, failing or read-only
 * disk (ENOSPC, EIO, EDQUOT, EROFS) stays an I/O error (1). @returns the error to throw.
 */
export function placeError(e: unknown, what: string): AgentbakError {
  if (e instanceof AgentbakError) return e;
  const code = (e as NodeJS.ErrnoException)?.code;
  if (code === "EIO" || code === "ENOSPC" || code === "EDQUOT" || code === "EROFS") return ioError(e, what);
  const path = (e as NodeJS.ErrnoException)?.path;
  const gloss: Record<string, string> = { ENOTDIR: "a part of the path is not a folder", EACCES: "permission denied", EPERM: "not permitted", ENOENT: "no folder can be made there", EEXIST: "already exists" };
  const why = code ? `${gloss[code] ? `${gloss[code]}, ` : ""}${code}` : String((e as Error)?.message ?? e);
  return new AgentbakError(Exit.usage, `${what}: can not ${(e as NodeJS.ErrnoException)?.syscall ?? "create"} ${path ?? ""} (${why})`, { cause: e });
}

/** Formats zod issues as `path.to.key: message`, joined with "; ". */
export function formatIssues(issues: core.$ZodIssue[]): string {
  return issues
    .map((i) => {
      const path = i.path.length ? i.path.join(".") : "(root)";
      if (i.code === "unrecognized_keys") return `${path}: unknown key(s) ${i.keys.map((k) => `"${k}"`).join(", ")}`;
      return `${path}: ${i.message}`;
    })
    .join("; ");
}
