/**
 * The local spool of a remote repository: an ordinary Repository on a
 * LocalStore in AGENTBAK_HOME/spool/<digest of the remote's location>, which
 * takes the backups while the remote can not be reached. Flushing is
 * replication into the remote (the same publish, each bundle verified before
 * it is sent and read back in full on arrival), after which the spooled copy
 * is removed. There is no second upload path.
 *
 * A spooled bundle that does not verify (damaged on this host's disk) is set
 * aside at flush, never deleted: moved to the agent's quarantine folder in the
 * spool with the reason beside it, together with the snapshots built on it;
 * the others still upload. A set-aside bundle is named by every flush until
 * one has told the operator: its note gets `reported_at` once `flush` has
 * written its output (a flush killed before that leaves it unreported, and
 * the next flush names it). One flush of an agent runs at a time (the spool's
 * agent lock): a second waits, then finds what is left.
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
import { Repository, type Snapshot } from "./repository.js";
import { removeTree } from "../cleanup.js";
import { crashStep } from "../crashpoint.js";
import { pidAlive, processStart } from "../fsutil.js";
import { homePaths } from "../home.js";
import { hasCause, notFound, UnreachableError } from "../errors.js";
import { hostWatermark, raiseBackupWatermark } from "../state/watermark.js";
import { type AgentRef } from "../facts.js";

export interface FlushResult {
  remote: string;
  spool: string;
  /** snapshots uploaded now */
  flushed: string[];
  /** snapshots the remote already held (an earlier flush that died before cleaning up, or another flush) */
  already: string[];
  /** spooled snapshots that do not verify (or build on one that does not): set aside, not uploaded, not deleted */
  quarantined: { snapshot_id: string; problem: string; path: string; earlier?: true }[];
  /** uploaded (or already there), but their spooled copy could not be removed: each names the snapshot, why, and that it stays */
  warnings: string[];
}

/** A set-aside bundle's note (`quarantine/<id>.problem.json`). */
interface ProblemNote {
  snapshot_id: string;
  problem: string;
  quarantined_at: string;
  /** the process that set it aside: while it runs, its own output names the bundle */
  pid?: number;
  /** when that process started (processStart): a process given the same pid since is not it */
  pid_started?: string;
  /** when a flush's output named it: later flushes do not name it again */
  reported_at?: string;
}

const NOTE = /^tenants\/([^/]+)\/agents\/([^/]+)\/quarantine\/([^/]+)\.problem\.json$/;

/** Whether the process that wrote a note still runs: its pid alive and, when the note has it, started when it did. */
const running = (n: ProblemNote): boolean => {
  if (!n.pid || !pidAlive(n.pid)) return false;
  const started = processStart(n.pid);
  return n.pid_started === undefined || started === null || started === n.pid_started;
};

/**
 * The bundles an earlier run set aside whose notes no output has named yet (that run was killed before it
 * reported, or was a backup): what flush names again, as `earlier`.
 */
async function unreported(spool: Repository, o: { tenant?: string; agent?: string }): Promise<FlushResult["quarantined"]> {
  const out: FlushResult["quarantined"] = [];
  for (const k of (await spool.store.list("tenants/")).sort()) {
    const m = NOTE.exec(k);
    if (!m || (o.tenant && m[1] !== o.tenant) || (o.agent && m[2] !== o.agent)) continue;
    const n = await spool.readJson<ProblemNote>(k);
    if (!n || n.reported_at || running(n)) continue;
    const bundle = keys.quarantine({ tenant: m[1]!, agent: m[2]! }, m[3]!);
    const kept = await spool.store.head(bundle);
    out.push({ snapshot_id: n.snapshot_id ?? m[3], problem: n.problem ?? "(no reason recorded)", path: `${spool.location}/${kept ? bundle : k}`, earlier: true });
  }
  return out;
}

/** Marks in their notes that `f`'s set-aside bundles were named to the operator: later flushes do not repeat them. */
export async function markReported(f: FlushResult): Promise<void> {
  if (!f.quarantined.length) return;
  const spool = await Repository.open(f.spool);
  const at = new Date().toISOString();
  for (const q of f.quarantined) {
    const rel = q.path.slice(f.spool.length + 1).replace(/\.agentbak$/, ".problem.json");
    const n = await spool.readJson<ProblemNote>(rel);
    if (n && !n.reported_at) await spool.writeJson(rel, { ...n, reported_at: at });
  }
}

