/**
 * The `files` stage: what the `files` patterns name (listed once per backup, before the instant when no pre hook
 * can change it), and their copies in staging.
 */
import { createHash } from "node:crypto";
import { closeSync, copyFileSync, existsSync, lstatSync, openSync, readFileSync, readSync, realpathSync, statSync, type BigIntStats } from "node:fs";
import { basename, dirname, join, relative, resolve, sep } from "node:path";
import { globSync, isDynamicPattern } from "tinyglobby";
import { chunkTuples, componentPath, type Component } from "../bundle/manifest.js";
import { LARGE_STATE } from "../chunks/fastcdc.js";
import type { ChunkRef, ChunkWriter, LazyWriter } from "../chunks/store.js";
import type { StagedFile } from "../bundle/writer.js";
import type { LoadedConfig } from "../config/load.js";
import { ioErrno, ioError, usageError, wrap } from "../errors.js";
import { SQLITE_SIDECAR } from "../facts.js";
import { atPath, ensureDirIn, isInside } from "../fsutil.js";
import { agentbakHome } from "../home.js";
import { TextScanner } from "../state/secrets/scan.js";
import { credentialFiles, type CaptureScope } from "./scope.js";

/** One file a `files` pattern names: the pattern (for messages) and the file's absolute path. */
export interface ListedFile {
  pattern: string;
  file: string;
  /** its real path, as listed (no link in it: the file itself) */
  real?: string;
  /** why it can not be captured (a name that is not UTF-8): the backup warns instead of failing */
  problem?: string;
  /** the file's stat as listed (through a link: its target's): the unchanged check's identity and times, not taken twice */
  stat?: BigIntStats;
}

/** U+FFFD, what a file name's bytes that are not UTF-8 read as: such a name can not be opened again by the name read. */
const NOT_UTF8 = "\uFFFD";

/**
 * Every file the `files` patterns name now, in pattern order, credential files included (the capture records
 * them as left out).
 * @throws AgentbakError(2) for a pattern naming what is captured otherwise or never, (10) for a literal path that does not exist.
 */
export function listFiles(lc: LoadedConfig, repoDir: string | null): ListedFile[] {
  const reserved = reservedPaths(lc, repoDir);
  const realRoot = realpathSync(lc.dir);
  return lc.config.files.flatMap((pattern) => expandFiles(lc, pattern, reserved, realRoot).map((f) => ({ pattern, ...f })));
}

/** The listed files without credential files (never read here): what the unchanged check fingerprints. */
export function readableFiles(lc: LoadedConfig, listed: ListedFile[]): string[] {
  const credentials = credentialFiles(lc);
  return listed.filter((l) => !l.problem && !credentials.has(l.file) && !credentials.has(l.real ?? realpathSync(l.file))).map((l) => l.file);
}

/**
 * The `files` list (listFiles) and, of it, the files a fingerprint may read (readableFiles): what the unchanged check
 * takes, once.
 */
export function listReadable(lc: LoadedConfig, repoDir: string | null): { listed: ListedFile[]; readable: string[] } {
  const listed = listFiles(lc, repoDir);
  return { listed, readable: readableFiles(lc, listed) };
}

/** Paths a `files` entry may never take, and what each is. */
interface Reserved {
  databases: string[];
  /** folders captured otherwise or never: the repository, the workspace */
  dirs: [string, string][];
}

/** What a `files` glob never takes for this config: its databases, the repository, agentbak's keys, the workspace, source folders. */
function reservedPaths(lc: LoadedConfig, repoDir: string | null): Reserved {
  const cfg = lc.config;
  const dirs: [string, string][] = [];
  if (repoDir) dirs.push([repoDir, "the repository"]);
  const home = agentbakHome();
  dirs.push([home, "agentbak's key folder (AGENTBAK_HOME)"]);
  if (existsSync(home)) dirs.push([realpathSync(home), "agentbak's key folder (AGENTBAK_HOME)"]);
  if (cfg.workspace) dirs.push([lc.resolve(cfg.workspace.path), "the workspace"]);
  for (const x of cfg.sources) if (x.path) dirs.push([lc.resolve(x.path), `state source ${x.name}`]);
  return { databases: cfg.databases.map((d) => lc.resolve(d.path)), dirs };
}

