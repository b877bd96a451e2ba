/**
 * An agent's chunk store in a repository: content-defined chunks of large
 * non-SQLite state, stored once per agent under its folder
 * (`<prefix>/<first 2 hex>/<id>`), each a standard age file of one zstd frame
 * (seal.ts), named by a keyed hash of its plaintext. A snapshot's manifest
 * lists each component's chunks (ChunkRef: id, ciphertext sha256 and size,
 * plaintext length), which is all a restoring host needs: it never has the
 * backup host's chunk key.
 *
 *   writer()  a backup host's side: putFile / putStream (chunk, hash, skip
 *             what is stored, compress, encrypt, upload), with the known-chunks
 *             index and the stat cache of local.ts
 *   read()    a component's plaintext, every chunk checked on the way
 *   verify()  without keys: every chunk there, and (read) its digest
 *   sweep()   mark and sweep under the agent's lease: unreferenced chunks
 *             older than a grace period are deleted
 */
import { createHash, randomBytes } from "node:crypto";
import { open } from "node:fs/promises";
import { Readable } from "node:stream";
import type { AgeIdentity } from "../crypto/age.js";
import { parseRecipient } from "../crypto/age.js";
import { AgentbakError, noKey, usageError, verifyError } from "../errors.js";
import { checkKey, type ObjectStore } from "../storage/store.js";
import { chunkBuffer, handleChunks, LARGE_STATE, checkParams, streamChunks, type ChunkParams } from "./fastcdc.js";
import { cachePaths, hostChunkKey, KnownChunks, StatCache, type ChunkRef } from "./local.js";
import { agentChunkKey, chunkId, compressChunk, decompressChunk, decryptChunk, encryptChunk } from "./seal.js";

export type { ChunkRef } from "./local.js";

/** The largest chunk a list may name (fastcdc's upper bound on max), and the most its age file may add to it. */
const MAX_LENGTH = 64 * 1024 * 1024;
const MAX_OVERHEAD = 64 * 1024;
const HEX64 = /^[0-9a-f]{64}$/;
/** The sweep record: its epoch changes at every sweep, before the first delete. */
const SWEEP_RECORD = "sweep.json";
/** A day: a chunk younger than this is never swept, referenced or not (a backup may be about to commit it). */
export const DEFAULT_GRACE_MS = 24 * 3600 * 1000;

/** A component stored as chunks: what the manifest lists for it. */
export interface StoredFile {
  /** SHA-256 of the whole plaintext (as a component's sha256 today) */
  sha256: string;
  size: number;
  chunks: ChunkRef[];
}

/** What storing one file or stream cost. */
export interface PutStats {
  /** bytes read and chunked (0 when the stat cache answered) */
  read: number;
  newChunks: number;
  /** bytes uploaded (age files) */
  newBytes: number;
  reusedChunks: number;
  fromStatCache: boolean;
  /** the file's size, times or inode changed while it was read: stored as read, not remembered in the stat cache */
  changedWhileRead: boolean;
}

/** How putFile stores a file (ChunkWriter.putFile). */
export interface PutFileOptions {
  statCache?: boolean;
  remember?: boolean;
  /** given each piece of the file as it is read and cut (putFile), as data: e.g. a secret scanner */
  tap?: PieceSink;
}

/** What takes a file's pieces in order as they are read (each valid only during the call). */
export interface PieceSink {
  push(piece: Uint8Array): void;
}

/**
 * The agent's lease for maintenance: a sweep checks it before every delete
 * and stops (with the lease's error) once it is lost.
 */
export interface Lease {
  /** the fencing token, recorded in the sweep record */
  readonly token: string;
  /** @throws when the lease is no longer held (another process holds the agent now) */
  assertHeld(): Promise<void>;
}

export interface SweepResult {
  /** chunks in the store when the sweep listed it */
  listed: number;
  referenced: number;
  deleted: number;
  deletedBytes: number;
  /** unreferenced, but younger than the grace period: kept */
  young: number;
  /** unreferenced and old, but the store's retention (Object Lock) refused the delete */
  retained: number;
}

