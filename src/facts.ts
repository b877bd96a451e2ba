/**
 * Facts the whole house shares, spelled once, low in the house (a base
 * module: it imports nothing of ours): unsafe text, URL redaction, the agent
 * ref and id patterns, snapshot and request ids, SQLite's sidecar files and
 * the reconcile strategies (and which one an open operation of a kind gets).
 */
import { randomBytes } from "node:crypto";

/**
 * Characters that can steer a terminal or reorder what a person reads: C0/C1
 * controls, DEL, Unicode format controls (bidi overrides and isolates,
 * zero-width characters), line and paragraph separators, lone surrogates,
 * and noncharacters (U+FFFE, U+FFFF, U+FDD0..U+FDEF ...: no text holds them,
 * and an XML file, the drill's JUnit report, can not). `ui/escape.ts` shows
 * them escaped; labels and restore-request fields holding one are refused at
 * input.
 */
export const UNSAFE_TEXT = /[\x00-\x1f\x7f-\x9f\p{Cf}\p{Zl}\p{Zp}\p{Cs}\p{NChar}]/u;

/** Whether `s` holds a character `UNSAFE_TEXT` matches. */
export const hasUnsafeText = (s: string): boolean => UNSAFE_TEXT.test(s);

/**
 * A JSON.parse reviver for files a person writes (config, drill spec): the key `__proto__` is refused, since
 * an object built from it would drop it silently (a strategy for kind "__proto__" would never apply).
 */
export const refuseProtoKey = (k: string, v: unknown): unknown => {
  if (k === "__proto__") throw new SyntaxError('the key "__proto__" is not a name agentbak accepts (it would be dropped)');
  return v;
};

const ALL_UNSAFE = new RegExp(UNSAFE_TEXT.source, "gu");

/**
 * `s` with every character of UNSAFE_TEXT shown as `\xNN` / `\uNNNN` (ESC becomes the four visible
 * characters `\x1b`): the one escaping of outside text, used by ui/escape.ts for the terminal and by
 * the drill's JUnit and Markdown files.
 */
export const escapeUnsafe = (s: string): string =>
  s.replace(ALL_UNSAFE, (c) => {
    const n = c.codePointAt(0)!;
    return n <= 0xff ? `\\x${n.toString(16).padStart(2, "0")}` : `\\u${n.toString(16).padStart(4, "0")}`;
  });

/**
 * The password of a URL (`scheme://user:PASSWORD@host`), anywhere in a text: up to the `@` its host follows (the
 * last `@` of the authority), so that a password holding `@`, or an unencoded `/`, `?` or `#`, is taken whole.
 */
// a port and a path (`host:8025/v1/users/bob@example.com`) is no password
// (a password may hold a space: up to the line's end the `@` its host follows is looked for; a bare port is none)
const URL_PASSWORD = /\b([a-z][a-z0-9+.-]*:\/\/[^\s:@/?#]*):(?!\d+(?:[/?#\s]|$))[^\n]*?@(?=[^\s@/?#]*(?:[/?#\s]|$))/gi;
/** A password given as a parameter: `?password=` in a URL's query, libpq's `password=` (quoted or not) in a `key=value` string. */
const PARAM_PASSWORD = /\b(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'"]+)/gi;

/**
 * `text` with the password of every URL in it, and every `password=` parameter, replaced by `***`: what
 * agentbak echoes (an error, a plan, a receipt, a log line) never carries a connection's password.
 */
export const redactUrls = (text: string): string => text.replace(URL_PASSWORD, "$1:***@").replace(PARAM_PASSWORD, "$1***");

/** One agent of one tenant: what sequences, locks, logs and trusted state are kept per. */
export interface AgentRef {
  tenant: string;
  agent: string;
}

/** Agent ids and tenants: also folder names in repositories and in AGENTBAK_HOME. */
export const ID_PATTERN = /^[a-z0-9][a-z0-9._-]{0,63}$/;
/** The one line a flag (`--tenant`, `--agent`) outside ID_PATTERN is refused with; null for an id. */
export const notAnId = (flag: string, v: string): string | null =>
  ID_PATTERN.test(v) ? null : `${flag}: not an id: ${JSON.stringify(v.slice(0, 80))} (lowercase letters, digits, . _ - (max 64), starting with a letter or digit)`;

/** A snapshot id as a pattern without anchors, for patterns that hold one (a repository key): its creation time (UTC, ISO 8601 basic, to the millisecond) and 8 random hex digits. */
export const SNAPSHOT_ID_BODY = String.raw`\d{8}T\d{9}Z-[0-9a-f]{8}`;

/** A snapshot id (YYYYMMDDTHHMMSSmmmZ-xxxxxxxx): ids sort by creation time. */
export const SNAPSHOT_ID = new RegExp(`^${SNAPSHOT_ID_BODY}$`);

/** A restore request id: `req-` and a snapshot-style id of when it was asked. */
export const REQUEST_ID = new RegExp(`^req-${SNAPSHOT_ID_BODY}$`);

/** A new snapshot id for a snapshot created at `d`. */
export const newSnapshotId = (d: Date): string => d.toISOString().replace(/[-:.]/g, "") + "-" + randomBytes(4).toString("hex");

/** A new restore request id for a request made at `d`. */
export const newRequestId = (d: Date): string => `req-${newSnapshotId(d)}`;

/** The files SQLite keeps beside a database file: write-ahead log, its shared-memory index, rollback journal. */
export const SQLITE_SIDECARS = ["wal", "shm", "journal"] as const;

/** A path that is one of a database's sidecars (`<database>-wal` ...); `.replace(SQLITE_SIDECAR, "")` names the database. */
export const SQLITE_SIDECAR = new RegExp(`-(${SQLITE_SIDECARS.join("|")})$`);

/** The path of `database`'s sidecar of `kind`. */
export const sidecarOf = (database: string, kind: (typeof SQLITE_SIDECARS)[number]): string => `${database}-${kind}`;

/** How an open operation is reconciled by idempotency key: ask, never resend; resend with the same key when the provider has no record; a person decides. */
export const STRATEGIES = ["observe", "retry-safe", "escalate"] as const;
export type Strategy = (typeof STRATEGIES)[number];

/**
 * The strategy for an open operation of `kind` (config openOperations): its own in `strategies`, else the default
 * (observe when nothing is configured). The kind is the agent's data: only a key the config itself has counts (a kind
 * named "constructor" is not Object's).
 */
export const strategyFor = (kind: string | null | undefined, ops: { strategies: Record<string, Strategy>; defaultStrategy: Strategy } | undefined): Strategy =>
  (kind != null && ops && Object.hasOwn(ops.strategies, kind) ? ops.strategies[kind] : undefined) ?? ops?.defaultStrategy ?? "observe";
