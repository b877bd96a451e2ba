/**
 * The read plan (src/capture/plan.ts): how a backup reads its databases is chosen once, up front, from what the
 * parent offers and the integrity policy, as data; and the parent's page index: an incremental builds on it only
 * when it is the index the parent's manifest signed (parentEntry reads the manifest, the page engine checks the stored
 * index: parentPages), made from a real SQLite file and sealed under this host's key.
 */
import { afterAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Manifest } from "../../../src/bundle/manifest.js";
import { chooseReadMode, integrityChecked, parentEntry, parentPages, type Parent } from "../../../src/capture/plan.js";
import { encodeIndex, indexPages, pageIndexKey, pagesRoot } from "../../../src/state/pages/index.js";

describe("chooseReadMode", () => {
  it("reads a full snapshot pinned in place: no parent index, whatever the integrity policy", () => {
    expect(chooseReadMode({ databases: 2, withIndex: 0, integrityChecked: true })).toBe("pinned");
    expect(chooseReadMode({ databases: 2, withIndex: 0, integrityChecked: false })).toBe("pinned");
  });

  it("reads an unchecked incremental's pages in place only when every database has its parent's index", () => {
    expect(chooseReadMode({ databases: 2, withIndex: 2, integrityChecked: false })).toBe("in-place");
    expect(chooseReadMode({ databases: 2, withIndex: 1, integrityChecked: false })).toBe("copy");
  });

  it("copies an incremental the integrity policy checks (integrity_check reads the copy)", () => {
    expect(chooseReadMode({ databases: 2, withIndex: 2, integrityChecked: true })).toBe("copy");
    expect(chooseReadMode({ databases: 3, withIndex: 1, integrityChecked: true })).toBe("copy");
  });

  it("offers nothing to read in place when there is no database", () => {
    expect(chooseReadMode({ databases: 0, withIndex: 0, integrityChecked: true })).toBe("copy");
  });
});

describe("integrityChecked", () => {
  it("checks every full snapshot and every integrityEvery-th link of a chain", () => {
    expect(integrityChecked(0, false, 5)).toBe(true);
    expect([1, 2, 3, 4, 5, 6, 10].map((link) => integrityChecked(link, true, 5))).toEqual([false, false, false, false, true, false, true]);
    expect(integrityChecked(3, true, 1)).toBe(true);
  });
});

const dir = mkdtempSync(join(tmpdir(), "agentbak-parent-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const file = join(dir, "agent.db");
const db = new Database(file);
db.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)");
const ins = db.prepare("INSERT INTO t (v) VALUES (?)");
for (let i = 0; i < 500; i++) ins.run(randomBytes(100).toString("hex"));
db.close();
const ix = indexPages(file);
// this host's page-index key, as the backup reads it (AGENTBAK_HOME/page-index-key)
const home = join(dir, "home");
const key = pageIndexKey(home);
const stored = encodeIndex(ix, key);

const manifest = (o: { format?: number; root?: string | null; name?: string } = {}) =>
  ({
    snapshot_id: "20261206T120000000Z-0badf00d",
    format_version: o.format ?? 5,
    components: [{ name: o.name ?? "main", kind: "sqlite", path: "db/main.sqlite", sha256: "ab".repeat(32), page_index_sha256: o.root === undefined ? pagesRoot(ix) : o.root }],
  }) as unknown as Manifest;

/** The parent's page index of database "main" as the plan judges it: its manifest's entry, then the page engine's check. */
let n = 0;
const judge = (m: Manifest, index: Buffer | null) => {
  const parent = { snapshot: { snapshot_id: m.snapshot_id }, header: { manifest: m }, indexes: new Map([["main", index]]) } as unknown as Parent;
  const p = parentPages(parent, ["main"], { home, repo: "/srv/repo", tenant: "t", agent: "a" }, `S${n++}`);
  p.sums.finish(null);
  return p.parents.get("main") ?? p.unindexed;
};

describe("the parent's page index (parentEntry, parentPages)", () => {
  it("takes the stored index whose pages root the manifest signed", () => {
    expect(parentEntry(manifest(), "main", stored)).toEqual({ stored, root: pagesRoot(ix), sha256: "ab".repeat(32) });
    const got = judge(manifest(), stored)!;
    expect("hashes" in got && got.pageCount).toBe(ix.pageCount);
    expect("hashes" in got && pagesRoot(got)).toBe(pagesRoot(ix));
  });

  it("refuses, with a warning, an index that does not match the manifest or is missing", () => {
    const other = judge(manifest({ root: "0".repeat(64) }), stored);
    expect(other).toEqual({ reason: "the page index of database main in 20261206T120000000Z-0badf00d is missing or does not match its manifest", routine: false });
    expect(parentEntry(manifest(), "main", null)).toEqual(other);
    expect(judge(manifest(), null)).toEqual(other);
    expect(judge(manifest(), Buffer.from("not an index"))).toEqual(other);
  });

  it("stores a database whole, routinely, after an upgrade or when it was added since the parent", () => {
    expect(parentEntry(manifest({ format: 3 }), "main", stored)).toMatchObject({ routine: true, reason: expect.stringContaining("bundle format 3") });
    expect(judge(manifest({ format: 3 }), stored)).toMatchObject({ routine: true, reason: expect.stringContaining("bundle format 3") });
    expect(judge(manifest({ name: "other" }), stored)).toEqual({ reason: "database main is not in 20261206T120000000Z-0badf00d (added since)", routine: true });
  });

  it("takes every page as changed when the index was sealed under another host's key", () => {
    expect(judge(manifest(), encodeIndex(ix, randomBytes(32)))).toEqual({ pageSize: 0, pageCount: 0, hashes: Buffer.alloc(0) });
  });
});