/** What a read must give: the component's sha256 and size, its name for errors, and for a packed file its start in the first chunk. */
export interface Whole {
  sha256: string;
  size: number;
  label: string;
  /** a packed small file: its bytes start this far into the first chunk's plaintext, and end within the last chunk */
  skip?: number;
}

/** What a backup host needs to write an agent's chunks. */
export interface WriterOptions {
  /** AGENTBAK_HOME: the chunk key and the caches live there */
  home: string;
  /** the repository's location (names this repository's caches) */
  location: string;
  scope: { tenant: string; agent: string };
  /** the config's recipients: every chunk is encrypted to them, and they are part of the id key */
  recipients: string[];
  params?: ChunkParams;
  /** uploads in flight at once (default 4) */
  concurrency?: number;
  /**
   * The object digests the agent's verified manifests sign for each chunk id: a chunk already there that this
   * host's index does not hold is adopted only when its bytes are the ones a manifest names (default: none is).
   */
  signed?: () => Promise<ReadonlyMap<string, ReadonlySet<string>>>;
}

/**
 * Checks a chunk list as a manifest gives it: with `size`, that its chunks hold exactly that many bytes, or with
 * `skip` too (a packed small file), that the range of `size` bytes from `skip` into the first chunk touches every chunk.
 * @throws AgentbakError(13) naming `label` and the bad entry
 */
function checkList(list: ChunkRef[], label: string, size?: number, skip?: number): void {
  let total = 0;
  list.forEach((r, i) => {
    const ok = HEX64.test(r.id) && HEX64.test(r.sha256) && Number.isSafeInteger(r.length) && r.length > 0 && r.length <= MAX_LENGTH && Number.isSafeInteger(r.size) && r.size > 0 && r.size <= r.length + MAX_OVERHEAD + r.length / 100;
    if (!ok) throw verifyError(`${label}: chunk ${i} is not a valid chunk reference`);
    total += r.length;
  });
  if (size === undefined) return;
  if (skip === undefined) {
    if (total !== size) throw verifyError(`${label}: its chunks hold ${total} bytes, manifest says ${size}`);
    return;
  }
  const last = list[list.length - 1];
  if (!last || !Number.isSafeInteger(skip) || skip < 0 || size < 1 || skip >= list[0]!.length || skip + size > total || total - last.length >= skip + size)
    throw verifyError(`${label}: its ${list.length} chunk(s) do not hold exactly the range of ${size} bytes from ${skip}`);
}

const sha256hex = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

/** An agent's chunks in a repository: the read side (no keys needed), and writer() for a backup host. */
export class ChunkStore {
  /** @param prefix the agent's chunks folder, e.g. `tenants/<t>/agents/<a>/chunks` @throws AgentbakError(2) for an invalid key */
  constructor(
    readonly store: ObjectStore,
    readonly prefix: string,
  ) {
    checkKey(prefix);
  }

  /** The object key of chunk `id`. */
  key(id: string): string {
    return `${this.prefix}/${id.slice(0, 2)}/${id}`;
  }

  /** The current sweep epoch ("" when the store was never swept). */
  async epoch(): Promise<string> {
    const b = await this.store.get(`${this.prefix}/${SWEEP_RECORD}`);
    if (!b) return "";
    try {
      const e = (JSON.parse(String(b)) as { epoch?: unknown }).epoch;
      if (typeof e === "string" && /^[0-9a-f]{32}$/.test(e)) return e;
    } catch {
      /* below */
    }
    // a record no sweep wrote: an epoch no index can have, so every index is checked against a listing
    return "f".repeat(32);
  }

  /** The ids of every chunk stored. */
  async listIds(): Promise<Set<string>> {
    const ids = new Set<string>();
    for (const k of await this.store.list(`${this.prefix}/`)) {
      const id = this.idOf(k);
      if (id) ids.add(id);
    }
    return ids;
  }

