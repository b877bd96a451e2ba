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
  /** the repository is in object storage (s3://...) */
  remote: boolean;
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
  return { lc, repoPath, trust, remote: repoPath.startsWith("s3://"), repo: () => openRepository(repoPath) };
}

/**
 * For a command that reads one snapshot: with a remote repository, downloads
 * it (and its chain) into a temp mirror and returns the local bundle path;
 * otherwise returns `ref` unchanged. Always call done().
 */
export async function localRef(ctx: Context, ref: string, agent?: string): Promise<{ ref: string; done(): void }> {
  if (!ctx.remote || ref.endsWith(".agentbak") || ref.includes("/") || ref === "random") return { ref, done: () => undefined };
  const { openStore } = await import("../repository/store.js");
  const { mirrorSnapshot } = await import("../repository/remote.js");
  const m = await mirrorSnapshot(await openStore(ctx.repoPath), ref, ctx.trust, agent);
  return { ref: m.path, done: m.cleanup };
}
