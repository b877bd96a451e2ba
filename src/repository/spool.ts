/**
 * The local spool of a remote repository: an ordinary Repository on a
 * LocalStore in AGENTBAK_HOME/spool/<digest of the remote's location>, which
 * takes the backups while the remote can not be reached. Flushing is
 * replication into the remote (the same publish, each bundle verified before
 * it is sent and read back in full on arrival), after which the spooled copy
 * is removed. There is no second upload path.
 *
 * A spool also remembers, per agent, the highest sequence committed in the
 * remote and the receipts of idempotency keys the remote answered, so a
 * spooled snapshot continues the remote's sequence and a key first used while
 * the remote was reachable still returns its first receipt.
 */
import { createHash } from "node:crypto";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import type { SigningKey } from "../crypto/sshsig.js";
import type { Trust } from "../crypto/trust.js";
import { isUrl } from "../storage/open.js";
import { keys, SPOOL_RECORD } from "./layout.js";
import { replicate } from "./replicate.js";
import { Repository, type AgentRef } from "./repository.js";

export interface FlushResult {
  remote: string;
  spool: string;
  /** snapshots uploaded now */
  flushed: string[];
  /** snapshots the remote already held (an earlier flush that died before cleaning up) */
  already: string[];
}

/** Whether backups to `location` spool when it can not be reached: object storage, not a folder. */
export const spools = (location: string) => isUrl(location);

/** The spool folder for a remote repository. */
export const spoolDir = (home: string, remote: string) => join(home, "spool", createHash("sha256").update(remote).digest("hex").slice(0, 16));

/** Opens (creating on first use) the spool of `remote`. */
export async function openSpool(home: string, remote: string): Promise<Repository> {
  const dir = spoolDir(home, remote);
  if (existsSync(join(dir, SPOOL_RECORD))) return Repository.open(dir);
  const { repo } = await Repository.init(dir);
  await repo.writeJson(SPOOL_RECORD, { remote });
  return repo;
}

/** Every spool in AGENTBAK_HOME, with the remote it stands in for. */
export async function allSpools(home: string): Promise<{ remote: string; spool: Repository }[]> {
  let names: string[];
  try {
    names = readdirSync(join(home, "spool"));
  } catch {
    return [];
  }
  const out: { remote: string; spool: Repository }[] = [];
  for (const n of names.sort()) {
    const spool = await Repository.init(join(home, "spool", n)).then((r) => r.repo);
    const rec = await spool.readJson<{ remote: string }>(SPOOL_RECORD);
    if (rec?.remote) out.push({ remote: rec.remote, spool });
  }
  return out;
}

/**
 * Uploads the spooled snapshots (of one agent, or all) into `remote`, oldest
 * first, and removes each from the spool once it is committed there.
 * @throws what replication throws: UnreachableError while the remote is still down (what was
 *   flushed before stays flushed), AgentbakError(11) when an agent is locked longer than `waitMs`.
 */
export async function flushSpool(spool: Repository, remote: Repository, trust: Trust, o: { tenant?: string; agent?: string; signingKey: SigningKey | null; waitMs?: number }): Promise<FlushResult> {
  spool.refresh();
  const r = await replicate(spool, remote, trust, { ids: [], tenant: o.tenant, agent: o.agent, signingKey: o.signingKey, idempotency: true, waitMs: o.waitMs });
  const done = new Set([...r.copied, ...r.skipped]);
  for (const s of await spool.list(trust, { tenant: o.tenant, agent: o.agent })) {
    if (!done.has(s.snapshot_id)) continue;
    const a = { tenant: s.tenant!, agent: s.agent_id };
    const key = s.header?.manifest.idempotency_key;
    // the key now answers from the remote, with the remote's path
    const committed = key ? await remote.idempotent<{ snapshot_id: string; sequence: number }>(a, key, trust) : undefined;
    await noteCommitted(spool, a, committed ?? { snapshot_id: s.snapshot_id, sequence: s.sequence! }, committed ? key! : undefined);
    await spool.remove(s);
  }
  return { remote: remote.location, spool: spool.location, flushed: r.copied, already: r.skipped };
}

/** Records in the spool that `receipt` was committed in the remote: its sequence and, with a key, the receipt. */
export async function noteCommitted(spool: Repository, a: AgentRef, receipt: { snapshot_id: string; sequence: number }, idempotencyKey?: string): Promise<void> {
  const seen = (await spool.readJson<{ sequence: number }>(keys.sequence(a)))?.sequence ?? 0;
  if (receipt.sequence > seen) await spool.writeJson(keys.sequence(a), { sequence: receipt.sequence, snapshot_id: receipt.snapshot_id, committed_remotely: true });
  if (idempotencyKey) await spool.writeJson(keys.idempotency(a, "backup", idempotencyKey), receipt);
}

/** The receipt of an idempotency key that the remote committed (and the spool no longer holds), if any. */
export async function remoteReceipt<T extends { snapshot_id: string }>(spool: Repository, a: AgentRef, key: string): Promise<T | undefined> {
  const r = await spool.readJson<T>(keys.idempotency(a, "backup", key));
  return r && !(await spool.committed(a, r.snapshot_id)) ? r : undefined;
}