  /** Every chunk id the store holds, with its object's size as the listing gives it (a folder: a stat each). */
  async listSizes(): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    for (const [k, { size }] of await this.store.tagged(`${this.prefix}/`)) {
      const id = this.idOf(k);
      if (id) out.set(id, size);
    }
    return out;
  }

  /** The chunk id a key names, or null for any other key. */
  private idOf(key: string): string | null {
    const m = key.slice(this.prefix.length + 1).match(/^([0-9a-f]{2})\/([0-9a-f]{64})$/);
    return m && m[2]!.startsWith(m[1]!) ? m[2]! : null;
  }

  /** A writer opened on first use (an agent without large state never opens one), given to the capture as data. */
  lazyWriter(o: WriterOptions): LazyWriter {
    return new LazyWriter(this, o);
  }

  /**
   * The writer of a backup host: its chunk key for this agent and recipients,
   * and its caches, checked against the store when a sweep ran since.
   * @throws AgentbakError(2) for a recipient that does not parse, (12) for a damaged chunk key file
   */
  async writer(o: WriterOptions): Promise<ChunkWriter> {
    if (!o.recipients.length) throw usageError("no recipients to encrypt chunks to");
    for (const r of o.recipients)
      try {
        parseRecipient(r);
      } catch {
        throw usageError(`recipient ${r.slice(0, 12)}... is not an age X25519 recipient`);
      }
    const params = o.params ?? LARGE_STATE;
    checkParams(params);
    const key = agentChunkKey(hostChunkKey(o.home), o.scope, o.recipients);
    const paths = cachePaths(o.home, o.location, o.scope, key);
    const known = KnownChunks.load(paths.known);
    // what the store holds is listed at every backup (one LIST per 1,000 chunks), not only after a sweep: a chunk
    // deleted behind the index's back (by hand, a lifecycle rule, a delete marker, a sweep record put back) is
    // stored again, never named by a new snapshot while it is missing; nor one whose size is not the one the index
    // holds (cut or grown in place): it is written again (a chunk damaged with its size kept is found by verify)
    const present = await this.listSizes();
    // (the intact ids listed first: a test called back from inside retain into the index is a call back up the stack)
    const intact = new Set([...known.ids()].filter((id) => present.get(id) === known.get(id)?.size));
    known.retain((id) => intact.has(id), await this.epoch());
    return new ChunkWriter(this, key, known, StatCache.load(paths.stat), o.recipients, params, o.concurrency ?? 4, present, o.signed ?? (async () => new Map()));
  }

  /** Downloads a chunk and checks its size and digest against its ref. @throws AgentbakError(13) naming `label` */
  private async fetch(r: ChunkRef, label: string): Promise<Buffer> {
    const b = await this.store.get(this.key(r.id));
    if (!b) throw verifyError(`${label}: chunk ${r.id} is missing from the repository`);
    if (b.length !== r.size || sha256hex(b) !== r.sha256) throw verifyError(`${label}: chunk ${r.id} does not match its digest in the manifest`);
    return b;
  }

  /**
   * A component's plaintext from its chunks: each one downloaded (the next
   * two ahead), checked against its size and ciphertext digest before it is
   * decrypted, decompressed into exactly its length; the whole plaintext's
   * size and sha256 are checked at the end (the stream fails there, and the
   * caller discards what it wrote).
   * @returns a stream that fails with AgentbakError(13) for damage, (12) when no identity is a recipient
   * @throws AgentbakError(13) at once for a list that is not valid chunk refs, or does not add up to `whole.size`
   */
  read(list: ChunkRef[], identities: AgeIdentity[], whole: Whole): Readable {
    checkList(list, whole.label, whole.size, whole.skip);
    return Readable.from(this.plaintext(list, identities, whole), { objectMode: false, highWaterMark: 1 });
  }

  /**
   * The last chunks read, decrypted with which identities: packed small files are read one after another from the
   * same chunk, which is then downloaded and decrypted once, not once per file.
   */
  private recent: { ref: ChunkRef; identities: AgeIdentity[]; plain: Buffer }[] = [];

  private cached(r: ChunkRef, identities: AgeIdentity[]): Buffer | null {
    const hit = this.recent.find((x) => x.identities === identities && x.ref.id === r.id && x.ref.sha256 === r.sha256 && x.ref.size === r.size && x.ref.length === r.length);
    return hit?.plain ?? null;
  }

  private async *plaintext(list: ChunkRef[], identities: AgeIdentity[], whole: Whole): AsyncGenerator<Buffer> {
    const h = createHash("sha256");
    // each chunk: its plaintext when it was just read (a packed file's neighbour), else its download
    const ahead: Promise<{ plain?: Buffer; sealed?: Buffer }>[] = [];
    const queue = (i: number) => {
      if (i >= list.length) return;
      const plain = this.cached(list[i]!, identities);
      const p = plain ? Promise.resolve({ plain }) : this.fetch(list[i]!, whole.label).then((sealed) => ({ sealed }));
      p.catch(() => undefined); // awaited in order below
      ahead.push(p);
    };
    queue(0);
    queue(1);
    let skip = whole.skip ?? 0;
    let want = whole.size;
    for (let i = 0; i < list.length; i++) {
      const r = list[i]!;
      const got = await ahead.shift()!;
      queue(i + 2);
      let plain = got.plain ?? (await this.open(r, got.sealed!, identities, whole.label));
      if (got.sealed && whole.skip !== undefined) this.recent = [...this.recent.slice(-1), { ref: r, identities, plain }];
      // a packed file: its range of the chunks' plaintext (the list was checked to touch every chunk)
      plain = plain.subarray(skip, skip + want);
      skip = 0;
      want -= plain.length;
      h.update(plain);
      yield plain;
    }
    if (h.digest("hex") !== whole.sha256) throw verifyError(`${whole.label}: sha256 of its chunks' plaintext does not match the manifest`);
  }

  /** Decrypts and decompresses a checked chunk into exactly its length. @throws AgentbakError(13), (12) when no identity is a recipient */
  private async open(r: ChunkRef, sealed: Buffer, identities: AgeIdentity[], label: string): Promise<Buffer> {
    let compressed: Buffer;
    try {
      compressed = await decryptChunk(sealed, identities);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "NO_IDENTITY") throw noKey(`${label}: chunk ${r.id}: no identity matched any of its recipients`);
      throw verifyError(`${label}: chunk ${r.id} does not decrypt: ${(e as Error).message}`);
    }
    try {
      return decompressChunk(compressed, r.length);
    } catch (e) {
      throw verifyError(`${label}: chunk ${r.id}: ${(e as Error).message}`);
    }
  }

  /**
   * Checks chunks without keys: each one is there with its size (HEAD), and
   * with `read` its ciphertext digest too (a full read). A chunk named by
   * several components or snapshots is checked once.
   * @returns how many distinct chunks and bytes were checked
   * @throws AgentbakError(13) naming up to three bad chunks and how many there are
   */
  async verify(list: ChunkRef[], o: { read: boolean; label?: string; concurrency?: number }): Promise<{ chunks: number; bytes: number }> {
    const label = o.label ?? "chunks";
    checkList(list, label);
    const unique = new Map<string, ChunkRef>();
    for (const r of list) {
      const seen = unique.get(r.id);
      if (seen && (seen.sha256 !== r.sha256 || seen.size !== r.size || seen.length !== r.length)) throw verifyError(`${label}: chunk ${r.id} is listed with two different digests`);
      unique.set(r.id, r);
    }
    const problems: string[] = [];
    let bytes = 0;
    const check = async (r: ChunkRef) => {
      try {
        if (o.read) await this.fetch(r, label);
        else {
          const h = await this.store.head(this.key(r.id));
          if (!h) throw verifyError(`${label}: chunk ${r.id} is missing from the repository`);
          if (h.size !== r.size) throw verifyError(`${label}: chunk ${r.id} is ${h.size} bytes, manifest says ${r.size}`);
        }
        bytes += r.size;
      } catch (e) {
        if (!(e instanceof AgentbakError)) throw e;
        problems.push(e.message);
      }
    };
    await inParallel([...unique.values()], o.concurrency ?? 4, check);
    if (problems.length) throw verifyError(`${problems.length} of ${unique.size} chunks failed: ${problems.slice(0, 3).join("; ")}`);
    return { chunks: unique.size, bytes };
  }

  /**
   * Mark and sweep: deletes every chunk not in `referenced` (the chunk ids of
   * every snapshot of the agent the repository lists, verified or not) that
   * is older than the grace period. A new sweep epoch is recorded before the
   * first delete, so every host's known-chunks index is checked against a
   * listing before it is trusted again. The lease is checked before every
   * delete: a lost lease stops the sweep with its error.
   * @throws the lease's error; the store's errors
   */
  async sweep(referenced: Set<string>, lease: Lease, o: { graceMs?: number; now?: Date } = {}): Promise<SweepResult> {
    const now = (o.now ?? new Date()).getTime();
    const grace = o.graceMs ?? DEFAULT_GRACE_MS;
    await lease.assertHeld();
    await this.store.put(`${this.prefix}/${SWEEP_RECORD}`, JSON.stringify({ epoch: randomBytes(16).toString("hex"), started_at: new Date(now).toISOString(), token: lease.token }));
    const ids = await this.listIds();
    const r: SweepResult = { listed: ids.size, referenced: 0, deleted: 0, deletedBytes: 0, young: 0, retained: 0 };
    for (const id of ids) {
      if (referenced.has(id)) {
        r.referenced++;
        continue;
      }
      const h = await this.store.head(this.key(id));
      if (!h) continue; // gone meanwhile
      if (now - h.mtimeMs < grace) {
        r.young++;
        continue;
      }
      await lease.assertHeld();
      if (await this.store.delete(this.key(id))) {
        r.deleted++;
        r.deletedBytes += h.size;
      } else r.retained++;
    }
    return r;
  }
}

