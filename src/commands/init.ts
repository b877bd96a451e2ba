/**
 * `agentbak init`: writes agentbak.json (unless it exists), creates the
 * repository it names (a folder or s3://; idempotent, like `restic init`),
 * and generates keys if there are none.
 */
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { loadConfig, repositoryLocation } from "../config/load.js";
import { configJsonSchema, ConfigSchema } from "../config/schema.js";
import { agentbakHome, keygen } from "../crypto/keys.js";
import { formatIssues, usageError } from "../errors.js";
import { writeFileAtomic } from "../fsutil.js";
import { Repository } from "../repository/repository.js";
import { isUrl } from "../storage/open.js";
import { askText } from "../ui/output.js";

export interface InitOptions {
  dir?: string;
  config?: string;
  agentId?: string;
  tenant?: string;
  repo?: string;
  database?: string[];
  workspace?: string;
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
}

/** Creates what is missing of config, repository and keys. */
export async function init(opts: InitOptions): Promise<InitResult> {
  const cfgPath = opts.config ? resolve(opts.config) : join(resolve(opts.dir ?? "."), "agentbak.json");
  const home = agentbakHome();
  let keysCreated = false;
  if (existsSync(cfgPath)) {
    // an existing config (hand-written or from an earlier init): create the repository it names
    const lc = loadConfig(cfgPath);
    if (opts.agentId || opts.tenant || opts.database || opts.workspace) throw usageError(`${cfgPath} already exists; edit it instead of passing --agent-id, --tenant, --database or --workspace`);
    const location = repositoryLocation(opts.repo, lc)!;
    const { created } = await Repository.init(location);
    return { config: cfgPath, config_created: false, repository: location, repository_created: created, home, keys_created: false, recipient: lc.config.recipients[0]! };
  }
  const agentId = opts.agentId ?? (opts.yes ? undefined : await askText("Agent id:", "--agent-id"));
  if (!agentId) throw usageError("agent id needed: pass --agent-id");
  const tenant = opts.tenant ?? (opts.yes ? "default" : await askText("Tenant:", "--tenant", "default"));
  const repoRef = opts.repo ?? "./backups";
  if (!existsSync(join(home, "age-recipient.txt"))) {
    keygen(home, agentId);
    keysCreated = true;
  }
  const recipient = readFileSync(join(home, "age-recipient.txt"), "utf8").trim();
  const raw = {
    $schema: "./agentbak.schema.json",
    agent: { id: agentId, tenant },
    repository: repoRef,
    recipients: [recipient],
    databases: (opts.database ?? []).map((spec) => {
      const [name, path] = spec.includes("=") ? spec.split(/=(.*)/s) : ["state", spec];
      return { name: name!, path: path! };
    }),
    ...(opts.workspace ? { workspace: { path: opts.workspace, uncommitted: "include" } } : {}),
  };
  const parsed = ConfigSchema.safeParse(raw);
  if (!parsed.success) throw usageError(`init: ${formatIssues(parsed.error.issues)}`);
  const dir = resolve(cfgPath, "..");
  const location = isUrl(repoRef) ? repoRef : resolve(dir, repoRef);
  const { created } = await Repository.init(location);
  writeFileAtomic(join(dir, "agentbak.schema.json"), JSON.stringify(configJsonSchema(), null, 2) + "\n");
  writeFileAtomic(cfgPath, JSON.stringify(raw, null, 2) + "\n");
  return { config: cfgPath, config_created: true, repository: location, repository_created: created, home, keys_created: keysCreated, recipient };
}
