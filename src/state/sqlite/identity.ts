/**
 * The identity of the databases' files, read without opening them in SQLite (stat and header reads only): the
 * unchanged check's part of the state, which a nothing-changed backup computes without loading better-sqlite3.
 */
import { createHash } from "node:crypto";
import { closeSync, existsSync, openSync, readSync, realpathSync, statSync } from "node:fs";
import { sidecarOf } from "../../facts.js";

/**
 * The identity of databases' files as one digest (the unchanged check's part of them, read by a backup at its
 * instant, under every write lock): each file's identity, size, mtime and ctime and its 100-byte header (the change
 * counter moves on every commit in rollback-journal mode), and its -wal's size, mtime and header (every commit
 * appends frames; a reset changes its salts) and -journal (a write in progress).
 */
export function databasesIdentity(dbs: { name: string; src: string }[]): string {
  const h = createHash("sha256");
  const add = (...parts: (string | number | bigint)[]) => h.update(parts.join("\0") + "\n");
  for (const d of dbs) {
    // SQLite keeps the -wal and -journal beside the real file when the configured path is a symbolic link
    const p = real(d.src);
    // its ctime too: bytes written in place with the old mtime put back (size and header kept) still move it
    add("db", d.name, ...identity(p, 100), ctimeOf(p));
    add("wal", ...identity(sidecarOf(p, "wal"), 32));
    add("journal", ...identity(sidecarOf(p, "journal"), 0));
  }
  return h.digest("hex");
}

function real(p: string): string {
  try {
    return realpathSync(p);
  } catch {
    return p; // missing: recorded as absent
  }
}

/** A file's ctime in ns (a program can not set it back), or "absent". */
function ctimeOf(path: string): string {
  return existsSync(path) ? String(statSync(path, { bigint: true }).ctimeNs) : "absent";
}

/** A file's identity, size, modification time and first `head` bytes (or "absent"). */
function identity(path: string, head: number): (string | bigint)[] {
  if (!existsSync(path)) return ["absent"];
  const st = statSync(path, { bigint: true });
  const buf = Buffer.alloc(head);
  if (head) {
    const fd = openSync(path, "r");
    try {
      readSync(fd, buf, 0, head, 0);
    } finally {
      closeSync(fd);
    }
  }
  // not the -wal's ctime: SQLite opened as root chowns the -wal file on every open, which changes it and nothing else
  return [st.dev, st.ino, st.size, st.mtimeNs, buf.toString("hex")];
}
