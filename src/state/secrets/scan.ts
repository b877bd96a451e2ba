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
