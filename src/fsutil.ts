/**
 * Durable file-system primitives: write to a temp name, fsync, rename, fsync
 * the directory. Shared by keys, repository and restore.
 */
import { closeSync, constants, existsSync, fstatSync, fsyncSync, linkSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, realpathSync, renameSync, rmSync, statSync, unlinkSync, writeSync } from "node:fs";
import { close, fdatasync, open, writev } from "node:fs";
import { open as openAsync } from "node:fs/promises";
import { createHash, randomBytes } from "node:crypto";
import { basename, dirname, join, sep } from "node:path";
import { Writable } from "node:stream";
import { execFileSync } from "node:child_process";

/** Whether path `p` is folder `dir` or inside it (never a sibling sharing its prefix). */
export const isInside = (p: string, dir: string) => p === dir || p.startsWith(dir + sep);

/**
 * mkdir -p without Node's recursive mkdir, which loops forever under /proc
 * (mkdir says ENOENT, the parent exists, it tries again) and says ENOENT when
 * an ancestor can not be made (EROFS, EACCES), which reads as "missing".
 * Walks up to the nearest existing ancestor and makes each folder below it.
 * @throws the errno of the first folder that could not be made, with its path
 * (ENOTDIR when an ancestor is a file).
 */
export function ensureDir(dir: string, mode?: number): void {
  const missing: string[] = [];
  let d = dir;
  while (!existsSync(d)) {
    missing.push(d);
    const up = dirname(d);
    if (up === d) break;
    d = up;
  }
  if (!missing.length && !statSync(dir).isDirectory()) throw Object.assign(new Error(`ENOTDIR: not a directory, mkdir '${dir}'`), { code: "ENOTDIR", path: dir, syscall: "mkdir" });
  for (const m of missing.reverse()) {
    try {
      mkdirSync(m, mode === undefined ? undefined : { mode });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
    }
  }
}

/**
 * ensureDir for a folder inside `root` (a staging folder): `root` itself is
 * never made, so work under a folder that was moved away (with the repository
 * it sits in) fails with ENOENT instead of building the tree again where it was.
 */
export function ensureDirIn(root: string, dir: string): void {
  if (!statSync(root, { throwIfNoEntry: false })?.isDirectory()) throw Object.assign(new Error(`ENOENT: no such file or directory, mkdir '${dir}'`), { code: "ENOENT", path: root, syscall: "mkdir" });
  ensureDir(dir);
}

/**
 * Runs `f` on the file `p`: a system error that names no path (a failed
 * read(2) or write(2) knows only its descriptor) is given this one, so the
 * user is told which file the disk failed on. @returns what `f` returns.
 */
export function atPath<T>(p: string, f: () => T): T {
  try {
    return f();
  } catch (e) {
    const x = e as NodeJS.ErrnoException;
    if (typeof x?.code === "string" && typeof x.syscall === "string") x.path ??= p;
    throw e;
  }
}

/**
 * Opens a file for reading only if it is a regular file: a FIFO, device or
 * socket named where a file is expected (a config, a key, a bundle, a
 * repository record replaced by a link to /dev/zero) would block forever or
 * never end. Opened non-blocking, so a FIFO with no writer returns at once.
 * @returns the descriptor (the caller closes it).
 * @throws the open's error (ENOENT, EACCES, ...), or code ENOTREG naming the path.
 */
export function openRegular(path: string): number {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY);
  const st = fstatSync(fd);
  if (st.isFile()) return fd;
  closeSync(fd);
  const what = st.isDirectory() ? "a folder" : st.isFIFO() ? "a FIFO" : st.isSocket() ? "a socket" : st.isCharacterDevice() || st.isBlockDevice() ? "a device" : "not a regular file";
  throw Object.assign(new Error(`${path} is ${what}, not a regular file`), { code: st.isDirectory() ? "EISDIR" : "ENOTREG", syscall: "open", path });
}

/** readFileSync for a path that must be a regular file (see openRegular). */
export function readFileRegular(path: string): Buffer;
export function readFileRegular(path: string, encoding: "utf8"): string;
export function readFileRegular(path: string, encoding?: "utf8"): Buffer | string {
  const fd = openRegular(path);
  try {
    return atPath(path, () => (encoding ? readFileSync(fd, encoding) : readFileSync(fd)));
  } finally {
    closeSync(fd);
  }
}