/** Runs `f` over `items`, at most `n` at once; the first failure is thrown once all started ones settled. */
async function inParallel<T>(items: T[], n: number, f: (x: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await f(items[next++]!);
  };
  const results = await Promise.allSettled(Array.from({ length: Math.min(n, items.length) }, worker));
  const failed = results.find((x): x is PromiseRejectedResult => x.status === "rejected");
  if (failed) throw failed.reason;
}

/**
 * A backup host's writer of one agent's chunks (ChunkStore.writer). Chunks
 * are cut and hashed as the input is read; one the known-chunks index holds
 * costs nothing more; a new one is compressed at once (the input's buffer is
 * reused for what follows), then encrypted and uploaded beside the reading of
 * the next ones, at most `concurrency` at a time. Call save() when done (also
 * after a failure: what was uploaded is then known to the next run).
 */
export class ChunkWriter {
  /** chunks being uploaded by this writer, by id: a chunk repeated within a run is uploaded once */
  private readonly pending = new Map<string, Promise<ChunkRef>>();
  /**
   * chunk buffers not in use: one is reused from file to file rather than a new 12 MiB one for each (GC in the
   * profile of two passes over the bench's 1578 files: 558 ms before, 293 ms after), one more for each
   * putFile or putStream running at once
   */
  private readonly buffers: Buffer[] = [];

