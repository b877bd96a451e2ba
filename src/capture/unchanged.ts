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
 *     nothing-changed backup) is compared by its device, inode, size, mtime and ctime themselves once settled;
 *   - each state source: its fingerprint (a PostgreSQL snapshot and sequences,
 *     a LanceDB table version's manifest: docs/chunk-store.md);
 *   - the config file's bytes and the signing key.
 * Backups with hooks, a source without a fingerprint (redis, an old server), a
 * label or an idempotency key are always taken: their state can not be read
 * this cheaply, or the caller asked for a snapshot of its own.
 */
import { createHash } from "node:crypto";
import { closeSync, existsSync, openSync, readSync, realpathSync, statSync } from "node:fs";
import { writeCacheFile, readFileRegular } from "../fsutil.js";
import type { LoadedConfig } from "../config/load.js";
import { workspaceState } from "../state/workspace/workspace.js";
import { homePaths } from "../home.js";
import { sidecarOf, type AgentRef } from "../facts.js";
import type { Repository } from "../repository/repository.js";
import { CHUNK_FROM, listReadable } from "./files.js";
import type { BackupOptions } from "./receipt.js";

/**
 * The state a backup would capture, as one digest: everything but the
 * databases (read before the capture), and the databases' files (read by a
 * backup at its snapshot instant, under every write lock, so that its own
 * opening of them — which creates a -wal file — is part of what it records).
 */
export async function otherState(lc: LoadedConfig, files: string[], signer: string, cache: StatCache): Promise<string | null> {
  const h = createHash("sha256");
  const add = (...parts: (string | number | bigint)[]) => h.update(parts.join("\0") + "\n");
  add("config", lc.path, readFileRegular(lc.path, "utf8"), signer);
  // the drivers (and execa) load only for an agent with sources: the nothing-changed path stays light
  const { sourceFingerprint } = lc.config.sources.length ? await import("../state/sources/index.js") : { sourceFingerprint: null };
  const sources = await Promise.all(lc.config.sources.map((s) => sourceFingerprint!(s, lc.dir)));
  if (sources.includes(null)) return null; // a source whose state can not be read cheaply: always backed up
  lc.config.sources.forEach((s, i) => add("source", s.name, s.kind, sources[i]!));
  if (lc.config.workspace) add("workspace", (await workspaceState(lc.resolve(lc.config.workspace.path))).key);
  const now = BigInt(Date.now()) * 1_000_000n;
  for (const f of files) add("file", f, fileKey(f, now, cache));
  cache.save();
  return h.digest("hex");
}

/** Within this of a file's mtime or ctime, its identity and times do not say it is unchanged (git's racy entries). */
const RACY_NS = 2_000_000_000n;

/** What a file holds, as the unchanged check compares it: a large file's identity and times, else its sha256 (from the stat cache when it answers). */
function fileKey(f: string, now: bigint, cache: StatCache): string {
  const st = statSync(f, { bigint: true });
  const id = [st.dev, st.ino, st.size, st.mtimeNs, st.ctimeNs].join(" ");
  // ctime can not be set back by a program: a file rewritten with its old mtime still gets a new ctime
  const settled = now - st.mtimeNs > RACY_NS && now - st.ctimeNs > RACY_NS;
  if (st.size >= BigInt(CHUNK_FROM) && settled) return `stat ${id}`;
  const sha = cache.get(f, id) ?? createHash("sha256").update(readFileRegular(f)).digest("hex");
  if (settled) cache.set(f, id, sha);
  return `sha256 ${sha}`;
}

/**
 * The unchanged check's stat cache of one agent's files (path → identity and times, sha256), kept in
 * AGENTBAK_HOME/cache. A damaged or foreign file is ignored (every file is read) and written anew; `trusted`
 * false (--no-stat-cache): nothing is answered from it, what is read is recorded.
 */
export class StatCache {
  private readonly old = new Map<string, [string, string]>();
  private readonly next: Record<string, [string, string]> = {};
  private changed = false;
  constructor(private readonly path: string, private readonly trusted: boolean) {
    try {
      const o = JSON.parse(readFileRegular(path, "utf8")) as unknown;
      if (o && typeof o === "object" && !Array.isArray(o))
        for (const [k, v] of Object.entries(o)) if (Array.isArray(v) && v.length === 2 && typeof v[0] === "string" && /^[0-9a-f]{64}$/.test(String(v[1]))) this.old.set(k, [v[0], v[1] as string]);
    } catch {
      this.changed = true; // none yet, or unreadable: rebuilt
    }
  }
  get(path: string, id: string): string | undefined {
    const e = this.trusted ? this.old.get(path) : undefined;
    return e && e[0] === id ? e[1] : undefined;
  }
  set(path: string, id: string, sha: string): void {
    this.next[path] = [id, sha];
    const e = this.old.get(path);
    if (!e || e[0] !== id || e[1] !== sha) this.changed = true;
  }
  save(): void {
    if (!this.changed && Object.keys(this.next).length === this.old.size) return;
    try {
      writeCacheFile(this.path, JSON.stringify(this.next));
    } catch {
      // a cache: the next check reads the files again
    }
  }
}

export function databasesState(lc: LoadedConfig): string {
  const h = createHash("sha256");
  const add = (...parts: (string | number | bigint)[]) => h.update(parts.join("\0") + "\n");
  for (const d of lc.config.databases) {
    // SQLite keeps the -wal and -journal beside the real file when the configured path is a symbolic link
    const p = real(lc.resolve(d.path));
    // its ctime too: bytes written in place with the old mtime put back (size and header kept) still move it
    add("db", d.name, ...identity(p, 100), ctimeOf(p));
    add("wal", ...identity(sidecarOf(p, "wal"), 32));
    add("journal", ...identity(sidecarOf(p, "journal"), 0));
  }
  return h.digest("hex");
}

export const stateKey = (other: string, databases: string) => createHash("sha256").update(`${other}\0${databases}`).digest("hex");

function real(p: string): string {
  try {
    return realpathSync(p);
  } catch {
    return p; // missing: recorded as absent
  }
}

/** A file's ctime in ns (a program can not set it back), or "absent". */
function ctimeOf(path: string): string {
  return existsSync(path) ? String(statSync(path, { bigint: true }).ctimeNs) : "absent";
}

/** A file's identity, size, modification time and first `head` bytes (or "absent"). */
function identity(path: string, head: number): (string | bigint)[] {
  if (!existsSync(path)) return ["absent"];
  const st = statSync(path, { bigint: true });
  const buf = Buffer.alloc(head);
  if (head) {
    const fd = openSync(path, "r");
    try {
      readSync(fd, buf, 0, head, 0);
    } finally {
      closeSync(fd);
    }
  }
  // not the -wal's ctime: SQLite opened as root chowns the -wal file on every open, which changes it and nothing else
  return [st.dev, st.ino, st.size, st.mtimeNs, buf.toString("hex")];
}

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
  const files = skippable ? listReadable(lc, x.repoDir) : null;
  const listed = files?.listed ?? null;
  const cache = new StatCache(homePaths(o.home).cache.statCache(cacheKey(o.repo.location, a)), o.statCache ?? true);
  const other = files ? await otherState(lc, files.readable, x.signer, cache).catch(() => null) : null;
  const last = other ? await unchangedSince<R>(lc, o.repo, o.home, a, other) : null;
  return { listed, other, last };
}
