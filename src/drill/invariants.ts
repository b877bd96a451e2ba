/**
 * Invariant packs: each `.sql` file is one named check. Header comments set
 * `-- severity: error|warning` and `-- database: NAME`; a query that returns
 * rows fails, and up to five offending rows are kept for the report.
 */
import { basename } from "node:path";
import { usageError } from "../errors.js";
import { globSync } from "tinyglobby";
import { openDefensive } from "../state/sqlite/open.js";
import { readFileRegular } from "../fsutil.js";

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
      const sql = readFileRegular(f, "utf8");
      const header = (k: string) => sql.match(new RegExp(`^--\\s*${k}:\\s*(.+)$`, "mi"))?.[1]?.trim();
      const sev = header("severity") ?? "error";
      if (sev !== "error" && sev !== "warning") throw usageError(`invariant ${f}: severity must be error or warning`);
      out.push({ name: basename(f, ".sql"), file: f, sql, severity: sev, database: header("database") ?? null, description: header("check") ?? "" });
    }
  }
  return out;
}

/** Runs a read-only query against a state source (an invariant naming it with `-- database:`). */
export type SourceQuery = (sql: string) => Promise<unknown[]>;

/**
 * Runs invariants against SQLite databases (name → path; each opened
 * defensively and read-only) or, when `-- database:` names a state source
 * with a query language (postgres), against its restored server.
 */
export async function runInvariants(invariants: Invariant[], databases: Map<string, string>, sources: Map<string, SourceQuery> = new Map()): Promise<InvariantResult[]> {
  const first = [...databases.keys()][0];
  const out: InvariantResult[] = [];
  for (const inv of invariants) {
    const name = inv.database ?? first;
    const base = { name: inv.name, severity: inv.severity };
    const rows = async (): Promise<unknown[]> => {
      const q = name ? sources.get(name) : undefined;
      if (q) return q(inv.sql);
      const path = name ? databases.get(name) : undefined;
      if (!path) throw new Error(`no database named ${name ?? "(none)"}`);
      const db = openDefensive(path);
      try {
        return db.prepare(inv.sql).all();
      } finally {
        db.close();
      }
    };
    try {
      const r = await rows();
      out.push({ ...base, ok: r.length === 0, rows: r.length, sample: r.slice(0, 5) });
    } catch (e) {
      out.push({ ...base, ok: false, rows: 0, sample: [], error: (e as Error).message });
    }
  }
  return out;
}
