/**
 * `backup --skip-if-unchanged`: a backup whose state is exactly
 * what this host's last snapshot of the agent captured writes no bundle and
 * reports that snapshot (status "unchanged"), as restic's
 * --skip-if-unchanged. The state's fingerprint is taken before each capture
 * and kept in AGENTBAK_HOME/cache beside the receipt, so a later change
 * (even one made while that capture ran) always gives a new fingerprint:
 *   - each database: its file's identity, size, mtime and ctime, its 100-byte header (the
 *     change counter moves on every commit in rollback-journal mode), and the
 *     -wal file's size, mtime and header (every commit appends frames; a reset
 *     changes its salts); a -journal present (a write in progress) is recorded too;
 *   - the workspace: git status and the working tree's digest;
 *   - every `files` match: its content's sha256, taken from the agent's stat cache (AGENTBAK_HOME/cache, as git's
 *     index: device, inode, size, mtime and ctime → sha256) when the file's are those recorded and neither time is
 *     within 2 s of now (a write in the same tick could go unseen), else read (the 1,575 small files of the bench's
 *     mixed agent were 0.35 s of a nothing-changed backup); ctime can not be set back by an unprivileged program,
 *     so a file rewritten to its old size and mtime (`touch -d`) is read again. `--no-stat-cache` reads every file
 *     (and records what it read). One of 512 KiB or more (a model adapter: reading 500 MB would be most of a
 *     nothing-changed backup) is compared by its device, inode, size, mtime and ctime themselves once settled.
 *     The files' stats are the listing's own (one per file), and when every file is settled and all their identities
 *     and times are the cache's summary's, the summary's digest answers without the cache's entries being parsed;
 *   - each state source: its fingerprint (a PostgreSQL snapshot and sequences,
 *     a LanceDB table version's manifest: docs/chunk-store.md);
 *   - the config file's bytes and the signing key.
 * Backups with hooks, a source without a fingerprint (redis, an old server), a
 * label or an idempotency key are always taken: their state can not be read
 * this cheaply, or the caller asked for a snapshot of its own.
 */
import { createHash } from "node:crypto";
import { statSync, type BigIntStats } from "node:fs";
import { writeCacheFile, readFileRegular, sha256FileRegular } from "../fsutil.js";
import type { LoadedConfig } from "../config/load.js";
import { workspaceState } from "../state/workspace/workspace.js";
import { homePaths } from "../home.js";
import { type AgentRef } from "../facts.js";
import { databasesIdentity } from "../state/sqlite/identity.js";
import type { Repository } from "../repository/repository.js";
import { CHUNK_FROM, listReadable } from "./files.js";
import type { BackupOptions } from "./receipt.js";

/**
 * The state a backup would capture, as one digest: everything but the
 * databases (read before the capture), and the databases' files (read by a
 * backup at its snapshot instant, under every write lock, so that its own
 * opening of them — which creates a -wal file — is part of what it records).
 */
export async function otherState(lc: LoadedConfig, files: string[], signer: string, cache: StatCache, listed?: Listed): Promise<string | null> {
  const now = listed?.at ?? BigInt(Date.now()) * 1_000_000n;
  const h = createHash("sha256");
  const add = (...parts: (string | number | bigint)[]) => h.update(parts.join("\0") + "\n");
  add("config", lc.path, readFileRegular(lc.path, "utf8"), signer);
  // the drivers (and execa) load only for an agent with sources: the nothing-changed path stays light
  const { sourceFingerprint } = lc.config.sources.length ? await import("../state/sources/index.js") : { sourceFingerprint: null };
  const sources = await Promise.all(lc.config.sources.map((s) => sourceFingerprint!(s, lc.dir)));
  if (sources.includes(null)) return null; // a source whose state can not be read cheaply: always backed up
  lc.config.sources.forEach((s, i) => add("source", s.name, s.kind, sources[i]!));
  if (lc.config.workspace) add("workspace", (await workspaceState(lc.resolve(lc.config.workspace.path))).key);
  add("files", filesDigest(files, now, cache, listed?.stats));
  cache.save();
  return h.digest("hex");
}

/**
 * The listing's stats of the files (ListedFile.stat), and when it began in ns: "settled" is judged against a time
 * taken before any stat, never after (a write in the same tick as the stat could go unseen).
 */
interface Listed {
  stats: ReadonlyMap<string, BigIntStats>;
  at: bigint;
}

/**
 * The `files` part of the state: each file's path and key (fileKey), as one digest. When every file is settled and
 * their paths, identities and times are exactly those of the stat cache's summary, the digest recorded with it is the
 * one the keys would give (each key is the cached sha256, or for a large file its identity itself) and the cache's
 * entries are not read at all (their JSON was most of the cache's cost: 1,578 files).
 */