  /** @internal use ChunkStore.writer */
  constructor(
    private readonly cs: ChunkStore,
    private readonly key: Buffer,
    private readonly known: KnownChunks,
    private readonly stat: StatCache,
    private readonly recipients: string[],
    private readonly params: ChunkParams,
    private readonly concurrency: number,
    /** the store's ids as listed when the writer opened, with their objects' sizes */
    private readonly present: ReadonlyMap<string, number>,
    /** WriterOptions.signed */
    private readonly signed: () => Promise<ReadonlyMap<string, ReadonlySet<string>>>,
  ) {}

  /**
   * Adds the chunks of a verified manifest (its signed refs) to the known
   * index, so that a host whose index was lost does not upload them again.
   */
  learn(list: ChunkRef[]): void {
    for (const r of list) if (this.present.get(r.id) === r.size) this.known.add(r);
  }

  /**
   * Stores a file as chunks. A file whose device, inode, size, mtime and ctime
   * are those of the last time it was stored (and whose chunks the index still
   * knows) is not read: its chunk list is reused.
   * @param o.statCache false: the stat cache may not answer (the file is read), as for files made for this run (a dump)
   * @param o.remember whether a file read is recorded in the stat cache for the next run (default: `statCache`);
   *   a file read while the cache may not answer (the first backup under a scan policy) is still worth remembering
   * @param o.tap given each piece of the file as it is read and cut (a chunk, at most `max` bytes, valid only
   *   during the call), in order: the secret scan reads the file in the same pass; not called when the cache answers
   * @throws the file's read errors (ENOENT, EISDIR, EIO: with its path), the store's errors
   */
  async putFile(path: string, o: PutFileOptions = {}): Promise<StoredFile & { stats: PutStats }> {
    const useCache = o.statCache ?? true;
    const remember = o.remember ?? useCache;
    const fh = await open(path, "r");
    try {
      const statNs = BigInt(Date.now()) * 1_000_000n;
      const st = await fh.stat({ bigint: true });
      const hit = useCache ? this.stat.lookup(path, st) : null;
      const refs = hit?.chunks.map((id) => this.known.get(id));
      if (hit && refs!.every((r) => r)) {
        const chunks = refs as ChunkRef[];
        return { sha256: hit.sha256, size: Number(st.size), chunks, stats: { read: 0, newChunks: 0, newBytes: 0, reusedChunks: chunks.length, fromStatCache: true, changedWhileRead: false } };
      }
      const r = await this.withBuffer((buf) => this.putChunks(handleChunks(fh, this.params, buf), o.tap));
      const after = await fh.stat({ bigint: true });
      const changed = after.size !== st.size || after.mtimeNs !== st.mtimeNs || after.ctimeNs !== st.ctimeNs || BigInt(r.size) !== st.size;
      if (remember && !changed)
        this.stat.record(
          path,
          st,
          statNs,
          r.sha256,
          r.chunks.map((c) => c.id),
        );
      return { ...r, stats: { ...r.stats, changedWhileRead: changed } };
    } finally {
      await fh.close();
    }
  }

