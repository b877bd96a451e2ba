// Invariant packs: headers set severity and database, a query returning rows fails with a sample of five, errors are kept per check, and the databases are opened read-only.
import { afterAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadInvariants, runInvariants } from "../../../src/drill/invariants.js";
import { AgentbakError } from "../../../src/errors.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-invariants-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const pack = join(tmp, "pack");
mkdirSync(pack);
writeFileSync(join(pack, "b_no_orphans.sql"), "-- check: every task has a run\n-- severity: warning\nSELECT id FROM tasks WHERE id NOT IN (SELECT task_id FROM runs)\n");
writeFileSync(join(pack, "a_positive.sql"), "-- database: ledger\nSELECT * FROM entries WHERE amount <= 0\n");
writeFileSync(join(pack, "notes.txt"), "not a check");
const failure = (f: () => unknown) => {
  try {
    f();
  } catch (e) {
    return [(e as AgentbakError).code, (e as Error).message];
  }
  return "loaded";
};

describe("loadInvariants", () => {
  it("loads each .sql file a glob matches, sorted, with its headers (severity defaults to error, database to none)", () => {
    const inv = loadInvariants(tmp, ["pack/*"]);
    expect(inv.map((i) => [i.name, i.severity, i.database, i.description])).toEqual([
      ["a_positive", "error", "ledger", ""],
      ["b_no_orphans", "warning", null, "every task has a run"],
    ]);
    expect(inv[0]!.file).toBe(join(pack, "a_positive.sql"));
    expect(inv[0]!.sql).toContain("SELECT * FROM entries");
  });

  it("a glob matching no .sql file is exit 2 naming it; a bad severity is exit 2 naming the file", () => {
    expect(failure(() => loadInvariants(tmp, ["pack/*.txt"]))).toEqual([2, 'invariants: "pack/*.txt" matches no .sql file']);
    const bad = join(tmp, "bad");
    mkdirSync(bad);
    writeFileSync(join(bad, "x.sql"), "-- severity: fatal\nSELECT 1\n");
    expect(failure(() => loadInvariants(tmp, ["bad/*.sql"]))).toEqual([2, `invariant ${join(bad, "x.sql")}: severity must be error or warning`]);
  });
});

describe("runInvariants", () => {
  const state = join(tmp, "state.sqlite");
  const ledger = join(tmp, "ledger.sqlite");
  const s = new Database(state);
  s.exec("CREATE TABLE tasks (id INTEGER); CREATE TABLE runs (task_id INTEGER)");
  s.exec("INSERT INTO tasks VALUES (1),(2),(3),(4),(5),(6),(7); INSERT INTO runs VALUES (1)");
  s.close();
  const l = new Database(ledger);
  l.exec("CREATE TABLE entries (amount INTEGER); INSERT INTO entries VALUES (5), (7)");
  l.close();
  const dbs = new Map([["state", state], ["ledger", ledger]]);

  it("a query that returns rows fails with its row count and the first five rows; none passes; no -- database: means the first database", async () => {
    const r = await runInvariants(loadInvariants(tmp, ["pack/*.sql"]), dbs);
    expect(r).toEqual([
      { name: "a_positive", severity: "error", ok: true, rows: 0, sample: [] },
      { name: "b_no_orphans", severity: "warning", ok: false, rows: 6, sample: [2, 3, 4, 5, 6].map((id) => ({ id })) },
    ]);
  });

  it("a failing query, or a database not restored, fails that check with the error and the others still run", async () => {
    const inv = loadInvariants(tmp, ["pack/*.sql"]);
    const r = await runInvariants([{ ...inv[0]!, database: "missing" }, { ...inv[1]!, sql: "SELECT nope FROM tasks" }, inv[0]!], dbs);
    expect(r[0]).toMatchObject({ ok: false, error: "no database named missing" });
    expect(r[1]).toMatchObject({ ok: false, error: expect.stringContaining("no such column: nope") });
    expect(r[2]).toMatchObject({ ok: true });
    expect(await runInvariants(inv.slice(1), new Map())).toEqual([expect.objectContaining({ ok: false, error: "no database named (none)" })]);
  });

  it("opens the databases read-only: a check that writes fails and changes nothing", async () => {
    const before = readFileSync(ledger);
    const [r] = await runInvariants([{ name: "w", file: "w.sql", sql: "DELETE FROM entries RETURNING amount", severity: "error", database: "ledger", description: "" }], dbs);
    expect(r).toMatchObject({ ok: false, error: expect.stringMatching(/readonly|read-only/i) });
    expect(readFileSync(ledger).equals(before)).toBe(true);
  });

  it("a check naming a state source runs through its query, not SQLite", async () => {
    const asked: string[] = [];
    const inv = loadInvariants(tmp, ["pack/a_positive.sql"]);
    const r = await runInvariants(inv, dbs, new Map([["ledger", async (sql: string) => (asked.push(sql), [{ amount: -1 }])]]));
    expect(asked).toEqual([inv[0]!.sql]);
    expect(r[0]).toMatchObject({ ok: false, rows: 1, sample: [{ amount: -1 }] });
  });
});
