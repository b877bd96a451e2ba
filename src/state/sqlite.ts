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
