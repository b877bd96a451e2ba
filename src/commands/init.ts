/**
 * `agentbak init`: writes agentbak.json (unless it exists), creates the
 * repository it names (a folder or s3://; idempotent, like `restic init`),
 * and generates keys if there are none.
 */
import { existsSync, readFileSync } from "node:fs";
import { basename, extname, join, resolve } from "node:path";
import { loadConfig, repositoryLocation } from "../config/load.js";
import { configJsonSchema, ConfigSchema } from "../config/schema.js";
import { keygen } from "../crypto/keys.js";
import { formatIssues, placeError, usageError } from "../errors.js";
import { writeFileAtomic } from "../fsutil.js";
import { Repository } from "../repository/repository.js";
import { discoverState } from "../state/discover.js";
import { isUrl } from "../storage/open.js";
import { agentbakHome, homePaths } from "../home.js";

/**
 * The questions init asks when a flag does not answer them: cli.ts passes
 * ui's prompts (each fails with 2 naming its flag when no prompt may be
 * shown). A command asks through these, never a terminal of its own.
 */
export interface InitPrompts {
  askText(message: string, flag: string, def?: string): Promise<string>;
  askChoices(message: string, flag: string, choices: string[]): Promise<string[]>;
  askOne(message: string, flag: string, choices: string[]): Promise<string | undefined>;
}

export interface InitOptions {
  /** asked only without --yes, for what the flags leave out */
  ask: InitPrompts;
  dir?: string;
  config?: string;
  agentId?: string;
  tenant?: string;
  repo?: string;
  database?: string[];
  workspace?: string;
  /** where the repository keeps its leases (docs/repositories.md): recorded in its marker */
  leases?: string;
  yes?: boolean;
}

export interface InitResult {
  config: string;
  config_created: boolean;
  repository: string;
  repository_created: boolean;
  home: string;
  keys_created: boolean;
  recipient: string;
  /** what the config names for backup (an empty list and null: backups capture no state) */
  databases: { name: string; path: string }[];
  /** names of those databases whose file does not exist yet (a backup fails with 10 until it does) */
  missing?: string[];
  workspace: string | null;
  warnings: string[];
}

/** A database name (lowercase, unique) for a discovered file: its base name. */
function nameFor(path: string, taken: Set<string>): string {
  let base = basename(path, extname(path)).toLowerCase().replace(/[^a-z0-9_]/g, "_").slice(0, 28);
  if (!/^[a-z]/.test(base)) base = `db_${base}`.slice(0, 28);
  let name = base;
  for (let i = 2; taken.has(name); i++) name = `${base}_${i}`;
  taken.add(name);
  return name;
}

/** Creates what is missing of config, repository and keys. */
export async function init(opts: InitOptions): Promise<InitResult> {
  // -c, then --dir, then AGENTBAK_CONFIG (flags beat environment), then ./agentbak.json: the config every other command reads
  const named = opts.config ?? (opts.dir === undefined ? process.env.AGENTBAK_CONFIG || undefined : undefined);
  const cfgPath = named ? resolve(named) : join(resolve(opts.dir ?? "."), "agentbak.json");
  const home = agentbakHome();
  let keysCreated = false;
  if (existsSync(cfgPath)) {
    // an existing config (hand-written or from an earlier init): create the repository it names
    const lc = loadConfig(cfgPath);
    if (opts.agentId || opts.tenant || opts.database || opts.workspace) throw usageError(`${cfgPath} already exists; edit it instead of passing --agent-id, --tenant, --database or --workspace`);
    const location = repositoryLocation(opts.repo, lc)!;
    const { created } = await Repository.init(location, { leases: opts.leases }).catch((e) => {
      throw placeError(e, `repository ${location}`);
    });
    const c = lc.config;
    return { config: cfgPath, config_created: false, repository: location, repository_created: created, home, keys_created: false, recipient: c.recipients[0]!, databases: c.databases, workspace: c.workspace?.path ?? null, warnings: [] };
  }
  const agentId = opts.agentId ?? (opts.yes ? undefined : await opts.ask.askText("Agent id:", "--agent-id"));
  if (!agentId) throw usageError("agent id needed: pass --agent-id");
  const tenant = opts.tenant ?? (opts.yes ? "default" : await opts.ask.askText("Tenant:", "--tenant", "default"));
  const repoRef = opts.repo ?? "./backups";
  const dir = resolve(cfgPath, "..");
  const location = isUrl(repoRef) ? repoRef : resolve(dir, repoRef);
  const databases = (opts.database ?? []).map((spec) => {
    const [name, path] = spec.includes("=") ? spec.split(/=(.*)/s) : ["state", spec];
    return { name: name!, path: path! };
  });
  let workspace = opts.workspace;
  if (!opts.yes && (!opts.database || !workspace)) {
    // offer what the folder holds; a config that names nothing backs up nothing
    const found = discoverState(dir, isUrl(repoRef) ? [] : [location]);
    if (!opts.database) {
      const taken = new Set<string>();
      for (const path of await opts.ask.askChoices("SQLite databases to back up:", "--database NAME=PATH (or --yes)", found.databases)) databases.push({ name: nameFor(path, taken), path });
    }
    workspace ??= await opts.ask.askOne("Git workspace of the agent:", "--workspace PATH (or --yes)", found.workspaces);
  }
  if (!existsSync(homePaths(home).recipient)) {
    try {
      keygen(home, agentId);
    } catch (e) {
      throw placeError(e, `keys in ${home}`);
    }
    keysCreated = true;
  }
  const recipient = readFileSync(homePaths(home).recipient, "utf8").trim();
  const raw = {
    $schema: "./agentbak.schema.json",
    agent: { id: agentId, tenant },
    repository: repoRef,
    recipients: [recipient],
    databases,
    ...(workspace ? { workspace: { path: workspace, uncommitted: "include" } } : {}),
  };
  const parsed = ConfigSchema.safeParse(raw);
  if (!parsed.success) throw usageError(`init: ${formatIssues(parsed.error.issues)}`);
  const { created } = await Repository.init(location, { leases: opts.leases }).catch((e) => {
    throw placeError(e, `repository ${location}`);
  });
  writeFileAtomic(join(dir, "agentbak.schema.json"), JSON.stringify(configJsonSchema(), null, 2) + "\n");
  writeFileAtomic(cfgPath, JSON.stringify(raw, null, 2) + "\n");
  // an agent may create its database at its first start: named, not refused, and said
  const missing = databases.filter((d) => !existsSync(resolve(dir, d.path))).map((d) => d.name);
  return { config: cfgPath, config_created: true, repository: location, repository_created: created, home, keys_created: keysCreated, recipient, databases, missing, workspace: workspace ?? null, warnings: [] };
}