/**
 * The sha256 (hex) of a regular file (openRegular), read 1 MiB at a time: memory does not grow with its size.
 * @throws what openRegular throws; a read error with its path (atPath)
 */
export function sha256FileRegular(path: string): string {
  const fd = openRegular(path);
  try {
    const h = createHash("sha256");
    const buf = Buffer.allocUnsafe(1024 * 1024);
    atPath(path, () => {
      for (let n; (n = readSync(fd, buf, 0, buf.length, null)) > 0; ) h.update(buf.subarray(0, n));
    });
    return h.digest("hex");
  } finally {
    closeSync(fd);
  }
}

/** fsyncs a file or folder (a folder, so that a rename or create inside it survives a crash). */
export function fsyncPath(path: string): void {
  const fd = openSync(path, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

export const fsyncDir = fsyncPath;

/** A sibling temp name that sweeps recognise (`.tmp-` prefix). */
export const tempSibling = (path: string) => join(dirname(path), `.tmp-${basename(path)}-${process.pid}-${randomBytes(4).toString("hex")}`);

/**
 * Writes `length` bytes of `buf` from `offset`, at `position` (or at the file
 * offset when null): write(2) may write less than asked (a disk filling up),
 * and the next call then fails with the real errno (ENOSPC) instead of a
 * silently short file.
 */
export function writeAll(fd: number, buf: Uint8Array, offset = 0, length = buf.length - offset, position: number | null = null): void {
  for (let done = 0; done < length; ) done += writeSync(fd, buf, offset + done, length - done, position === null ? null : position + done);
}

function writeTemp(path: string, data: string | Uint8Array | ((fd: number) => void), mode: number, durable = true): string {
  ensureDir(dirname(path));
  const tmp = tempSibling(path);
  const fd = openSync(tmp, "wx", mode);
  try {
    if (typeof data === "function") data(fd);
    else writeAll(fd, typeof data === "string" ? Buffer.from(data) : data);
    if (durable) fsyncSync(fd);
  } catch (e) {
    closeSync(fd);
    rmSync(tmp, { force: true });
    // a write on a descriptor names no path; the caller's error message should
    (e as NodeJS.ErrnoException).path ??= path;
    throw e;
  }
  closeSync(fd);
  return tmp;
}

/** Atomically replaces `path` with `data` (temp, fsync, rename, fsync dir). */
export function writeFileAtomic(path: string, data: string | Uint8Array, mode = 0o644): void {
  const tmp = writeTemp(path, data, mode);
  try {
    renameSync(tmp, path);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw e;
  }
  fsyncDir(dirname(path));
}

/**
 * Replaces a cache file in AGENTBAK_HOME/cache (temp, rename): readers see the
 * old file or the new one, never part of one, but nothing is fsynced — a cache
 * lost or damaged by a crash is read as no cache (every reader parses it
 * defensively), which costs the next run time, not correctness. Each fsync is
 * about 15 ms here (a 1 GiB incremental made 21, 316 ms in all); a backup
 * writes up to four caches.
 */
export function writeCacheFile(path: string, data: string | Uint8Array | ((fd: number) => void)): void {
  const tmp = writeTemp(path, data, 0o600, false);
  try {
    renameSync(tmp, path);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw e;
  }
}

/**
 * writeCacheFile of a file made of many strings, written in slices through one buffer (UTF-8), so that neither the
 * whole file's text nor its bytes are held at once: `headLength` bytes are reserved at its start and filled last
 * with `head()` (of exactly that length in UTF-8), called after the last of `parts` (a MAC of them, say).
 * @throws the write's error, the temp file removed; or when `head()` is not `headLength` bytes long
 */
export function writeCacheFileInSlices(path: string, headLength: number, parts: Iterable<string>, head: () => string): void {
  const slice = Buffer.allocUnsafe(1 << 20);
  const write = (fd: number) => {
    let used = headLength;
    slice.fill(0x20, 0, headLength);
    for (const part of parts) {
      const n = Buffer.byteLength(part);
      if (used + n > slice.length) {
        writeAll(fd, slice, 0, used);
        used = 0;
      }
      if (n > slice.length) writeAll(fd, Buffer.from(part));
      else used += slice.write(part, used);
    }
    writeAll(fd, slice, 0, used);
    const h = Buffer.from(head());
    if (h.length !== headLength) throw new Error(`a cache file's head is ${h.length} bytes, not ${headLength}`);
    writeAll(fd, h, 0, h.length, 0);
  };
  writeCacheFile(path, write);
}

/**
 * Atomically creates `path` with `data`, failing with EEXIST when it already
 * exists (link(2) never overwrites).
 */
export function createFileExclusive(path: string, data: string | Uint8Array, mode = 0o644): void {
  const tmp = writeTemp(path, data, mode);
  try {
    linkSync(tmp, path);
  } finally {
    unlinkSync(tmp);
  }
  fsyncDir(dirname(path));
}

/** Publishes a finished temp file at `path` without overwriting (link + unlink), then fsyncs the directory. */
export function publishExclusive(tmp: string, path: string): void {
  linkSync(tmp, path);
  unlinkSync(tmp);
  fsyncDir(dirname(path));
}

/** Whether a process with this pid exists (EPERM means it does). */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * When process `pid` started (clock ticks since boot: field 22 of /proc/<pid>/stat), or null where that can not be
 * read (the process is gone, or no /proc). With the pid it names one process: pids are reused, start times are not.
 */
export function processStart(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // after "(comm) ": state is field 3, so starttime (22) is the 20th
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19] ?? null;
  } catch {
    return null;
  }
}

