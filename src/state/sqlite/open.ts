/**
 * SQLite connections to files agentbak did not write: defensive opening,
 * integrity and foreign-key checks, row counts, sqlite-vec dimensions, and
 * SQLite's errors said for the user with their exit codes.
 */
import Database from "better-sqlite3";
import type { BtreeCensus } from "./btree.js";
import { type AgentbakError, ioErrno, ioError, lockedError, verifyError, wrap } from "../../errors.js";

export type DB = Database.Database;

/**
 * SQLite's own default page cache (2000 KiB) for a connection that reads a
 * whole database. better-sqlite3 builds SQLite with 16000 KiB per connection,
 * and the inspection's integrity_check of a 1194 MiB database filled all of
 * it: the backup's peak RSS was 11-14 MiB higher, and integrity_check took
 * 2.0-2.8 s with either size. The pragma reads the schema, so on a file that
 * is locked or not a database it fails: that is left to what reads it next
 * to report, as before.
 */
export function smallCache(db: DB): void {
  try {
    db.pragma("cache_size = -2000");
  } catch {
    /* reported by the next read */
  }
}

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
  smallCache(db);
  return db;
}

/**
 * The full integrity_check result: ["ok"] when healthy. Corruption that SQLite
 * raises as an error instead of listing ("database disk image is malformed")
 * is returned as the result too; this never throws for a damaged file.
 */
export function integrityCheck(db: DB, check: "integrity_check" | "quick_check" = "integrity_check"): string[] {
  try {
    return (db.pragma(check) as Record<string, unknown>[]).map((r) => String(Object.values(r)[0]));
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
 * `census`: the pages of this very snapshot as another read saw them
 * (state/sqlite/btree.ts); a table whose tree it holds soundly is counted from it,
 * any other through SQL.
 */
export function tableCounts(db: DB, census?: BtreeCensus): { counts: Record<string, number>; skipped: string[] } {
  const tables = db
    .prepare("SELECT name, sql, rootpage FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
    .all() as { name: string; sql: string | null; rootpage: number | null }[];
  const withoutRowid = census ? new Set((db.pragma("table_list") as { schema: string; name: string; wr: number }[]).filter((t) => t.schema === "main" && t.wr).map((t) => t.name)) : null;
  const counts: Record<string, number> = {};
  const skipped: string[] = [];
  for (const t of tables) {
    const fromPages = census && !isVirtual(t.sql) && t.rootpage ? census.count(t.rootpage, withoutRowid!.has(t.name)) : null;
    if (fromPages !== null) {
      counts[t.name] = fromPages;
      continue;
    }
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
 * An error from SQLite about database `name` at `path`, for the user: busy or
 * locked is 11 (naming the wait), a full or failing disk names the path and
 * errno (1), a file SQLite refuses (not a database, corrupt, a schema it will
 * not load) is 13.
 */
export function sqliteError(e: unknown, name: string, path: string, waitedMs = 0): AgentbakError {
  const code = String((e as { code?: unknown })?.code ?? "");
  const msg = (e as Error)?.message ?? String(e);
  if (/^SQLITE_(BUSY|LOCKED)/.test(code))
    return lockedError(`database ${name} (${path}) is locked by another process (${msg}; waited ${Math.round(waitedMs / 1000)}s); pass --wait to wait longer`);
  if (/^SQLITE_(FULL|IOERR)/.test(code) || ioErrno(e)) return ioError(e, `database ${name}: ${path}`);
  if (/^SQLITE_(NOTADB|CORRUPT|ERROR|SCHEMA)/.test(code)) return verifyError(`database ${name} (${path}): ${msg}`);
  return wrap(e, `database ${name} (${path})`);
}
