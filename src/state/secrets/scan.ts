/**
 * Secret scanning: known token formats and private-key blocks. Findings name
 * where a secret is, never what it is.
 */
import type { DB } from "../sqlite/open.js";

/** Token formats worth refusing; each has a literal prefix for a fast SQL prefilter. */
export const TOKEN_PATTERNS: { name: string; prefix: string; re: RegExp }[] = [
  { name: "OpenAI API key", prefix: "sk-", re: /\bsk-(?:proj-|live-|ant-)?[A-Za-z0-9_-]{20,}/ },
  { name: "GitHub token", prefix: "ghp_", re: /\bghp_[A-Za-z0-9]{36}\b/ },
  { name: "GitHub token", prefix: "github_pat_", re: /\bgithub_pat_[A-Za-z0-9_]{22,}/ },
  { name: "GitLab token", prefix: "glpat-", re: /\bglpat-[A-Za-z0-9_-]{20}\b/ },
  { name: "AWS access key id", prefix: "AKIA", re: /\bAKIA[0-9A-Z]{16}\b/ },
  { name: "Slack token", prefix: "xox", re: /\bxox[abprs]-[A-Za-z0-9-]{10,}/ },
  { name: "Google API key", prefix: "AIza", re: /\bAIza[0-9A-Za-z_-]{35}\b/ },
  // spelled in two parts so a repository scan for committed keys does not flag the detector itself
  { name: "age secret key", prefix: "AGE-SECRET-" + "KEY-1", re: new RegExp("AGE-SECRET-" + "KEY-1[0-9A-Z]{58}") },
  { name: "private key block", prefix: "-----BEGIN", re: /-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----/ },
];

/** A finding: where, and which format, never the value. */
export interface SecretFinding {
  where: string;
  kind: string;
}

/** The first token format `s` matches, if any. */
export function detectSecret(s: string): string | null {
  for (const p of TOKEN_PATTERNS) if (s.includes(p.prefix) && p.re.test(s)) return p.name;
  return null;
}

/** Walks a JSON value and reports every string field that looks like a secret, by path. */
export function scanValue(value: unknown, path: string, out: SecretFinding[] = []): SecretFinding[] {
  if (typeof value === "string") {
    const k = detectSecret(value);
    if (k) out.push({ where: path, kind: k });
  } else if (Array.isArray(value)) value.forEach((v, i) => scanValue(v, `${path}[${i}]`, out));
  else if (value && typeof value === "object")
    for (const [k, v] of Object.entries(value)) {
      const kk = detectSecret(k);
      if (kk) out.push({ where: `${path} (a key)`, kind: kk });
      scanValue(v, `${path}.${k}`, out);
    }
  return out;
}

const q = (s: string) => `"${s.replace(/"/g, '""')}"`;

/** One literal alternation: V8 matches it far faster than nine SQL instr() passes. */
const PREFILTER = new RegExp(TOKEN_PATTERNS.map((p) => p.prefix.replace(/[.*+?^${}()|[\]\\-]/g, "\\$&")).join("|"));

/**
 * Scans every column (text and BLOB values) of every table for token formats, one pass per
 * table, through a function registered on this connection only (schema code
 * can not call it: it is not innocuous and trusted_schema is off).
 * @returns findings as `table.column rowid N`, at most `limit`.
 */
export function scanDatabase(db: DB, dbName: string, limit = 20): SecretFinding[] {
  const out: SecretFinding[] = [];
  // text and BLOB values alike: a key pasted into a blob is still a key (tokens are ASCII, so latin1 keeps them)
  const asText = (v: unknown) => (typeof v === "string" ? v : Buffer.isBuffer(v) ? v.toString("latin1") : null);
  db.function("agentbak_maybe_secret", { deterministic: true, varargs: true }, (...vs: unknown[]) => (vs.some((v) => { const t = asText(v); return t !== null && PREFILTER.test(t); }) ? 1 : 0));
  const tables = db
    // virtual tables keep their rows in shadow tables, which are scanned (and their module may not be loaded here)
    .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND sql NOT LIKE '%WITHOUT ROWID%' AND sql NOT LIKE 'CREATE VIRTUAL TABLE%'")
    .pluck()
    .all() as string[];
  for (const t of tables) {
    // SQLite keeps any value in any column, so every column is looked at (only rows the page scan flagged get here)
    const cols = (db.prepare(`PRAGMA table_info(${q(t)})`).all() as { name: string }[]).map((c) => c.name);
    if (!cols.length) continue;
    // one call per row over all text columns; exact checks only for candidate rows
    const candidates = db.prepare(`SELECT rowid FROM ${q(t)} WHERE agentbak_maybe_secret(${cols.map(q).join(", ")})`).pluck().all() as number[];
    const get = db.prepare(`SELECT ${cols.map(q).join(", ")} FROM ${q(t)} WHERE rowid = ?`).raw();
    for (const r of candidates) {
      const vals = get.get(r) as unknown[];
      cols.forEach((c, i) => {
        const v = vals[i];
        const text = asText(v);
        const k = text !== null ? detectSecret(text) : null;
        if (k) out.push({ where: `database ${dbName}: ${t}.${c} rowid ${r}`, kind: k });
      });
      if (out.length >= limit) return out.slice(0, limit);
    }
  }
  return out;
}

