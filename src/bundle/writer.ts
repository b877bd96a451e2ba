/**
 * Writes a bundle: components → tar → zstd → age (payload, to a temp file,
 * hashed as it is written), then the signed manifest, then the outer tar.
 * Everything streams; memory does not grow with the size of the state.
 */
import { createReadStream, createWriteStream, rmSync, statSync } from "node:fs";
import { FlushBehindFile, fsyncPath } from "../fsutil.js";
import { once } from "node:events";
import { rm } from "node:fs/promises";
import { pipeline } from "node:stream/promises";
import { Readable } from "node:stream";
import * as tar from "tar-stream";
import { AgeEncryptStream } from "../crypto/age.js";
import { NS, signMessage, type SigningKey } from "../crypto/sshsig.js";
import { AgentbakError, ioErrno, ioError } from "../errors.js";
import { encodeManifest, type Component, type Manifest } from "./manifest.js";
import { tarEnd, tarHeader, tarPadding } from "./outer.js";
import { ByteCounter, HashTap, PAYLOAD_CHUNK, zstdCompressStream } from "./streams.js";
import { pageRuns, type PageSource } from "../state/pages.js";

/**
 * A staged component and what the manifest says about it: a file, or the
 * pages of a database snapshot read in place (a full snapshot pinned by its
 * read transaction: nothing is copied to staging first).
 */
export type StagedComponent = StagedFile | (Omit<Component, "sha256" | "size"> & { pages: PageSource; file?: undefined });

/** A staged component file. */
export type StagedFile = Omit<Component, "sha256" | "size"> & { file: string; pages?: undefined };

/** A snapshot's pages as a stream of 1 MiB runs (fresh buffers: the tar packer keeps what it is given until written). */
function pageStream(src: PageSource): Readable {
  const runs = pageRuns(src.pageSize, src.pageCount, 1 << 20);
  return new Readable({
    highWaterMark: 1 << 20,
    read() {
      try {
        const r = runs.next();
        if (r.done) return void this.push(null);
        const [first, n] = r.value;
        const buf = Buffer.allocUnsafe(n * src.pageSize);
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
 * Packs, compresses and encrypts `components` into `payloadFile`.
 * @returns the components with their digests and the payload's digest and sizes.
 */
export async function writePayload(components: StagedComponent[], recipients: string[], payloadFile: string): Promise<{ components: Component[]; payload: Manifest["payload"] }> {
  const pack = tar.pack();
  const tarTap = new ByteCounter();
  const outTap = new HashTap(Number.POSITIVE_INFINITY, "payload.age", PAYLOAD_CHUNK);
  const out = createWriteStream(payloadFile, { flags: "wx", mode: 0o600 });
  // compression in zstd's own threads, off this one; 1 MiB jobs keep their buffers small (the default 8 MiB jobs
  // cost ~50 MiB). One worker or two: the same wall time beside the checks on 2 cores (1194 MiB: 14.6-17.1 s vs
  // 15.4-16.1 s), two used ~5 MiB more
  const CompressStream = zstdCompressStream();
  const zstd = new CompressStream({ compressionLevel: ZSTD_LEVEL, nbWorkers: 2, windowLog: 21, jobSize: 1 << 20, checksumFlag: true });
  const done = pipeline(pack, tarTap, zstd, new AgeEncryptStream(recipients), outTap, out);
  // a failure of the output (a full disk) ends `done` while a component is still being packed: it is raced
  // below, and neither promise may go unhandled meanwhile
  done.catch(() => undefined);
  const result: Component[] = [];
  try {
    for (const c of components) {
      const size = c.pages ? c.pages.pageCount * c.pages.pageSize : statSync(c.file).size;
      const tap = new HashTap(size, c.path);
      const entry = pack.entry({ name: c.path, size, mode: 0o644, mtime: new Date(0), type: "file" });
      const packed = pipeline(c.pages ? pageStream(c.pages) : createReadStream(c.file, { highWaterMark: 1 << 20 }), tap, entry);
      packed.catch(() => undefined);
      await Promise.race([packed, done]);
      await packed;
      if (tap.bytes !== size) throw new Error(`component ${c.path} changed size while being packed`);
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
    if (!out.closed) await once(out, "close");
    // an error that already names its file (a database read in place) is passed on as it is
    throw !(e instanceof AgentbakError) && ioErrno(e) ? ioError(e, payloadFile) : e;
  }
  // no fsync here: the payload is a temp file; the bundle that holds it is fsynced
  return {
    components: result,
    payload: { sha256: outTap.digest(), size: outTap.bytes, tar_size: tarTap.bytes, compression: "zstd", encryption: "age-x25519", chunks: { size: PAYLOAD_CHUNK, sha256: outTap.chunks!.digest() } },
  };
}

/**
 * Writes the outer bundle tar to `outFile` (which must not exist) and fsyncs
 * it. The payload file is consumed: removed once copied.
 * @returns the manifest bytes that were signed.
 */
export async function writeBundleFile(manifest: Manifest, key: SigningKey, payloadFile: string, outFile: string): Promise<Buffer> {
  const mbytes = encodeManifest(manifest);
  const sig = Buffer.from(signMessage(key, NS.manifest, mbytes));
  const mtime = new Date(manifest.created_at);
  const out = new FlushBehindFile(outFile, 0o644);
  const write = async (b: Buffer) => {
    if (!out.write(b)) await once(out, "drain");
  };
  try {
    await write(Buffer.concat([tarHeader("manifest.json", mbytes.length, mtime), mbytes, tarPadding(mbytes.length)]));
    await write(Buffer.concat([tarHeader("manifest.sig", sig.length, mtime), sig, tarPadding(sig.length)]));
    await write(tarHeader("payload.age", manifest.payload.size, mtime));
    await pipeline(createReadStream(payloadFile, { highWaterMark: 1 << 20 }), out, { end: false });
    await write(Buffer.concat([tarPadding(manifest.payload.size), tarEnd()]));
    out.end();
    await once(out, "finish");
  } catch (e) {
    out.destroy();
    rmSync(outFile, { force: true });
    throw ioErrno(e) ? ioError(e, outFile) : e;
  }
  // removed beside the fsync (freeing a large file's blocks takes a while); once it is gone its unflushed pages
  // are dropped instead of being written back along with the bundle's
  const removed = rm(payloadFile, { force: true });
  try {
    fsyncPath(outFile);
  } catch (e) {
    throw ioError(e, outFile);
  } finally {
    await removed;
  }
  return mbytes;
}