/** Whether backups to `location` spool when it can not be reached: object storage, not a folder. */
export const spools = (location: string) => isUrl(location);

/** The spool folder for a remote repository. */
export const spoolDir = (home: string, remote: string) => homePaths(home).spool(createHash("sha256").update(remote).digest("hex").slice(0, 16));

/** Opens (creating on first use) the spool of `remote`. */
export async function openSpool(home: string, remote: string): Promise<Repository> {
  const dir = spoolDir(home, remote);
  if (existsSync(join(dir, SPOOL_RECORD))) return Repository.open(dir);
  const { repo } = await Repository.init(dir);
  await repo.writeJson(SPOOL_RECORD, { remote });
  return repo;
}

/** The spool of the repository at `remote` when it is object storage (opened, made if new), else null: a folder never spools. */
export const spoolFor = async (home: string, remote: string): Promise<Repository | null> => (spools(remote) ? openSpool(home, remote) : null);

/** Every spool in AGENTBAK_HOME, with the remote it stands in for. */
export async function allSpools(home: string): Promise<{ remote: string; spool: Repository }[]> {
  let names: string[];
  try {
    names = readdirSync(homePaths(home).spools);
  } catch {
    return [];
  }
  const out: { remote: string; spool: Repository }[] = [];
  for (const n of names.sort()) {
    const spool = await Repository.init(homePaths(home).spool(n)).then((r) => r.repo);
    const rec = await spool.readJson<{ remote: string }>(SPOOL_RECORD);
    if (rec?.remote) out.push({ remote: rec.remote, spool });
  }
  return out;
}

/**
 * Uploads the spooled snapshots (of one agent, or all) into `remote`, oldest
 * first, and removes each from the spool once it is committed there; sets
 * aside those that do not verify. Each agent's spool is locked meanwhile.
 * @throws what replication throws: UnreachableError while the remote is still down (what was
 *   flushed before stays flushed), AgentbakError(11) when an agent is locked longer than `waitMs`.
 */
export async function flushSpool(spool: Repository, remote: Repository, trust: Trust, o: { tenant?: string; agent?: string; signingKey: SigningKey | null; waitMs?: number }): Promise<FlushResult> {
  spool.refresh();
  const res: FlushResult = { remote: remote.location, spool: spool.location, flushed: [], already: [], quarantined: [], warnings: [] };
  res.quarantined.push(...(await unreported(spool, o)));
  const waiting = await spool.list(trust, {});
  await bindRemote(spool, remote, waiting.length);
  const agents = new Map<string, AgentRef>();
  for (const s of waiting) if (s.tenant && (!o.tenant || s.tenant === o.tenant) && (!o.agent || s.agent_id === o.agent)) agents.set(`${s.tenant}/${s.agent_id}`, { tenant: s.tenant, agent: s.agent_id });
  // the copier (and the bundle reader it verifies with) loads only when a spool is flushed: a backup to a local
  // repository imports this module and never flushes
  const { replicate } = await import("./replicate.js");
  for (const a of agents.values()) {
    const lock = await spool.lock(a, "agent", o.waitMs ?? 60_000);
    try {
      spool.refresh(); // what another flush left, once it let go
      const setAside = async (s: Snapshot, problem: string) => void res.quarantined.push(await quarantine(spool, s, problem));
      const r = await replicate(spool, remote, trust, { ids: [], ...a, signingKey: o.signingKey, idempotency: true, waitMs: o.waitMs, setAside });
      res.flushed.push(...r.copied);
      res.already.push(...r.skipped);
      const done = new Set([...r.copied, ...r.skipped]);
      for (const s of await spool.list(trust, a)) {
        if (!done.has(s.snapshot_id)) continue;
        const key = s.header?.manifest.idempotency_key;
        // the key now answers from the remote, with the remote's path
        const committed = key ? await remote.idempotent<{ snapshot_id: string; sequence: number }>(a, key, trust) : undefined;
        await noteCommitted(spool, a, committed ?? { snapshot_id: s.snapshot_id, sequence: s.sequence! }, committed ? key! : undefined);
        // committed in the remote whatever happens here: a spooled copy that can not be removed is said, not a failure
        await spool.remove(s).catch((e: unknown) => {
          res.warnings.push(`spooled snapshot ${s.snapshot_id} is committed in ${remote.location}, but its spooled copy could not be removed (${(e as Error).message}): it stays in ${spool.location}, and the next flush finds it already there`);
        });
      }
    } finally {
      await lock.release();
    }
  }
  return res;
}

