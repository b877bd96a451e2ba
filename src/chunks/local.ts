/**
 * What a backup host keeps about an agent's chunks in AGENTBAK_HOME: the host's
 * chunk key (the ids' HMAC key comes from it), the known-chunks index (which
 * chunks the repository holds, with their ciphertext digests, so a chunk
 * already stored costs no request at all) and the stat cache (a file whose
 * size, times and inode did not change is not read again: its chunk list is
 * taken from here). Both caches are written without fsync and read
 * defensively: lost or damaged, they cost the next backup time, never
 * correctness.
 */
import { createHash, randomBytes } from "node:crypto";
import { existsSync, readFileSync, type BigIntStats } from "node:fs";
import { join } from "node:path";
import { noKey } from "../errors.js";
import { ensureDir, writeCacheFile, writeFileAtomic } from "../fsutil.js";

/** A chunk as a snapshot's manifest lists it: what a host without the chunk key needs to fetch and check it. */
export interface ChunkRef {
  /** the object's name: HMAC-SHA256 of the plaintext under the agent's chunk key (hex) */
  id: string;
  /** SHA-256 of the stored object (the age file), hex */
  sha256: string;
  /** bytes of the stored object */
  size: number;
  /** bytes of plaintext it holds */
  length: number;
}

/** The host's chunk key (AGENTBAK_HOME/chunk-key, 64 hex digits), created on first use. @throws AgentbakError(12) when the file is damaged */
export function hostChunkKey(home: string): Buffer {
  const p = join(home, "chunk-key");
  if (!existsSync(p)) writeFileAtomic(p, randomBytes(32).toString("hex") + "\n", 0o600);
  const text = readFileSync(p, "utf8").trim();
  if (!/^[0-9a-f]{64}$/i.test(text)) throw noKey(`${p} is not a chunk key (64 hex digits); restore it from a copy of AGENTBAK_HOME, or remove it to start a new one (the next backup then stores every chunk again)`);
  return Buffer.from(text, "hex");
}

/** The cache files of one agent in one repository under one chunk key: AGENTBAK_HOME/cache/chunks/<digest>.{known,stat}. */
export function cachePaths(home: string, location: string, scope: { tenant: string; agent: string }, key: Buffer): { known: string; stat: string } {
  const keyCheck = createHash("sha256").update("agentbak chunk key check\0").update(key).digest("hex");
  const name = createHash("sha256").update([location, scope.tenant, scope.agent, keyCheck].join("\0")).digest("hex").slice(0, 32);
  const dir = join(home, "cache", "chunks");
  return { known: join(dir, `${name}.known`), stat: join(dir, `${name}.stat`) };
}

const MAGIC = Buffer.from("AGBKCHK1");
const ENTRY = 72;
const HEAD = MAGIC.length + 16 + 4;

/**
 * The chunks this host knows the repository holds, with their refs. Its
 * `epoch` is the repository's sweep epoch it was last checked against: a
 * sweep (on any host) changes the epoch, and an index of another epoch is
 * checked against a listing before it is trusted (ChunkStore.writer).
 */
export class KnownChunks {
  private readonly refs = new Map<string, ChunkRef>();
  epoch = "";
  private dirty = false;

  private constructor(private readonly file: string) {}

  /** The index in `file`, or an empty one when it is missing or damaged. */
  static load(file: string): KnownChunks {
    const k = new KnownChunks(file);
    let b: Buffer;
    try {
      b = readFileSync(file);
    } catch {
      return k;
    }
    const n = b.length >= HEAD ? b.readUInt32BE(MAGIC.length + 16) : -1;
    const body = b.subarray(0, b.length - 32);
    if (n < 0 || !b.subarray(0, MAGIC.length).equals(MAGIC) || b.length !== HEAD + n * ENTRY + 32 || !createHash("sha256").update(body).digest().equals(b.subarray(body.length))) return k;
    k.epoch = b.subarray(MAGIC.length, MAGIC.length + 16).toString("hex");
    for (let i = 0, o = HEAD; i < n; i++, o += ENTRY)
      k.refs.set(b.toString("hex", o, o + 32), { id: b.toString("hex", o, o + 32), sha256: b.toString("hex", o + 32, o + 64), size: b.readUInt32BE(o + 64), length: b.readUInt32BE(o + 68) });
    if (/^0+$/.test(k.epoch)) k.epoch = "";
    return k;
  }

  get(id: string): ChunkRef | undefined {
    return this.refs.get(id);
  }

  get size(): number {
    return this.refs.size;
  }

  ids(): IterableIterator<string> {
    return this.refs.keys();
  }

  add(ref: ChunkRef): void {
    if (this.refs.get(ref.id)?.sha256 === ref.sha256) return;
    this.refs.set(ref.id, ref);
    this.dirty = true;
  }

