/**
 * Writes a bundle payload first: components → tar → zstd → age, hashed as it
 * is written, straight to its place in the bundle file; then the signed
 * manifest and the outer tar's head, into the room kept before it. The
 * payload is written once (a temp file copied into the bundle wrote it twice:
 * 1.5-1.7 s of a 1194 MiB database's 11.8-12.6 s backup, after all the CPU
 * work). Everything streams; memory does not grow with the size of the state.
 */
import { noProgress, type Progress } from "../progress.js";
import { closeSync, createReadStream, fsyncSync, openSync, renameSync, rmSync, statSync } from "node:fs";
import { FlushBehindFile, fsyncPath, writeAll } from "../fsutil.js";
import { once } from "node:events";
import { pipeline } from "node:stream/promises";
import { Readable } from "node:stream";
import * as tar from "tar-stream";
import { AgeEncryptStream } from "../crypto/age.js";
import { NS, signMessage, type SigningKey } from "../crypto/sshsig.js";
import { AgentbakError, ioErrno, ioError } from "../errors.js";
import { CHUNK_LIST_FORMAT_VERSION, CHUNKED_FORMAT_VERSION, encodeManifest, FORMAT_VERSION, MAX_MANIFEST, PACKED_FORMAT_VERSION, PLAIN_FORMAT_VERSION, sha256hex, type Component, type Manifest } from "./manifest.js";
import { BLOCK, tarBlocks, tarEnd, tarHeader, tarPadding } from "./outer.js";
import { BufferPool, ByteCounter, HashTap, LIST_FROM, PAYLOAD_CHUNK, pooledFileStream, youngCollector, ZstdCompress, zstdOutSize } from "./streams.js";
import { pageRuns, type PageSource } from "../state/sqlite/pagefile.js";

/**
 * A bundle file planned before its payload is written: payload.age starts at
 * `payloadAt`, after room for manifest.json's header, `manifestRoom` bytes of
 * manifest, manifest.sig's header and signature, and payload.age's header.
 */
export interface BundlePlan {
  path: string;
  manifestRoom: number;
  sigSize: number;
  payloadAt: number;
  /** a payload of LIST_FROM bytes or more lists its chunks' digests (format 7); export writes format 4, without */
  listChunks: boolean;
}

/**
 * Plans the bundle file `path` (which must not exist yet) for these
 * components. The manifest's room is a guess made before the manifest
 * exists: the agent's previous manifest (`prior`, without its padding) and
 * 1 KiB more, or, when that is smaller or there is none, 3 KiB and per
 * component twice its path and 256 bytes (a component's entry was 434 bytes
 * for a database with its record counts) and 160 bytes per chunk it lists.
 * A manifest that does not fit is written without padding and the payload
 * moved after it (writeBundleFile).
 */
export function planBundle(path: string, key: SigningKey, components: Pick<Component, "path" | "chunks">[], prior?: Manifest, payloadBound = 0, listChunks = true): BundlePlan {
  // a payload's chunk list: 67 bytes a digest; the payload is at most about the components' bytes (zstd and age add
  // a little to incompressible ones)
  const list = listChunks && payloadBound * 1.01 + 65536 >= LIST_FROM ? 67 * Math.ceil((payloadBound * 1.01 + 65536) / PAYLOAD_CHUNK) + 16 : 0;
  const guess = list + Math.max(3072 + components.reduce((n, c) => n + 2 * c.path.length + 256 + 160 * (c.chunks?.length ?? 0), 0), prior ? unpadded(prior).length + 1024 : 0);
  const manifestRoom = Math.min(MAX_MANIFEST, tarBlocks(guess));
  // an Ed25519 SSHSIG of one key in one namespace has the same size whatever it signs
  const sigSize = signMessage(key, NS.manifest, Buffer.alloc(0)).length;
  return { path, manifestRoom, sigSize, payloadAt: BLOCK + manifestRoom + BLOCK + tarBlocks(sigSize) + BLOCK, listChunks };
}

/** A manifest's bytes without its padding. */
function unpadded(m: Manifest): Buffer {
  const { layout_padding: _p, ...rest } = m;
  return encodeManifest(rest);
}

/**
 * A staged component and what the manifest says about it: a file, or the
 * pages of a database snapshot read in place (a full snapshot pinned by its
 * read transaction: nothing is copied to staging first).
 */
export type StagedComponent = StagedFile | (Omit<Component, "sha256" | "size"> & { pages: PageSource; file?: undefined });

/** A staged component file. */
export type StagedFile = Omit<Component, "sha256" | "size"> & { file: string; pages?: undefined };

/** A snapshot's pages as a stream of 1 MiB runs, read into `pool`'s buffers (zstd gives them back). */
function pageStream(src: PageSource, pool: BufferPool): Readable {
  const runs = pageRuns(src.pageSize, src.pageCount, pool.size);
  return new Readable({
    highWaterMark: pool.size,
    read() {
      try {
        const r = runs.next();
        if (r.done) return void this.push(null);
        const [first, n] = r.value;
        const buf = pool.take().subarray(0, n * src.pageSize);
        src.read(first, n, buf);
        this.push(buf);
      } catch (e) {
        this.destroy(e as Error);
      }
    },
  });
}

