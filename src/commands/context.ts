/**
 * What commands share, read once: the config (if any), trust, the repository
 * (flag, then AGENTBAK_REPOSITORY, then config), the agent a command is about,
 * keys on demand, and one way to turn a reference (ID, unique prefix, latest,
 * random, or a bundle file) into a local bundle file.
 */
import { existsSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import type { LinkSource } from "../bundle/chain.js";
import type { ChunkSource } from "../bundle/chunked.js";
import { ChunkStore } from "../chunks/store.js";
import { LocalStore } from "../storage/local.js";
import { loadNamed, type LoadedConfig } from "../config/load.js";
import type { AgeIdentity } from "../crypto/age.js";
import { loadIdentities, loadSigningKey } from "../crypto/keys.js";
import type { SigningKey } from "../crypto/sshsig.js";
import { loadTrust, type Trust } from "../crypto/trust.js";
import { notFound, usageError, wrap } from "../errors.js";
import { Repository, type ResolveFilter, type Snapshot } from "../repository/repository.js";
import { agentbakHome, homePaths } from "../home.js";
import { notAnId, type AgentRef } from "../facts.js";

export interface GlobalOpts {
  config?: string;
  repo?: string;
  json?: boolean;
}

/** A bundle ready to read: a local file, its chain's links, and the repository entry when it came from one. */
export interface BundleRef {
  path: string;
  links: LinkSource;
  /** where a format-5 bundle's chunked components are read from (a bundle file: the chunks folder beside its snapshots folder, if any) */
  chunks: ChunkSource | null;
  snapshot: Snapshot | null;
  release(): void;
}

export interface Context {
  lc: LoadedConfig | undefined;
  home: string;
  /** allowed signers and revoked keys; read again when either file changes */
  readonly trust: Trust;
  /** where the repository is, if any was named */
  repoLocation: string | undefined;
  /** The repositories opened, by location: this context's own, or those it shares with others (serve --host). */
  repositories: Map<string, Promise<Repository>>;
  /** The repository. @throws AgentbakError(2) when none is named, (10) when it does not exist. */
  repository(): Promise<Repository>;
  /** The repository when one is named, else undefined. */
  maybeRepository(): Promise<Repository | undefined>;
  /** The tenant and agent a command is about: flags, then the config. */
  agentFilter(flags: { agent?: string; tenant?: string }): { tenant?: string; agent?: string };
  /** The signing key (config `signing.key`, AGENTBAK_SIGNING_KEY_FILE, or AGENTBAK_HOME). @throws AgentbakError(12). */
  signingKey(): SigningKey;
  /** The signing key, or null when there is none. */
  maybeSigningKey(): SigningKey | null;
  identities(file?: string): AgeIdentity[];
  /** A reference to a snapshot in the repository. @throws AgentbakError(10) when nothing matches, (2) when ambiguous. */
  resolve(ref: string, f?: ResolveFilter): Promise<Snapshot>;
  /**
   * A reference as a local bundle file.
   * @throws AgentbakError(10) when nothing matches, (2) when ambiguous.
   */
  openRef(ref: string, f?: ResolveFilter): Promise<BundleRef>;
}

/**
 * Checks a --tenant and --agent a command was given: an id no agent can have is the caller's mistake, never an empty listing.
 * @throws AgentbakError(2) naming the flag, the value JSON-quoted (a control character or ESC shown escaped)
 */
export function checkIds(flags: { agent?: string; tenant?: string }): void {
  for (const [k, v] of [["--tenant", flags.tenant], ["--agent", flags.agent]] as const) {
    const why = v === undefined ? null : notAnId(k, v);
    if (why) throw usageError(why);
  }
}

/** A reference names a bundle file (rather than a snapshot in a repository). */
export const isFileRef = (ref: string) => ref.endsWith(".agentbak") || ref.includes("/");

/**
 * Loads config and trust, and prepares the rest lazily; `configless`: no config at all, not even ./agentbak.json or
 * AGENTBAK_CONFIG (a fleet drill's agents are not that config's); `repositories`: open repositories shared by
 * location among the contexts of one process (serve --host: one handle, one store client per repository, not per agent). @throws AgentbakError(2) for a bad config or allowed_signers.
 */
export function context(opts: GlobalOpts, o: { configless?: boolean; repositories?: Map<string, Promise<Repository>> } = {}): Context {
  const { lc, location: repoLocation } = loadNamed(opts, o.configless);
  const home = agentbakHome();
  const signers = lc?.config.signing.allowedSigners ? lc.resolve(lc.config.signing.allowedSigners) : undefined;
  const readTrust = () => {
    try {
      return loadTrust(home, signers);
    } catch (e) {
      throw wrap(e, "allowed_signers");
    }
  };
  // a long-running server sees a signer added or revoked without a restart
  const stamp = () => [signers ?? homePaths(home).allowedSigners, homePaths(home).revokedSigners].map((f) => statSync(f, { throwIfNoEntry: false })?.mtimeMs ?? "-").join("|");
  let trust = readTrust();
  let trustStamp = stamp();
  const repositories = o.repositories ?? new Map<string, Promise<Repository>>();
  const keyFile = lc?.config.signing.key ? lc.resolve(lc.config.signing.key) : undefined;
  let key: SigningKey | undefined;
  const ctx: Context = {
    lc,
    home,
    get trust() {
      const now = stamp();
      if (now !== trustStamp) [trust, trustStamp] = [readTrust(), now];
      return trust;
    },
    repoLocation,
    repositories,
    repository() {
      if (!repoLocation) throw usageError("no repository: pass --repo, set AGENTBAK_REPOSITORY, or use a config (-c)");
      // a failed open is not kept: a long-running server tries again once the repository is back
      return Repository.shared(repositories, repoLocation, { home });
    },
    async maybeRepository() {
      return repoLocation ? ctx.repository() : undefined;
    },
    agentFilter(flags) {
      checkIds(flags);
      return { tenant: flags.tenant ?? lc?.config.agent.tenant, agent: flags.agent ?? lc?.config.agent.id };
    },
    signingKey() {
      return (key ??= loadSigningKey(keyFile));
    },
    maybeSigningKey() {
      try {
        return ctx.signingKey();
      } catch {
        return null;
      }
    },
    identities: (file) => loadIdentities(file),
    async resolve(ref, f = {}) {
      if (isFileRef(ref)) throw usageError(`${ref} is a file; pass a snapshot id, a unique prefix of one, or latest`);
      return (await ctx.repository()).resolve(ref, ctx.trust, f);
    },
    async openRef(ref, f = {}) {
      if (isFileRef(ref)) {
        const path = resolve(ref);
        if (!existsSync(path)) throw notFound(`bundle file not found: ${path}`);
        // the links of a bundle file sit beside it, as in a copied snapshots folder
        const links: LinkSource = async (id) => {
          const p = join(dirname(path), `${id}.agentbak`);
          if (!existsSync(p)) throw notFound(`bundle ${p} not found`);
          return p;
        };
        // its chunks too: `<folder>/snapshots/<id>.agentbak` reads them from `<folder>/chunks/`, as in a folder repository
        const agentDir = join(dirname(path), "..");
        const chunks = existsSync(join(agentDir, "chunks")) ? new ChunkStore(new LocalStore(agentDir), "chunks") : null;
        return { path, links, chunks, snapshot: null, release: () => undefined };
      }
      const s = await ctx.resolve(ref, f);
      const opened = await (await ctx.repository()).open(s, ctx.trust);
      return { ...opened, snapshot: s };
    },
  };
  // every repository this process writes an audit or drill entry to rewrites the agent's status record (status --all reads it)
  // loaded when a record is written: its module graph (restore requests, the bundle reader, the source drivers) is
  // most of what a command loads, and listings and a nothing-changed backup never write one (test/e2e/startup.test.ts)
  Repository.statusWriter = async (r, a, signer) => (await import("../status/gather.js")).writeStatusRecord(r, ctx.trust, a, signer);
  return ctx;
}

/**
 * The one agent a command acts on: flags, then config; a tenant not given is
 * the only tenant the repository holds for that agent.
 * @throws AgentbakError(2) when it can not be told.
 */
export async function agentOf(ctx: Context, flags: { agent?: string; tenant?: string }): Promise<AgentRef> {
  const f = ctx.agentFilter(flags);
  if (!f.agent) throw usageError("which agent? pass --agent (and --tenant) or a config");
  if (f.tenant) return { tenant: f.tenant, agent: f.agent };
  const tenants = [...new Set((await (await ctx.repository()).list(ctx.trust, { agent: f.agent })).map((e) => e.tenant).filter((t): t is string => Boolean(t)))];
  if (tenants.length !== 1) throw usageError(`which tenant of agent ${f.agent}? pass --tenant${tenants.length ? ` (${tenants.join(", ")})` : ""}`);
  return { tenant: tenants[0]!, agent: f.agent };
}