/**
 * Binds the spool to the repository it stands in for, by the id of its marker (`remote_id` in spool.json,
 * recorded the first time the remote answers): bundles spooled for one repository are never uploaded into
 * another that replaced it at the same location (a bucket emptied and initialised again). An empty spool
 * follows the new repository silently: nothing of the old one waits in it.
 * @throws AgentbakError(10) naming both ids, the spool and what to do, when snapshots wait for a replaced repository
 */
async function bindRemote(spool: Repository, remote: Repository, waiting: number): Promise<void> {
  const id = remote.repositoryId;
  if (!id) return; // a repository of agentbak 0.1: no id to bind to
  const rec = (await spool.readJson<{ remote: string; remote_id?: string }>(SPOOL_RECORD)) ?? { remote: remote.location };
  if (rec.remote_id === id) return;
  if (rec.remote_id !== undefined && waiting > 0)
    throw notFound(
      `repository ${remote.location} was replaced: ${waiting} spooled snapshot(s) in ${spool.location} were made for repository ${rec.remote_id}, and the one there now is ${id}; ` +
        `they are not uploaded into it and stay in the spool (to upload them there anyway, remove "remote_id" from ${spool.location}/${SPOOL_RECORD} and run agentbak flush)`,
    );
  await spool.writeJson(SPOOL_RECORD, { ...rec, remote_id: id });
}

/**
 * Moves a spooled snapshot that does not verify into the agent's quarantine
 * folder, bytes unchanged, with the reason beside it; its idempotency record
 * goes (a key whose snapshot the spool no longer holds reads as committed in
 * the remote). @returns what flush reports of it.
 */
async function quarantine(spool: Repository, s: Snapshot, problem: string): Promise<FlushResult["quarantined"][number]> {
  const a = { tenant: s.tenant!, agent: s.agent_id };
  const key = keys.quarantine(a, s.snapshot_id);
  const tmp = spool.store.tempDir("quarantine");
  // no bundle to keep (gone, or a FIFO or device in its place, which the store never reads): the note is what is set aside
  let kept = false;
  try {
    if (await spool.store.head(s.key)) {
      const file = join(tmp, `${s.snapshot_id}.agentbak`);
      await spool.store.download(s.key, file);
      await spool.store.upload(key, file);
      kept = true;
    }
  } finally {
    removeTree(tmp);
  }
  const note = keys.quarantineNote(a, s.snapshot_id);
  await spool.writeJson(note, { snapshot_id: s.snapshot_id, problem, quarantined_at: new Date().toISOString(), pid: process.pid, pid_started: processStart(process.pid) ?? undefined } satisfies ProblemNote);
  for (const k of await spool.store.list(keys.idempotencyRecords(a, "backup")))
    if ((await spool.readJson<{ snapshot_id?: string }>(k))?.snapshot_id === s.snapshot_id) await spool.store.delete(k);
  await spool.remove(s);
  crashStep("flush-set-aside");
  return { snapshot_id: s.snapshot_id, problem, path: `${spool.location}/${kept ? key : note}` };
}

/** Records in the spool that `receipt` was committed in the remote: its sequence and, with a key, the receipt. */
export async function noteCommitted(spool: Repository, a: AgentRef, receipt: { snapshot_id: string; sequence: number }, idempotencyKey?: string): Promise<void> {
  const seen = (await spool.readJson<{ sequence: number }>(keys.sequence(a)))?.sequence ?? 0;
  if (receipt.sequence > seen) await spool.writeJson(keys.sequence(a), { sequence: receipt.sequence, snapshot_id: receipt.snapshot_id, committed_remotely: true });
  if (idempotencyKey) await spool.writeJson(keys.idempotency(a, "backup", idempotencyKey), receipt);
}

