/**
 * Secret scanning: known token formats and private-key blocks. Findings name
 * where a secret is, never what it is.
 */
import type { DB } from "./sqlite.js";

/** Token formats worth refusing; each has a literal prefix for a fast SQL prefilter. */
export const TOKEN_PATTERNS: { name: string; prefix: string; re: RegExp }[] = [
  { name: "OpenAI API key", prefix: "sk-", re: /\bsk-(?:proj-|live-|ant-)?[A-Za-z0-9_-]{20,}/ },
  { name: "GitHub token", prefix: "ghp_", re: /\bghp_[A-Za-z0-9]{36}\b/ },
  { name: "GitHub token", prefix: "github_pat_", re: /\bgithub_pat_[A-Za-z0-9_]{22,}/ },
  { name: "GitLab token", prefix: "glpat-", re: /\bglpat-[A-Za-z0-9_-]{20}\b/ },
  { name: "AWS access key id", prefix: "AKIA", re: /\bAKIA[0-9A-Z]{16}\b/ },
  { name: "Slack token", prefix: "xox", re: /\bxox[abprs]-[A-Za-z0-9-]{10,}/ },
  { name: "Google API key", prefix: "AIza", re: /\bAIza[0-9A-Za-z_-]{35}\b/ },
  { name: "age secret key", prefix: "AGE-SECRET-KEY-1", re: /AGE-SECRET-KEY-1[0-9A-Z]{58}/ },
  { name: "private key block", prefix: "-----BEGIN", re: /-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----/ },
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

/**
 * Scans every text column of every table for token formats. SQLite's instr()
 * prefilters in C; only candidate rows are tested with the full patterns.
 * @returns findings as `table.column rowid N`, at most `limit`.
 */
export function scanDatabase(db: DB, dbName: string, limit = 20): SecretFinding[] {
  const out: SecretFinding[] = [];
  const tables = db
    .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND sql NOT LIKE '%WITHOUT ROWID%'")
    .pluck()
    .all() as string[];
  for (const t of tables) {
    const cols = (db.prepare(`PRAGMA table_info(${q(t)})`).all() as { name: string; type: string }[]).filter(
      (c) => !/BLOB|INT|REAL|FLOA|DOUB|NUM/i.test(c.type),
    );
    for (const c of cols) {
      const cond = TOKEN_PATTERNS.map((p) => `instr(${q(c.name)}, '${p.prefix}') > 0`).join(" OR ");
      const rows = db.prepare(`SELECT rowid AS r, ${q(c.name)} AS v FROM ${q(t)} WHERE typeof(${q(c.name)}) = 'text' AND (${cond})`).iterate() as Iterable<{ r: number; v: string }>;
      for (const row of rows) {
        const k = detectSecret(row.v);
        if (k) out.push({ where: `database ${dbName}: ${t}.${c.name} rowid ${row.r}`, kind: k });
        if (out.length >= limit) return out;
      }
    }
  }
  return out;
}