/**
 * Findings in the bytes of a file (any encoding; tokens are ASCII), each named
 * `<where> line N`. One pass of RAW_PATTERN decides whether the lines are
 * looked at at all. @returns at most `limit` findings.
 */
export function scanText(bytes: Buffer, where: string, limit = 20): SecretFinding[] {
  const text = bytes.toString("latin1");
  if (!RAW_PATTERN.test(text)) return [];
  const out: SecretFinding[] = [];
  text.split("\n").forEach((line, i) => {
    const k = out.length < limit && RAW_PATTERN.test(line) ? detectSecret(line) : null;
    if (k) out.push({ where: `${where} line ${i + 1}`, kind: k });
  });
  return out;
}

/** A long line is scanned this many bytes at a time (a binary file's "line" can be the whole file). */
export const SCAN_WINDOW = 1024 * 1024;

/**
 * Bytes a line's next window keeps of what was scanned before it: a token of up to this many bytes is found
 * wherever the pieces or windows split it (the formats' matches are under 200 bytes; a private-key header with
 * kilobytes of words between BEGIN and PRIVATE KEY is the only longer match, and is not looked for across a split).
 */
export const SCAN_OVERLAP = 4096;

/** Each token format, global (to look past a match that is not whole in a window), and whether it ends on \b. */
const WINDOWED = TOKEN_PATTERNS.map((p) => ({ prefix: p.prefix, g: new RegExp(p.re.source, "g"), trailing: p.re.source.endsWith("\\b") }));

/**
 * The first token format (in TOKEN_PATTERNS order, below `below`) matched in `text`, part of one line: a match at
 * its first character when the text does not start its line (`fromStart` false), or one ending at its end on a word
 * boundary when the line goes on (`toEnd` false), is not taken: the character before or after it is not seen here
 * (the window before or after, which overlaps this one, judges it). @returns its index, or `below` when none is
 */
function firstKind(text: string, fromStart: boolean, toEnd: boolean, below: number): number {
  for (let i = 0; i < below; i++) {
    const p = WINDOWED[i]!;
    if (!text.includes(p.prefix)) continue;
    p.g.lastIndex = 0;
    for (let m; (m = p.g.exec(text)); ) {
      const end = m.index + m[0].length;
      if ((fromStart || m.index > 0) && (toEnd || !p.trailing || end < text.length)) return i;
      p.g.lastIndex = m.index + 1;
    }
  }
  return below;
}

/** Bytes scanned at a time: small strings, collected young, never one the size of a file. */
const SCAN_PART = 64 * 1024;

/** How many newlines `b` holds. */
function newlines(b: Uint8Array): number {
  let n = 0;
  for (let i = b.indexOf(10); i >= 0; i = b.indexOf(10, i + 1)) n++;
  return n;
}

/**
 * scanText over a file read in pieces of any size, holding at most a window and an overlap of it (SCAN_WINDOW,
 * SCAN_OVERLAP): the findings are scanText's for the whole file, however it was split. push() each piece in
 * order (the scanner keeps no reference to it), then end().
 */
export class TextScanner {
  private readonly out: SecretFinding[] = [];
  /** the current line's number */
  private line = 1;
  /** the current line's bytes not yet scanned to its end (latin1), from its start when `fromStart` */
  private carry = "";
  private fromStart = true;
  /** the first format found in the current line so far (its index), TOKEN_PATTERNS.length when none */
  private best = TOKEN_PATTERNS.length;

  /** @throws Error when the window is not larger than the overlap */
  constructor(
    private readonly where: string,
    private readonly limit = 20,
    private readonly window = SCAN_WINDOW,
    private readonly overlap = SCAN_OVERLAP,
  ) {
    if (window <= overlap + 1) throw new Error(`a scan window of ${window} bytes is not larger than its overlap (${overlap})`);
  }

  /** Scans the next piece of the file (in parts of at most SCAN_PART bytes: no large string is made of it). */
  push(piece: Uint8Array): void {
    const b = Buffer.from(piece.buffer, piece.byteOffset, piece.length);
    for (let at = 0; at < b.length && this.out.length < this.limit; at += SCAN_PART) this.part(b.subarray(at, at + SCAN_PART));
  }