/** The manifest fields the writer does not compute itself. */
export type ManifestDraft = Omit<Manifest, "components" | "payload">;

const ZSTD_LEVEL = 3;

/**
 * Packs, compresses and encrypts `components` into the planned bundle file, at
 * its payload's place (the file is created; the head is left for writeBundleFile).
 * @returns the components with their digests and the payload's digest and sizes.
 */
export async function writePayload(components: StagedComponent[], recipients: string[], plan: BundlePlan, progress: Progress = noProgress): Promise<{ components: Component[]; payload: Manifest["payload"] }> {
  const pack = tar.pack();
  const tarTap = new ByteCounter();
  const outTap = new HashTap(Number.POSITIVE_INFINITY, "payload.age", PAYLOAD_CHUNK);
  // written back as it goes: the payload's writes reach the disk beside the CPU work, not after it
  const out = new FlushBehindFile(plan.path, 0o644, { start: plan.payloadAt });
  // compression in zstd's own threads, off this one; 1 MiB jobs keep their buffers small (the default 8 MiB jobs
  // cost ~50 MiB). One worker or two: the same wall time beside the checks on 2 cores (1194 MiB: 14.6-17.1 s vs
  // 15.4-16.1 s), two used ~5 MiB more
  // the components are read into a few reused buffers, which zstd gives back once it has copied them; its output
  // buffers come back from the age stage likewise
  const pool = new BufferPool(1 << 20);
  const compressed = new BufferPool(zstdOutSize());
  const zstd = new ZstdCompress({ level: ZSTD_LEVEL, workers: 2, windowLog: 21, jobSize: 1 << 20 }, pool, compressed);
  // the age stage's output is a new buffer per 64 KiB chunk: collected every 4 MiB rather than every ~64
  const collect = youngCollector(4 << 20);
  const done = pipeline(pack, tarTap, zstd, new AgeEncryptStream(recipients, (b) => (compressed.give(b), collect(b.length))), outTap, out);
  // a failure of the output (a full disk) ends `done` while a component is still being packed: it is raced
  // below, and neither promise may go unhandled meanwhile
  done.catch(() => undefined);
  const result: Component[] = [];
  try {
    // counted as the components are read into the tar (every byte of them once)
    const counted = progress.stage("writing payload", components.reduce((n, c) => n + sizeOf(c), 0));
    for (const c of components) {
      const size = sizeOf(c);
      // a component that grows or shrinks while it is read fails here, named (tar-stream would say only "Size mismatch")
      const tap = new HashTap(size, `component ${c.path}`, undefined, true);
      const entry = pack.entry({ name: c.path, size, mode: 0o644, mtime: new Date(0), type: "file" });
      const packed = pipeline(c.pages ? pageStream(c.pages, pool) : pooledFileStream(c.file, pool), tap, new ByteCounter(size, `component ${c.path}`, counted), entry);
      packed.catch(() => undefined);
      await Promise.race([packed, done]);
      await packed;
      const { file: _f, pages: _p, ...meta } = c;
      result.push({ ...meta, sha256: tap.digest(), size });
    }
    pack.finalize();
    await done;
  } catch (e) {
    pack.destroy(e as Error);
    await done.catch(() => undefined);
    // the pipeline ends on the first error without waiting for the file's close, and a read that fails at once
    // beats the file's open (in libuv's thread pool): the caller removes the staging folder, which must not see
    // the file appear after it was emptied
    if (!out.closed) await new Promise<void>((resolve) => out.once("close", () => resolve())); // once() would reject on the error the stream emits first
    // an error that already names its file (a database read in place) is passed on as it is
    throw !(e instanceof AgentbakError) && ioErrno(e) ? ioError(e, plan.path) : e;
  }
  // no fsync here: writeBundleFile fsyncs the finished bundle
  return {
    components: result,
    payload: { sha256: outTap.digest(), size: outTap.bytes, tar_size: tarTap.bytes, compression: "zstd", encryption: "age-x25519", chunks: payloadChunks(outTap, plan.listChunks) },
  };
}

/** The payload's chunk digests' root, and from LIST_FROM bytes on each digest (format 7: restore checks each chunk as it reads). */
function payloadChunks(tap: HashTap, list: boolean): NonNullable<Manifest["payload"]["chunks"]> {
  const sha256 = tap.chunks!.digest();
  return list && tap.bytes >= LIST_FROM ? { size: PAYLOAD_CHUNK, sha256, digests: tap.chunks!.list } : { size: PAYLOAD_CHUNK, sha256 };
}

/** The manifest with `layout_padding` that makes it exactly `room` bytes, or null when it is larger. */
function fitManifest(m: Manifest, room: number): Manifest | null {
  const bare = encodeManifest({ ...m, layout_padding: "" }).length;
  return bare <= room ? { ...m, layout_padding: " ".repeat(room - bare) } : null;
}

