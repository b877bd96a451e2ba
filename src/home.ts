/**
 * Every path under AGENTBAK_HOME, named once (a base module: it imports
 * nothing of ours): the key files and trust files, the page-index key, this
 * host's trusted state, the caches, the spools and the agent interface's tokens.
 */
import { homedir } from "node:os";
import { join, resolve } from "node:path";

/** AGENTBAK_HOME, default ~/.config/agentbak. */
export const agentbakHome = (): string => resolve(process.env.AGENTBAK_HOME ?? join(homedir(), ".config", "agentbak"));

/** The file names of a key folder: AGENTBAK_HOME, or the folder `keygen --out` writes. */
export const KEY_FILES = {
  identity: "age-identity.txt",
  recipient: "age-recipient.txt",
  signingKey: "signing-key",
  signingPub: "signing-key.pub",
  allowedSigners: "allowed_signers",
  revokedSigners: "revoked_signers",
} as const;

/**
 * The paths of `home` (default AGENTBAK_HOME). A cache file whose name
 * carries a key takes the key (a digest its owner makes of what the entry
 * is for) and names the file around it.
 */
export function homePaths(home: string = agentbakHome()) {
  const cache = join(home, "cache");
  return {
    home,
    identity: join(home, KEY_FILES.identity),
    recipient: join(home, KEY_FILES.recipient),
    signingKey: join(home, KEY_FILES.signingKey),
    allowedSigners: join(home, KEY_FILES.allowedSigners),
    revokedSigners: join(home, KEY_FILES.revokedSigners),
    /** this host's key for page-index digests and block sums (state/pages/) */
    pageIndexKey: join(home, "page-index-key"),
    /** the KEY=value file scheduled jobs read their credentials from (schedule) */
    credentialsEnv: join(home, "agentbak.env"),
    /** what this host trusts about an agent (state/watermark.ts), per tenant */
    trustedState: (tenant: string, agent: string) => join(home, "state", tenant, `${agent}.json`),
    /** agentbak 0.1's trusted state: one file per agent id, whatever the tenant */
    trustedStateV1: (agent: string) => join(home, "state", `${agent}.json`),
    /** one spool per remote repository (repository/spool.ts) */
    spools: join(home, "spool"),
    spool: (key: string) => join(home, "spool", key),
    /** bearer tokens of the agent interface, one record each */
    tokens: join(home, "tokens"),
    token: (id: string) => join(home, "tokens", `${id}.json`),
    cache: {
      dir: cache,
      /** a repository's verified manifests, per repository and listing scope (repository/headercache.ts) */
      headers: (key: string) => join(cache, `headers-${key}.bin`),
      /** a repository's catalog records this host checked against the objects (repository/catalogcache.ts) */
      catalogs: (key: string) => join(cache, `catalogs-${key}.json`),
      /** the key of the header caches' (and the catalog cache's) HMAC */
      headersKey: join(cache, "headers.key"),
      /** payload digests verified by this host, by file identity (bundle/chain.ts) */
      checkedPayloads: join(cache, "checked-payloads.json"),
      /** one agent database's block sums (state/pages/blocks.ts) */
      blockSums: (key: string) => join(cache, `blocks-${key}`),
      /** the last backup of an agent to a repository, to tell an unchanged agent (capture/unchanged.ts) */
      lastBackup: (key: string) => join(cache, `last-backup-${key}.json`),
      /** the unchanged check's stat cache of an agent's `files`: identity and times → sha256 (capture/unchanged.ts) */
      statCache: (key: string) => join(cache, `stat-cache-${key}.json`),
      /** the last proven capture of a workspace (capture/backup.ts) */
      workspaceCapture: (key: string) => join(cache, `workspace-${key}.json`),
    },
  };
}