function reservedBy(p: string, r: Reserved): string | null {
  if (r.databases.includes(p)) return "a configured database";
  if (SQLITE_SIDECAR.test(p) && r.databases.includes(p.replace(SQLITE_SIDECAR, ""))) return "a SQLite sidecar of a configured database";
  const dir = r.dirs.find(([d]) => isInside(p, d));
  if (dir) return dir[1];
  return p.includes(`${sep}.git${sep}`) || p.endsWith(`${sep}.git`) ? "a .git folder" : null;
}

/**
 * The files a `files` pattern names. A glob never takes a configured
 * database or its sidecars, the repository, the workspace (captured with its
 * own history), `.git` or node_modules; a literal path naming one of those is
 * a config error, and so is any match whose real path leaves the config
 * folder (through a symbolic link, to a file or a folder).
 * @throws AgentbakError(2) as above, (10) for a literal path that does not exist.
 */
function expandFiles(lc: LoadedConfig, pattern: string, reserved: Reserved, realRoot: string): Omit<ListedFile, "pattern">[] {
  const literal = !isDynamicPattern(pattern);
  const found = literal
    ? [lc.resolve(pattern)]
    : // links are followed, so that every match is judged by where it really is (below)
      globSync(pattern, { cwd: lc.dir, absolute: true, onlyFiles: true, dot: true, followSymbolicLinks: true, ignore: ["**/.git/**", "**/node_modules/**"] }).map((f) => resolve(f)).sort();
  const out: Omit<ListedFile, "pattern">[] = [];
  // a file that is not a link is where its folder really is: one lstat per file and one realpath per folder, not a
  // realpath (an lstat per path component) and a stat per file (1,578 files: most of a nothing-changed listing)
  const realDirs = new Map<string, string>();
  const realDir = (d: string) => realDirs.get(d) ?? realDirs.set(d, realpathSync(d)).get(d)!;
  for (const f of found) {
    let real: string;
    let st: BigIntStats;
    try {
      // bigint: the unchanged check keeps this stat's nanosecond times (fileKey), so the file is not stat'ed again
      const l = lstatSync(f, { bigint: true });
      real = l.isSymbolicLink() ? realpathSync(f) : join(realDir(dirname(f)), basename(f));
      st = l.isSymbolicLink() ? statSync(real, { bigint: true }) : l;
    } catch (e) {
      // a name the agent made of bytes that are not UTF-8 is listed, but can not be opened by the name read: named, not a failed backup
      if (!literal && (e as NodeJS.ErrnoException).code === "ENOENT" && f.includes(NOT_UTF8)) {
        out.push({ file: f, problem: "its name is not UTF-8 (shown with U+FFFD): not captured" });
        continue;
      }
      throw wrap(e, `files: ${pattern}`);
    }
    // for messages only: not computed for each of an agent's thousands of files
    const rel = () => relative(lc.dir, f).split(sep).join("/") || ".";
    if (literal && st.isDirectory()) throw usageError(`files: ${pattern} is a folder; name its files, or a glob such as ${rel()}/**`);
    // a FIFO would block the backup forever, a device never ends: only regular files are captured
    if (!st.isFile()) {
      if (literal) throw usageError(`files: ${pattern} is ${st.isFIFO() ? "a FIFO" : st.isSocket() ? "a socket" : "a device"}, not a regular file`);
      continue;
    }
    if (!isInside(real, realRoot)) throw usageError(`files: ${rel()} ${real !== f ? `is a symbolic link to ${real}, ` : "is "}outside the config folder ${lc.dir}`);
    const why = reservedBy(f, reserved) ?? (real === f ? null : reservedBy(real, reserved));
    if (why && literal) throw usageError(`files: ${pattern} names ${why}; it is captured otherwise or never`);
    if (!why) out.push({ file: f, real, stat: st });
  }
  return out;
}