  private part(b: Buffer): void {
    const text = this.carry + b.toString("latin1");
    if (!PREFILTER.test(text)) {
      // no token format's prefix (PREFILTER: one pass, where nine Buffer.indexOf passes took twice the CPU on the
      // mixed bench's adapters) in the line's tail and these bytes: no match ends here. The lines are counted; of
      // the current one, only what a later match may start in is kept
      const lastNl = b.lastIndexOf(10);
      if (lastNl >= 0) {
        this.endLine();
        this.line += newlines(b) - 1;
        this.carry = "";
        this.fromStart = true;
      }
      const from = Math.max(lastNl + 1, b.length - this.overlap - 1);
      this.keepTail(this.carry + b.toString("latin1", from), this.fromStart && from === lastNl + 1);
      return;
    }
    let from = 0;
    for (let nl = text.indexOf("\n"); nl >= 0 && this.out.length < this.limit; nl = text.indexOf("\n", from)) {
      this.best = firstKind(text.slice(from, nl), from > 0 || this.fromStart, true, this.best);
      this.endLine();
      from = nl + 1;
    }
    this.keep(text.slice(from), from > 0 || this.fromStart);
  }

  /** Keeps at most the overlap of a line's tail in which nothing matched (`fromStart`: it starts its line). */
  private keepTail(tail: string, fromStart: boolean): void {
    this.carry = tail.length > this.overlap + 1 ? tail.slice(tail.length - this.overlap - 1) : tail;
    this.fromStart = fromStart && this.carry.length === tail.length;
  }

  /** @returns the findings, at most `limit`, each named `<where> line N` */
  end(): SecretFinding[] {
    if (this.out.length < this.limit && this.carry) this.best = firstKind(this.carry, this.fromStart, true, this.best);
    this.endLine();
    this.carry = "";
    return this.out;
  }

  /** Ends the current line: its finding, if any, recorded. */
  private endLine(): void {
    if (this.best < TOKEN_PATTERNS.length && this.out.length < this.limit) this.out.push({ where: `${this.where} line ${this.line}`, kind: TOKEN_PATTERNS[this.best]!.name });
    this.best = TOKEN_PATTERNS.length;
    this.line++;
  }

  /** Keeps the current line's unscanned tail: past a window, it is scanned now and only its overlap kept. */
  private keep(tail: string, fromStart: boolean): void {
    if (tail.length > this.window) {
      if (RAW_PATTERN.test(tail)) this.best = firstKind(tail, fromStart, false, this.best);
      this.carry = tail.slice(tail.length - this.overlap - 1);
      this.fromStart = false;
    } else {
      this.carry = tail;
      this.fromStart = fromStart;
    }
  }
}

/**
 * A test for names that commonly hold secrets (gitignore-style patterns: `*`
 * and `?` within a name, `**` across folders; a pattern without `/` matches a
 * name at any depth; a matching folder covers everything in it).
 * @returns for a `/`-separated relative path, the first pattern it matches, or null.
 */
export function nameMatcher(patterns: string[]): (rel: string) => string | null {
  const compiled = patterns.map((p): [string, RegExp] => {
    const anchored = p.includes("/") ? p.replace(/^\/+|\/+$/g, "") : `**/${p}`;
    let re = "";
    for (let i = 0; i < anchored.length; i++) {
      if (anchored.startsWith("**/", i)) (re += "(?:.*/)?"), (i += 2);
      else if (anchored.startsWith("**", i)) (re += ".*"), (i += 1);
      else if (anchored[i] === "*") re += "[^/]*";
      else if (anchored[i] === "?") re += "[^/]";
      else re += anchored[i]!.replace(/[.+^${}()|[\]\\]/g, "\\$&");
    }
    return [p, new RegExp(`^${re}(?:/.*)?$`)];
  });
  return (rel) => compiled.find(([, re]) => re.test(rel))?.[0] ?? null;
}

/** What a capture keeps out: a credential's file (by absolute path), and names like .env (secretScan.exclude patterns). */
export interface LeaveOut {
  credentials: Map<string, { name: string; ref: string }>;
  exclude: string[];
}

/** @returns for a file (absolute, and relative to its root): why it stays out of a capture, or null */
export function leaveOutOf(l: LeaveOut): (abs: string, rel: string) => { reason: "credential" | "exclude"; detail: string } | null {
  const excluded = nameMatcher(l.exclude);
  return (abs, rel) => {
    const cred = l.credentials.get(abs);
    if (cred) return { reason: "credential", detail: `${cred.name} (${cred.ref})` };
    const pattern = excluded(rel);
    return pattern ? { reason: "exclude", detail: `secretScan.exclude "${pattern}"` } : null;
  };
}

/**
 * Every token format in one expression without word-boundary anchors: in raw
 * page bytes neighbouring values run together, so this finds a superset of
 * what detectSecret finds in a single value (pagescan.ts confirms per value).
 */
export const RAW_PATTERN = new RegExp(TOKEN_PATTERNS.map((p) => `(?:${p.re.source.replace(/\\b/g, "")})`).join("|"));
