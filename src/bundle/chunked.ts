/**
 * Chunked components (format 5): a component whose bytes are in the agent's
 * chunk store instead of the payload; its signed manifest entry lists the
 * chunks (docs/chunk-store.md). The store itself is chunks/store.ts, which
 * this layer does not import: it is handed in as a ChunkSource.
 */
import { dirname, join } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { AgeIdentity } from "../crypto/age.js";
import { AgentbakError, ioErrno, ioError, notFound, verifyError } from "../errors.js";
import { ensureDir, FlushBehindFile } from "../fsutil.js";
import { chunkRefs, type ChunkRef, type Component, type Manifest } from "./manifest.js";

/** Where a bundle's chunks are read from: the agent's chunk store in the repository the bundle came from. */
export interface ChunkSource {
  /** a component's plaintext, each chunk checked (size and ciphertext sha256) before it is decrypted; the stream fails with 13 or 12 */
  read(list: ChunkRef[], identities: AgeIdentity[], whole: { sha256: string; size: number; label: string; skip?: number }): Readable;
  /** without keys: each chunk there with its size (`read`: and its ciphertext sha256). @throws AgentbakError(13) naming the bad chunks */
  verify(list: ChunkRef[], o: { read: boolean; label?: string }): Promise<{ chunks: number; bytes: number }>;
}

/** The components of a manifest stored as chunks. */
export const chunkedComponents = (m: Manifest): (Component & { chunks: NonNullable<Component["chunks"]> })[] =>
  m.components.filter((c): c is Component & { chunks: NonNullable<Component["chunks"]> } => Boolean(c.chunks));

/** What a component's errors are called. */
const labelOf = (c: Component) => `component ${c.path}${c.target ? ` (${c.target})` : ""}`;

/**
 * The chunk source a bundle needs, or an error when it lists chunks and there is none.
 * @throws AgentbakError(10) when the manifest lists chunks and `chunks` is null (a bundle file away from its repository)
 */
function needSource(m: Manifest, chunks: ChunkSource | null | undefined): ChunkSource | null {
  const first = chunkedComponents(m)[0];
  if (!first) return null;
  if (!chunks) throw notFound(`${labelOf(first)} of snapshot ${m.snapshot_id} is stored as chunks in its repository, and none is at hand: restore it from the repository, or from a bundle written by agentbak export`);
  return chunks;
}

/**
 * Checks, without keys, that every chunk the manifest lists is in the store with its size.
 * @returns how many distinct chunks and bytes, or null when the manifest lists none
 * @throws AgentbakError(13) naming the component and the chunks, (10) when no store is at hand
 */
export async function verifyChunked(m: Manifest, chunks: ChunkSource | null | undefined, read = false): Promise<{ components: number; chunks: number; bytes: number } | null> {
  const source = needSource(m, chunks);
  if (!source) return null;
  let n = 0;
  let bytes = 0;
  const list = chunkedComponents(m);
  // a chunk several components list (packed small files share theirs) is checked once, under the first one's name
  const checked = new Map<string, ChunkRef>();
  for (const c of list) {
    const refs = chunkRefs(c)!.filter((r) => {
      const seen = checked.get(r.id);
      if (!seen) return Boolean(checked.set(r.id, r));
      if (seen.sha256 !== r.sha256 || seen.size !== r.size || seen.length !== r.length) throw verifyError(`${labelOf(c)}: chunk ${r.id} is listed with two different digests`);
      return false;
    });
    if (!refs.length) continue;
    const r = await source.verify(refs, { read, label: labelOf(c) });
    n += r.chunks;
    bytes += r.bytes;
  }
  return { components: list.length, chunks: n, bytes };
}

/**
 * Writes each chunked component under `destDir` at its manifest path, every chunk checked before it is decrypted
 * and the whole file's sha256 and size at the end.
 * @throws AgentbakError(13) naming the component and the chunk, (12) when no identity is a recipient, (10) when no store is at hand
 */
export async function extractChunked(m: Manifest, chunks: ChunkSource | null | undefined, identities: AgeIdentity[], destDir: string): Promise<number> {
  const source = needSource(m, chunks);
  if (!source) return 0;
  const list = chunkedComponents(m);
  for (const c of list) {
    const dest = join(destDir, c.path);
    ensureDir(dirname(dest));
    try {
      await pipeline(source.read(chunkRefs(c)!, identities, { sha256: c.sha256, size: c.size, label: labelOf(c), skip: c.chunk_skip }), new FlushBehindFile(dest, 0o600));
    } catch (e) {
      throw e instanceof AgentbakError ? e : ioErrno(e) ? ioError(e, dest) : e;
    }
  }
  return list.length;
}
