/**
 * The local repository: a folder holding `agents/<agent>/<snapshot>.agentbak`,
 * lock files, idempotency records, fencing generations and an append-only
 * audit log. Bundles are published with link(2), so one is never overwritten.
 */
import { appendFileSync, closeSync, existsSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, statSync, unlinkSync, writeSync } from "node:fs";
import { hostname } from "node:os";
import { join, resolve } from "node:path";
import { AgentbakError, Exit, lockedError, notFound, usageError } from "../errors.js";
import { createFileExclusive, fsyncDir, publishExclusive, writeFileAtomic } from "../fsutil.js";

const REPO_CONFIG = "agentbak-repository.json";

/** A bundle file in the repository. */
export interface BundleRef {
  agentId: string;
  snapshotId: string;
  path: string;
  size: number;
}

/** A held lock; release() removes it. */
export interface Lock {
  path: string;
  release(): void;
}

export class LocalRepository {
  readonly root: string;

  constructor(root: string) {
    this.root = resolve(root);
  }

  /** Creates the repository layout (idempotent). */
  init(): void {
    for (const d of ["agents", "locks", "tmp", "idempotency", "state"]) mkdirSync(join(this.root, d), { recursive: true });
    const cfg = join(this.root, REPO_CONFIG);
    if (!existsSync(cfg)) writeFileAtomic(cfg, JSON.stringify({ format: "agentbak-repository", version: 1, created_at: new Date().toISOString() }, null, 2) + "\n");
  }

  /** @throws AgentbakError(10) when the folder is not an agentbak repository. */
  open(): this {
    if (!existsSync(join(this.root, REPO_CONFIG))) throw notFound(`repository not found: ${this.root} (no ${REPO_CONFIG}; run agentbak init)`);
    return this;
  }

  agentDir(agentId: string): string {
    return join(this.root, "agents", agentId);
  }

  bundlePath(agentId: string, snapshotId: string): string {
    return join(this.agentDir(agentId), `${snapshotId}.agentbak`);
  }

  /** A private temp folder inside the repository (same filesystem, so publishing is a link). */
  tempDir(tag: string): string {
    const d = join(this.root, "tmp", `${tag}-${process.pid}-${Date.now()}`);
    mkdirSync(d, { recursive: true });
    return d;
  }

  /**
   * Removes temp folders left by processes that are gone (kill -9, power loss).
   * @returns how many were removed.
   */
  sweepTemp(): number {
    const dir = join(this.root, "tmp");
    if (!existsSync(dir)) return 0;
    let n = 0;
    for (const e of readdirSync(dir)) {
      const pid = Number(e.split("-").at(-2));
      if (Number.isInteger(pid) && pid !== process.pid && !pidAlive(pid)) {
        rmSync(join(dir, e), { recursive: true, force: true });
        n++;
      }
    }
    return n;
  }

  /** Publishes a finished bundle; never overwrites. @throws AgentbakError(1) if the id exists. */
  publish(tmpFile: string, agentId: string, snapshotId: string): string {
    const dest = this.bundlePath(agentId, snapshotId);
    mkdirSync(this.agentDir(agentId), { recursive: true });
    try {
      publishExclusive(tmpFile, dest);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "EEXIST") throw new AgentbakError(Exit.failure, `bundle ${dest} already exists; refusing to overwrite`);
      throw e;
    }
    fsyncDir(join(this.root, "agents"));
    return dest;
  }

  /** Every bundle file, sorted by agent then snapshot id (time order). */
  list(agentId?: string): BundleRef[] {
    const agentsDir = join(this.root, "agents");
    if (!existsSync(agentsDir)) return [];
    const agents = agentId ? [agentId] : readdirSync(agentsDir).sort();
    const out: BundleRef[] = [];
    for (const a of agents) {
      const d = join(agentsDir, a);
      if (!existsSync(d)) continue;
      for (const f of readdirSync(d).sort()) {
        if (!f.endsWith(".agentbak") || f.startsWith(".")) continue;
        const p = join(d, f);
        out.push({ agentId: a, snapshotId: f.slice(0, -".agentbak".length), path: p, size: statSync(p).size });
      }
    }
    return out;
  }

  /**
   * Takes the named lock (O_EXCL file with pid, host, start time). A lock whose
   * owner process on this host is gone is stale and taken over.
   * @throws AgentbakError(11) naming the holder when held and `waitMs` runs out.
   */
  async lock(name: string, waitMs = 0): Promise<Lock> {
    const path = join(this.root, "locks", `${name}.lock`);
    mkdirSync(join(this.root, "locks"), { recursive: true });
    const deadline = Date.now() + waitMs;
    for (;;) {
      try {
        const fd = openSync(path, "wx", 0o644);
        writeSync(fd, JSON.stringify({ pid: process.pid, host: hostname(), started_at: new Date().toISOString() }) + "\n");
        fsyncSync(fd);
        closeSync(fd);
        return { path, release: () => rmSync(path, { force: true }) };
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      }
      let holder: { pid?: number; host?: string; started_at?: string } = {};
      try {
        holder = JSON.parse(readFileSync(path, "utf8"));
      } catch {
        /* being written; retry */
      }
      if (holder.host === hostname() && holder.pid && !pidAlive(holder.pid)) {
        try {
          unlinkSync(path);
        } catch {
          /* someone else took it over first */
        }
        continue;
      }
      if (Date.now() >= deadline)
        throw lockedError(`repository locked (${name}) by pid ${holder.pid ?? "?"} on ${holder.host ?? "?"} since ${holder.started_at ?? "?"}; pass --wait to wait`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Appends one JSON line to the audit log and fsyncs it. Never pass state contents. */
  audit(entry: Record<string, unknown>): void {
    const path = join(this.root, "audit.log");
    appendFileSync(path, JSON.stringify({ at: new Date().toISOString(), host: hostname(), user: process.env.USER ?? null, ...entry }) + "\n");
    const fd = openSync(path, "r+");
    fsyncSync(fd);
    closeSync(fd);
  }

  /** Reads a small JSON record under the repository, or undefined. */
  readRecord<T>(rel: string): T | undefined {
    const p = join(this.root, rel);
    if (!existsSync(p)) return undefined;
    return JSON.parse(readFileSync(p, "utf8")) as T;
  }

  /** Writes (replaces) a small JSON record atomically. */
  writeRecord(rel: string, value: unknown): void {
    writeFileAtomic(join(this.root, rel), JSON.stringify(value, null, 2) + "\n");
  }

  /** Creates a record that must not exist yet. @returns false when it already existed. */
  createRecord(rel: string, value: unknown): boolean {
    try {
      createFileExclusive(join(this.root, rel), JSON.stringify(value, null, 2) + "\n");
      return true;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "EEXIST") return false;
      throw e;
    }
  }
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

/** Opens the repository at `root` or fails with exit 10; `s3://` is not supported by this build. */
export function openRepository(root: string): LocalRepository {
  if (/^[a-z0-9]+:\/\//.test(root)) throw usageError(`repository ${root}: only local repositories are supported by this build`);
  return new LocalRepository(root).open();
}
