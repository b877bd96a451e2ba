/**
 * Reads and verifies a bundle, in the order DESIGN.md fixes: signature over
 * the raw manifest bytes → strict manifest parse → payload digest → decrypt →
 * component digests. Nothing from the payload is decrypted, decompressed or
 * parsed before the signature and payload digest check out.
 */
import { noProgress, type Progress } from "../progress.js";
import { createHash } from "node:crypto";
import { open } from "node:fs/promises";
import { dirname, join } from "node:path";
import { finished, pipeline } from "node:stream/promises";
import type { AgeIdentity } from "../crypto/age.js";
import type { Trust } from "../crypto/trust.js";
import { AgentbakError, ioErrno, ioError, noKey, PayloadMismatch, verifyError } from "../errors.js";
import { clipName } from "./manifest.js";
import { plaintext } from "./plaintext.js";
import { fileChunksSha256 } from "./chunks.js";
import { ByteCounter, youngCollector } from "./streams.js";
import { PayloadUntar, type Member, type TarHeader } from "./untar.js";
import { ensureDir, FlushBehindFile } from "../fsutil.js";

export type { Trust };

import { verifyHeader, type VerifiedBundle } from "./header.js";

export { verifyHeader, verifyLayout, type VerifiedBundle } from "./header.js";

/** sha256 of bytes [start, start + size) of a file: the next read runs while this chunk is hashed. */
export async function fileRangeSha256(path: string, start: number, size: number): Promise<string> {
  const CHUNK = 4 << 20;
  const h = createHash("sha256");
  const fh = await open(path, "r");
  try {
    const bufs = [Buffer.allocUnsafe(CHUNK), Buffer.allocUnsafe(CHUNK)];
    const readAt = (i: number, off: number) => fh.read(bufs[i % 2]!, 0, Math.min(CHUNK, size - off), start + off);
    let next = size > 0 ? readAt(0, 0) : null;
    for (let i = 0, off = 0; next; i++) {
      const { bytesRead } = await next;
      if (bytesRead === 0) throw verifyError(`bundle truncated at byte ${start + off}`);
      off += bytesRead;
      next = off < size ? readAt(i + 1, off) : null;
      h.update(bufs[i % 2]!.subarray(0, bytesRead));
    }
  } finally {
    await fh.close();
  }
  return h.digest("hex");
}

/**
 * Full header check plus the payload digest (one read of the payload). With `decrypting` (the caller goes on to
 * readPayload), a format-7 payload's digest is left to that read, which checks each chunk before decrypting it
 * (`payloadUnchecked`).
 * @throws AgentbakError(13) `payload.age: digest mismatch` when the payload is not the signed one.
 */
export async function verifyBundle(path: string, trust: Trust, now = new Date(), progress: Progress = noProgress, o: { decrypting?: boolean } = {}): Promise<VerifiedBundle> {
  return checkPayload(verifyHeader(path, trust, now), progress, o);
}

/**
 * verifyBundle's payload half, for a bundle whose header verified (one read of the payload).
 * @throws AgentbakError(13) `payload.age: digest mismatch` when the payload is not the signed one.
 */
export async function checkPayload(v: VerifiedBundle, progress: Progress = noProgress, o: { decrypting?: boolean } = {}): Promise<VerifiedBundle> {
  if (o.decrypting && v.manifest.payload.chunks?.digests) return { ...v, payloadUnchecked: true };
  const { path, payloadOffset: at, payloadSize: size } = v.layout;
  // hashed off this thread (or in one stream): counted when done, one step of the payload's size
  const counted = progress.stage("checking payload digest", size);
  // a bundle that lists its chunks' digests is hashed on two threads; one without (written before they were added) in one stream
  const c = v.manifest.payload.chunks;
  if (c ? (await fileChunksSha256(path, at, size, c.size)) !== c.sha256 : (await fileRangeSha256(path, at, size)) !== v.manifest.payload.sha256)
    throw new PayloadMismatch("payload.age: digest mismatch (not the payload the manifest signed)");
  counted(size);
  return v;
}

/** What decrypting and checking the payload found. */
export interface PayloadCheck {
  components: { path: string; sha256: string; size: number }[];
}

/**
 * Decrypts the payload of a verified bundle and checks every component against
 * the manifest. With `destDir`, each component is also written under it (at its
 * manifest path); only regular files listed in the manifest, each once, within
 * their declared size, are accepted.
 * @throws AgentbakError(12) when no identity matches, (13) on any mismatch.
 */
