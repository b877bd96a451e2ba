/**
 * A local folder as an object store. Objects appear whole or not at all:
 * small ones are written to a temp name, fsynced and renamed (or linked, when
 * they must not exist yet); uploads are linked into place with link(2), so
 * an existing object is never overwritten.
 *
 * The folder itself is made only when the store is opened to create it
 * (`init`): a repository folder renamed, deleted or unmounted under a running
 * process is "not found" (10) at the next write or listing, never begun again
 * as an empty tree where it was.
 */
import { appendFileSync, closeSync, copyFileSync, existsSync, linkSync, readdirSync, readSync, rmSync, statSync, unlinkSync } from "node:fs";
import { dirname, join, resolve, sep } from "node:path";
import { tmpdir } from "node:os";
import { type AgentbakError, notFound, verifyError } from "../errors.js";
import { atPath, createFileExclusive, ensureDir, fsyncDir, fsyncPath, pidDir, sweepDead, tempSibling, writeFileAtomic, readFileRegular, openRegular } from "../fsutil.js";
import { checkKey, type ObjectStore } from "./store.js";

const TMP = "tmp";
/** errors of a path one of whose folders is a file (ENOTDIR) or a link that loops (ELOOP) */
const PATH_BROKEN = new Set(["ENOTDIR", "ELOOP"]);

export class LocalStore implements ObjectStore {
  readonly root: string;
  readonly inPlace = true;

  constructor(root: string, opts: { create?: boolean } = {}) {
    this.root = resolve(root);
    if (opts.create) atPath(this.root, () => ensureDir(this.root));
  }

  get url(): string {
    return this.root;
  }

  private path(key: string): string {
    return join(this.root, ...checkKey(key));
  }

  private missing(key: string): AgentbakError {
    return notFound(`object ${key} not found in ${this.root}`);
  }

  /**
   * Whether the object at `p` is a regular file. A FIFO, device, socket or folder in its place (or a link to
   * one) is no object: list() never names it, and opening it would block forever or never end.
   */
  private static regular(p: string): boolean {
    try {
      return statSync(p, { throwIfNoEntry: false })?.isFile() === true;
    } catch (e) {
      if (!PATH_BROKEN.has((e as NodeJS.ErrnoException).code ?? "")) throw e;
      return false;
    }
  }

