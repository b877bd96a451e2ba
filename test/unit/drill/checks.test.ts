/**
 * The drill's restore checks (src/drill/checks.ts) against real SQLite files:
 * foreign keys and user_version against the manifest, cursors against their
 * recorded values, and the checks that only read what the drill measured
 * (objectives, runtime differences, open operations left unreconciled).
 */
import Database from "better-sqlite3";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { Extracted } from "../../../src/bundle/extract.js";
import type { Manifest } from "../../../src/bundle/manifest.js";
import { CheckLog } from "../../../src/drill/checklog.js";
import { cursorChecks, databaseChecks, objectiveChecks, runtimeChecks, unreconciledOperations } from "../../../src/drill/checks.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-unit-checks-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A database with a parent and a child table; `orphan` adds a child whose parent is missing. */
function database(name: string, o: { userVersion: number; orphan?: boolean }): string {
  const path = join(dir, `${name}.sqlite`);
  const db = new Database(path);
  db.exec("CREATE TABLE parent (id INTEGER PRIMARY KEY); CREATE TABLE child (id INTEGER PRIMARY KEY, parent_id INTEGER REFERENCES parent(id)); INSERT INTO parent VALUES (1); INSERT INTO child VALUES (1, 1);");
  // better-sqlite3 enforces foreign keys; a database written without them can hold an orphan
  if (o.orphan) {
    db.pragma("foreign_keys = OFF");
    db.exec("INSERT INTO child VALUES (2, 99)");
  }
  db.pragma(`user_version = ${o.userVersion}`);
  db.close();
  return path;
}

const byName = (log: CheckLog) => Object.fromEntries(log.checks.map((c) => [c.name, { ok: c.ok, severity: c.severity, detail: c.detail }]));

describe("databaseChecks", () => {
  it("fails a foreign-key violation and a user_version other than the manifest's; reports integrity as extraction found it", () => {
    const x: Extracted = {
      root: dir,
      databases: [
        { name: "good", path: database("good", { userVersion: 3 }), schemaVersion: 3 },
        { name: "bad", path: database("bad", { userVersion: 2, orphan: true }), schemaVersion: 3 },
      ],
      sources: [],
      checks: [{ name: "integrity:good", ok: true, detail: "integrity_check ok" }],
    };
    const log = new CheckLog(Date.now(), {});
    expect(databaseChecks(x, log)).toEqual({ integrity: { good: "ok", bad: "not checked" }, restored: { good: 3, bad: 2 } });
    expect(byName(log)).toEqual({
      "foreign_key_check:good": { ok: true, severity: "error", detail: "ok" },
      "schema_version:good": { ok: true, severity: "error", detail: "user_version 3, manifest 3" },
      "foreign_key_check:bad": { ok: false, severity: "error", detail: "child rowid 2 references missing parent" },
      "schema_version:bad": { ok: false, severity: "error", detail: "user_version 2, manifest 3" },
    });
  });
});

describe("cursorChecks", () => {
  it("compares each cursor's query in the restored database with the recorded value, and names a missing database or a failing query", () => {
    const path = database("cursors", { userVersion: 1 });
    const m = {
      cursor_queries: {
        last_child: { database: "state", sql: "SELECT max(id) FROM child" },
        moved: { database: "state", sql: "SELECT count(*) FROM parent" },
        broken: { database: "state", sql: "SELECT max(id) FROM nowhere" },
        elsewhere: { database: "other", sql: "SELECT 1" },
      },
      cursors: { last_child: 1, moved: 7, broken: 1, elsewhere: 1 },
    } as unknown as Manifest;
    const log = new CheckLog(Date.now(), {});
    const cursors = cursorChecks(m, new Map([["state", path]]), log);
    expect(cursors.map((c) => [c.name, c.restored, c.ok])).toEqual([
      ["last_child", 1, true],
      ["moved", 1, false],
      ["broken", null, false],
      ["elsewhere", null, false],
    ]);
    const checks = byName(log);
    expect(checks["cursor:moved"]!.detail).toBe("manifest 7, restored 1");
    expect(checks["cursor:broken"]!.detail).toMatch(/no such table: nowhere/);
    expect(checks["cursor:elsewhere"]!.detail).toBe("no database other");
  });
});

describe("the checks of what the drill measured", () => {
  it("objectives: an RPO or RTO missed is an error; one not stated is not checked", () => {
    const log = new CheckLog(Date.now(), {});
    objectiveChecks({ rpoMinutes: 10, rtoSeconds: 5 }, { rpo_seconds: 601, rto_seconds: 5 }, log);
    objectiveChecks(undefined, { rpo_seconds: 1e9, rto_seconds: 1e9 }, log);
    expect(log.checks.map((c) => [c.scenario, c.name, c.ok, c.detail])).toEqual([
      ["objectives", "rpo", false, "snapshot was 10.0 minutes old at drill time; objective 10 minutes"],
      ["objectives", "rto", true, "recovered and reconciled in 5 s; objective 5 s"],
    ]);
  });

  it("open operations not reconciled: a warning when the spec runs the worker, a note (info) for a checks-only spec, nothing when reconciled or none", () => {
    const log = new CheckLog(Date.now(), {});
    unreconciledOperations(3, false, true, log);
    unreconciledOperations(3, false, false, log);
    unreconciledOperations(3, true, true, log);
    unreconciledOperations(0, false, true, log);
    expect(log.checks.map((c) => [c.ok, c.severity])).toEqual([
      [false, "warning"],
      [false, "info"],
    ]);
    expect(log.checks[0]!.detail).toMatch(/^3 open operation\(s\) in the snapshot, not reconciled in this drill/);
  });

  it("runtime differences let through are warnings saying why", () => {
    const log = new CheckLog(Date.now(), {});
    runtimeChecks(
      [
        { key: "agent_version", what: "agent version", snapshot: "1.4.2", here: "1.5.0", compatible: true },
        { key: "model:llm", what: "model llm", snapshot: null, here: "gpt-x", compatible: false },
      ],
      log,
    );
    expect(log.checks.map((c) => [c.name, c.ok, c.severity, c.detail])).toEqual([
      ["runtime:agent_version", true, "warning", "agent version 1.4.2 -> 1.5.0 (declared compatible)"],
      ["runtime:model:llm", true, "warning", "model llm (not recorded) -> gpt-x (approved with --allow-runtime-change)"],
    ]);
  });
});