  /** Keeps only the ids `keep` says the repository still holds, under `epoch`. */
  retain(keep: (id: string) => boolean, epoch: string): void {
    for (const id of [...this.refs.keys()]) if (!keep(id)) this.refs.delete(id);
    this.epoch = epoch;
    this.dirty = true;
  }

  /** Writes the index (temp and rename, no fsync) when it changed. */
  save(): void {
    if (!this.dirty) return;
    const b = Buffer.alloc(HEAD + this.refs.size * ENTRY + 32);
    MAGIC.copy(b);
    if (this.epoch) Buffer.from(this.epoch, "hex").copy(b, MAGIC.length);
    b.writeUInt32BE(this.refs.size, MAGIC.length + 16);
    let o = HEAD;
    for (const r of this.refs.values()) {
      b.write(r.id, o, "hex");
      b.write(r.sha256, o + 32, "hex");
      b.writeUInt32BE(r.size, o + 64);
      b.writeUInt32BE(r.length, o + 68);
      o += ENTRY;
    }
    createHash("sha256").update(b.subarray(0, o)).digest().copy(b, o);
    ensureDir(join(this.file, ".."), 0o700);
    writeCacheFile(this.file, b);
    this.dirty = false;
  }
}

/** What the stat cache holds for a file: the stat it was read under, and what it was stored as. */
interface StatEntry {
  dev: string;
  ino: string;
  size: string;
  mtimeNs: string;
  ctimeNs: string;
  /** when the stat was taken (ns since the epoch): a file modified within RACY_NS of it may change again unseen */
  statNs: string;
  sha256: string;
  chunks: string[];
}

/**
 * A file modified this close to the moment it was read may be written again
 * within the same timestamp tick (git's "racy" entries): its entry is not
 * trusted, and the next backup reads the file again.
 */
const RACY_NS = 2_000_000_000n;

/** The identity of a file's contents as stat(2) tells it. */
const identity = (st: BigIntStats) => ({ dev: String(st.dev), ino: String(st.ino), size: String(st.size), mtimeNs: String(st.mtimeNs), ctimeNs: String(st.ctimeNs) });

/**
 * Files already stored, by absolute path: the chunk list of a file whose
 * device, inode, size, mtime and ctime are those recorded (ctime can not be
 * set back by a program, so a file rewritten and its mtime restored still
 * misses). Only entries used or written by this run are saved: what the
 * last snapshot held, as restic compares against its parent snapshot.
 */
export class StatCache {
  private readonly entries = new Map<string, StatEntry>();
  private readonly used = new Map<string, StatEntry>();

  private constructor(private readonly file: string) {}

  /** The cache in `file`, or an empty one when it is missing or damaged. */
  static load(file: string): StatCache {
    const c = new StatCache(file);
    try {
      const j = JSON.parse(readFileSync(file, "utf8")) as { v?: unknown; entries?: Record<string, StatEntry> };
      if (j.v === 1 && j.entries && typeof j.entries === "object")
        for (const [p, e] of Object.entries(j.entries)) if (e && typeof e.sha256 === "string" && Array.isArray(e.chunks)) c.entries.set(p, e);
    } catch {
      /* none yet, or unreadable: every file is read */
    }
    return c;
  }

  /** The stored file for `path` when `st` is the stat it was stored under (and that was not racy). */
  lookup(path: string, st: BigIntStats): { sha256: string; chunks: string[] } | null {
    const e = this.entries.get(path);
    if (!e) return null;
    const now = identity(st);
    if (e.dev !== now.dev || e.ino !== now.ino || e.size !== now.size || e.mtimeNs !== now.mtimeNs || e.ctimeNs !== now.ctimeNs) return null;
    if (BigInt(e.mtimeNs) + RACY_NS > BigInt(e.statNs) || BigInt(e.ctimeNs) + RACY_NS > BigInt(e.statNs)) return null;
    this.used.set(path, e);
    return { sha256: e.sha256, chunks: e.chunks };
  }

  /** Records that `path`, as of `st` (taken at `statNs`, before it was read), was stored as `sha256` in `chunks`. */
  record(path: string, st: BigIntStats, statNs: bigint, sha256: string, chunks: string[]): void {
    const e = { ...identity(st), statNs: String(statNs), sha256, chunks };
    this.entries.set(path, e);
    this.used.set(path, e);
  }

  /** Writes the entries this run used or wrote (temp and rename, no fsync). */
  save(): void {
    ensureDir(join(this.file, ".."), 0o700);
    writeCacheFile(this.file, JSON.stringify({ v: 1, entries: Object.fromEntries(this.used) }));
  }
}
