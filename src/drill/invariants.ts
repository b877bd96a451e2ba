/**
 * Invariant packs: each `.sql` file is one named check. Header comments set
 * `-- severity: error|warning` and `-- database: NAME`; a query that returns
 * rows fails, and up to five offending rows are kept for the report.
 */
import { readFileSync } from "node:fs";
import { basename } from "node:path";
import { usageError } from "../errors.js";
import { globSync } from "tinyglobby";
import { openDefensive } from "../state/sqlite.js";

export interface Invariant {
  name: string;
  file: string;
  sql: string;
  severity: "error" | "warning";
  database: string | null;
  description: string;
}

export interface InvariantResult {
  name: string;
  severity: "error" | "warning";
  ok: boolean;
  rows: number;
  sample: unknown[];
  error?: string;
}

/** Loads every pack matched by the globs. @throws AgentbakError(2) when a glob matches nothing. */
export function loadInvariants(base: string, globs: string[]): Invariant[] {
  const out: Invariant[] = [];
  for (const g of globs) {
    const files = globSync(g, { cwd: base, absolute: true, onlyFiles: true, expandDirectories: false }).filter((f) => f.endsWith(".sql")).sort();
    if (files.length === 0) throw usageError(`invariants: "${g}" matches no .sql file`);
    for (const f of files) {
      const sql = readFileSync(f, "utf8");
      const header = (k: string) => sql.match(new RegExp(`^--\\s*${k}:\\s*(.+)$`, "mi"))?.[1]?.trim();
      const sev = header("severity") ?? "error";
      if (sev !== "error" && sev !== "warning") throw usageError(`invariant ${f}: severity must be error or warning`);
      out.push({ name: basename(f, ".sql"), file: f, sql, severity: sev, database: header("database") ?? null, description: header("check") ?? "" });
    }
  }
  return out;
}

/**
 * Runs invariants against databases (name → path), each opened defensively and read-only.
 */
export function runInvariants(invariants: Invariant[], databases: Map<string, string>): InvariantResult[] {
  const first = [...databases.keys()][0];
  return invariants.map((inv) => {
    const name = inv.database ?? first;
    const path = name ? databases.get(name) : undefined;
    if (!path) return { name: inv.name, severity: inv.severity, ok: false, rows: 0, sample: [], error: `no database named ${name ?? "(none)"}` };
    const db = openDefensive(path);
    try {
      const rows = db.prepare(inv.sql).all();
      return { name: inv.name, severity: inv.severity, ok: rows.length === 0, rows: rows.length, sample: rows.slice(0, 5) };
    } catch (e) {
      return { name: inv.name, severity: inv.severity, ok: false, rows: 0, sample: [], error: (e as Error).message };
    } finally {
      db.close();
    }
  });
}