/**
 * Creates a private folder `<parent>/<tag>-<pid>-<random>`. The owner's pid is
 * in the name from the first instant, so a folder left by kill -9 is always
 * recognisable to sweepDead.
 */
export function pidDir(parent: string, tag: string): string {
  ensureDir(parent);
  const d = join(parent, `${tag}-${process.pid}-${randomBytes(4).toString("hex")}`);
  mkdirSync(d, { mode: 0o700 });
  return d;
}

/**
 * Unmounts (lazily) every mount at or under `dir`: a folder that is about to be removed may hold a tmpfs a stage
 * mounted (the drill's enospc nemesis) and was interrupted or killed before its own unmount; removing it would stop
 * at the mount point (EBUSY) and leave the mount. Never throws.
 * @returns the mount points it unmounted
 */
export function unmountUnder(dir: string): string[] {
  let mounts: string;
  try {
    mounts = readFileSync("/proc/mounts", "utf8");
  } catch {
    return [];
  }
  // /proc/mounts escapes space, tab, newline and backslash in its fields as octal
  const unescape = (f: string) => f.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
  const under = mounts
    .split("\n")
    .map((l) => unescape(l.split(" ")[1] ?? ""))
    .filter((m) => m === dir || m.startsWith(dir + sep))
    .sort((x, y) => y.length - x.length);
  return under.filter((m) => {
    try {
      execFileSync("umount", ["-l", m], { stdio: "ignore" });
      return true;
    } catch {
      return false;
    }
  });
}

/**
 * Removes entries of `parent` named `<tag>-<pid>-<hex>` (or `.tmp-<name>-<pid>-<hex>`
 * files) whose process is gone. @returns how many were removed.
 */
export function sweepDead(parent: string, tag: string): number {
  let names: string[];
  try {
    names = readdirSync(parent);
  } catch {
    return 0;
  }
  let n = 0;
  for (const e of names) {
    if (!e.startsWith(tag)) continue;
    const pid = Number(e.match(/-(\d+)-[0-9a-f]{8}$/)?.[1]);
    if (pid && pid !== process.pid && !pidAlive(pid)) {
      unmountUnder(join(parent, e));
      rmSync(join(parent, e), { recursive: true, force: true });
      n++;
    }
  }
  return n;
}

/**
 * fsyncs every file and folder under `dir`, then `dir` itself. `parallel` fsyncs at once (on libuv's threads): the
 * journal commits one fsync waits for take the others' with them. 1578 small files: 3.4 s one after the other,
 * 0.4 s sixteen at a time (the restore of the bench's mixed agent spent 5.4 s here).
 */
export async function fsyncTree(dir: string, parallel = 16): Promise<void> {
  const paths = readdirSync(dir, { withFileTypes: true, recursive: true }).filter((e) => e.isFile() || e.isDirectory()).map((e) => join(e.parentPath, e.name));
  let next = 0;
  const one = async () => {
    while (next < paths.length) {
      const fh = await openAsync(paths[next++]!, "r");
      try {
        await fh.sync();
      } finally {
        await fh.close();
      }
    }
  };
  // every fsync settles before the first failure is thrown: nothing is left in flight on a descriptor
  const settled = await Promise.allSettled(Array.from({ length: Math.min(parallel, paths.length) }, one));
  for (const s of settled) if (s.status === "rejected") throw s.reason;
  fsyncPath(dir);
}

