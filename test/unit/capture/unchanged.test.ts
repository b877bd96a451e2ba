// Telling an unchanged agent: the databases' fingerprint moves with any write (file, WAL or journal), and the last backup is remembered per repository and agent.
import { afterAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { databasesState, lastBackup, rememberBackup, stateKey } from "../../../src/capture/unchanged.js";
import { homePaths } from "../../../src/home.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-unchanged-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const lcOf = (dir: string) => ({ path: join(dir, "agentbak.json"), dir, resolve: (p: string) => join(dir, p), config: { databases: [{ name: "state", path: "state.sqlite" }] } }) as any;

describe("databasesState", () => {
  it("is stable while nothing is written, and moves on a committed write in WAL mode (the main file untouched)", () => {
    const dir = mkdtempSync(join(tmp, "a-"));
    const db = new Database(join(dir, "state.sqlite"));
    db.pragma("journal_mode = WAL");
    db.pragma("wal_autocheckpoint = 0");
    db.exec("CREATE TABLE t (x)");
    const lc = lcOf(dir);
    const before = databasesState(lc);
    expect(databasesState(lc)).toBe(before);
    db.prepare("INSERT INTO t VALUES (?)").run(1);
    const after = databasesState(lc);
    expect(after).not.toBe(before);
    db.close();
  });

  it("a missing database is recorded as absent, and differs from an empty file", () => {
    const dir = mkdtempSync(join(tmp, "b-"));
    const lc = lcOf(dir);
    const absent = databasesState(lc);
    writeFileSync(join(dir, "state.sqlite"), "");
    expect(databasesState(lc)).not.toBe(absent);
  });

  it("stateKey is a sha256 of both parts, in order", () => {
    expect(stateKey("a", "b")).toMatch(/^[0-9a-f]{64}$/);
    expect(stateKey("a", "b")).not.toBe(stateKey("b", "a"));
  });
});

describe("lastBackup", () => {
  const a = { tenant: "acme", agent: "billing-agent" };
  it("is remembered per repository and agent; none, or an unreadable record, is null", () => {
    const home = mkdtempSync(join(tmp, "home-"));
    expect(lastBackup(home, "/repo", a)).toBeNull();
    const rec = { fingerprint: "f", sequence: 3, expires_at: "2026-03-02T00:00:00.000Z", receipt: { snapshot_id: "s" } };
    rememberBackup(home, "/repo", a, rec);
    expect(lastBackup(home, "/repo", a)).toEqual(rec);
    expect(lastBackup(home, "/other-repo", a)).toBeNull();
    expect(lastBackup(home, "/repo", { ...a, tenant: "globex" })).toBeNull();
    const f = homePaths(home).cache.lastBackup(createHash("sha256").update(`/repo\0${a.tenant}\0${a.agent}`).digest("hex").slice(0, 16));
    writeFileSync(f, "{ cut sh");
    expect(lastBackup(home, "/repo", a)).toBeNull();
  });
});