export async function readPayload(v: VerifiedBundle, identities: AgeIdentity[], destDir?: string, only?: Set<string>, progress: Progress = noProgress): Promise<PayloadCheck> {
  // a chunked component (format 5) is in the agent's chunk store, not in the payload (bundle/chunked.ts)
  const expected = new Map(v.manifest.components.filter((c) => !c.chunks).map((c) => [c.path, c]));
  const seen = new Set<string>();
  const found: PayloadCheck["components"] = [];
  // the decompressed tar is only counted: each component in it is hashed on its own below
  const counted = progress.stage("decrypting payload", v.manifest.payload.tar_size);
  // the plaintext arrives in fresh buffers, spent once written: collected every 4 MiB, not after ~64 MiB of them (youngCollector)
  const collect = youngCollector(4 << 20);
  const tarTap = new ByteCounter(v.manifest.payload.tar_size, "decompressed payload", (n) => (counted(n), collect(n)));
  let payloadDigest = () => "";
  let giveBack: ((b: Buffer) => void) | undefined;
  const entry = (header: TarHeader): Member => {
    const name = header.name;
    const shown = clipName(name);
    const c = expected.get(name);
    const fail = (m: string) => verifyError(`payload: ${m}`);
    if (header.type !== "file") throw fail(`member ${shown} is a ${String(header.type).slice(0, 20)}, only regular files are accepted`);
    if (!c) throw fail(`member ${shown} is not listed in the manifest`);
    if (seen.has(name)) throw fail(`member ${shown} appears twice`);
    if (header.size !== c.size) throw fail(`member ${shown} declares ${header.size} bytes, manifest says ${c.size}`);
    seen.add(name);
    const dest = destDir && (!only || only.has(name)) ? join(destDir, name) : null;
    return memberSink(c, dest, (sha) => found.push({ path: name, sha256: sha, size: c.size }));
  };
  const extract = new PayloadUntar(entry, (b) => giveBack?.(b));
  try {
    // read, payload digest, age and zstd: on a worker thread for a large payload (bundle/plaintext.ts)
    const { chunks, sha256: signed } = v.manifest.payload;
    const listed = chunks?.digests ? { chunks: { size: chunks.size, digests: chunks.digests, signed } } : {};
    const p = plaintext({ path: v.layout.path, offset: v.layout.payloadOffset, size: v.layout.payloadSize, tarSize: v.manifest.payload.tar_size, ...listed }, identities);
    payloadDigest = p.digest;
    giveBack = p.giveBack;
    await pipeline(p.stream, tarTap, extract);
  } catch (e) {
    // the pipeline ends on the first error: a member's file still open is closed before the caller removes its folder
    if (!extract.closed) await finished(extract.destroy()).catch(() => undefined);
    if (e instanceof AgentbakError) throw e;
    const err = e as NodeJS.ErrnoException;
    if (err.code === "PAYLOAD_DIGEST") throw new PayloadMismatch(err.message);
    if (err.code === "NO_IDENTITY") throw noKey(`payload.age: ${err.message} (recipients: ${v.manifest.recipients.join(", ")})`);
    // a failed read is the bundle's file; a failed write (or mkdir) is where components were going
    if (ioErrno(err)) throw ioError(err, err.path ?? (err.syscall === "read" || !destDir ? v.layout.path : destDir));
    throw verifyError(`payload: ${err.message}`);
  }
  if (payloadDigest() !== v.manifest.payload.sha256) throw new PayloadMismatch("payload.age: changed while being read");
  if (tarTap.bytes !== v.manifest.payload.tar_size) throw verifyError(`payload: decompressed to ${tarTap.bytes} bytes, manifest says ${v.manifest.payload.tar_size}`);
  for (const p of expected.keys()) if (!seen.has(p)) throw verifyError(`payload: component ${p} missing`);
  return { components: found };
}


/**
 * One member's bytes: hashed as they arrive and (with `dest`) written to a new file; at its end the file is
 * closed and the digest compared with the manifest's.
 */
function memberSink(c: { path: string; sha256: string }, dest: string | null, ok: (sha: string) => void): Member {
  const hash = createHash("sha256");
  let sink: FlushBehindFile | null = null;
  let failed: Error | null = null;
  // a full or failing disk is not a bad bundle
  const ioFail = (e: Error) => (e instanceof AgentbakError ? e : dest && ioErrno(e) ? ioError(e, dest) : verifyError(`component ${c.path}: ${e.message}`));
  if (dest) {
    try {
      ensureDir(dirname(dest));
      sink = new FlushBehindFile(dest, 0o600);
    } catch (e) {
      throw ioError(e, dest);
    }
    sink.on("error", (e) => void (failed ??= ioFail(e)));
  }
  const check = () => {
    if (failed) throw failed;
  };
  return {
    data(view, done) {
      hash.update(view);
      if (!sink) return done();
      sink.write(view, (e) => done(e));
    },
    async ready() {
      check();
      const s = sink;
      // its writes backed up: on until they drain (or the file fails and closes: `failed` says why)
      if (s?.writableNeedDrain && !s.closed)
        await new Promise<void>((resolve) => {
          const go = () => (s.off("drain", go), s.off("close", go), resolve());
          s.on("drain", go).on("close", go);
        });
      check();
    },
    async abort() {
      if (sink && !sink.closed) await finished(sink.destroy()).catch(() => undefined);
    },
    async end() {
      if (sink) {
        // as pipeline() waited for it: the file written and closed
        await finished(sink.end()).catch((e: Error) => void (failed ??= ioFail(e)));
      }
      check();
      const sha = hash.digest("hex");
      if (sha !== c.sha256) throw verifyError(`component ${c.path}: digest mismatch`);
      ok(sha);
    },
  };
}
