/** `agentbak init`: a config, a local repository, keys if none, trust for the signer. */
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { configJsonSchema, ConfigSchema } from "../config/schema.js";
import { formatIssues } from "../config/load.js";
import { agentbakHome, keygen } from "../crypto/keys.js";
import { usageError } from "../errors.js";
import { writeFileAtomic } from "../fsutil.js";
import { LocalRepository } from "../repository/local.js";
import { askText } from "../ui/output.js";

export interface InitOptions {
  dir?: string;
  agentId?: string;
  tenant?: string;
  repo?: string;
  database?: string[];
  workspace?: string;
  yes?: boolean;
}

export interface InitResult {
  config: string;
  repository: string;
  home: string;
  keysCreated: boolean;
  recipient: string;
}

/** Creates agentbak.json (refuses to overwrite), the repository and keys. */
export async function init(opts: InitOptions): Promise<InitResult> {
  const dir = resolve(opts.dir ?? ".");
  const cfgPath = join(dir, "agentbak.json");
  if (existsSync(cfgPath)) throw usageError(`${cfgPath} already exists; edit it or choose another --dir`);
  const agentId = opts.agentId ?? (opts.yes ? undefined : await askText("Agent id:", "--agent-id"));
  if (!agentId) throw usageError("agent id needed: pass --agent-id");
  const tenant = opts.tenant ?? (opts.yes ? "default" : await askText("Tenant:", "--tenant", "default"));
  const repoRel = opts.repo ?? "./backups";
  const home = agentbakHome();
  let keysCreated = false;
  if (!existsSync(join(home, "age-recipient.txt"))) {
    keygen(home, agentId);
    keysCreated = true;
  }
  const recipient = readFileSync(join(home, "age-recipient.txt"), "utf8").trim();
  const raw = {
    $schema: "./agentbak.schema.json",
    agent: { id: agentId, tenant },
    repository: repoRel,
    recipients: [recipient],
    databases: (opts.database ?? []).map((spec) => {
      const [name, path] = spec.includes("=") ? spec.split(/=(.*)/s) : ["state", spec];
      return { name: name!, path: path! };
    }),
    ...(opts.workspace ? { workspace: { path: opts.workspace, uncommitted: "include" } } : {}),
  };
  const parsed = ConfigSchema.safeParse(raw);
  if (!parsed.success) throw usageError(`init: ${formatIssues(parsed.error.issues)}`);
  writeFileAtomic(join(dir, "agentbak.schema.json"), JSON.stringify(configJsonSchema(), null, 2) + "\n");
  writeFileAtomic(cfgPath, JSON.stringify(raw, null, 2) + "\n");
  const repository = resolve(dir, repoRel);
  new LocalRepository(repository).init();
  return { config: cfgPath, repository, home, keysCreated, recipient };
}