function filesDigest(files: string[], now: bigint, cache: StatCache, listed?: ReadonlyMap<string, BigIntStats>): string {
  const ids = createHash("sha256");
  const stats = files.map((f) => {
    const st = listed?.get(f) ?? statSync(f, { bigint: true });
    const id = [st.dev, st.ino, st.size, st.mtimeNs, st.ctimeNs].join(" ");
    // ctime can not be set back by a program: a file rewritten with its old mtime still gets a new ctime
    const settled = now - st.mtimeNs > RACY_NS && now - st.ctimeNs > RACY_NS;
    ids.update(`${f}\0${id}\0${settled ? 1 : 0}\n`);
    return { f, id, settled, large: st.size >= BigInt(CHUNK_FROM) };
  });
  const allSettled = stats.every((x) => x.settled);
  const idsDigest = ids.digest("hex");
  const known = allSettled ? cache.summary(idsDigest) : undefined;
  if (known) return known;
  const h = createHash("sha256");
  for (const x of stats) h.update(`${x.f}\0${fileKey(x, cache)}\n`);
  const digest = h.digest("hex");
  if (allSettled) cache.setSummary(idsDigest, digest);
  return digest;
}

/** Within this of a file's mtime or ctime, its identity and times do not say it is unchanged (git's racy entries). */
const RACY_NS = 2_000_000_000n;

/** What a file holds, as the unchanged check compares it: a large file's identity and times, else its sha256 (from the stat cache when it answers). */
function fileKey(x: { f: string; id: string; settled: boolean; large: boolean }, cache: StatCache): string {
  if (x.large && x.settled) return `stat ${x.id}`;
  const sha = cache.get(x.f, x.id) ?? sha256FileRegular(x.f);
  if (x.settled) cache.set(x.f, x.id, sha);
  return `sha256 ${sha}`;
}

/**
 * The unchanged check's stat cache of one agent's files (path → identity and times, sha256), kept in
 * AGENTBAK_HOME/cache as one JSON object. A damaged or foreign file is ignored (every file is read) and written anew;
 * `trusted` false (--no-stat-cache): nothing is answered from it, what is read is recorded.
 * Its first member, under the key "" (no file's path), is a summary: the digest of every file's path, identity and
 * times when all were settled, the files' digest they gave, and the sha256 of the rest of the file's text, so the
 * summary answers only beside the very entries it was computed from. Read without parsing the entries, which are
 * parsed only when the summary does not answer.
 */
export class StatCache {
  private text: string | null = null;
  private entries: Map<string, [string, string]> | null = null;
  private readonly next = new Map<string, [string, string]>();
  private changed = false;
  private sum: [string, string] | null = null;
  private newSum: [string, string] | null = null;
  constructor(
    private readonly path: string,
    private readonly trusted: boolean,
  ) {
    try {
      this.text = readFileRegular(path, "utf8");
      const m = SUMMARY.exec(this.text);
      if (m && createHash("sha256").update(this.text.slice(m[0].length)).digest("hex") === m[3]) this.sum = [m[1]!, m[2]!];
    } catch {
      this.changed = true; // none yet, or unreadable: rebuilt
    }
  }
  /** The files' digest recorded for exactly these paths, identities and times (all settled), if the cache holds it. */
  summary(ids: string): string | undefined {
    return this.trusted && this.sum?.[0] === ids ? this.sum[1] : undefined;
  }
  setSummary(ids: string, digest: string): void {
    this.newSum = [ids, digest];
    if (this.sum?.[0] !== ids || this.sum[1] !== digest) this.changed = true;
  }
  private old(): Map<string, [string, string]> {
    if (this.entries) return this.entries;
    this.entries = new Map();
    try {
      const o = JSON.parse(this.text ?? "") as unknown;
      if (o && typeof o === "object" && !Array.isArray(o))
        for (const [k, v] of Object.entries(o)) if (k && Array.isArray(v) && v.length === 2 && typeof v[0] === "string" && /^[0-9a-f]{64}$/.test(String(v[1]))) this.entries.set(k, [v[0], v[1] as string]);
    } catch {
      this.changed = true; // unreadable: rebuilt
    }
    return this.entries;
  }
  get(path: string, id: string): string | undefined {
    const e = this.trusted ? this.old().get(path) : undefined;
    return e && e[0] === id ? e[1] : undefined;
  }
  set(path: string, id: string, sha: string): void {
    this.next.set(path, [id, sha]);
    const e = this.old().get(path);
    if (!e || e[0] !== id || e[1] !== sha) this.changed = true;
  }
  save(): void {
    // the summary answered (nothing read, nothing set): the file stays as it is
    if (!this.changed && (!this.entries || this.next.size === this.entries.size)) return;
    const rest = JSON.stringify(Object.fromEntries(this.next)).slice(1); // '"path":[…],…}' or '}'
    const head = this.newSum && this.next.size ? `{"":["${this.newSum[0]}","${this.newSum[1]}","${createHash("sha256").update(`,${rest}`).digest("hex")}"]` : "";
    try {
      writeCacheFile(this.path, head ? `${head},${rest}` : `{${rest}`);
    } catch {
      // a cache: the next check reads the files again
    }
  }
}