  /** Stores a stream (a dump piped in, a pack of small files) as chunks. @throws the stream's errors, the store's errors */
  putStream(source: AsyncIterable<Uint8Array>): Promise<StoredFile & { stats: PutStats }> {
    return this.withBuffer((buf) => this.putChunks(streamChunks(source, this.params, buf)));
  }

  private async withBuffer<T>(f: (buf: Buffer) => Promise<T>): Promise<T> {
    const buf = this.buffers.pop() ?? chunkBuffer(this.params);
    try {
      return await f(buf);
    } finally {
      this.buffers.push(buf);
    }
  }

  private async putChunks(input: AsyncIterable<Buffer>, tap?: PieceSink): Promise<StoredFile & { stats: PutStats }> {
    const whole = createHash("sha256");
    const stats: PutStats = { read: 0, newChunks: 0, newBytes: 0, reusedChunks: 0, fromStatCache: false, changedWhileRead: false };
    const refs: (ChunkRef | Promise<ChunkRef>)[] = [];
    const inflight = new Set<Promise<unknown>>();
    try {
      for await (const view of input) {
        whole.update(view);
        tap?.push(view);
        stats.read += view.length;
        const id = chunkId(this.key, view);
        const known = this.known.get(id) ?? this.pending.get(id);
        if (known) {
          stats.reusedChunks++;
          refs.push(known);
          continue;
        }
        // the view is the chunker's buffer: compressed now, into a buffer of its own; the rest runs beside what follows
        const p = this.upload(id, view.length, compressChunk(view), stats);
        this.pending.set(id, p);
        refs.push(p);
        const tracked = p.finally(() => inflight.delete(tracked));
        tracked.catch(() => undefined); // its failure is the upload's, thrown below
        inflight.add(tracked);
        if (inflight.size >= this.concurrency) await Promise.race(inflight);
      }
      return { sha256: whole.digest("hex"), size: stats.read, chunks: await Promise.all(refs), stats };
    } finally {
      await Promise.allSettled(refs);
      this.pending.clear();
    }
  }

