// What init offers: SQLite files by their header (not their name) and git work trees, never inside .git, node_modules or the repository.
import { afterAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { discoverState } from "../../../src/state/discover.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-discover-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const sqlite = (p: string) => {
  mkdirSync(join(p, ".."), { recursive: true });
  const d = new Database(p);
  d.pragma("journal_mode = WAL");
  d.exec("CREATE TABLE t (x); INSERT INTO t VALUES (1)");
  return d; // left open: its -wal and -shm sidecars exist while walking
};

describe("discoverState", () => {
  it("finds databases by header and work trees by .git, sorted, skipping sidecars, .git, node_modules, the repository and symlinks", () => {
    const root = join(tmp, "agent");
    const open = [sqlite(join(root, "state", "agent.sqlite")), sqlite(join(root, "data.bin")), sqlite(join(root, "node_modules", "x", "cache.db")), sqlite(join(root, "backups", "copy.sqlite"))];
    writeFileSync(join(root, "state", "fake.sqlite"), "not a database at all");
    mkdirSync(join(root, ".git", "objects"), { recursive: true });
    mkdirSync(join(root, "workspace", ".git"), { recursive: true });
    symlinkSync(join(root, "state"), join(root, "link"));
    const found = discoverState(root, [join(root, "backups")]);
    for (const d of open) d.close();
    expect(found).toEqual({ databases: ["data.bin", "state/agent.sqlite"], workspaces: [".", "workspace"] });
  });

  it("stops at maxDepth folders down", () => {
    const root = join(tmp, "deep");
    const d = sqlite(join(root, "a", "b", "c", "deep.sqlite"));
    d.close();
    expect(discoverState(root, [], 3).databases).toEqual(["a/b/c/deep.sqlite"]);
    expect(discoverState(root, [], 2).databases).toEqual([]);
  });
});
