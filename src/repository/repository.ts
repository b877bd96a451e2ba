/**
 * A repository: agentbak's layout, locks, catalog, records and logs, written
 * once over the ObjectStore interface (restic's repository/backend split).
 * Nothing here knows whether the store is a folder or a bucket.
 *
 * A snapshot becomes visible when its commit marker is written, last, with a
 * conditional write: bundle, page indexes and records go first, so an
 * interrupted backup, copy or compact never shows up and `latest` never moves
 * to a half-written bundle.
 */
import { createHash, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { userInfo } from "node:os";
import { verifyLayout, type VerifiedBundle } from "../bundle/header.js";
import { readLayoutRanges } from "../bundle/outer.js";
import { chunkRefs, snapshotKind, type Component, type Manifest } from "../bundle/manifest.js";
import type { LinkSource } from "../bundle/chain.js";
import type { ChunkSource } from "../bundle/chunked.js";
import { ChunkStore, type LazyWriter, type SweepResult } from "../chunks/store.js";
import { holdsCheckpoint, lineSha256, nextLine, verifyChainText, type ChainCheckpoint, type ChainVerifyResult } from "../crypto/chainlog.js";
import { signRecord, verifyRecord, verifySigned } from "../crypto/signed.js";
import { NS, type SigningKey } from "../crypto/sshsig.js";
import type { Trust } from "../crypto/trust.js";
import { crashStep } from "../crashpoint.js";
import { doneBeforeInterrupt, interrupting, letInterruptsIn, onInterrupt, removeTree } from "../cleanup.js";
import { AgentbakError, Exit, notFound, usageError, verifyError } from "../errors.js";
import { mapLimit } from "../limit.js";
import { openStore } from "../storage/open.js";
import type { ObjectStore } from "../storage/store.js";
import { HeaderCache } from "./headercache.js";
import { bundleTags, CATALOG_KIND, committedObjects, fromRecord, judgeSigner, recordedObjects, summarize, type CatalogEntry, type CatalogRecord } from "./catalog.js";
import { CatalogCache, type CheckedRecord } from "./catalogcache.js";
import { acquireLease, hostId, probeConditionalWrites, type Lease } from "./lease.js";
import { readGenerations, reserveGeneration, type GenerationView, type Signing } from "./generation.js";
import { isAgentRef, keys, LAYOUT_VERSION, legacy, ownerOf, parseSnapshotKey, REPO_CONFIG, snapshotFolders, snapshotsDir } from "./layout.js";
import { ID_PATTERN, SNAPSHOT_ID, type AgentRef } from "../facts.js";
import { raiseCommittedIn, readCommittedIn } from "../state/watermark.js";

export type { CatalogEntry } from "./catalog.js";

/** A catalog entry and what the repository needs to read it. */
/** The listing's problem for a bundle whose signed manifest names another snapshot, agent or tenant than its place. */
export const MISPLACED = "manifest names another snapshot, agent or tenant than where it is stored";

export interface Snapshot extends CatalogEntry {
  /** the snapshots folder key and the bundle key */
  dir: string;
  key: string;
  header: VerifiedBundle | null;
}

/** A held lock: a lease with its fencing token (repository/lease.ts). */
export type Lock = Lease;

/** A bundle as a local file (in place when the store allows), with its chain's links; release() removes fetched copies. */
export interface OpenedBundle {
  path: string;
  links: LinkSource;
  /** the agent's chunk store, which a format-5 bundle's chunked components are read from (null: a layout-v1 snapshot) */
  chunks: ChunkSource | null;
  release(): void;
}

/** What `resolve` narrows to. */
export interface ResolveFilter {
  tenant?: string;
  agent?: string;
  /** created strictly before */
  before?: Date;
  /** created within this many milliseconds of now (random) */
  within?: number;
  /** `latest` may be older than the newest sequence this host committed here (restore --allow-rollback) */
  allowRollback?: boolean;
}

/** What verifying a log (the audit log, a drill report) in the repository found. */
export interface LogVerifyResult extends ChainVerifyResult {
  /** where the log is, for people */
  log: string;
  /** the signed head record the log reaches, or null when there is none */
  head: (ChainCheckpoint & { at: string }) | null;
  /** how many entries this host had verified before (0: never) */
  seen_before: number;
  warnings: string[];
}

/** A hash-chained log of an agent's, with its signed head record: where both are, the namespace, the head's kind. */
interface LogKind {
  name: string;
  key: (a: AgentRef) => string;
  head: (a: AgentRef) => string;
  ns: string;
  headKind: string;
  /** every entry names the tenant and agent (the audit log's do) */
  bound: boolean;
}

/** What a fleet's listing may do beyond reading: `fresh` checks every record against its agent's folder; `signer` writes the tenant's summary. */
export interface ListingOptions {
  fresh?: boolean;
  /** this host's signing key: a listing that read records itself writes the tenant's summary (none: it writes nothing) */
  signer?: SigningKey | null;
}
/** the kind of a tenant's catalog summary (keys.catalogSummary) */
const SUMMARY_KIND = "catalog-summary";

/**
 * A tenant's summary as stored: one line, its signed head (signRecord: the tenant, the time, and the SHA-256 of
 * what follows), then the records' JSON. The signature covers a digest of the records' bytes rather than their
 * canonical JSON: canonicalizing some 10 MB cost a reader (and the writer) about 0.5 s of CPU, hashing it 0.06 s.
 */
function sealSummary(tenant: string, records: [string, CheckedRecord][], signer: SigningKey): Buffer {
  const body = Buffer.from(JSON.stringify(records));
  const head = signRecord({ kind: SUMMARY_KIND, tenant, at: new Date().toISOString(), records_sha256: createHash("sha256").update(body).digest("hex") }, signer, NS.receipt);
  return Buffer.concat([Buffer.from(`${JSON.stringify(head)}\n`), body]);
}

/**
 * The records of a summary sealed by sealSummary, when its head verifies (signed by a key trusted now for
 * agentbak-receipt, of `tenant`) and the records are the bytes it names; null when there is none or they are not an array.
 * @throws AgentbakError(13) when the head does not verify or the records are not the ones it signed; SyntaxError when not JSON
 */
function openSummary(raw: Buffer | null, tenant: string, trust: Trust, key: string, now: Date): [string, CheckedRecord][] | null {
  if (!raw) return null;
  const nl = raw.indexOf(0x0a);
  if (nl < 0) throw verifyError(`${key}: not a summary this version reads`);
  const head = verifySigned(JSON.parse(raw.subarray(0, nl).toString("utf8")), trust, NS.receipt, SUMMARY_KIND, key, now).body;
  const body = raw.subarray(nl + 1);
  if (head.tenant !== tenant) return null;
  if (head.records_sha256 !== createHash("sha256").update(body).digest("hex")) throw verifyError(`${key}: its records were edited after it was signed`);
  const records = JSON.parse(body.toString("utf8")) as unknown;
  return Array.isArray(records) ? (records as [string, CheckedRecord][]) : null;
}
/**
 * Whether `n` records of `live` are worth a tenant's summary: missed by this host (read it), or read by this
 * listing itself (write it again): 32 of them, or a quarter of the tenant's.
 */
const worthSummary = (n: number, live: number) => n > 0 && (n >= 32 || n * 4 >= live);
/** the kind of an agent's status record (keys.statusRecord) */
export const STATUS_KIND = "agent-status";
/** audit events after which what status shows of an agent may differ: restore requests, decisions, restores, reconciles, activations */
const STATUS_EVENTS = /^(restore|reconcile|activate)/;

const LOGS = {
  audit: { name: "audit log", key: keys.audit, head: keys.auditHead, ns: NS.receipt, headKind: "audit-head", bound: true },
  report: { name: "drill report", key: keys.drillReport, head: keys.drillReportHead, ns: NS.report, headKind: "report-head", bound: false },
} satisfies Record<string, LogKind>;


export const catalogEntry = (e: Snapshot): CatalogEntry => {
  const { dir: _d, key: _k, header: _h, ...entry } = e;
  return entry;
};

/**
 * Narrows a listing: only entries labelled `label`, and only the `latest`
 * newest of each tenant and agent (restic's `snapshots --latest N`). Order kept.
 */
export function selectEntries<E extends CatalogEntry>(list: E[], f: { label?: string; latest?: number }): E[] {
  const labelled = f.label === undefined ? list : list.filter((e) => e.label === f.label);
  if (f.latest === undefined) return labelled;
  const groups = new Map<string, E[]>();
  for (const e of labelled) groups.set(`${e.tenant}/${e.agent_id}`, [...(groups.get(`${e.tenant}/${e.agent_id}`) ?? []), e]);
  const keep = new Set([...groups.values()].flatMap((g) => [...g].sort((x, y) => (x.snapshot_id < y.snapshot_id ? 1 : -1)).slice(0, f.latest)));
  return labelled.filter((e) => keep.has(e));
}

/**
 * Orders ids by UTF-16 code unit, the same in every locale. (localeCompare loaded ICU's collator on the first
 * call: 10-12 ms of a 200-snapshot listing.)
 */
export const ordinal = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/** The head of an agent's chain an incremental builds on (chainHead), why it can not be used, or null: none verifies. */
export type ChainHead = { snapshot: Snapshot; header: VerifiedBundle; links: number; indexes: Map<string, Buffer | null> } | { unusable: string } | null;

/** What a backup knows once it has begun (Repository.beginBackup). */
export interface BackupStart<T> {
  lock: Lock;
  /** the receipt the idempotency key recorded: nothing is to be written */
  prior: T | undefined;
  sequence: number;
  /** the agent's newest verified manifest */
  newest: Manifest | undefined;
  /** an incremental's chain head (null: none was asked for, or none verifies) */
  head: ChainHead;
  /** the agent's chunk writer, opened on first use (null: none asked for) */
  writer: LazyWriter | null;
  /** the latest snapshot's source entries a source whose fingerprint did not change reuses, by payload path */
  reusable: ReadonlyMap<string, Component>;
}

export class Repository {
  /** what list() read, by scope: "" for the whole repository, an agent's folder for a list of that agent */
  private catalogs = new Map<string, Promise<Snapshot[]>>();
  /**
   * Verified headers by bundle key, for a process that lists again and again
   * (the agent interface's server): a committed bundle is never rewritten, so
   * one whose identity (etag) and trust are unchanged is not verified twice.
   */
  private headers = new Map<string, { etag: string; trust: Trust; v: VerifiedBundle }>();
  /**
   * Reads an agent's status facts from its objects and writes its status record (the command context sets it, with
   * status/gather.ts's reader and its trust: this layer does not judge drill reports or requests); unset, an entry
   * that changes them leaves no record.
   */
  static statusWriter: ((repo: Repository, a: AgentRef, key: SigningKey) => Promise<void>) | null = null;
  /** catalog records this process deleted before changing their agents' snapshots, not written again since */
  private dropped = new Set<string>();
  /** the agent leases this process holds here, by lease folder: deletes and commits check them (fencing) */
  private held = new Map<string, Lease>();
  /** where the leases are: this store, or the one the marker names (`leases`) under this repository's id */
  private leaseHome: Promise<{ store: ObjectStore; root: string }> | null = null;

  private constructor(
    readonly store: ObjectStore,
    /** where verified headers are kept on disk (AGENTBAK_HOME), for the next process */
    private readonly home: string | undefined,
    /** the id its marker (REPO_CONFIG) had when opened; null for a repository of agentbak 0.1, which had none */
    private readonly id: string | null,
    /** the marker's `leases`: a store for leases when this one's conditional writes are not honoured */
    private readonly leasesAt: string | null = null,
  ) {}

  /** Where the repository is, for people and for records. */
  get location(): string {
    return this.store.url;
  }

  /** The id its marker had when opened (null: a repository of agentbak 0.1): another repository at the same location has another. */
  get repositoryId(): string | null {
    return this.id;
  }

  /**
   * Opens an existing repository.
   * @throws AgentbakError(10) when there is none at `location`.
   */
  static async open(location: string, opts: { home?: string } = {}): Promise<Repository> {
    const store = await openStore(location);
    const cfg = await store.get(REPO_CONFIG);
    // repositories in object storage made by agentbak 0.1 had no config object
    const v01 = cfg ? [] : await store.list("agents/").catch((e: unknown) => (e instanceof AgentbakError && e.code === Exit.notFound ? [] : Promise.reject(e)));
    if (!cfg && v01.length === 0) throw notFound(`repository not found: ${location} (no ${REPO_CONFIG}; run agentbak init)`);
    return new Repository(store, opts.home, cfg && repositoryId(cfg), cfg && leasesOf(cfg, location));
  }

  /**
   * The repository at `location` that `opened` holds (one handle, one store client per repository in a process),
   * opened now when it holds none; a failed open is not kept, so the next call tries again. `fresh`: checked to be
   * still there and the same one, and listed afresh (a long-running server: other processes write it too).
   * @throws AgentbakError(10) when there is none at `location` (or it is gone), and what the store throws
   */
  static async shared(opened: Map<string, Promise<Repository>>, location: string, o: { home: string; fresh?: boolean }): Promise<Repository> {
    const open =
      opened.get(location) ??
      Repository.open(location, { home: o.home }).catch((e: unknown) => {
        opened.delete(location);
        throw e;
      });
    opened.set(location, open);
    const repo = await open;
    if (o.fresh) {
      await repo.recheck();
      repo.refresh();
    }
    return repo;
  }

  /**
   * Creates the repository at `location` if it does not exist (idempotent).
   * @param opts.leases where to keep its leases (a store whose conditional writes are honoured: an
   *   unversioned bucket beside a versioned one); recorded in the marker, added to an existing one.
   * @returns whether it was created.
   * @throws AgentbakError(2) when `leases` does not honour conditional writes, or differs from the one recorded.
   */
  static async init(location: string, opts: { home?: string; leases?: string } = {}): Promise<{ repo: Repository; created: boolean }> {
    const store = await openStore(location, { create: true });
    if (opts.leases) await checkLeaseStore(opts.leases);
    const marker = { format: "agentbak-repository", version: LAYOUT_VERSION, id: randomBytes(16).toString("hex"), created_at: new Date().toISOString(), ...(opts.leases ? { leases: opts.leases } : {}) };
    const body = JSON.stringify(marker, null, 2) + "\n";
    // read first: a versioned bucket on Ceph RGW does not refuse the conditional create, and would take a new marker (a new id)
    let cfg = await store.get(REPO_CONFIG);
    const created = !cfg && (await store.put(REPO_CONFIG, body, { ifNoneMatch: true }));
    if (!cfg) cfg = created ? Buffer.from(body) : await store.get(REPO_CONFIG);
    const recorded = cfg && leasesOf(cfg, location);
    if (opts.leases && cfg && recorded !== opts.leases) {
      if (recorded) throw usageError(`repository ${location} keeps its leases in ${recorded}, not ${opts.leases}; moving them while processes hold leases would let two hold one`);
      cfg = Buffer.from(JSON.stringify({ ...JSON.parse(String(cfg)), leases: opts.leases }, null, 2) + "\n");
      await store.put(REPO_CONFIG, cfg);
    }
    return { repo: new Repository(store, opts.home, cfg && repositoryId(cfg), cfg && leasesOf(cfg, location)), created };
  }

  /**
   * Checks that the repository is still where it was opened, and is the same
   * one (its marker's id): a long-running process (the agent interface's
   * server) calls it before every operation, and publish before it writes and
   * again before it commits, so a repository renamed, deleted, unmounted or
   * replaced meanwhile is "not found", never begun again, listed as empty or
   * reported committed.
   * @throws AgentbakError(10) when it is gone or another one; UnreachableError when the store does not answer.
   */
  async recheck(): Promise<void> {
    const cfg = await this.store.get(REPO_CONFIG);
    if (!cfg) {
      if (this.id === null && (await this.store.list("agents/")).length > 0) return;
      throw notFound(`repository not found: ${this.location} (its ${REPO_CONFIG} is gone since this process opened it: moved, deleted or unmounted?)`);
    }
    const now = repositoryId(cfg);
    if (this.id !== null && now !== this.id)
      throw notFound(`repository at ${this.location} is not the repository this process opened (id ${this.id}, now ${now}): it was replaced; restart to use the new one`);
  }

  /**
   * What a write that failed with `e` reports: the repository's own "not found" (10) when it went away meanwhile
   * (renamed, deleted or unmounted under the run failed it at whatever step came next), else `e`.
   */
  async goneOr(e: unknown): Promise<unknown> {
    return this.recheck().then(
      () => e,
      (gone: unknown) => (gone instanceof AgentbakError && gone.code === Exit.notFound ? gone : e),
    );
  }

  /**
   * Checks that `a`'s records are still here when this host committed snapshots of it into this very repository
   * (by its id, as this host's trusted state in AGENTBAK_HOME records): an agent's folder moved or deleted out of
   * the repository is "not found", never listed as empty nor begun again in a new folder. An agent this host never
   * committed here (a new repository, a copy's, another host's) is not affected; forget keeps the sequence record.
   * @throws AgentbakError(10) naming the sequence this host committed, and what to do
   */
  private async kept(a: AgentRef): Promise<void> {
    if (!this.home || !this.id) return; // no trusted state to ask, or a repository of agentbak 0.1 (no id)
    const seen = readCommittedIn(this.home, a, this.id);
    if (!seen || (await this.store.get(keys.sequence(a)))) return;
    // the state file is named from AGENTBAK_HOME, not by its path: an agent of the server reads this message too
    throw notFound(
      `the snapshots of ${a.tenant}/${a.agent} are gone from repository ${this.location}: this host committed sequence ${seen} there, and its sequence record (${keys.sequence(a)}) is missing (its folder moved or deleted?); ` +
        `put the folder back, or back up into a new repository (agentbak init), or, to begin the agent again here, remove "${this.id}" from committed_in in AGENTBAK_HOME/state/${a.tenant}/${a.agent}.json`,
    );
  }

  /**
   * Whether the newest snapshot that verifies of `a` here is older than what this host committed into this very
   * repository (its trusted state's committed_in): the newer ones deleted, hidden by a delete marker, or damaged.
   * Retention never removes an agent's newest snapshot, so the repository alone can not explain it.
   * @param newest the highest sequence among `a`'s snapshots here that verify (0: none)
   * @returns what is missing, as a clause for a message; null when nothing is
   */
  newestMissing(a: AgentRef, newest: number): string | null {
    const seen = this.home && this.id ? readCommittedIn(this.home, a, this.id) : 0;
    if (seen <= newest) return null;
    return `but this host committed sequence ${seen} there: the newer snapshots are gone or do not verify (deleted, hidden by a delete marker, or damaged?)`;
  }

  // ---- small records ----

  async readJson<T>(key: string): Promise<T | undefined> {
    const b = await this.store.get(key);
    if (!b) return undefined;
    try {
      return JSON.parse(String(b)) as T;
    } catch {
      throw verifyError(`repository record ${key} in ${this.location} is not JSON`);
    }
  }

  async writeJson(key: string, value: unknown, opts: { ifNoneMatch?: boolean } = {}): Promise<boolean> {
    return this.store.put(key, JSON.stringify(value, null, 2) + "\n", opts);
  }

  // ---- locks ----

  /**
   * Takes an agent's lock: a lease with a fencing token (repository/lease.ts),
   * renewed while held. A lease whose holder on this host is gone, or that
   * expired (AGENTBAK_LEASE_SECONDS without renewal), is taken over.
   * Deletes and commits of `a` in this repository check the agent lease first.
   * @throws AgentbakError(10) when this host committed `a` here and its records are gone (kept); (11) naming the holder when held and `waitMs` runs out;
   *   (2) when the store holding the leases does not honour conditional writes.
   */
  async lock(a: AgentRef, name: "agent" | "restore" | "log" | "generation", waitMs = 0): Promise<Lock> {
    await this.kept(a); // a lease's folder is made under the agent's: never where its records went missing
    return this.leaseOn(keys.lease(a, name), `${name} lock of ${a.tenant}/${a.agent} in ${this.location}`, waitMs);
  }

  /**
   * Begins a backup of `a`, answering at once what the later stages would otherwise ask piecemeal: takes its agent
   * lock (lock), removes what runs that died left behind (sweep), and reads the receipt `idempotencyKey` already
   * recorded (idempotent), else the sequence the new snapshot takes (nextSequence: under the lock, nothing else of `a`
   * is published meanwhile), the agent's newest verified manifest (of the listing nextSequence read: it sizes the room
   * kept for the new one's), for an incremental (`incremental`: its databases) the head of the chain to build on with
   * its page indexes (chainHead), and with `chunks` the agent's chunk writer, opened on first use, and the newest
   * snapshot's source entries a source whose fingerprint did not change may reuse (reusableSources). A failure after
   * the lock releases it.
   * @returns the lock, and the receipt recorded for the key (then nothing is to be written, `sequence` is 0 and
   *   nothing else is read)
   * @throws what lock, sweep, idempotent, nextSequence and chainHead throw (goneOr: "not found" when the repository
   *   went away meanwhile)
   */
  async beginBackup<T extends { snapshot_id: string }>(
    a: AgentRef,
    o: {
      waitMs: number;
      idempotencyKey?: string;
      trust: Trust;
      sequenceFloor?: number;
      /** AGENTBAK_HOME: the chain's checked payload digests, the chunk writer's index */
      home: string;
      /** an incremental is asked for: the databases whose page indexes its parent's chain head is read with */
      incremental: string[] | null;
      /** large files are stored as chunks (encrypted to `recipients`); `sources`: the agent has state sources */
      chunks: { recipients: string[]; sources: boolean } | null;
    },
  ): Promise<BackupStart<T>> {
    const lock = await this.lock(a, "agent", o.waitMs);
    try {
      crashStep("locked");
      await this.sweep(a);
      const prior = o.idempotencyKey ? await this.idempotent<T>(a, o.idempotencyKey, o.trust) : undefined;
      if (prior) return { lock, prior, sequence: 0, newest: undefined, head: null, writer: null, reusable: new Map() };
      const sequence = await this.nextSequence(a, o.trust, o.sequenceFloor);
      const newest = (await this.list(o.trust, a)).filter((e) => e.header).at(-1)?.header?.manifest;
      const head = o.incremental ? await this.chainHead(a, o.trust, o.home, o.incremental) : null;
      const writer = o.chunks ? this.chunkWriter(a, { home: o.home, recipients: o.chunks.recipients, trust: o.trust }) : null;
      const reusable = writer && o.chunks?.sources ? await this.reusableSources(a, o.trust, writer) : new Map<string, Component>();
      return { lock, prior, sequence, newest, head, writer, reusable };
    } catch (e) {
      await lock.release().catch(() => undefined);
      throw await this.goneOr(e);
    }
  }

  /**
   * The chunked source entries of `a`'s latest verified snapshot that a source may reuse when its fingerprint did not
   * change: fingerprinted, and every chunk still known to this host's chunk writer (which forgets what a sweep
   * removed), so a reused entry never names a chunk that is gone. None when no snapshot verifies.
   */
  private async reusableSources(a: AgentRef, trust: Trust, writer: LazyWriter): Promise<Map<string, Component>> {
    let m: Manifest | null = null;
    try {
      m = (await this.resolve("latest", trust, a)).header?.manifest ?? null;
    } catch (e) {
      if (!(e instanceof AgentbakError)) throw e; // none yet, or none that verifies: every source is captured
    }
    const out = new Map<string, Component>();
    for (const c of m?.components ?? []) if (c.fingerprint && c.chunks && (await writer.holds(chunkRefs(c)!))) out.set(c.path, c);
    return out;
  }

  /** Takes the lease whose grants live in `folder` (see lock). */
  private async leaseOn(folder: string, what: string, waitMs: number): Promise<Lock> {
    const home = await (this.leaseHome ??= this.leasesAt
      ? openStore(this.leasesAt, { create: true }).then((store) => ({ store, root: `repositories/${this.id}/` }))
      : Promise.resolve({ store: this.store, root: "" }));
    const lease = await acquireLease(home.store, home.root + folder, { waitMs, what });
    const unregister = onInterrupt(() => lease.release()); // waited for by main before it exits
    this.held.set(folder, lease);
    return {
      get token() {
        return lease.token;
      },
      check: () => lease.check(),
      release: async () => {
        unregister();
        if (this.held.get(folder) === lease) this.held.delete(folder);
        await lease.release();
      },
    };
  }

  /**
   * The fence before a delete or a commit of `a`'s snapshots: the agent lease
   * this process holds must still be its own.
   * @throws AgentbakError(11) when it was taken over; (130) once an interrupt is being handled; (1) when this process holds none (a bug).
   */
  private async fence(a: AgentRef, what: string): Promise<void> {
    const lease = this.held.get(keys.lease(a, "agent"));
    if (!lease) throw new AgentbakError(Exit.failure, `internal error: ${what} of ${a.tenant}/${a.agent} in ${this.location} without holding its agent lock`);
    await lease.check();
    // an interrupt while the lease was checked, or before (a folder's deletes never yield to the signal's
    // handler on their own): its release may be under way, and nothing is committed or deleted after it
    await letInterruptsIn();
    if (interrupting()) throw new AgentbakError(Exit.interrupted, "interrupted");
  }

  // ---- catalog ----

  /**
   * Every committed snapshot (filtered), oldest first, with its verified
   * header or the reason it did not verify.
   */
  async list(trust: Trust, f: { tenant?: string; agent?: string } = {}, now = new Date()): Promise<Snapshot[]> {
    // one agent of one tenant: only its own folders are read (its v2 folder, and the v1 folder of that agent id),
    // so a backup or listing costs what that agent holds, not what the whole repository holds
    const ref = f.tenant && f.agent ? { tenant: f.tenant, agent: f.agent } : null;
    if (ref && !isAgentRef(ref)) return []; // no folder can hold it
    const scope = ref ? snapshotFolders(ref) : null;
    const k = scope?.join("|") ?? "";
    let all = this.catalogs.get(k);
    if (!all) this.catalogs.set(k, (all = (ref ? this.kept(ref) : Promise.resolve()).then(() => this.readCatalog(trust, now, scope))));
    return (await all).filter((e) => (!f.agent || e.agent_id === f.agent) && (!f.tenant || e.tenant === f.tenant || (e.tenant === null && !f.agent)));
  }

  /** Forgets what list() read, after this process changed the repository. */
  private invalidate(): void {
    this.catalogs.clear();
  }

  /** Lists afresh next time: for a long-running process, whose repository others write too. */
  refresh(): void {
    this.invalidate();
  }

  /**
   * What a listing prints (filtered), oldest first per agent: one agent's from its objects (list); every agent's
   * (or a tenant's) from the catalog records (catalog.ts). One LIST of each tenant's catalog folder names every
   * record with its identity: a record this host checked before and unchanged since is used as it is (its signer
   * and expiries judged now); a new or changed one is read, verified and checked against a LIST of its agent's
   * snapshots folder; an agent with none, or whose record does not agree, is listed from its objects. `fresh`:
   * every record is checked against its agent's folder again (a LIST and a GET per agent, 64 at once).
   */
  async entries(trust: Trust, f: { tenant?: string; agent?: string } = {}, now = new Date(), o: ListingOptions = {}): Promise<CatalogEntry[]> {
    return (await this.listing(trust, f, now, o)).entries;
  }

  /**
   * entries(), and with `status` each listed agent's status record (keys.statusRecord) from the same LIST: the
   * signed body of one this host checked before and unchanged since, else read and verified (a GET); an agent
   * with none, or one that is not JSON, unsigned, edited, another agent's or signed by a key not trusted now,
   * is missing from `status` (the caller reads that agent's facts from its objects). None with `fresh`.
   */
  async listing(trust: Trust, f: { tenant?: string; agent?: string } = {}, now = new Date(), o: ListingOptions & { status?: boolean } = {}): Promise<{ entries: CatalogEntry[]; status: Map<string, Record<string, unknown>> }> {
    const status = new Map<string, Record<string, unknown>>();
    // the LISTs at once, not one after the other (each is a round trip to a bucket): layout v1's folder, the tenants, then each tenant's agents and records
    const [v1, named] = f.agent ? [[], []] : await Promise.all([this.store.folders("agents/"), f.tenant ? [f.tenant] : this.store.folders("tenants/")]);
    if (f.agent || v1.length) return { entries: (await this.list(trust, f, now)).map(catalogEntry), status }; // layout v1 folders: listed whole
    const tenants = named.filter((t) => ID_PATTERN.test(t));
    const agents: AgentRef[] = [];
    const tags = new Map<string, string>();
    const listed = await mapLimit(tenants, 16, (tenant) => Promise.all([this.store.folders(`tenants/${tenant}/agents/`), this.store.tagged(keys.catalogs(tenant))]));
    tenants.forEach((tenant, i) => {
      const [folders, tagged] = listed[i]!;
      for (const [k, t] of tagged) tags.set(k, t.tag);
      for (const agent of folders) if (isAgentRef({ tenant, agent })) agents.push({ tenant, agent });
    });
    const cache = new CatalogCache(this.home, this.store.url);
    // a host that has not checked most of a tenant's records takes them from its summary, where their ETags still match
    const used = (k: string) => k.endsWith(".json") || (Boolean(o.status) && k.endsWith(".status")); // the records this listing reads
    if (!o.fresh) for (const t of tenants) await this.readSummary(t, trust, now, cache, tags, used);
    const out = await mapLimit(agents, 64, (a) => this.agentEntries(a, trust, now, cache, tags.get(keys.catalog(a)) ?? null, Boolean(o.fresh)));
    if (o.status && !o.fresh)
      await mapLimit(agents, 64, async (a) => {
        const body = await this.statusRecord(a, trust, now, cache, tags.get(keys.statusRecord(a)) ?? null);
        if (body) status.set(`${a.tenant}/${a.agent}`, body);
      });
    cache.save(new Set(tags.keys()), (k) => tenants.some((t) => k.startsWith(keys.catalogs(t))));
    // each tenant's by what this listing read of that tenant's: one whose records were all taken as checked is not written again
    if (o.signer) for (const t of tenants) await this.writeSummary(t, cache, tags, o.signer, cache.readUnder(keys.catalogs(t)));
    return { entries: out.flat(), status };
  }

  /**
   * Takes into `cache` the records of `tenant`'s summary (keys.catalogSummary) whose ETags the LIST (`tags`) still
   * gives, when this host misses enough of those this listing reads (`used`; worthSummary) and the summary verifies (signed by a key trusted now
   * for agentbak-receipt). What it binds: per record its key, ETag, signed body and its signer's key, as the host
   * that wrote it had checked each against its agent's snapshots folder (or took it from a summary in turn).
   */
  private async readSummary(tenant: string, trust: Trust, now: Date, cache: CatalogCache, tags: Map<string, string>, used: (key: string) => boolean): Promise<void> {
    const key = keys.catalogSummary(tenant);
    const prefix = keys.catalogs(tenant);
    let [missing, live] = [0, 0];
    for (const [k, tag] of tags) if (k.startsWith(prefix) && used(k)) [missing, live] = [missing + Number(!cache.get(k, tag)), live + 1];
    if (!tags.has(key) || !worthSummary(missing, live)) return;
    try {
      const records = openSummary(await this.store.get(key), tenant, trust, key, now);
      if (!records) return;
      for (const [k, e] of records.filter((r) => Array.isArray(r))) if (typeof k === "string" && k !== key && k.startsWith(prefix) && e && tags.get(k) === e.tag && !cache.get(k, e.tag)) cache.set(k, e, false);
    } catch (e) {
      if (!(e instanceof AgentbakError) && !(e instanceof SyntaxError)) throw e; // a summary that does not verify is not used
    }
  }

  /**
   * Writes `tenant`'s summary: every record of its catalog folder this host holds checked at the ETag the LIST gave,
   * signed with this host's key; when this listing read `read` of the tenant's records itself (none: nothing new to
   * say), and enough of them (worthSummary) or there was no summary. Any listing host may write it and none waits for
   * another: a reader uses an entry only while its record's ETag is unchanged, so an older summary written last costs
   * readers requests, never a wrong listing.
   */
  private async writeSummary(tenant: string, cache: CatalogCache, tags: Map<string, string>, signer: SigningKey, read: number): Promise<void> {
    const key = keys.catalogSummary(tenant);
    const records = cache.checked(keys.catalogs(tenant), tags).filter(([k]) => k !== key);
    if (!read || !records.length || (tags.has(key) && !worthSummary(read, records.length))) return;
    try {
      await this.store.put(key, sealSummary(tenant, records, signer));
    } catch (e) {
      if (!(e instanceof AgentbakError)) throw e; // a summary not written only costs the next new host time
    }
  }

  /** `a`'s status record, verified: as this host checked it when unchanged since (`tag`), else read (null: none, or not to be used). */
  private async statusRecord(a: AgentRef, trust: Trust, now: Date, cache: CatalogCache, tag: string | null): Promise<Record<string, unknown> | null> {
    if (!tag) return null;
    const key = keys.statusRecord(a);
    const hit = cache.get(key, tag);
    // an older record than one this host read (put back by whoever can write the repository) would hide what came since
    if (hit) return judgeSigner(trust, hit.signer, NS.receipt, now).trusted && !cache.older(key, (hit.record as { at?: unknown }).at) ? (hit.record as unknown as Record<string, unknown>) : null;
    try {
      const v = verifySigned(JSON.parse(String(await this.store.get(key))), trust, NS.receipt, STATUS_KIND, key, now);
      if (v.body.tenant !== a.tenant || v.body.agent_id !== a.agent) throw verifyError(`${key}: another agent's status record`);
      if (cache.older(key, v.body.at)) throw verifyError(`${key}: older than the status record this host read before`);
      cache.set(key, { tag, record: v.body as unknown as CatalogRecord, signer: v.signer.toString("base64") });
      return v.body;
    } catch (e) {
      if (!(e instanceof AgentbakError) && !(e instanceof SyntaxError)) throw e;
      cache.drop(key);
      return null;
    }
  }

  /**
   * Writes `a`'s status record: `facts` as the caller (status/gather.ts) read them from the objects, signed.
   * Called by appendChained's statusWriter under the agent's log lock.
   */
  async writeStatusRecord(a: AgentRef, facts: Record<string, unknown>, key: SigningKey): Promise<void> {
    await this.writeJson(keys.statusRecord(a), signRecord({ kind: STATUS_KIND, tenant: a.tenant, agent_id: a.agent, at: new Date().toISOString(), ...facts }, key, NS.receipt));
  }

  /**
   * One agent's listing: from its record as this host checked it, when the record is unchanged since (`tag`);
   * else from its record (or, with none, the one earlier builds kept in its folder) when that agrees with a LIST
   * of its snapshots folder; else from its objects.
   * @param fresh the record is checked against the folder whatever this host checked before (--fresh)
   */
  private async agentEntries(a: AgentRef, trust: Trust, now: Date, cache: CatalogCache, tag: string | null, fresh: boolean): Promise<CatalogEntry[]> {
    const dir = snapshotsDir(a);
    const key = keys.catalog(a);
    const path = (id: string) => `${this.location}/${keys.bundle(dir, id)}`;
    const hit = tag && !fresh ? cache.get(key, tag) : null;
    if (hit && judgeSigner(trust, hit.signer, NS.receipt, now).trusted) {
      const listed = fromRecord(hit.record, a, recordedObjects(hit.record), trust, now, path);
      if (listed) return listed;
    }
    const [tagged, raw] = await Promise.all([this.store.tagged(`${dir}/`), this.store.get(tag ? key : keys.oldCatalog(a))]);
    const objects = committedObjects([...tagged.keys()], dir);
    let rec: CatalogRecord | null = null;
    let signer = "";
    try {
      const v = raw && verifySigned(JSON.parse(String(raw)), trust, NS.receipt, CATALOG_KIND, tag ? key : keys.oldCatalog(a), now);
      if (v) [rec, signer] = [v.body as unknown as CatalogRecord, v.signer.toString("base64")];
    } catch {
      /* unparsable, unsigned, edited or signed by a key not trusted now: listed from the objects */
    }
    const fromRec = rec && fromRecord(rec, a, objects, trust, now, path, bundleTags(tagged, dir));
    if (fromRec && tag) cache.set(key, { tag, record: rec!, signer });
    else cache.drop(key);
    return fromRec ?? (await this.list(trust, a, now)).map(catalogEntry);
  }

  /**
   * Rewrites `a`'s catalog record from its objects, signed (no key: none is written). The caller holds
   * the agent lease. A record that could not be written only costs the next listing time.
   */
  async writeCatalog(a: AgentRef, trust: Trust, key: SigningKey | null): Promise<void> {
    this.dropped.delete(keys.catalog(a)); // whether or not this write lands, the next change deletes the record first
    if (!key) return;
    const dir = snapshotsDir(a);
    try {
      const tagged = await this.store.tagged(`${dir}/`);
      const objects = committedObjects([...tagged.keys()], dir);
      await this.writeJson(keys.catalog(a), signRecord(summarize(a, await this.list(trust, a), objects, new Date(), bundleTags(tagged, dir)), key, NS.receipt));
      await this.store.delete(keys.oldCatalog(a)); // where earlier builds kept it
    } catch (e) {
      if (!(e instanceof AgentbakError)) throw e;
    }
  }

  /**
   * Deletes `a`'s catalog record before a commit or a removal of its snapshots changes them (the caller holds the
   * agent lease): one that dies before writeCatalog leaves no record, and a listing reads that agent from its objects.
   * @throws AgentbakError when the delete fails: the change must not happen under a record that no longer agrees.
   */
  async dropCatalog(a: AgentRef): Promise<void> {
    if (this.dropped.has(keys.catalog(a))) return;
    await this.store.delete(keys.catalog(a));
    this.dropped.add(keys.catalog(a));
  }

  private async readCatalog(trust: Trust, now: Date, scope: string[] | null): Promise<Snapshot[]> {
    const found = new Map<string, { dir: string; id: string; bundle: boolean; commit: boolean }>();
    const listed: string[] = [];
    for (const prefix of scope ? scope.map((d) => `${d}/`) : ["tenants/", "agents/"]) listed.push(...(await this.store.list(prefix)));
    const headerCache = new HeaderCache(this.home, this.store.url, scope?.join("|") ?? "");
    for (const p of listed.map((k) => parseSnapshotKey(k))) {
      if (!p || (p.ext !== "agentbak" && p.ext !== "commit")) continue;
      const k = `${p.dir}/${p.id}`;
      const e = found.get(k) ?? { dir: p.dir, id: p.id, bundle: false, commit: false };
      if (p.ext === "agentbak") e.bundle = true;
      else e.commit = true;
      found.set(k, e);
    }
    // layout v1 folders published bundles with link(2): in a store that writes objects whole, a bundle there is committed
    const committed = [...found.values()].filter((e) => e.commit || (e.bundle && this.store.inPlace && e.dir.startsWith("agents/")));
    const out: Snapshot[] = [];
    for (const c of committed) out.push(await this.describeSnapshot(c.dir, c.id, c.bundle, trust, now, headerCache));
    headerCache.save(new Set(out.map((e) => e.key)));
    // a missing parent breaks a chain; a damaged one is found when the chain is verified
    const present = new Set(committed.filter((c) => c.bundle).map((c) => `${c.dir}/${c.id}`));
    for (const e of out) {
      const parent = e.header?.manifest.parent?.snapshot_id;
      // a parent may sit in the v1 folder of the same agent
      if (parent && !present.has(`${e.dir}/${parent}`) && !present.has(`${legacy.dir(e.agent_id)}/${parent}`))
        Object.assign(e, { status: "invalid", problem: `chain broken: parent snapshot ${parent} is missing`, problem_code: Exit.verify });
    }
    brokenLinks(out);
    return out.sort((x, y) => ordinal(x.tenant ?? "", y.tenant ?? "") || ordinal(x.agent_id, y.agent_id) || ordinal(x.snapshot_id, y.snapshot_id));
  }

  private async describeSnapshot(dir: string, id: string, hasBundle: boolean, trust: Trust, now: Date, headerCache: HeaderCache): Promise<Snapshot> {
    const owner = ownerOf(dir);
    const key = keys.bundle(dir, id);
    const base = { dir, key, agent_id: owner.agent, snapshot_id: id, path: this.store.inPlace ? `${this.location}/${key}` : `${this.location}/${key}` };
    const unread = { tenant: owner.tenant, kind: null, parent: null, sequence: null, created_at: null, expires_at: null, label: null, signer: null, schema_version: null, header: null };
    const bad = (e: AgentbakError, size = 0): Snapshot => ({ ...base, ...unread, size, status: "invalid", problem: e.message, problem_code: e.code });
    const h = hasBundle ? await this.store.head(key) : null;
    if (!h) return bad(notFound(`${key}: committed but the bundle object is missing`));
    const known = this.headers.get(key);
    let v: VerifiedBundle;
    try {
      if (known?.etag === h.etag && known.trust === trust) v = known.v;
      else {
        // the same bytes read and verified in an earlier run: trust is checked again, the reads and the signature are not
        const cached = headerCache.get(key, h.etag, base.path);
        v = verifyLayout(cached ?? (await readLayoutRanges(base.path, h.size, (s, e) => this.store.getRange(key, s, e))), trust, now);
        if (!cached) headerCache.set(key, h.etag, v.layout, v.layout.signedBy!);
      }
      this.headers.set(key, { etag: h.etag, trust, v });
    } catch (e) {
      if (!(e instanceof AgentbakError)) throw e;
      return bad(e, h.size);
    }
    const m = v.manifest;
    const mismatch = m.agent_id !== owner.agent || m.snapshot_id !== id || (owner.tenant !== null && m.tenant !== owner.tenant);
    const expired = new Date(m.expires_at) <= now;
    return {
      ...base,
      tenant: m.tenant,
      kind: snapshotKind(m),
      parent: m.parent?.snapshot_id ?? null,
      sequence: m.sequence,
      created_at: m.created_at,
      expires_at: m.expires_at,
      label: m.label,
      size: h.size,
      status: mismatch ? "invalid" : expired ? "expired" : "ok",
      problem: mismatch ? MISPLACED : expired ? `expired at ${m.expires_at}` : null,
      problem_code: mismatch ? Exit.verify : expired ? Exit.policy : null,
      signer: v.signer.principal,
      schema_version: m.schema_version,
      header: mismatch ? null : v,
    };
  }

  /**
   * Resolves a reference to one snapshot: `latest` (the verified, unexpired
   * snapshot with the highest sequence), `random` (one created within
   * `within`), a snapshot id, or a unique prefix of one.
   * @throws AgentbakError(10) when nothing matches, (2) when a prefix or `latest` is ambiguous, (13/14) when the match does not verify.
   */
  async resolve(ref: string, trust: Trust, f: ResolveFilter = {}): Promise<Snapshot> {
    const all = await this.list(trust, f);
    const where = `${f.tenant ? `tenant ${f.tenant}, ` : ""}${f.agent ? `agent ${f.agent}, ` : ""}${this.location}`;
    const timely = (e: Snapshot) => !f.before || (e.created_at !== null && new Date(e.created_at) < f.before);
    const cond = f.before ? ` created before ${f.before.toISOString()}` : "";
    if (ref === "latest" || ref === "random") {
      const ok = all.filter((e) => e.status === "ok" && timely(e) && (ref === "latest" || Date.now() - new Date(e.created_at!).getTime() <= (f.within ?? Infinity)));
      const agents = new Set(ok.map((e) => `${e.tenant}/${e.agent_id}`));
      if (agents.size > 1) throw usageError(`"${ref}" is ambiguous: ${where} holds ${[...agents].join(", ")}; pass --agent and --tenant or a config`);
      if (!ok.length) {
        const bad = all.filter((e) => e.status !== "ok").at(-1);
        if (bad && !all.some((e) => e.status === "ok")) throw new AgentbakError(bad.problem_code === Exit.policy ? Exit.policy : Exit.verify, `no restorable snapshot; newest ${bad.snapshot_id}: ${bad.problem}`);
        throw notFound(`no verified snapshot${cond}${ref === "random" && f.within !== undefined ? ` within ${Math.round(f.within / 3_600_000)}h` : ""} in ${where}`);
      }
      if (ref === "latest") {
        const newest = ok.sort((x, y) => x.sequence! - y.sequence!).at(-1)!;
        const gone = f.tenant && f.agent && !f.before && !f.allowRollback ? this.newestMissing({ tenant: f.tenant, agent: f.agent }, newest.sequence!) : null;
        if (gone) throw new AgentbakError(Exit.policy, `rollback: latest of ${f.tenant}/${f.agent} in ${this.location} is sequence ${newest.sequence}, ${gone}; name the snapshot by its id, or restore with --allow-rollback, to use it`);
        return newest;
      }
      return ok[Math.floor(Math.random() * ok.length)]!;
    }
    if (!/^[0-9TZ-]+[0-9a-f-]*$/.test(ref)) throw usageError(`not a snapshot reference: ${JSON.stringify(ref.slice(0, 80))} (an id, a unique prefix of one, latest, or a bundle file)`);
    const hits = all.filter((e) => e.snapshot_id.startsWith(ref));
    if (hits.length > 1 && !hits.some((e) => e.snapshot_id === ref))
      throw usageError(`snapshot prefix ${ref} is ambiguous in ${where}: ${hits.slice(0, 5).map((e) => e.snapshot_id).join(", ")}${hits.length > 5 ? ", ..." : ""}`);
    const hit = hits.find((e) => e.snapshot_id === ref) ?? hits[0];
    if (!hit) throw notFound(`snapshot ${ref} not found in ${where}`);
    if (!timely(hit)) throw notFound(`snapshot ${hit.snapshot_id} was created at ${hit.created_at}, not before ${f.before!.toISOString()}`);
    return hit;
  }

  /**
   * The head of `a`'s chain, for an incremental to build on: the latest verified snapshot, and how many links its
   * chain holds, every link verified (each link's payload digest read once on this host, by file identity: a large
   * full snapshot is not read again at every incremental built on it). The newest snapshot is the chain's head: one
   * that does not verify (itself, or a link below it) is not skipped for an older one; then `unusable` says why.
   * With it, the head's stored page index of each database of `dbs` its manifest signs one for (pageIndex: null when
   * missing or malformed), for the caller to judge against that digest.
   * @returns the head, why it is unusable, or null when no snapshot verifies
   */
  async chainHead(a: AgentRef, trust: Trust, home: string, dbs: string[]): Promise<ChainHead> {
    const newest = (await this.list(trust, a)).at(-1);
    if (newest?.status === "invalid") return { unusable: `chain of ${newest.snapshot_id} is not usable (${newest.problem})` };
    let latest: Snapshot;
    try {
      latest = await this.resolve("latest", trust, a);
    } catch (e) {
      if (e instanceof AgentbakError) return null;
      throw e;
    }
    const opened = await this.open(latest, trust);
    try {
      // the whole reader (tar, age, the worker threads) loads only when a chain is read
      const chain = await (await import("../bundle/chain.js")).verifyChainRemembered(opened.path, opened.links, trust, home);
      const m = chain.head.manifest;
      const indexes = new Map<string, Buffer | null>();
      // only a database's component carries a page index digest; before format 4 an index is of no use to build on
      for (const db of m.format_version >= 4 ? dbs : []) if (m.components.some((c) => c.name === db && c.page_index_sha256)) indexes.set(db, await this.pageIndex(latest, db));
      return { snapshot: latest, header: chain.head, links: chain.links.length, indexes };
    } catch (e) {
      if (!(e instanceof AgentbakError)) throw e;
      return { unusable: `chain of ${latest.snapshot_id} is not usable (${e.message})` };
    } finally {
      opened.release();
    }
  }

  /**
   * A snapshot's bundle as a local file: in place for a folder, downloaded
   * into a private temp folder otherwise; its chain's links come the same way.
   * @throws AgentbakError(10) when the bundle is missing.
   */
  async open(s: Snapshot, trust: Trust): Promise<OpenedBundle> {
    let tmp: string | null = null;
    const temp = () => (tmp ??= this.store.tempDir("fetch"));
    const fetchKey = (key: string) => this.store.localPath(key, this.store.inPlace ? "" : temp());
    const cleanup = () => tmp && removeTree(tmp);
    const unregister = onInterrupt(cleanup);
    const release = () => (cleanup(), unregister());
    try {
      const path = await fetchKey(s.key);
      const links: LinkSource = async (id) => {
        if (!SNAPSHOT_ID.test(id)) throw notFound(`snapshot ${id} not found`);
        // the links sit in the snapshot's own folders: the same listing as the snapshot's (read once per process)
        const inList = (await this.list(trust, s.tenant ? { tenant: s.tenant, agent: s.agent_id } : { agent: s.agent_id })).find((e) => e.snapshot_id === id && (e.dir === s.dir || e.dir === legacy.dir(s.agent_id)));
        if (!inList) throw notFound(`snapshot ${id} not found in ${this.location}`);
        if (!inList.header) throw new AgentbakError(inList.problem_code === Exit.notFound ? Exit.notFound : Exit.verify, inList.problem ?? "does not verify");
        return fetchKey(inList.key);
      };
      return { path, links, chunks: s.tenant ? this.chunks({ tenant: s.tenant, agent: s.agent_id }) : null, release };
    } catch (e) {
      release();
      throw e;
    }
  }

  /** The agent's chunk store (docs/chunk-store.md). @throws AgentbakError(2) for an id outside the pattern */
  chunks(a: AgentRef): ChunkStore {
    return new ChunkStore(this.store, keys.chunks(a));
  }

  /**
   * A backup's chunk writer for `a`, opened on first use (an agent without large state never opens one): a chunk
   * already in the store is adopted only with a digest one of `a`'s verified manifests signs (listed once, when the
   * first such chunk is met).
   */
  chunkWriter(a: AgentRef, o: { home: string; recipients: string[]; trust: Trust }): LazyWriter {
    let signed: Promise<Map<string, Set<string>>> | null = null;
    const signedChunks = async () => {
      const out = new Map<string, Set<string>>();
      for (const s of await this.list(o.trust, a))
        for (const c of s.header?.manifest.components ?? []) for (const [id, sha256] of c.chunks ?? []) (out.get(id) ?? out.set(id, new Set()).get(id)!).add(sha256);
      return out;
    };
    return this.chunks(a).lazyWriter({ home: o.home, location: this.location, scope: a, recipients: o.recipients, signed: () => (signed ??= signedChunks()) });
  }

  /**
   * Mark and sweep of `a`'s chunks under its agent lease (the caller holds it): every chunk no committed snapshot of
   * `a` lists, older than `graceMs`, is deleted, the lease checked before each delete. When a snapshot does not
   * verify its chunk list can not be trusted, so nothing is swept (and that is said).
   * @returns what was swept, or why nothing was
   * @throws AgentbakError(11) when the lease was lost (nothing more is deleted); the store's errors
   */
  async sweepChunks(a: AgentRef, trust: Trust, o: { graceMs?: number } = {}): Promise<SweepResult | { skipped: string }> {
    this.invalidate();
    const entries = await this.list(trust, a);
    const bad = entries.find((e) => !e.header);
    if (bad) return { skipped: `snapshot ${bad.snapshot_id} does not verify (${bad.problem}); the chunks it may list are left for an operator` };
    const referenced = new Set(entries.flatMap((e) => e.header!.manifest.components.flatMap((c) => c.chunks?.map((x) => x[0]) ?? [])));
    const lease = this.held.get(keys.lease(a, "agent"));
    if (!lease) throw new AgentbakError(Exit.failure, `internal error: sweeping the chunks of ${a.tenant}/${a.agent} in ${this.location} without holding its agent lock`);
    const store = this.chunks(a);
    // an agent that never stored a chunk gets no sweep record (nor a chunks folder)
    if (!(await store.listIds()).size) return { listed: 0, referenced: 0, deleted: 0, deletedBytes: 0, young: 0, retained: 0 };
    crashStep("chunks-marked");
    // the fence (the lease still this process's, and no interrupt being handled) before each delete: a SIGTERM
    // during the sweep ends it there, never a chunk deleted while the lease's release is under way or after it
    return store.sweep(referenced, { token: String(lease.token), assertHeld: () => this.fence(a, "sweeping chunks") }, o);
  }

  /**
   * A snapshot's whole page index for `db` (encodeIndex), or null when it or
   * an index it builds on is missing or malformed. An incremental's is stored
   * as the changes since its parent's, rebuilt here from the chain's.
   */
  async pageIndex(s: Pick<Snapshot, "dir" | "snapshot_id">, db: string): Promise<Buffer | null> {
    const changes: Buffer[] = [];
    const seen = new Set<string>();
    // the page engine loads when an index is read (a backup's parent, verify), never for a listing
    const { applyIndexChain, indexParent } = await import("../state/pages/index.js");
    try {
      // a chain is at most fullEvery links long; a loop of parent ids ends the walk
      for (let id = s.snapshot_id; !seen.has(id) && changes.length <= 10_000; ) {
        seen.add(id);
        const b = await this.store.get(keys.pageIndex(s.dir, id, db));
        if (!b) return null;
        const parent = indexParent(b);
        if (parent === null) return changes.length ? applyIndexChain(b, changes.reverse()) : b;
        // the id names an object in this folder: nothing else is read (what is rebuilt is checked against the signed digest)
        if (!SNAPSHOT_ID.test(parent)) return null;
        changes.push(b);
        id = parent;
      }
    } catch {
      /* malformed: as if missing */
    }
    return null;
  }

  // ---- writing snapshots ----

  /** The sequence the last publish of `a` recorded (0 when none). */
  async recordedSequence(a: AgentRef): Promise<number> {
    return (await this.readJson<{ sequence: number }>(keys.sequence(a)))?.sequence ?? 0;
  }

  /** The next checkpoint sequence for `a`: above every sequence recorded here and `floor` (this host's watermark). */
  async nextSequence(a: AgentRef, trust: Trust, floor = 0): Promise<number> {
    const rec = await this.recordedSequence(a);
    const v1 = (await this.readJson<{ sequence: number }>(legacy.sequence(a.agent)))?.sequence ?? 0;
    const listed = Math.max(0, ...(await this.list(trust, a)).map((e) => e.sequence ?? 0));
    return Math.max(rec, v1, listed, floor) + 1;
  }

  /**
   * Publishes a finished bundle: sequence record, idempotency record and page
   * indexes, then the bundle (a link in a folder; never half-visible), then the
   * bundle is read back through the reader, then the commit marker, last,
   * makes it visible. The caller holds the agent lock. `file` may be consumed.
   * @returns the new snapshot's catalog entry.
   */
  async publish(
    a: AgentRef,
    p: {
      snapshotId: string;
      file: string;
      sequence: number;
      indexes: [string, Buffer][];
      /** the receipt a repeated idempotency key answers with; the bundle's path is added here */
      idempotency?: { key: string; receipt: Record<string, unknown> };
      retainUntil?: Date;
      lockMode?: "GOVERNANCE" | "COMPLIANCE";
      trust: Trust;
      /** read the whole bundle back (payload digest), not just its signed header */
      verifyFully?: boolean;
      audit: Record<string, unknown>;
      signingKey: SigningKey | null;
      /**
       * the snapshot is complete and visible once the commit marker is written: from then on an interrupt exits 130
       * saying `note` (cleanup.ts), and `path` is filled in with where the bundle is (a caller must not report it lost
       * or take it again, whatever fails after it)
       */
      committed?: { note: string; path?: string };
      /**
       * the payload's digest, hashed by this host as it wrote the bundle, and this host's AGENTBAK_HOME: in a folder
       * repository (which links the very file) it is remembered there, so chainHead's verification of an incremental
       * built on this snapshot need not read the payload again
       */
      checkedPayload?: { sha256: string; home: string };
    },
  ): Promise<Snapshot> {
    // a Ctrl-C that came while the bundle was written (on a local disk, work that may never yield) ends the run
    // here, before anything of the snapshot is in the repository
    await letInterruptsIn();
    await this.recheck();
    const dir = snapshotsDir(a);
    const key = keys.bundle(dir, p.snapshotId);
    const path = `${this.location}/${key}`;
    const seq = await this.recordedSequence(a);
    if (p.sequence > seq) await this.writeJson(keys.sequence(a), { sequence: p.sequence, snapshot_id: p.snapshotId });
    if (p.idempotency) await this.writeJson(keys.idempotency(a, "backup", p.idempotency.key), { ...p.idempotency.receipt, path });
    for (const [db, ix] of p.indexes) await this.store.put(keys.pageIndex(dir, p.snapshotId, db), ix);
    crashStep("sequence-reserved");
    await this.fence(a, "publishing");
    await this.store.delete(key); // an uncommitted leftover of a dead run (the caller holds the lock)
    await this.store.upload(key, p.file, { retainUntil: p.retainUntil, lockMode: p.lockMode });
    crashStep("uploaded");
    // read back what landed before anyone can see it
    const tmp = this.store.tempDir("arrival");
    try {
      const local = p.verifyFully ? await this.store.localPath(key, tmp) : null;
      // the whole reader (tar, age, the worker threads) loads only when the bundle is read whole
      const v = local ? await (await import("../bundle/reader.js")).verifyBundle(local, p.trust) : verifyLayout(await readLayoutRanges(path, (await this.store.head(key))?.size ?? 0, (s, e) => this.store.getRange(key, s, e)), p.trust);
      if (v.manifest.snapshot_id !== p.snapshotId || v.manifest.agent_id !== a.agent || v.manifest.tenant !== a.tenant) throw verifyError(`${key}: the bundle that arrived names another snapshot`);
    } catch (e) {
      await this.store.delete(key);
      throw e instanceof AgentbakError ? new AgentbakError(e.code, `${key} failed verification on arrival: ${e.message}`) : e;
    } finally {
      removeTree(tmp);
    }
    await letInterruptsIn(); // a Ctrl-C that came during the upload ends the run here, with nothing committed
    await this.recheck(); // the repository renamed or unmounted during the upload: the snapshot is not reported committed
    await this.dropCatalog(a); // a run that dies between the commit and the record leaves none, never a stale one
    await this.fence(a, "committing"); // a lock lost meanwhile: another process may have removed this snapshot's parent
    if (!(await this.store.put(keys.commit(dir, p.snapshotId), JSON.stringify({ snapshot_id: p.snapshotId, committed_at: new Date().toISOString() }), { ifNoneMatch: true })))
      throw new AgentbakError(Exit.failure, `snapshot ${p.snapshotId} is already committed in ${this.location}; refusing to overwrite`);
    if (p.committed) {
      doneBeforeInterrupt(p.committed.note);
      p.committed.path = path;
    }
    crashStep("published");
    if (this.home && this.id) raiseCommittedIn(this.home, a, this.id, p.sequence);
    this.invalidate();
    await this.audit(a, { event: "backup", snapshot_id: p.snapshotId, sequence: p.sequence, ...p.audit }, p.signingKey);
    crashStep("recorded");
    const s = (await this.list(p.trust, a)).find((e) => e.snapshot_id === p.snapshotId);
    if (!s) throw new AgentbakError(Exit.failure, `snapshot ${p.snapshotId} was committed but is not listed`);
    await this.writeCatalog(a, p.trust, p.signingKey);
    if (p.checkedPayload && this.store.inPlace && existsSync(s.path)) {
      const checked = (await import("../bundle/chain.js")).checkedPayloads(p.checkedPayload.home);
      checked.add(s.path, p.checkedPayload.sha256);
      checked.save();
    }
    return s;
  }

  /** Whether snapshot `id` of `a`, published with `sequence`, is still the last one published here, and committed. */
  async stillNewest(a: AgentRef, sequence: number, id: string): Promise<boolean> {
    return (await this.recordedSequence(a)) === sequence && (await this.committed(a, id));
  }

  /** Whether snapshot `id` of `a` is committed here. */
  async committed(a: AgentRef, id: string): Promise<boolean> {
    return Boolean(await this.store.head(keys.commit(snapshotsDir(a), id)));
  }

  /**
   * The receipt an idempotency key recorded, if its snapshot was committed.
   * The record itself is not signed; the snapshot it names must be one whose
   * signed manifest carries this key, so an edited record can not answer a
   * backup with another snapshot.
   * @throws AgentbakError(13) naming the record when its snapshot's manifest carries another key (or none verifies).
   */
  async idempotent<T extends { snapshot_id: string }>(a: AgentRef, key: string, trust: Trust): Promise<T | undefined> {
    const file = keys.idempotency(a, "backup", key);
    const prior = await this.readJson<T>(file);
    if (!prior) return undefined;
    // a record whose snapshot never committed was written by a run that died before publishing
    if (typeof prior.snapshot_id !== "string" || !SNAPSHOT_ID.test(prior.snapshot_id) || !(await this.store.head(keys.commit(snapshotsDir(a), prior.snapshot_id)))) return undefined;
    const s = (await this.list(trust, a)).find((e) => e.snapshot_id === prior.snapshot_id && e.dir === snapshotsDir(a));
    if (s?.header?.manifest.idempotency_key !== key)
      throw verifyError(`idempotency record ${file} in ${this.location} names snapshot ${prior.snapshot_id}, whose signed manifest ${s?.header ? "carries another idempotency key" : "does not verify"} (edited)`);
    return prior;
  }

  /**
   * Removes what runs that died left behind for `a`: staging folders, bundles
   * and page indexes never committed (the caller holds the agent lock, so no
   * live writer owns them). @returns the keys removed.
   */
  async sweep(a: AgentRef): Promise<string[]> {
    const removed: string[] = [];
    await this.fence(a, "sweeping");
    const n = await this.store.sweep(3_600_000);
    if (n) removed.push(`${n} temp file(s), folder(s) or incomplete upload(s)`);
    for (const dir of snapshotFolders(a)) {
      const listed = (await this.store.list(`${dir}/`)).map((k) => ({ k, p: parseSnapshotKey(k) })).filter((x) => x.p?.dir === dir);
      const committed = new Set(listed.filter((x) => x.p!.ext === "commit").map((x) => x.p!.id));
      const v1Committed = dir === legacy.dir(a.agent) && this.store.inPlace;
      for (const { k, p } of listed) {
        if (committed.has(p!.id) || p!.ext === "commit" || v1Committed) continue;
        await this.fence(a, "sweeping");
        if (await this.store.delete(k)) removed.push(k);
      }
    }
    if (removed.length) this.invalidate();
    return removed;
  }

  /**
   * Removes a snapshot: the bundle first (when retention refuses, it stays
   * listed), then its page indexes, then its commit marker.
   * @returns false when the store's retention refused the deletion.
   */
  async remove(s: Snapshot): Promise<boolean> {
    // one check per snapshot: its three deletes follow at once
    await this.fence({ tenant: s.tenant!, agent: s.agent_id }, "removing a snapshot");
    if (s.tenant && isAgentRef({ tenant: s.tenant, agent: s.agent_id })) await this.dropCatalog({ tenant: s.tenant, agent: s.agent_id });
    if (!(await this.store.delete(s.key))) return false;
    for (const k of await this.store.list(`${s.dir}/${s.snapshot_id}.`)) if (k.endsWith(".pageindex")) await this.store.delete(k);
    await this.store.delete(keys.commit(s.dir, s.snapshot_id));
    this.invalidate();
    return true;
  }

  // ---- restore records ----

  /**
   * The fencing generation of `a` (0 when never restored): the highest entry of its generation log and record,
   * here and in the replicas copy linked it with; entries are checked against `trust` (generation.ts).
   * @throws AgentbakError(13) when this repository's record or log is damaged.
   */
  async generation(a: AgentRef, trust: Trust): Promise<number> {
    return (await this.generations(a, trust)).highest;
  }

  /** The generation of `a` with where it was read, the linked replicas that could not be, and warnings. @throws as generation(). */
  async generations(a: AgentRef, trust: Trust): Promise<GenerationView> {
    return readGenerations(this, a, (l) => Repository.open(l), trust);
  }

  /**
   * Reserves the next generation of `a` above `atLeast` and every linked entry and record, and writes its log
   * entry (signed with `sign.key` when there is one) and record into each (a crash after this only burns a
   * number). The caller holds the restore lock. @throws as reserveGeneration.
   */
  async reserveGeneration(a: AgentRef, atLeast: number, info: Record<string, unknown>, sign: Signing): Promise<{ generation: number; unreachable: GenerationView["unreachable"] }> {
    return reserveGeneration(this, a, atLeast, info, (l) => Repository.open(l), sign);
  }

  async restoreRecord<T>(a: AgentRef, requestId: string): Promise<T | undefined> {
    return this.readJson<T>(keys.idempotency(a, "restore", requestId));
  }

  async writeRestoreRecord(a: AgentRef, requestId: string, value: unknown): Promise<void> {
    await this.writeJson(keys.idempotency(a, "restore", requestId), value);
  }

  // ---- logs ----

  /**
   * Appends an entry to `a`'s audit log (hash-chained; signed when a key is
   * given, and then its signed head record moves to it). Never pass state contents.
   */
  async audit(a: AgentRef, entry: Record<string, unknown>, key: SigningKey | null): Promise<void> {
    const who = { host: hostId(), user: safeUser() };
    await this.appendChained(a, LOGS.audit, { at: new Date().toISOString(), ...who, tenant: a.tenant, agent_id: a.agent, ...entry }, key);
  }

  /** Appends a signed drill report entry for `a` (its signed head record moves to it). @returns the entry and where the report is. */
  async appendDrillReport(a: AgentRef, body: Record<string, unknown>, key: SigningKey): Promise<{ entry: Record<string, unknown>; location: string }> {
    const entry = await this.appendChained(a, LOGS.report, body, key);
    return { entry, location: `${this.location}/${keys.drillReport(a)}` };
  }

  /** The text of `a`'s drill report ("" when there is none). */
  async drillReport(a: AgentRef): Promise<string> {
    return String((await this.store.get(keys.drillReport(a))) ?? "");
  }

  /** The text of `a`'s audit log ("" when there is none); verify it with verifyChainText before trusting an entry. */
  async auditLog(a: AgentRef): Promise<string> {
    return String((await this.store.get(keys.audit(a))) ?? "");
  }

  /** Every drill report entry that may concern `a`: its report, then layout v1's report shared by all agents. */
  async drillHistory(a: AgentRef): Promise<string> {
    return (await this.drillReport(a)) + String((await this.store.get(legacy.drillReport)) ?? "");
  }

  /**
   * Verifies `a`'s audit log: every entry chained, of this agent and signed by
   * a trusted key (an unsigned one is not accepted as genuine); then that it
   * still reaches its signed head record, and `seen` (how far this host saw it
   * reach before, from its trusted state). Entries cut off the end are found
   * by either; a cut together with an older genuine head is found only by a
   * host that saw further.
   * @returns the chain's extent, and warnings (no head record: a cut is not detectable from the repository alone).
   * @throws AgentbakError(10) when `a` has no audit log here, (13) naming the first bad entry, or the head or
   *   checkpoint the log no longer reaches.
   */
  async verifyAudit(a: AgentRef, trust: Trust, seen: ChainCheckpoint | null): Promise<LogVerifyResult> {
    return this.verifyLog(a, LOGS.audit, trust, seen);
  }

  /** Verifies `a`'s drill report in this repository as verifyAudit does its audit log, `seen` too. @throws as verifyAudit. */
  async verifyDrillReport(a: AgentRef, trust: Trust, seen: ChainCheckpoint | null): Promise<LogVerifyResult> {
    return this.verifyLog(a, LOGS.report, trust, seen);
  }

  private async verifyLog(a: AgentRef, log: LogKind, trust: Trust, seen: ChainCheckpoint | null): Promise<LogVerifyResult> {
    const [file, headFile] = [log.key(a), log.head(a)];
    const raw = await this.store.get(file);
    const headRaw = await this.readJson<unknown>(headFile);
    if (!raw && headRaw === undefined && !seen?.entries) throw notFound(`no ${log.name} for ${a.tenant}/${a.agent} in ${this.location}`);
    const text = String(raw ?? "");
    const chain = verifyChainText(text, trust, log.ns, `${file} in ${this.location}: entry`, { expect: log.bound ? { tenant: a.tenant, agent_id: a.agent } : {} });
    const cut = (cp: ChainCheckpoint, by: string) =>
      verifyError(
        `${file} in ${this.location} was cut short or replaced: ${by} names ${cp.entries} entries ending in a line of sha256 ${cp.head_sha256.slice(0, 16)}..., the log ${chain.entries < cp.entries ? `holds only ${chain.entries}` : "does not hold that line"}`,
      );
    const warnings: string[] = [];
    let head: LogVerifyResult["head"] = null;
    if (headRaw === undefined) {
      // an emptied log warns too: no entry was ever written without its head record
      warnings.push(`${headFile} is missing in ${this.location} (a log written before agentbak kept one, or removed): entries cut off the end of the log can not be detected from the repository alone`);
    } else {
      const what = `${headFile} in ${this.location}`;
      const h = verifyRecord(headRaw, trust, log.ns, log.headKind, what);
      if (h.tenant !== a.tenant || h.agent_id !== a.agent || !Number.isSafeInteger(h.entries) || (h.entries as number) < 1 || typeof h.head_sha256 !== "string")
        throw verifyError(`${what}: not the head of ${a.tenant}/${a.agent}'s ${log.name} (moved in from another agent)`);
      head = { entries: h.entries as number, head_sha256: h.head_sha256, at: String(h.at) };
      if (!holdsCheckpoint(text, head)) throw cut(head, `its signed head record ${headFile} (${head.at})`);
    }
    if (seen && !holdsCheckpoint(text, seen)) throw cut(seen, "this host's trusted state (the furthest it verified before)");
    return { ...chain, log: `${this.location}/${file}`, head, seen_before: seen?.entries ?? 0, warnings };
  }

  /**
   * Appends one entry to a log of `a` under its log lock; when signed, the
   * log's signed head record moves to it: a count and the last line's sha256,
   * so entries cut off the end are found (unless the head was replaced by an
   * older genuine one too).
   */
  private async appendChained(a: AgentRef, log: LogKind, body: Record<string, unknown>, signingKey: SigningKey | null): Promise<Record<string, unknown>> {
    const lock = await this.lock(a, "log", 30_000);
    try {
      // an entry that changes what status shows: the status record goes first (a run that dies leaves none, never a
      // stale one) and is written again after; any other entry (a backup's) writes one only where there is none
      const changes = log === LOGS.report || STATUS_EVENTS.test(String(body.event));
      if (changes) await this.store.delete(keys.statusRecord(a));
      const entry = await this.appendLine({ key: log.key(a), head: log.head(a), ns: log.ns, headRecord: { kind: log.headKind, tenant: a.tenant, agent_id: a.agent } }, body, signingKey);
      if (signingKey && Repository.statusWriter && (changes || !(await this.store.head(keys.statusRecord(a)))))
        await Repository.statusWriter(this, a, signingKey).catch((e: unknown) => {
          if (!(e instanceof AgentbakError)) throw e; // a record not written only costs the next status --all time
        });
      return entry;
    } finally {
      await lock.release();
    }
  }

  /** Appends one chained line to a log (its lease held by the caller) and, when signed, moves its signed head record to it. */
  private async appendLine(log: { key: string; head: string; ns: string; headRecord: { kind: string } & Record<string, unknown> }, body: Record<string, unknown>, signingKey: SigningKey | null): Promise<Record<string, unknown>> {
    const { line, entry } = nextLine(String((await this.store.get(log.key)) ?? ""), body, signingKey, log.ns);
    await this.store.append(log.key, line);
    if (signingKey) {
      const head = { ...log.headRecord, entries: (entry.index as number) + 1, head_sha256: lineSha256(line), at: new Date().toISOString() };
      await this.writeJson(log.head, signRecord(head, signingKey, log.ns));
    }
    return entry;
  }

  /** Appends a signed entry to the repository's fleet report (a fleet drill's sample and figure). @returns the entry and where the report is. */
  async appendFleetReport(body: Record<string, unknown>, key: SigningKey): Promise<{ entry: Record<string, unknown>; location: string }> {
    const lock = await this.leaseOn(keys.fleetLease, `fleet report lock in ${this.location}`, 30_000);
    try {
      const entry = await this.appendLine({ key: keys.fleetReport, head: keys.fleetReportHead, ns: NS.report, headRecord: { kind: "fleet-report-head" } }, body, key);
      return { entry, location: `${this.location}/${keys.fleetReport}` };
    } finally {
      await lock.release();
    }
  }

  /** The text of the repository's fleet report ("" when no fleet drill ran); verify it with verifyReportText before trusting an entry. */
  async fleetReport(): Promise<string> {
    return String((await this.store.get(keys.fleetReport)) ?? "");
  }
}

/**
 * Marks every snapshot built on a link that does not verify (its signature or
 * manifest, or a manifest digest other than the one its child recorded) as
 * invalid, naming the link: `parent <id>: <its problem>`, down the whole chain.
 * (A link's payload digest is read by verify, restore, drill and backup, not by a listing.)
 */
function brokenLinks(list: Snapshot[]): void {
  const byKey = new Map(list.map((e) => [`${e.dir}/${e.snapshot_id}`, e]));
  const settled = new Set<Snapshot>();
  const settle = (e: Snapshot): void => {
    if (settled.has(e)) return; // once each, and a loop of parent ids ends here
    settled.add(e);
    const want = e.header?.manifest.parent;
    if (!want || e.status === "invalid") return;
    // a parent may sit in the v1 folder of the same agent; a missing one was marked by the caller
    const parent = byKey.get(`${e.dir}/${want.snapshot_id}`) ?? byKey.get(`${legacy.dir(e.agent_id)}/${want.snapshot_id}`);
    if (!parent) return;
    settle(parent);
    const problem =
      parent.status === "invalid" ? parent.problem : parent.header && parent.header.manifestSha256 !== want.manifest_sha256 ? `its manifest is not the one ${e.snapshot_id} recorded (digest differs)` : null;
    if (problem) Object.assign(e, { status: "invalid", problem: `parent ${parent.snapshot_id}: ${problem}`, problem_code: Exit.verify });
  };
  for (const e of list) settle(e);
}

/** The marker's `leases` location, or null. @throws AgentbakError(13) when it is there and not a location. */
function leasesOf(marker: Buffer, location: string): string | null {
  let v: unknown;
  try {
    v = (JSON.parse(String(marker)) as { leases?: unknown }).leases;
  } catch {
    return null;
  }
  if (v === undefined) return null;
  if (typeof v !== "string" || !(v.startsWith("s3://") || v.startsWith("/")) || v.length > 1024) throw verifyError(`${REPO_CONFIG} in ${location}: leases is not an s3:// URL or an absolute folder`);
  return v;
}

/**
 * Checks a location for leases before a marker names it: an s3:// URL or an absolute folder, whose
 * store refuses a second conditional create of one object. @throws AgentbakError(2) naming what is wrong.
 */
async function checkLeaseStore(location: string): Promise<void> {
  if (!(location.startsWith("s3://") || location.startsWith("/"))) throw usageError(`--leases ${location}: an s3://BUCKET/PREFIX URL or an absolute folder`);
  const store = await openStore(location, { create: true });
  if (!(await probeConditionalWrites(store)))
    throw usageError(`--leases ${location}: this store does not refuse a second conditional create of one object (a versioned bucket on Ceph RGW?); leases need an unversioned bucket`);
}

/** A repository's id: its marker's `id`, or (a marker written before ids) the marker's digest, which no other repository shares. */
function repositoryId(marker: Buffer): string {
  try {
    const id = (JSON.parse(String(marker)) as { id?: unknown }).id;
    if (typeof id === "string" && id) return id;
  } catch {
    /* below */
  }
  return createHash("sha256").update(marker).digest("hex").slice(0, 32);
}

function safeUser(): string | null {
  try {
    return userInfo().username;
  } catch {
    return process.env.USER ?? null;
  }
}
