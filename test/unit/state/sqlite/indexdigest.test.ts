// The backup's index digest check against real corrupted SQLite files: each planted index corruption (an entry
// altered, missing or extra, a UNIQUE broken, a leaf page's byte edited) passes quick_check, fails integrity_check,
// and fails backupIntegrityCheck; healthy files of every value type pass; schemas it can not read that way fall back.
import { afterAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { backupIntegrityCheck, INDEX_DIGEST_FROM } from "../../../../src/state/sqlite/indexdigest.js";
import { integrityCheck, openDefensive } from "../../../../src/state/sqlite/open.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-indexdigest-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
let n = 0;

/** A database made by `sql`, closed. */
function make(sql: string): string {
  const file = join(tmp, `db${n++}.sqlite`);
  const db = new Database(file);
  db.exec(sql);
  db.close();
  return file;
}

/** Runs `change` while index `name` is hidden from the schema (so SQLite does not maintain it), then puts it back. */
function behindIndex(file: string, name: string, change: string, sqlAfter?: string): void {
  let db = new Database(file);
  db.unsafeMode(true);
  const row = db.prepare("SELECT tbl_name, rootpage, sql FROM sqlite_schema WHERE name = ?").get(name) as { tbl_name: string; rootpage: number; sql: string };
  db.pragma("writable_schema = ON");
  db.prepare("DELETE FROM sqlite_schema WHERE name = ?").run(name);
  db.close();
  db = new Database(file);
  db.exec(change);
  db.close();
  db = new Database(file);
  db.unsafeMode(true);
  db.pragma("writable_schema = ON");
  db.prepare("INSERT INTO sqlite_schema VALUES ('index', ?, ?, ?, ?)").run(name, row.tbl_name, row.rootpage, sqlAfter ?? row.sql);
  db.close();
}

/** quick_check, integrity_check and the backup's check of a file, read as the backup reads it (the index digests at any size: `from` 0). */
function checks(file: string, from = 0) {
  const db = openDefensive(file);
  try {
    return { quick: integrityCheck(db, "quick_check"), full: integrityCheck(db), backup: backupIntegrityCheck(db, from) };
  } finally {
    db.close();
  }
}

const LEDGER = `CREATE TABLE ledger (id INTEGER PRIMARY KEY, account TEXT NOT NULL, ts INTEGER, amount REAL, memo BLOB);
  CREATE INDEX ledger_account ON ledger (account);
  CREATE INDEX ledger_ts_amount ON ledger (ts, amount);
  WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 3000)
  INSERT INTO ledger SELECT i, printf('acct-%06d', i * 7919 % 100000), CASE WHEN i % 50 = 0 THEN NULL ELSE 1767225600 + i END, i * 1.5, randomblob(i % 40) FROM s;`;

describe("backupIntegrityCheck", () => {
  it("passes a healthy database of every value type (NULLs, reals, blobs, 64-bit integers, a column named rowid) by the index digest", () => {
    const file = make(`${LEDGER}
      CREATE TABLE odd (rowid TEXT, big INTEGER, v);
      CREATE UNIQUE INDEX odd_big ON odd (big);
      CREATE INDEX odd_v ON odd (v COLLATE NOCASE, rowid);
      INSERT INTO odd VALUES ('a', 9223372036854775807, 'Text'), ('b', -9223372036854775808, x'00ff'), ('c', NULL, NULL), ('d', NULL, 2.5), ('e', 9007199254740993, 'text');`);
    expect(checks(file)).toEqual({ quick: ["ok"], full: ["ok"], backup: { result: ["ok"], method: "index_digest" } });
  });

  it("catches an index entry whose value differs from its row's (counts equal), as integrity_check does", () => {
    const file = make(LEDGER);
    behindIndex(file, "ledger_account", "UPDATE ledger SET account = 'acct-zzzzzz' WHERE id = 1234");
    const c = checks(file);
    expect(c.quick).toEqual(["ok"]);
    expect(c.full.join("\n")).toMatch(/row 1234 missing from index ledger_account/);
    expect(c.backup).toEqual({ result: ["index ledger_account does not hold the entries of table ledger's rows (their digests differ)"], method: "index_digest" });
  });

  it("catches a missing and an extra index entry (quick_check counts each index's entries), as integrity_check does", () => {
    const missing = make(LEDGER);
    behindIndex(missing, "ledger_ts_amount", "INSERT INTO ledger VALUES (5000, 'acct-x', 1, 2.0, NULL)");
    const extra = make(LEDGER);
    behindIndex(extra, "ledger_account", "DELETE FROM ledger WHERE id = 77");
    for (const [file, index] of [[missing, "ledger_ts_amount"], [extra, "ledger_account"]] as const) {
      const c = checks(file);
      expect(c.full.join("\n")).toMatch(new RegExp(`wrong # of entries in index ${index}`));
      expect(c.backup.method).toBe("index_digest");
      expect(c.backup.result.join("\n")).toMatch(new RegExp(`wrong # of entries in index ${index}`));
    }
  });

  it("catches a UNIQUE index holding two equal keys (under its collation; NULLs may repeat), as integrity_check does", () => {
    const binary = make(`CREATE TABLE u (k TEXT, n); CREATE INDEX u_k ON u (k); INSERT INTO u VALUES ('a', 1), ('a', 2), (NULL, 3), (NULL, 4);`);
    behindIndex(binary, "u_k", "SELECT 1", "CREATE UNIQUE INDEX u_k ON u (k)");
    const nocase = make(`CREATE TABLE u (k TEXT, n); CREATE INDEX u_k ON u (k COLLATE NOCASE); INSERT INTO u VALUES ('A', 1), ('a', 2), (NULL, 3), (NULL, 4);`);
    behindIndex(nocase, "u_k", "SELECT 1", "CREATE UNIQUE INDEX u_k ON u (k COLLATE NOCASE)");
    const nulls = make(`CREATE TABLE u (k TEXT, n); CREATE UNIQUE INDEX u_k ON u (k COLLATE NOCASE); INSERT INTO u VALUES ('A', 1), ('b', 2), (NULL, 3), (NULL, 4);`);
    for (const file of [binary, nocase]) {
      const c = checks(file);
      expect(c.quick).toEqual(["ok"]);
      expect(c.full.join("\n")).toMatch(/non-unique entry in index u_k/);
      expect(c.backup).toEqual({ result: ["non-unique entry in index u_k"], method: "index_digest" });
    }
    expect(checks(nulls).backup).toEqual({ result: ["ok"], method: "index_digest" });
  });

  it("catches a byte edited in an index leaf page of the file, as integrity_check does", () => {
    const file = make(`CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT); CREATE INDEX t_name ON t (name);
      INSERT INTO t VALUES (1, 'alpha-0001'), (2, 'bravo-0002'), (3, 'charlie-0003');`);
    const db = new Database(file, { readonly: true });
    const root = db.prepare("SELECT rootpage FROM sqlite_schema WHERE name = 't_name'").pluck().get() as number;
    const size = db.pragma("page_size", { simple: true }) as number;
    db.close();
    const bytes = readFileSync(file);
    const page = bytes.subarray((root - 1) * size, root * size);
    const at = page.indexOf("bravo-0002");
    expect(at).toBeGreaterThan(0);
    page[at + 9] = "7".charCodeAt(0); // bravo-0007: still in order, still a well-formed record
    writeFileSync(file, bytes);
    const c = checks(file);
    expect(c.quick).toEqual(["ok"]);
    expect(c.full.join("\n")).toMatch(/row 2 missing from index t_name/);
    expect(c.backup).toEqual({ result: ["index t_name does not hold the entries of table t's rows (their digests differ)"], method: "index_digest" });
  });

  it("reports quick_check's findings for a damaged b-tree without reading on", () => {
    const file = make(LEDGER);
    const bytes = readFileSync(file);
    bytes.fill(0xee, 4096 * 3 + 8, 4096 * 3 + 200); // a table page's cell pointers and cells
    writeFileSync(file, bytes);
    const c = checks(file);
    expect(c.quick).not.toEqual(["ok"]);
    expect(c.backup).toEqual({ result: c.quick, method: "index_digest" });
  });

  it("runs integrity_check for an expression index, a partial index and an indexed WITHOUT ROWID table, and says so", () => {
    const schemas = [
      "CREATE TABLE t (a TEXT); CREATE INDEX t_lower ON t (lower(a)); INSERT INTO t VALUES ('X');",
      "CREATE TABLE t (a TEXT); CREATE INDEX t_some ON t (a) WHERE a > 'm'; INSERT INTO t VALUES ('x');",
      "CREATE TABLE t (a TEXT PRIMARY KEY, b) WITHOUT ROWID; CREATE INDEX t_b ON t (b); INSERT INTO t VALUES ('x', 1);",
    ];
    for (const s of schemas) expect(checks(make(s)).backup).toEqual({ result: ["ok"], method: "integrity_check" });
    const broken = make("CREATE TABLE t (a TEXT); CREATE INDEX t_lower ON t (lower(a)); INSERT INTO t VALUES ('X'), ('Y');");
    behindIndex(broken, "t_lower", "UPDATE t SET a = 'Z' WHERE a = 'X'");
    const c = checks(broken);
    expect(c.backup.method).toBe("integrity_check");
    expect(c.backup.result).toEqual(c.full);
    expect(c.full).not.toEqual(["ok"]);
  });

  it("runs integrity_check (attested as before, bundle format unchanged) for a database with no index, and for one below INDEX_DIGEST_FROM, where it costs no more", () => {
    const noIndex = make("CREATE TABLE t (id INTEGER PRIMARY KEY, b BLOB); INSERT INTO t VALUES (1, x'00'), (2, x'01');");
    expect(checks(noIndex).backup).toEqual({ result: ["ok"], method: "integrity_check" });
    const small = make(LEDGER);
    expect(checks(small, INDEX_DIGEST_FROM).backup).toEqual({ result: ["ok"], method: "integrity_check" });
    behindIndex(small, "ledger_account", "UPDATE ledger SET account = 'acct-zzzzzz' WHERE id = 1234");
    expect(checks(small, INDEX_DIGEST_FROM).backup).toEqual({ result: checks(small).full, method: "integrity_check" });
    const large = make(`${LEDGER} CREATE TABLE pad (b BLOB); WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ${INDEX_DIGEST_FROM / 4096 + 16}) INSERT INTO pad SELECT randomblob(3500) FROM s;`);
    expect(checks(large, INDEX_DIGEST_FROM).backup).toEqual({ result: ["ok"], method: "index_digest" });
  });
});