  /**
   * @throws AgentbakError(10) when the folder is gone, or is no folder (a file, or a link that loops, in its place):
   *   nothing is written where it was.
   */
  private present(): void {
    let st;
    try {
      st = statSync(this.root, { throwIfNoEntry: false });
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "ELOOP") throw notFound(`repository not found: ${this.root} (a symbolic link that loops, not a folder)`);
      if (code === "ENOTDIR") throw notFound(`repository not found: ${this.root} (a path above it is a file, not a folder)`);
      throw e;
    }
    if (!st) throw notFound(`repository not found: ${this.root} (no such folder)`);
    if (!st.isDirectory()) throw notFound(`repository not found: ${this.root} (it is a file, not a folder)`);
  }

  /**
   * An error of a path under the root that says a folder on it is no folder (ENOTDIR, ELOOP): when the repository
   * itself is gone (a file or a loop in its place) that is "not found" (10, from present); a folder inside it replaced
   * is left as the error it is (an internal error: the repository is damaged, not gone).
   */
  private broken(e: unknown): unknown {
    if (PATH_BROKEN.has((e as NodeJS.ErrnoException).code ?? "")) this.present();
    return e;
  }

  /** A folder keeps no versions: nothing is hidden. */
  async hidden(_prefix: string): Promise<Map<string, Buffer>> {
    return new Map();
  }

  async put(key: string, body: Buffer | string, opts: { ifNoneMatch?: boolean } = {}): Promise<boolean> {
    const p = this.path(key);
    this.present();
    if (!opts.ifNoneMatch) {
      atPath(p, () => writeFileAtomic(p, body));
      return true;
    }
    try {
      atPath(p, () => createFileExclusive(p, body));
      return true;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "EEXIST") return false;
      throw e;
    }
  }

  async upload(key: string, file: string): Promise<void> {
    const p = this.path(key);
    this.present();
    atPath(p, () => this.link(file, p));
  }

  private link(file: string, p: string): void {
    ensureDir(dirname(p));
    let src = file;
    try {
      linkSync(file, p); // same filesystem: the finished file itself, never a partial copy
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EXDEV") throw e;
      src = tempSibling(p);
      try {
        copyFileSync(file, src);
        fsyncPath(src);
        linkSync(src, p);
      } finally {
        rmSync(src, { force: true });
      }
    }
    if (src === file) unlinkSync(file);
    fsyncDir(dirname(p));
  }

  async append(key: string, line: string): Promise<void> {
    const p = this.path(key);
    this.present();
    const created = !existsSync(p);
    ensureDir(dirname(p));
    atPath(p, () => {
      appendFileSync(p, line);
      fsyncPath(p);
    });
    if (created) fsyncDir(dirname(p));
  }

  async get(key: string): Promise<Buffer | null> {
    const p = this.path(key);
    try {
      return atPath(p, () => readFileRegular(p));
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "ENOENT") return null;
      // a record of the repository replaced by a FIFO or a device is damage, not the caller's mistake
      if (code === "ENOTREG" || code === "EISDIR") throw verifyError(`object ${key} in ${this.root} is damaged: ${(e as Error).message.replace(/^.* is /, "it is ")}`);
      throw this.broken(e);
    }
  }

  async getRange(key: string, start: number, end: number): Promise<Buffer> {
    const p = this.path(key);
    let fd: number;
    try {
      fd = openRegular(p);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "ENOENT" || code === "ENOTREG" || code === "EISDIR") throw this.missing(key);
      throw this.broken(e);
    }
    try {
      const b = Buffer.allocUnsafe(end - start + 1);
      const n = atPath(p, () => readSync(fd, b, 0, b.length, start));
      return b.subarray(0, n);
    } finally {
      closeSync(fd);
    }
  }

  async download(key: string, file: string): Promise<void> {
    const p = this.path(key);
    if (!LocalStore.regular(p)) throw this.missing(key);
    atPath(p, () => copyFileSync(p, file, 1 /* COPYFILE_EXCL */));
  }

  async localPath(key: string): Promise<string> {
    const p = this.path(key);
    if (!LocalStore.regular(p)) throw this.missing(key);
    return p;
  }

  async head(key: string): Promise<{ size: number; mtimeMs: number; etag: string } | null> {
    try {
      const st = statSync(this.path(key));
      if (!st.isFile()) return null;
      return { size: st.size, mtimeMs: st.mtimeMs, etag: `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}` };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw this.broken(e);
    }
  }

  async list(prefix: string): Promise<string[]> {
    // walk only the folder the prefix names
    const dirKey = prefix.includes("/") ? prefix.slice(0, prefix.lastIndexOf("/")) : "";
    const dir = dirKey ? this.path(dirKey) : this.root;
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true, recursive: true });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw this.broken(e);
      this.present(); // a folder of it that does not exist is empty; the repository itself gone is not
      return [];
    }
    const out: string[] = [];
    for (const e of entries) {
      if (!e.isFile() || e.name.startsWith(".tmp-")) continue;
      const rel = join(e.parentPath, e.name).slice(this.root.length + 1).split(sep).join("/");
      if (rel.startsWith(prefix) && !rel.startsWith(`${TMP}/`)) out.push(rel);
    }
    return out.sort();
  }

  async tagged(prefix: string): Promise<Map<string, { tag: string; size: number }>> {
    const out = new Map<string, { tag: string; size: number }>();
    for (const k of await this.list(prefix)) {
      const h = await this.head(k);
      if (h) out.set(k, { tag: h.etag, size: h.size }); // one gone since the listing is not listed
    }
    return out;
  }

  async strays(prefix: string): Promise<string[]> {
    const dirKey = prefix.replace(/\/$/, "");
    try {
      return readdirSync(dirKey ? this.path(dirKey) : this.root, { withFileTypes: true })
        .filter((e) => !e.isFile() && !e.name.startsWith(".tmp-"))
        .map((e) => `${dirKey ? `${dirKey}/` : ""}${e.name}`)
        .sort();
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT" && (e as NodeJS.ErrnoException).code !== "ENOTDIR") throw e;
      return [];
    }
  }

  async folders(prefix: string): Promise<string[]> {
    const dirKey = prefix.replace(/\/$/, "");
    let entries;
    try {
      entries = readdirSync(dirKey ? this.path(dirKey) : this.root, { withFileTypes: true });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT" && (e as NodeJS.ErrnoException).code !== "ENOTDIR") throw this.broken(e);
      this.present();
      return [];
    }
    // the store's own temp folder is no folder of keys
    return entries.filter((e) => e.isDirectory() && !e.name.startsWith(".tmp-") && (dirKey || e.name !== TMP)).map((e) => e.name).sort();
  }

  async delete(key: string): Promise<boolean> {
    const p = this.path(key);
    try {
      unlinkSync(p);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "ENOENT") return true;
      // a file that can not be unlinked (EPERM in an immutable folder, EROFS) says so: rmSync's fallback to
      // removing a folder turned that into "ENOTDIR … scandir '<file>'"
      if (code !== "EISDIR") throw e;
      rmSync(p, { force: true });
    }
    return true;
  }

  tempDir(tag: string): string {
    // inside the repository: the same filesystem, so an upload is a link
    this.present();
    try {
      return pidDir(join(this.root, TMP), tag);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== "EACCES" && code !== "EROFS" && code !== "EPERM") throw e;
      return pidDir(tmpdir(), `agentbak-${tag}`);
    }
  }

  async sweep(): Promise<number> {
    // staging folders and temp siblings of objects, left by processes that are gone
    let n = sweepDead(join(this.root, TMP), "");
    const folders = new Set<string>();
    try {
      for (const e of readdirSync(this.root, { withFileTypes: true, recursive: true })) if (e.isFile() && e.name.startsWith(".tmp-")) folders.add(e.parentPath);
    } catch {
      return n;
    }
    for (const f of folders) n += sweepDead(f, ".tmp-");
    return n;
  }
}
