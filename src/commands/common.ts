/**
 * What most commands need: the config (if any), the repository, and trust.
 */
import { loadConfigIfAny, repositoryPath, type LoadedConfig } from "../config/load.js";
import { agentbakHome } from "../crypto/keys.js";
import { loadTrust } from "../crypto/trust.js";
import type { Trust } from "../bundle/reader.js";
import { openRepository, type LocalRepository } from "../repository/local.js";
import { wrap } from "../errors.js";

export interface GlobalOpts {
  config?: string;
  repo?: string;
  json?: boolean;
}

export interface Context {
  lc: LoadedConfig | undefined;
  repoPath: string;
  trust: Trust;
}

/** Loads config, repository path and trust for a command. */
export function context(opts: GlobalOpts, needRepo = true): Context & { repo(): LocalRepository } {
  const lc = loadConfigIfAny(opts.config);
  const repoPath = needRepo ? repositoryPath(opts.repo, lc) : "";
  let trust: Trust;
  try {
    trust = loadTrust(agentbakHome(), lc?.config.signing.allowedSigners ? lc.resolve(lc.config.signing.allowedSigners) : undefined);
  } catch (e) {
    throw wrap(e, "allowed_signers");
  }
  return { lc, repoPath, trust, repo: () => openRepository(repoPath) };
}