/**
 * Where a `files` file lies in the payload: `files/<its path>`, or, for a name a
 * payload path can not hold (a space, an accent, ESC, a bidi control: the
 * agent's names are data), `files/=/<sha256 of the path>`; the manifest's
 * target keeps the exact name the restore writes.
 */
const payloadPath = (rel: string): string => {
  const plain = `files/${rel}`;
  // a real folder named "=" is hashed too: no name can land on another's payload path
  return componentPath.safeParse(plain).success && !rel.startsWith("=/") ? plain : `files/=/${createHash("sha256").update(rel).digest("hex")}`;
};

/** A file at least this large is stored as chunks in the agent's chunk store (docs/chunk-store.md): the minimum chunk. */
export const CHUNK_FROM = LARGE_STATE.min;

/** How large files are stored: the agent's chunk writer (opened on first use), and whether the stat cache may answer. */
export interface ChunkedFiles {
  writer: LazyWriter;
  /**
   * false when this host's last backup of the agent did not finish under the current secret-scan policy: a file
   * the stat cache answers is not read, so not scanned, and must have been scanned under this policy before
   */
  statCache: boolean;
}

/** What the `files` stage captured: copies in staging for the payload, and files stored as chunks. */
export interface CapturedFiles {
  staged: StagedFile[];
  /** manifest entries of files stored as chunks (format 5) or packed (format 6) */
  chunked: Component[];
}

/** A small file waiting to be packed or copied into staging. */
interface SmallFile {
  file: string;
  path: string;
  rel: string;
  pattern: string;
}

/**
 * Copies the `files` components into staging (those `given`, listed before the pre hook, else listed now; `repoDir`:
 * the repository's folder, never listed): what must never be captured stays out (and is recorded), the rest is
 * scanned. With `chunks` (the agent's chunk writer, opened on first use), a file of CHUNK_FROM bytes or more is stored
 * as chunks instead: read in place at this instant, only its new chunks uploaded, and not read at all when the stat
 * cache knows it unchanged (then not scanned again either: it was scanned when it was read). The smaller files are
 * packed (storePacked) when together they hold CHUNK_FROM bytes or more; fewer stay in the payload, so an agent of a
 * few small files writes the format-4 bundle of before.
 */
export async function captureFiles(s: CaptureScope, given: ListedFile[] | null, chunks: ChunkedFiles | null, repoDir: string | null): Promise<CapturedFiles> {
  const { lc } = s;
  const listed = given ?? listFiles(lc, repoDir);
  const small: SmallFile[] = [];
  const large: SmallFile[] = [];
  let smallBytes = 0;
  for (const { pattern, file: f, problem } of listed) {
    const rel = relative(lc.dir, f).split(sep).join("/");
    if (rel.startsWith("..")) throw usageError(`files: ${rel} is outside the config folder`);
    if (problem) {
      s.warnings.push(`files: ${rel}: ${problem}`);
      continue;
    }
    const path = payloadPath(rel);
    const why = s.leaveOut(f, rel) ?? s.leaveOut(realpathSync(f), rel);
    if (why) {
      s.notCaptured.push({ path: rel, ...why });
      continue;
    }
    const size = chunks ? statSync(f).size : 0;
    if (chunks && size >= CHUNK_FROM) large.push({ file: f, path, rel, pattern });
    else small.push({ file: f, path, rel, pattern });
    if (size < CHUNK_FROM) smallBytes += size;
  }
  const pack = smallBytes >= CHUNK_FROM;
  // the writer opens (listing the chunk store) only when a file goes into it: an agent of a few small files never opens it
  if (!chunks || (!large.length && !pack)) return { staged: small.map((f) => stageFile(s, f)), chunked: [] };
  const chunked: Component[] = [];
  for (const f of large) chunked.push(await storeChunked(s, chunks.writer, f, chunks.statCache));
  if (!pack) return { staged: small.map((f) => stageFile(s, f)), chunked };
  const packed = await storePacked(s, chunks.writer, small);
  return { staged: packed.empty.map((f) => stageFile(s, f)), chunked: [...chunked, ...packed.components] };
}

