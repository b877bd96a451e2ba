/**
 * package.json's allowScripts names every package of the lock file whose
 * install script `npm ci` runs (optional ones aside: npm skips those it can
 * not install). npm 11 warns for each one not named, so a reader's first
 * `npm ci` (README Quick start) ended in "install scripts not yet covered by
 * allowScripts" for esbuild and node-pty.
 */
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const read = (f: string) => JSON.parse(readFileSync(join(root, f), "utf8")) as Record<string, unknown>;

describe("package.json allowScripts", () => {
  it("covers every non-optional package of the lock file with an install script", () => {
    const allow = read("package.json").allowScripts as Record<string, boolean>;
    const lock = read("package-lock.json").packages as Record<string, { hasInstallScript?: boolean; optional?: boolean }>;
    const scripted = Object.entries(lock)
      .filter(([path, p]) => path && p.hasInstallScript && !p.optional)
      .map(([path]) => path.slice(path.lastIndexOf("node_modules/") + "node_modules/".length));
    expect(scripted).toContain("better-sqlite3");
    expect(scripted.filter((name) => allow[name] !== true)).toEqual([]);
  });
});