/**
 * Where a backup of `a` to the repository at `location` goes, answered once before it (backupTarget): the spool when
 * the repository is object storage (else null: a folder never spools), the repository itself or why it can not be
 * reached, and the sequence floors.
 */
export interface BackupTarget {
  spool: Repository | null;
  /** the repository, opened (null: unreachable, `unreachable` says why; only ever with a spool) */
  remote: Repository | null;
  unreachable: Error | null;
  /** the next sequence is above this: the caller's floor and this host's watermark (what it has backed up or restored) */
  floor: number;
  /** and into the remote, above what waits in the spool (and the sequence last committed) as well */
  remoteFloor: number;
}

/**
 * Opens what a backup of `a` to `location` needs, before it: this host's watermark read as the sequence floor, the
 * spool (object storage only), then the repository from the process's open ones (`opened`, Repository.shared) unless
 * it was found unreachable moments ago (`down`: why), and the spool's last sequence.
 * @throws what opening them throws, except that an unreachable object store is answered (`unreachable`)
 */
export async function backupTarget(opened: Map<string, Promise<Repository>>, location: string, o: { home: string; fresh?: boolean; a: AgentRef; trust: Trust; floor?: number; down: Error | null }): Promise<BackupTarget> {
  // the next sequence is above what this host has backed up or restored, whatever the repository says
  const floor = Math.max(o.floor ?? 0, hostWatermark(o.home, o.a));
  const spool = await spoolFor(o.home, location);
  try {
    if (spool && o.down) throw o.down;
    const remote = await Repository.shared(opened, location, { home: o.home, fresh: o.fresh });
    // spooled snapshots (and the sequence last committed) come before this one
    const remoteFloor = spool ? Math.max(floor, (await spool.nextSequence(o.a, o.trust)) - 1) : floor;
    return { spool, remote, unreachable: null, floor, remoteFloor };
  } catch (e) {
    if (!spool || !hasCause(e, UnreachableError)) throw e;
    return { spool, remote: null, unreachable: e as Error, floor, remoteFloor: floor };
  }
}

/**
 * After a backup (`receipt`) into the target: when it committed to the remote (`reached`) and there is a spool, the
 * spool records it and uploads what waited in it (settleSpool); then this host's watermark rises to its sequence.
 * @returns the flush, the error that stopped it (the new snapshot is committed either way), or null when none ran
 * @throws what recording the commit in the spool or the watermark throws
 */
export async function settleBackup(t: BackupTarget, trust: Trust, a: AgentRef & { signingKey: SigningKey }, receipt: { snapshot_id: string; sequence: number }, o: { home: string; reached: boolean; idempotencyKey?: string }): Promise<FlushResult | Error | null> {
  const f = o.reached && t.spool && t.remote ? await settleSpool(t.spool, t.remote, trust, a, receipt, o.idempotencyKey) : null;
  raiseBackupWatermark(o.home, a, receipt.sequence);
  return f;
}

/**
 * After a backup committed to the remote: the spool records it (noteCommitted), then uploads what waited in it
 * (flushSpool).
 * @returns the flush, or the error that stopped it: the new snapshot is committed either way
 * @throws what recording the commit in the spool throws
 */
async function settleSpool(spool: Repository, remote: Repository, trust: Trust, a: AgentRef & { signingKey: SigningKey }, receipt: { snapshot_id: string; sequence: number }, idempotencyKey?: string): Promise<FlushResult | Error> {
  await noteCommitted(spool, a, receipt, idempotencyKey);
  return flushSpool(spool, remote, trust, { tenant: a.tenant, agent: a.agent, signingKey: a.signingKey, waitMs: 0 }).catch((e: unknown) => e as Error);
}

/** The receipt of an idempotency key that the remote committed (and the spool no longer holds), if any. */
export async function remoteReceipt<T extends { snapshot_id: string }>(spool: Repository, a: AgentRef, key: string): Promise<T | undefined> {
  const r = await spool.readJson<T>(keys.idempotency(a, "backup", key));
  return r && !(await spool.committed(a, r.snapshot_id)) ? r : undefined;
}
