/**
 * Finding, reading and validating the config file.
 */
import { existsSync } from "node:fs";
import { dirname, isAbsolute, resolve } from "node:path";
import { formatIssues, notFound, usageError } from "../errors.js";
import { isUrl } from "../storage/open.js";
import { ConfigSchema, type Config } from "./schema.js";
import { isInside, readFileRegular } from "../fsutil.js";
import { refuseProtoKey } from "../facts.js";

/** A validated config with the folder its relative paths resolve against. */
export interface LoadedConfig {
  config: Config;
  path: string;
  dir: string;
  /** Resolves a config-relative path. */
  resolve(p: string): string;
}

/** The config path from the flag, AGENTBAK_CONFIG, or ./agentbak.json when it exists. */
export function configPath(flag?: string): string | undefined {
  if (flag) return resolve(flag);
  if (process.env.AGENTBAK_CONFIG) return resolve(process.env.AGENTBAK_CONFIG);
  const def = resolve("agentbak.json");
  return existsSync(def) ? def : undefined;
}

/**
 * Reads and strictly validates a config file.
 * @throws AgentbakError(2) naming the file and every bad key path; (10) when it is missing.
 */
export function loadConfig(path: string): LoadedConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileRegular(path, "utf8"), refuseProtoKey);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (err.code === "ENOENT") throw notFound(`config ${path}: not found`);
    throw usageError(`config ${path}: ${err.message}`);
  }
  const parsed = ConfigSchema.safeParse(raw);
  if (!parsed.success) throw usageError(`config ${path}: ${formatIssues(parsed.error.issues)}`);
  const dir = dirname(path);
  const lc: LoadedConfig = { config: parsed.data, path, dir, resolve: (p) => (isAbsolute(p) ? p : resolve(dir, p)) };
  const clash = placementClash(lc);
  if (clash) throw usageError(`config ${path}: ${clash}`);
  return lc;
}

/**
 * What the workspace would capture twice: a `files` entry whose fixed part
 * lies inside it, or a database inside it (restored in place, then the
 * workspace is rebuilt over it). Such a backup could never be restored.
 * @returns the problem, or null.
 */
function placementClash(lc: LoadedConfig): string | null {
  const ws = lc.config.workspace;
  if (!ws) return null;
  const root = lc.resolve(ws.path);
  for (const [i, f] of lc.config.files.entries()) {
    const fixed = f.split("/").filter((seg, k, all) => all.slice(0, k + 1).every((x) => !/[*?[\]{}()!]/.test(x))).join("/");
    if (isInside(lc.resolve(fixed || "."), root)) return `files.${i}: "${f}" is inside the workspace (${ws.path}), which is captured with its history; remove it from files`;
  }
  for (const [i, d] of lc.config.databases.entries())
    if (isInside(lc.resolve(d.path), root)) return `databases.${i}.path: "${d.path}" is inside the workspace (${ws.path}); keep databases outside it (the workspace is rebuilt from git)`;
  return null;
}

/** Loads the config when one is named or present; undefined otherwise. */
export function loadConfigIfAny(flag?: string): LoadedConfig | undefined {
  const p = configPath(flag);
  return p ? loadConfig(p) : undefined;
}

/**
 * What a command's flags name, read together: the config (`configless`: none, not even ./agentbak.json or
 * AGENTBAK_CONFIG) and the repository's location (repositoryLocation).
 * @throws AgentbakError(2) for a bad config
 */
export function loadNamed(flags: { config?: string; repo?: string }, configless = false): { lc: LoadedConfig | undefined; location: string | undefined } {
  const lc = configless ? undefined : loadConfigIfAny(flags.config);
  return { lc, location: repositoryLocation(flags.repo, lc) };
}

/**
 * The repository location: flag, then AGENTBAK_REPOSITORY, then config
 * (folders resolved: the flag and environment against the working folder,
 * the config's against the config's folder); undefined when none is named.
 */
export function repositoryLocation(flag: string | undefined, cfg: LoadedConfig | undefined): string | undefined {
  const loc = (p: string, base: (x: string) => string) => (isUrl(p) ? p : base(p));
  if (flag) return loc(flag, (x) => resolve(x));
  if (process.env.AGENTBAK_REPOSITORY) return loc(process.env.AGENTBAK_REPOSITORY, (x) => resolve(x));
  if (cfg) return loc(cfg.config.repository, cfg.resolve);
  return undefined;
}
