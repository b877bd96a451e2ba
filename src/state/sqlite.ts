/**
 * SQLite: consistent online copies, defensive opening, integrity checks.
 */
import Database from "better-sqlite3";
import { statSync } from "node:fs";
import { type AgentbakError, ioErrno, ioError, lockedError, usageError, verifyError, wrap } from "../errors.js";

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

/** Row counts per user table. */
export function tableCounts(db: DB): Record<string, number> {
  const tables = db
    .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
    .pluck()
    .all() as string[];
  const out: Record<string, number> = {};
  for (const t of tables) out[t] = db.prepare(`SELECT count(*) FROM "${t.replace(/"/g, '""')}"`).pluck().get() as number;
  return out;
}

/** PRAGMA user_version. */
export const userVersion = (db: DB) => db.pragma("user_version", { simple: true }) as number;

/** How long a snapshot waits for a writer's lock on a live database when --wait does not say. */
export const DEFAULT_BUSY_MS = 5000;

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

/**
 * Makes a consistent copy of a live database with SQLite's online backup API
 * and converts it to a single self-contained rollback-journal file. The copy
 * runs inside one read transaction, taken first (waiting up to `busyMs` for a
 * writer's lock), so it is one committed state; writers in WAL mode keep
 * going. Integrity is checked by inspectSnapshot before anything is published.
 * @throws AgentbakError naming the database: 10 missing, 2 a folder, 11 locked past `busyMs`, 13 not a database SQLite will open safely, 1 (path and errno) when the disk fails.
 */
export async function snapshotDatabase(name: string, src: string, dest: string, busyMs = DEFAULT_BUSY_MS): Promise<void> {
  let st;
  try {
    st = statSync(src);
  } catch (e) {
    throw wrap(e, `database ${name}: ${src}`);
  }
  if (st.isDirectory()) throw usageError(`database ${name}: ${src} is a folder, not an SQLite database file`);
  let source: DB;
  try {
    source = new Database(src, { readonly: true, fileMustExist: true });
  } catch (e) {
    throw sqliteError(e, name, src);
  }
  try {
    source.pragma(`busy_timeout = ${busyMs}`);
    // the read transaction starts here: a writer holding an exclusive lock is met now, as busy, and the
    // backup below copies exactly this state (one step holds it; copying everything in as few steps as possible)
    source.exec("BEGIN");
    source.prepare("SELECT count(*) FROM sqlite_schema").get();
  } catch (e) {
    source.close();
    throw sqliteError(e, name, src, busyMs);
  }
  try {
    await source.backup(dest, { progress: ({ totalPages }) => Math.max(totalPages, 100) });
    source.exec("COMMIT");
  } catch (e) {
    throw ioErrno(e) ? ioError(e, `database ${name}: online backup to ${dest}`) : sqliteError(e, name, src, busyMs);
  } finally {
    source.close();
  }
  let copy: DB | undefined;
  try {
    copy = new Database(dest);
    copy.pragma("journal_mode = DELETE");
  } catch (e) {
    // the copy holds the live database's schema: name the live file
    throw ioErrno(e) ? ioError(e, `database ${name}: ${dest}`) : sqliteError(e, name, src);
  } finally {
    copy?.close();
  }
}
