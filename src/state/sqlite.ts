/**
 * SQLite: consistent online copies, defensive opening, integrity checks.
 */
import Database from "better-sqlite3";
import { existsSync } from "node:fs";
import { wrap } from "../errors.js";

export type DB = Database.Database;

/**
 * Opens a database we did not write ourselves (a restored or snapshotted
 * copy) so that nothing the schema defines can run code: trusted_schema off,
 * defensive mode, no extensions, no mmap, cell_size_check on.
 */
export function openDefensive(path: string, opts: { readonly?: boolean } = {}): DB {
  const db = new Database(path, { readonly: opts.readonly ?? true, fileMustExist: true });
  db.unsafeMode(false);
  db.pragma("trusted_schema = OFF");
  db.pragma("mmap_size = 0");
  db.pragma("cell_size_check = ON");
  return db;
}

/**
 * The full integrity_check result: ["ok"] when healthy. Corruption that SQLite
 * raises as an error instead of listing ("database disk image is malformed")
 * is returned as the result too; this never throws for a damaged file.
 */
export function integrityCheck(db: DB): string[] {
  try {
    return (db.pragma("integrity_check") as Record<string, unknown>[]).map((r) => String(Object.values(r)[0]));
  } catch (e) {
    return [(e as Error).message];
  }
}

/** foreign_key_check rows as readable strings. */
export function foreignKeyCheck(db: DB): string[] {
  return (db.pragma("foreign_key_check") as { table: string; rowid: number; parent: string; fkid: number }[]).map(
    (r) => `${r.table} rowid ${r.rowid} references missing ${r.parent}`,
  );
}

/**
 * Row counts per user table. A virtual table whose module is not loaded here
 * (sqlite-vec's vec0, say) can not be read: it is left out and named in
 * `skipped` with the reason; its shadow tables are ordinary tables and counted.
 */
export function tableCounts(db: DB): { counts: Record<string, number>; skipped: string[] } {
  const tables = db
    .prepare("SELECT name, sql FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
    .all() as { name: string; sql: string | null }[];
  const counts: Record<string, number> = {};
  const skipped: string[] = [];
  for (const t of tables) {
    try {
      counts[t.name] = db.prepare(`SELECT count(*) FROM "${t.name.replace(/"/g, '""')}"`).pluck().get() as number;
    } catch (e) {
      if (!isVirtual(t.sql)) throw e;
      skipped.push(`${t.name}: ${(e as Error).message}`);
    }
  }
  return { counts, skipped };
}

/** Whether a table's CREATE statement makes a virtual table. */
export const isVirtual = (sql: string | null) => /^\s*CREATE\s+VIRTUAL\s+TABLE/i.test(sql ?? "");

/**
 * The vector columns of sqlite-vec `vec0` tables, read from their CREATE
 * statements (`embedding float[768]`), and whether every stored chunk of
 * vectors has that width. Works without the extension: the vectors live in
 * ordinary shadow tables (`<table>_vector_chunksNN`).
 */
export function vec0Dimensions(db: DB): { table: string; column: string; dimension: number; badChunks: number }[] {
  const out: { table: string; column: string; dimension: number; badChunks: number }[] = [];
  const vtabs = db.prepare("SELECT name, sql FROM sqlite_schema WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%'").all() as { name: string; sql: string }[];
  for (const v of vtabs) {
    const m = /USING\s+vec0\s*\(([\s\S]*)\)\s*$/i.exec(v.sql);
    if (!m) continue;
    const cols = [...m[1]!.matchAll(/([A-Za-z_][A-Za-z0-9_]*)\s+(float|int8|bit)\s*\[\s*(\d+)\s*\]/gi)];
    cols.forEach(([, column, type, n], i) => {
      const dimension = Number(n);
      const bytes = type!.toLowerCase() === "float" ? dimension * 4 : type!.toLowerCase() === "int8" ? dimension : Math.ceil(dimension / 8);
      const chunks = `${v.name}_vector_chunks${String(i).padStart(2, "0")}`;
      const q = (s: string) => `"${s.replace(/"/g, '""')}"`;
      let badChunks = 0;
      try {
        // each chunk holds `size` slots of `bytes` bytes (vec0's layout): another width means another dimension
        badChunks = db
          .prepare(`SELECT count(*) FROM ${q(chunks)} v JOIN ${q(`${v.name}_chunks`)} c ON c.chunk_id = v.rowid WHERE length(v.vectors) <> c.size * ?`)
          .pluck()
          .get(bytes) as number;
      } catch {
        badChunks = -1;
      }
      out.push({ table: v.name, column: column!, dimension, badChunks });
    });
  }
  return out;
}

/** PRAGMA user_version. */
export const userVersion = (db: DB) => db.pragma("user_version", { simple: true }) as number;

/**
 * Makes a consistent copy of a live database with SQLite's online backup API
 * (one read transaction; writers in WAL mode keep going) and converts it to a
 * single self-contained rollback-journal file. Integrity is checked by
 * inspectSnapshot before anything is published.
 * @throws AgentbakError naming the database when the source is missing or unreadable.
 */
export async function snapshotDatabase(name: string, src: string, dest: string): Promise<void> {
  if (!existsSync(src)) throw wrap(Object.assign(new Error("missing"), { code: "ENOENT", path: src }), `database ${name}`);
  const source = new Database(src, { readonly: true, fileMustExist: true });
  try {
    source.pragma("busy_timeout = 10000");
    // copy everything in as few steps as possible: a step holds one read transaction, so the copy is one committed state
    await source.backup(dest, { progress: ({ totalPages }) => Math.max(totalPages, 100) });
  } catch (e) {
    throw wrap(e, `database ${name}: online backup to ${dest}`);
  } finally {
    source.close();
  }
  const copy = new Database(dest);
  try {
    copy.pragma("journal_mode = DELETE");
  } finally {
    copy.close();
  }
}