/**
 * A file written as a stream that starts its own writeback as it goes: each
 * time `every` more bytes are written it calls fdatasync in the background, so
 * the caller's fsync of the finished file only has the tail left to flush. The
 * kernel starts writeback on its own only past dirty_background_ratio (2.4 GB
 * of a 24 GiB host), so a restored 1.2 GB database used to be flushed whole
 * by the final fsync: 0.87 s with the main thread blocked and the disk idle
 * until then. Opened with O_EXCL (`path` must not exist); a failed background
 * fdatasync fails the next write or the end.
 */
export class FlushBehindFile extends Writable {
  private fd = -1;
  private position = 0;
  private unsynced = 0;
  private flushing: Promise<void> | null = null;
  private writing: Promise<void> | null = null;
  private flushError: Error | null = null;
  private readonly every: number;

  /** `start`: where in the new file the stream's first byte goes (the bytes before it are left for the caller) */
  constructor(readonly path: string, private readonly mode: number, { start = 0, every = 32 << 20 }: { start?: number; every?: number } = {}) {
    super({ highWaterMark: 1 << 20 });
    this.position = start;
    this.every = every;
  }

  override _construct(cb: (e?: Error | null) => void): void {
    open(this.path, "wx", this.mode, (e, fd) => {
      if (e) return cb(e);
      this.fd = fd;
      cb();
    });
  }

  override _writev(chunks: { chunk: Buffer }[], cb: (e?: Error | null) => void): void {
    this.writing = this.writeChunks(chunks.map((c) => c.chunk));
    this.writing.then(() => cb(), cb);
  }

  override _write(chunk: Buffer, _e: BufferEncoding, cb: (e?: Error | null) => void): void {
    this.writing = this.writeChunks([chunk]);
    this.writing.then(() => cb(), cb);
  }

  override _final(cb: (e?: Error | null) => void): void {
    void (this.flushing ?? Promise.resolve()).then(() => cb(this.flushError));
  }

  override _destroy(err: Error | null, cb: (e?: Error | null) => void): void {
    // the descriptor is closed only once no write or fdatasync is using it (a closed number can be reused)
    const busy = [this.writing, this.flushing].map((p) => p?.catch(() => undefined));
    void Promise.all(busy).then(() => {
      if (this.fd < 0) return cb(err);
      close(this.fd, (e) => cb(err ?? e));
      this.fd = -1;
    });
  }

  private async writeChunks(bufs: Buffer[]): Promise<void> {
    if (this.flushError) throw this.flushError;
    let total = 0;
    for (const b of bufs) total += b.length;
    // write(2) may write less than asked (a disk filling up): the rest is written again, and a real error thrown
    for (let done = 0; done < total; ) {
      let skip = done;
      const rest: Buffer[] = [];
      for (const b of bufs) {
        if (skip >= b.length) skip -= b.length;
        else {
          rest.push(skip ? b.subarray(skip) : b);
          skip = 0;
        }
      }
      done += await new Promise<number>((res, rej) => writev(this.fd, rest, this.position + done, (e, n) => (e ? rej(e) : res(n))));
    }
    this.position += total;
    this.unsynced += total;
    if (this.unsynced >= this.every && !this.flushing) {
      this.unsynced = 0;
      this.flushing = new Promise<void>((res) =>
        fdatasync(this.fd, (e) => {
          if (e) this.flushError ??= Object.assign(e, { path: this.path });
          this.flushing = null;
          res();
        }),
      );
    }
  }
}

/**
 * Where `path` (absolute) leads: the real path of its deepest part that exists (every symbolic link on the way
 * followed, /proc/self's included) joined with the rest, which does not exist yet.
 */
export function realTarget(path: string): string {
  const rest: string[] = [];
  for (let p = path; ; p = dirname(p)) {
    try {
      return join(realpathSync(p), ...rest.reverse());
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT" || dirname(p) === p) return path; // unreadable: the restore says why
      rest.push(basename(p));
    }
  }
}
