/**
 * Packages only some agents need are optional peer dependencies in
 * package.json (and dev dependencies, so a checkout has them): LanceDB (with
 * the Apache Arrow it brings, ~165 MB installed) for a lancedb source, the AWS
 * SDK (~25 MB) for an S3 repository, sqlite-vec (~0.2 MB) for a drill's recall check of a vec0 table. An install of agentbak leaves them out
 * (npm installs no optional peer, and --omit=optional is not honoured by a
 * global install of a tarball: npm/cli#8284); they load here when a config
 * uses them, from agentbak's own node_modules or from beside agentbak (Node's
 * resolution looks in the node_modules folder agentbak sits in, where
 * `npm install -g PACKAGE` puts a package next to a global agentbak).
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { AgentbakError, Exit } from "./errors.js";
import { ROOT } from "./version.js";

/** `npm install -g` for `names` at the versions package.json's peerDependencies name. */
export function installCommand(names: string[]): string {
  const want: Record<string, string> = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).peerDependencies ?? {};
  const word = (n: string) => {
    const s = want[n] ? `${n}@${want[n]}` : n;
    return /^[\w@./=-]+$/.test(s) ? s : `'${s}'`; // a range (^3.1) is quoted for the shell
  };
  return `npm install -g ${names.map(word).join(" ")}`;
}

/** Whether `e` says one of `names` itself could not be found (not a file inside an installed package). */
function notInstalled(e: unknown, names: string[]): boolean {
  const code = (e as { code?: unknown })?.code;
  if (code !== "ERR_MODULE_NOT_FOUND" && code !== "MODULE_NOT_FOUND") return false;
  const msg = String((e as Error).message);
  return names.some((n) => msg.includes(`'${n}'`));
}

/**
 * Loads optional packages for `what` ("a lancedb source", "an S3 repository").
 * @param names the packages `load` imports, all named in the install command
 * @throws AgentbakError(2) naming the install command when one of them is not installed.
 */
export async function loadOptional<T>(what: string, names: string[], load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (e) {
    if (notInstalled(e, names)) throw new AgentbakError(Exit.usage, `${what} needs ${names.join(" and ")}, not installed (optional, left out of a plain install): ${installCommand(names)}`);
    throw e;
  }
}