  /**
   * Encrypts and uploads a new chunk. One that is there already is adopted when a verified manifest names its bytes
   * (stored by a host whose index was lost); else (a dead run's, or damaged in place: without the identity its
   * bytes can not be told apart) it is written over, never named by a new snapshot as it is.
   */
  private async upload(id: string, length: number, compressed: Buffer, stats: PutStats): Promise<ChunkRef> {
    const key = this.cs.key(id);
    const there = this.present.has(id);
    if (there) {
      const adopted = await this.adopt(id, length);
      if (adopted) return (stats.reusedChunks++, adopted);
    }
    const sealed = await encryptChunk(compressed, this.recipients);
    const ref: ChunkRef = { id, sha256: sha256hex(sealed), size: sealed.length, length };
    if (!(await this.cs.store.put(key, sealed, { ifNoneMatch: !there }))) {
      const adopted = await this.adopt(id, length);
      if (!adopted) throw new Error(`chunk ${key} exists and vanished at once`);
      return (stats.reusedChunks++, adopted);
    }
    this.known.add(ref);
    stats.newChunks++;
    stats.newBytes += ref.size;
    return ref;
  }

  /**
   * A chunk the store holds but this host's index does not: its id says it
   * was made with this host's key from the same plaintext, so its ciphertext
   * is taken as it is (downloaded once for its digest; a verify with the
   * identity, or a drill, decrypts it).
   * @returns its ref, or null when it is not there after all
   */
  private async adopt(id: string, length: number): Promise<ChunkRef | null> {
    const b = await this.cs.store.get(this.cs.key(id));
    if (!b) return null;
    const ref: ChunkRef = { id, sha256: sha256hex(b), size: b.length, length };
    if (!(await this.signed()).get(id)?.has(ref.sha256)) return null;
    this.known.add(ref);
    return ref;
  }

  /**
   * Whether every chunk of a list is one this host's index holds with the same digest and sizes: checked against the
   * store's listing after any sweep, so a list it holds names no chunk a sweep removed (a reused entry is safe to sign).
   */
  holds(list: ChunkRef[]): boolean {
    return list.every((r) => {
      const k = this.known.get(r.id);
      return k !== undefined && k.sha256 === r.sha256 && k.size === r.size && k.length === r.length;
    });
  }

  /** Writes the known-chunks index and the stat cache (no fsync: they are caches). */
  save(): void {
    this.known.save();
    this.stat.save();
  }
}

/**
 * An agent's chunk writer, opened when the first large file is met: the capture's stages get it as data and store
 * through it (putFile, putStream, holds), never opening it themselves.
 */
export class LazyWriter {
  private opened: Promise<ChunkWriter> | null = null;
  constructor(
    private readonly store: ChunkStore,
    private readonly o: WriterOptions,
  ) {}

  /** The writer, opened now if it was not. @throws what ChunkStore.writer throws */
  get(): Promise<ChunkWriter> {
    return (this.opened ??= this.store.writer(this.o));
  }

  /** Stores one file as chunks through the writer, opened now if it was not (ChunkWriter.putFile). */
  async putFile(path: string, o: PutFileOptions = {}): ReturnType<ChunkWriter["putFile"]> {
    return (await this.get()).putFile(path, o);
  }

  /** Stores a stream as chunks through the writer, opened now if it was not (ChunkWriter.putStream). */
  async putStream(source: AsyncIterable<Uint8Array>): ReturnType<ChunkWriter["putStream"]> {
    return (await this.get()).putStream(source);
  }

  /** Whether this host's index holds every chunk of a list (ChunkWriter.holds), the writer opened now if it was not. */
  async holds(list: ChunkRef[]): Promise<boolean> {
    return (await this.get()).holds(list);
  }

  /** Keeps what was uploaded for the next run, when a writer was opened (a cache: its failure costs time, never data). */
  async save(): Promise<void> {
    await this.opened?.then((w) => w.save()).catch(() => undefined);
  }
}