/** Copies one file into staging and scans it (read in pieces: scanPieces). @returns its staged component */
function stageFile(s: CaptureScope, { file: f, path, rel, pattern }: SmallFile): StagedFile {
  const dest = join(s.staging, path);
  ensureDirIn(s.staging, join(dest, ".."));
  try {
    copyFileSync(f, dest);
  } catch (e) {
    throw ioErrno(e) ? ioError(e, dest) : wrap(e, `files: ${pattern}`);
  }
  const scanner = scannerFor(s, rel);
  if (scanner) atPath(dest, () => scanPieces(dest, scanner));
  found(s, scanner);
  return { path, kind: "file", name: rel, file: dest, target: rel };
}

/** Bytes a staged file is read at a time for its scan. */
const SCAN_PIECE = 1024 * 1024;

/** Reads a file into a scanner in pieces: memory does not grow with its size. */
function scanPieces(file: string, scanner: TextScanner): void {
  const fd = openSync(file, "r");
  try {
    const buf = Buffer.allocUnsafe(SCAN_PIECE);
    for (let n; (n = readSync(fd, buf, 0, SCAN_PIECE, null)) > 0; ) scanner.push(buf.subarray(0, n));
  } finally {
    closeSync(fd);
  }
}

/**
 * Packs small files (docs/chunk-store.md): each read once (and scanned), concatenated in path order into one stream
 * cut and stored like a large file, so an unchanged run of files gives the same chunks and a changed one costs one
 * or two. Each file's manifest entry lists the chunks its bytes touch and where they start in the first
 * (`chunk_skip`). An empty file touches no chunk: it goes into the payload (`empty`).
 * @throws the files' read errors (named), the store's errors
 */
async function storePacked(s: CaptureScope, w: LazyWriter, small: SmallFile[]): Promise<{ components: Component[]; empty: SmallFile[] }> {
  const order = [...small].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  const read: { f: SmallFile; sha256: string; offset: number; size: number }[] = [];
  const empty: SmallFile[] = [];
  async function* stream(): AsyncGenerator<Buffer> {
    let offset = 0;
    for (const f of order) {
      let b: Buffer;
      try {
        b = readFileSync(f.file);
      } catch (e) {
        throw ioErrno(e) ? ioError(e, f.file) : wrap(e, `files: ${f.pattern}`);
      }
      if (!b.length) {
        empty.push(f);
        continue;
      }
      const scanner = scannerFor(s, f.rel);
      scanner?.push(b);
      found(s, scanner);
      read.push({ f, sha256: createHash("sha256").update(b).digest("hex"), offset, size: b.length });
      offset += b.length;
      yield b;
    }
  }
  const pack = await w.putStream(stream());
  const ends: number[] = [];
  pack.chunks.reduce((end, c) => (ends.push(end + c.length), end + c.length), 0);
  const components = read.map(({ f, sha256, offset, size }) => {
    // the chunks this file's range [offset, offset + size) touches: from the one it starts in to the one it ends in
    const first = ends.findIndex((end) => end > offset);
    const last = ends.findIndex((end) => end >= offset + size);
    return fileEntry(f, { sha256, size }, pack.chunks.slice(first, last + 1), offset - (first > 0 ? ends[first - 1]! : 0));
  });
  return { components, empty };
}

/**
 * The scan of a `files` file (`rel` in messages), or null when the policy is off: the one place the files stage
 * applies its scan policy. The file is scanned in pieces as it is read (TextScanner: a token across two pieces is
 * found), never held whole; its end() gives the findings, which the caller adds to the scope's (found()).
 */
