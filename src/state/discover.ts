/**
 * Finds what an agent folder holds worth backing up, for `init` to offer:
 * SQLite database files (by their header) and git repositories. At the root
 * of state/, not in a wing: it looks for what two wings (sqlite/, workspace/)
 * then capture.
 */
import { closeSync, existsSync, openSync, readdirSync, readSync } from "node:fs";
import { join, relative, sep } from "node:path";
import { SQLITE_MAGIC } from "./sqlite/pagefile.js";
import { SQLITE_SIDECAR } from "../facts.js";

export interface Discovered {
  /** SQLite files, relative to the folder, sorted */
  databases: string[];
  /** git work trees ("." for the folder itself), relative to the folder, sorted */
  workspaces: string[];
}

const SKIP_DIRS = new Set([".git", "node_modules", ".agentbak"]);

function isSqlite(file: string): boolean {
  const head = Buffer.alloc(SQLITE_MAGIC.length);
  let fd: number | undefined;
  try {
    fd = openSync(file, "r");
    return readSync(fd, head, 0, head.length, 0) === head.length && head.equals(SQLITE_MAGIC);
  } catch {
    return false;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/**
 * Walks `dir` (at most `maxDepth` folders down and `maxEntries` entries, so a
 * huge tree does not stall a prompt), skipping .git, node_modules and the
 * absolute paths in `skip` (the repository folder). Never follows symlinks.
 */
export function discoverState(dir: string, skip: string[] = [], maxDepth = 4, maxEntries = 20_000): Discovered {
  const found: Discovered = { databases: [], workspaces: [] };
  let seen = 0;
  const rel = (p: string) => relative(dir, p).split(sep).join("/") || ".";
  const walk = (d: string, depth: number) => {
    if (existsSync(join(d, ".git"))) found.workspaces.push(rel(d));
    let entries;
    try {
      entries = readdirSync(d, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries.sort((x, y) => x.name.localeCompare(y.name))) {
      if (++seen > maxEntries) return;
      const p = join(d, e.name);
      if (e.isDirectory()) {
        if (!SKIP_DIRS.has(e.name) && !skip.includes(p) && depth < maxDepth) walk(p, depth + 1);
      } else if (e.isFile() && !SQLITE_SIDECAR.test(e.name) && isSqlite(p)) found.databases.push(rel(p));
    }
  };
  walk(dir, 0);
  found.databases.sort();
  found.workspaces.sort();
  return found;
}
