/**
 * The tool version, from package.json, and the package's root folder: the one
 * place that knows where this code sits, whether it runs from `dist/` (tsc)
 * or from the packed CLI (`dist/packed/`, esbuild).
 */
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** The nearest folder above this module holding agentbak's package.json. */
function packageRoot(): string {
  for (let d = dirname(fileURLToPath(import.meta.url)); ; d = dirname(d)) {
    const p = join(d, "package.json");
    if (existsSync(p) && JSON.parse(readFileSync(p, "utf8")).name === "agentbak") return d;
    if (dirname(d) === d) throw new Error(`agentbak's package.json not found above ${fileURLToPath(import.meta.url)}`);
  }
}

export const ROOT = packageRoot();
export const TOOL_VERSION: string = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).version;

/**
 * The arguments that run this same CLI (bin/agentbak.js, as this process was started) in a child of `process.execPath`:
 * node's own flags travel with it (fault injection, --import probes), a debugger port would clash and is left out.
 */
export const childCli = (): string[] => [...process.execArgv.filter((a) => !a.startsWith("--inspect")), process.argv[1]!];