function scannerFor(s: CaptureScope, rel: string): TextScanner | null {
  return s.lc.config.secretScan.files === "off" ? null : new TextScanner(`files: ${rel}`);
}

/** Adds a finished scan's findings to the scope's. */
const found = (s: CaptureScope, scanner: TextScanner | null) => void (scanner && s.findings.files.push(...scanner.end()));

/**
 * The manifest entry of what was stored as chunks: `head` (path, kind, name, and a source's facts), its digest and
 * size, `tail`, and its chunk list (`skip`: where a packed file starts in its first chunk). The one place the files
 * stage writes an entry's chunks, for its own files and the sources' (storeSourceFiles).
 */
function chunkedEntry(head: Omit<Component, "sha256" | "size">, r: { sha256: string; size: number }, tail: Partial<Component>, chunks: ChunkRef[], skip?: number): Component {
  return { ...head, sha256: r.sha256, size: r.size, ...tail, chunks: chunkTuples(chunks), ...(skip === undefined ? {} : { chunk_skip: skip }) };
}

/** The manifest entry of a file stored as chunks (`skip`: where a packed file starts in its first chunk). */
function fileEntry(f: Pick<SmallFile, "path" | "rel">, r: { sha256: string; size: number }, chunks: ChunkRef[], skip?: number): Component {
  return chunkedEntry({ path: f.path, kind: "file", name: f.rel }, r, { target: f.rel }, chunks, skip);
}

/** Stores one file whole as chunks through the writer: the one place the files stage does (putFile). */
const storeFile = (w: LazyWriter, file: string, o: Parameters<LazyWriter["putFile"]>[1]) => w.putFile(file, o);

/** Stores one large file as chunks; @returns its manifest entry. @throws its read errors (named), the store's errors */
async function storeChunked(s: CaptureScope, w: LazyWriter, f: SmallFile, statCache: boolean): Promise<Component> {
  let r: Awaited<ReturnType<ChunkWriter["putFile"]>>;
  const scanner = scannerFor(s, f.rel);
  try {
    // read and scanned in the same pass, piece by piece, under this run's policy: remembered even when the cache
    // could not answer; not read (nor scanned) when the cache answers
    r = await storeFile(w, f.file, { statCache, remember: true, tap: scanner ?? undefined });
  } catch (e) {
    throw ioErrno(e) ? ioError(e, f.file) : wrap(e, `files: ${f.pattern}`);
  }
  if (r.stats.changedWhileRead) s.warnings.push(`files: ${f.rel} changed while it was read; stored as read`);
  if (!r.stats.fromStatCache) found(s, scanner);
  return fileEntry(f, r, r.chunks);
}

/**
 * Stores each captured source file of at least the minimum chunk (a PostgreSQL dump, a LanceDB table's stream) as
 * chunks, as this stage stores a large file: an unchanged one costs no new chunk. It was made for this run, so the
 * stat cache is not used.
 * @returns what stays in the payload, and the manifest entries of what went into the chunk store
 */
export async function storeSourceFiles(staged: StagedFile[], writer: LazyWriter): Promise<{ staged: StagedFile[]; chunked: Component[] }> {
  const out: { staged: StagedFile[]; chunked: Component[] } = { staged: [], chunked: [] };
  for (const s of staged) {
    if (statSync(s.file).size < CHUNK_FROM) {
      // in the payload: nothing to reuse, so no fingerprint (it is written only beside chunks, format 6)
      const { fingerprint: _fp, ...inPayload } = s;
      out.staged.push(inPayload);
      continue;
    }
    const r = await storeFile(writer, s.file, { statCache: false });
    const { file: _f, pages: _p, ...meta } = s;
    out.chunked.push(chunkedEntry(meta, r, {}, r.chunks));
  }
  return out;
}