/** A staged component's bytes. */
const sizeOf = (c: StagedComponent) => (c.pages ? c.pages.pageCount * c.pages.pageSize : statSync(c.file).size);

/**
 * Plans the bundle at `path` and writes its payload (writePayload): the `staged` components; the manifest will also
 * list `stored` (components whose bytes are elsewhere: the chunk store), and `prior`, the agent's newest manifest,
 * sizes the room kept for it.
 * @returns the bundle's plan (for writeBundleFile) and what was written
 */
export async function writeComponents(path: string, key: SigningKey, staged: StagedComponent[], recipients: string[], o: { stored?: Pick<Component, "path" | "chunks">[]; prior?: Manifest; progress?: Progress; listChunks?: boolean } = {}) {
  const bundle = planBundle(path, key, [...staged, ...(o.stored ?? [])], o.prior, staged.reduce((n, c) => n + sizeOf(c), 0), o.listChunks ?? true);
  return { bundle, written: await writePayload(staged, recipients, bundle, o.progress) };
}

/**
 * Signs the manifest and completes the planned bundle file whose payload
 * writePayload wrote: the head into the room kept for it, the end of the tar
 * after the payload, then fsync. A manifest larger than its room is written
 * without padding into a new file, the payload copied after it, and that
 * file renamed over the first.
 * @returns the manifest bytes that were signed, and their sha256 (the manifest_sha256 receipts and audit entries name)
 */
export async function writeBundleFile(draft: Manifest, key: SigningKey, plan: BundlePlan): Promise<{ bytes: Buffer; sha256: string }> {
  // a bundle whose components are all in its payload is the format-4 bundle of before; one that lists chunks is format 5,
  // and one with a packed small file (a range of its chunks) or a source's fingerprint format 6
  // and one whose payload lists its chunks' digests (LIST_FROM bytes and more) format 7, one with index_digest_checked 8
  const format_version = draft.components.some((c) => c.index_digest_checked !== undefined) ? FORMAT_VERSION : draft.payload.chunks?.digests || draft.recall ? CHUNK_LIST_FORMAT_VERSION : draft.components.some((c) => c.chunk_skip !== undefined || c.fingerprint !== undefined) ? PACKED_FORMAT_VERSION : draft.components.some((c) => c.chunks) ? CHUNKED_FORMAT_VERSION : PLAIN_FORMAT_VERSION;
  const { layout_padding: _p, ...unpadded } = { ...draft, format_version };
  const fitted = fitManifest(unpadded, plan.manifestRoom);
  const mbytes = encodeManifest(fitted ?? unpadded);
  const sig = Buffer.from(signMessage(key, NS.manifest, mbytes));
  const size = draft.payload.size;
  const mtime = new Date(draft.created_at);
  const head = Buffer.concat([
    tarHeader("manifest.json", mbytes.length, mtime),
    mbytes,
    tarPadding(mbytes.length),
    tarHeader("manifest.sig", sig.length, mtime),
    sig,
    tarPadding(sig.length),
    tarHeader("payload.age", size, mtime),
  ]);
  const tail = Buffer.concat([tarPadding(size), tarEnd()]);
  try {
    if (head.length === plan.payloadAt) {
      const fd = openSync(plan.path, "r+");
      try {
        writeAll(fd, head, 0, head.length, 0);
        writeAll(fd, tail, 0, tail.length, plan.payloadAt + size);
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
    } else await movePayloadAfter(head, tail, plan, size);
  } catch (e) {
    rmSync(plan.path, { force: true });
    // the file that failed: the bundle, or (moving the payload) its new copy
    throw ioErrno(e) ? ioError(e, (e as NodeJS.ErrnoException).path ?? plan.path) : e;
  }
  return { bytes: mbytes, sha256: sha256hex(mbytes) };
}

/** The bundle written anew with `head` before the payload (the rare manifest larger than its room). */
async function movePayloadAfter(head: Buffer, tail: Buffer, plan: BundlePlan, size: number): Promise<void> {
  const moved = `${plan.path}.moved`;
  const out = new FlushBehindFile(moved, 0o644);
  const write = async (b: Buffer) => {
    if (!out.write(b)) await once(out, "drain");
  };
  try {
    await write(head);
    if (size) await pipeline(createReadStream(plan.path, { start: plan.payloadAt, end: plan.payloadAt + size - 1, highWaterMark: 1 << 20 }), out, { end: false });
    await write(tail);
    out.end();
    await once(out, "finish");
    fsyncPath(moved);
    renameSync(moved, plan.path);
  } catch (e) {
    out.destroy();
    rmSync(moved, { force: true });
    // the copy's own writes, fsync and rename name it; a failed read of the bundle names the bundle (the stream says so)
    throw ioErrno(e) && !(e as NodeJS.ErrnoException).path ? Object.assign(e as Error, { path: moved }) : e;
  }
}
