/**
 * The read plan (src/capture/plan.ts): how a backup reads its databases is chosen once, up front, from what the
 * parent offers and the integrity policy, as data; and the parent's page index: an incremental builds on it only
 * when it is the index the parent's manifest signed, made from a real SQLite file and sealed under this host's key.
 */
import { afterAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Manifest } from "../../../src/bundle/manifest.js";
import { chooseReadMode, integrityChecked, judgeParentIndex } from "../../../src/capture/plan.js";
import { encodeIndex, indexPages, pagesRoot } from "../../../src/state/pages/index.js";

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
const key = randomBytes(32);
const stored = encodeIndex(ix, key);

const manifest = (o: { format?: number; root?: string | null; name?: string } = {}) =>
  ({
    snapshot_id: "20261206T120000000Z-0badf00d",
    format_version: o.format ?? 5,
    components: [{ name: o.name ?? "main", kind: "sqlite", path: "db/main.sqlite", page_index_sha256: o.root === undefined ? pagesRoot(ix) : o.root }],
  }) as unknown as Manifest;

describe("judgeParentIndex", () => {
  it("takes the stored index whose pages root the manifest signed", () => {
    const got = judgeParentIndex(manifest(), "main", stored, key);
    expect("hashes" in got && got.pageCount).toBe(ix.pageCount);
    expect("hashes" in got && pagesRoot(got)).toBe(pagesRoot(ix));
  });

  it("refuses, with a warning, an index that does not match the manifest or is missing", () => {
    const other = judgeParentIndex(manifest({ root: "0".repeat(64) }), "main", stored, key);
    expect(other).toEqual({ reason: "the page index of database main in 20261206T120000000Z-0badf00d is missing or does not match its manifest", routine: false });
    expect(judgeParentIndex(manifest(), "main", null, key)).toEqual(other);
    expect(judgeParentIndex(manifest(), "main", Buffer.from("not an index"), key)).toEqual(other);
  });

  it("stores a database whole, routinely, after an upgrade or when it was added since the parent", () => {
    expect(judgeParentIndex(manifest({ format: 3 }), "main", stored, key)).toMatchObject({ routine: true, reason: expect.stringContaining("bundle format 3") });
    expect(judgeParentIndex(manifest({ name: "other" }), "main", stored, key)).toEqual({ reason: "database main is not in 20261206T120000000Z-0badf00d (added since)", routine: true });
  });

  it("takes every page as changed when the index was sealed under another host's key", () => {
    expect(judgeParentIndex(manifest(), "main", stored, randomBytes(32))).toEqual({ pageSize: 0, pageCount: 0, hashes: Buffer.alloc(0) });
  });
});