/** The stat cache's summary as its file begins: `{"":["<ids>","<files' digest>","<sha256 of the rest>"]`. */
const SUMMARY = /^\{"":\["([0-9a-f]{64})","([0-9a-f]{64})","([0-9a-f]{64})"\]/;

/** The databases' part of the state: their files' identity (state/sqlite: databasesIdentity). */
export const databasesState = (lc: LoadedConfig): string => databasesIdentity(lc.config.databases.map((d) => ({ name: d.name, src: lc.resolve(d.path) })));

export const stateKey = (other: string, databases: string) => createHash("sha256").update(`${other}\0${databases}`).digest("hex");

/** What the last snapshot of an agent from this host recorded. */
export interface LastBackup<R> {
  fingerprint: string;
  sequence: number;
  expires_at: string;
  receipt: R;
}

const cacheKey = (location: string, a: AgentRef) => createHash("sha256").update(`${location}\0${a.tenant}\0${a.agent}`).digest("hex").slice(0, 16);
const file = (home: string, location: string, a: AgentRef) => homePaths(home).cache.lastBackup(cacheKey(location, a));

export function lastBackup<R>(home: string, location: string, a: AgentRef): LastBackup<R> | null {
  try {
    return JSON.parse(readFileRegular(file(home, location, a), "utf8")) as LastBackup<R>;
  } catch {
    return null; // none yet, or unreadable: the backup is taken
  }
}

export function rememberBackup<R>(home: string, location: string, a: AgentRef, last: LastBackup<R>): void {
  writeCacheFile(file(home, location, a), JSON.stringify(last) + "\n");
}

/**
 * Keeps the fingerprint of the state a snapshot captured beside its receipt, for the next --skip-if-unchanged: `other`
 * (otherState) and the databases' part, read at the instant (only when every write lock was held: else null, and
 * nothing is kept unless there are no databases).
 */
export function rememberState<R>(lc: LoadedConfig, home: string, location: string, a: AgentRef, state: { other: string; databases: string | null }, last: Omit<LastBackup<R>, "fingerprint">): void {
  if (!state.databases && lc.config.databases.length) return;
  rememberBackup(home, location, a, { fingerprint: stateKey(state.other, state.databases ?? databasesState(lc)), ...last });
}

/** An unchanged state is backed up again anyway when its last snapshot expires within this. */
const UNCHANGED_EXPIRY_MARGIN_MS = 86_400_000;

/**
 * This host's last backup of the agent, when the state (`other`, with the databases read now) is what it captured,
 * its snapshot is still the newest committed one and it is far from expiring; else null.
 */
export async function unchangedSince<R extends { snapshot_id: string }>(lc: LoadedConfig, repo: Repository, home: string, a: AgentRef, other: string): Promise<LastBackup<R> | null> {
  const last = lastBackup<R>(home, repo.location, a);
  if (!last || last.fingerprint !== stateKey(other, databasesState(lc)) || Date.parse(last.expires_at) - Date.now() <= UNCHANGED_EXPIRY_MARGIN_MS) return null;
  return (await repo.stillNewest(a, last.sequence, last.receipt.snapshot_id)) ? last : null;
}

/**
 * Whether nothing changed since this host's last snapshot, which is still the newest and far from expiring (then no
 * bundle is written). Without hooks nothing can change what the `files` patterns name before the capture: they are
 * listed once, here, and the capture takes that list.
 * `signer`: the signing key's fingerprint.
 * @returns the files listed (or null: the capture lists them after the pre hook), the state's fingerprint without
 *   the databases (or null: not skippable), and the last backup when it holds this very state
 */
export async function unchanged<R extends { snapshot_id: string }>(lc: LoadedConfig, o: Pick<BackupOptions, "skipUnchanged" | "label" | "idempotencyKey" | "repo" | "home" | "statCache">, a: AgentRef, x: { repoDir: string | null; signer: string }) {
  const cfg = lc.config;
  const skippable = o.skipUnchanged && !o.label && !o.idempotencyKey && !cfg.hooks.pre.length && !cfg.hooks.post.length;
  const at = BigInt(Date.now()) * 1_000_000n;
  const files = skippable ? listReadable(lc, x.repoDir) : null;
  const listed = files?.listed ?? null;
  const cache = new StatCache(homePaths(o.home).cache.statCache(cacheKey(o.repo.location, a)), o.statCache ?? true);
  const stats = new Map(files?.listed.flatMap((l) => (l.stat ? [[l.file, l.stat] as const] : [])));
  const other = files ? await otherState(lc, files.readable, x.signer, cache, { stats, at }).catch(() => null) : null;
  const last = other ? await unchangedSince<R>(lc, o.repo, o.home, a, other) : null;
  return { listed, other, last };
}
