// Shared test helpers: temp agents with throwaway keys, and the real binary.
import { execa } from "execa";
import { afterAll, beforeAll } from "vitest";
import { randomBytes } from "node:crypto";
import { createServer } from "node:net";
import { closeSync, cpSync, existsSync, mkdtempSync, openSync, readSync, rmSync, readFileSync, readdirSync, mkdirSync, statSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
// @ts-expect-error plain JS fixture
import { generateAgent } from "../fixtures/agent/generate.js";

export const ROOT = resolve(import.meta.dirname, "..");

// figures a test reports to `npm run threats` (test/threats-reporter.ts)
declare module "vitest" {
  interface TaskMeta {
    /** peak RSS of the agentbak process a bomb case ran, KiB */
    peakRssKb?: number;
    /** the tamper sweep: flips tried (by where) and detected, truncations tried and refused */
    bitFlips?: { tried: number; detected: number; manifestBytes: number; signatureBytes: number; headerBytes: number; payloadOffsets: number; truncations: number; refused: number };
  }
}
export const BIN = join(ROOT, "bin", "agentbak.js");

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
  /** peak resident memory of the process in KiB, when run with `rss: true` */
  maxRssKb?: number;
}

/** Prints the process's peak RSS (KiB) as the last stderr line when it exits. */
const RSS_PROBE = 'data:text/javascript,process.on("exit",()=>process.stderr.write("\\nagentbak-test-maxrss-kb="+process.resourceUsage().maxRSS+"\\n"))';

/** Runs the real agentbak binary; with `rss`, also measures its peak memory; `nodeArgs` go to node (an --import that injects a fault). */
export async function run(args: string[], opts: { cwd?: string; env?: Record<string, string | undefined>; timeout?: number; rss?: boolean; nodeArgs?: string[] } = {}): Promise<RunResult> {
  const r = await execa("node", [...(opts.nodeArgs ?? []), ...(opts.rss ? ["--import", RSS_PROBE] : []), BIN, ...args], {
    cwd: opts.cwd,
    env: { NO_COLOR: "1", ...opts.env },
    reject: false,
    stdin: "ignore",
    timeout: opts.timeout ?? 120_000,
  });
  let stderr = String(r.stderr);
  const m = /\n?agentbak-test-maxrss-kb=(\d+)\n?$/.exec(stderr);
  if (m) stderr = stderr.slice(0, m.index);
  return { code: r.exitCode ?? -1, stdout: String(r.stdout), stderr, ...(m ? { maxRssKb: Number(m[1]) } : {}) };
}

/**
 * Which store the repository tests run against: a local folder, or (the "s3"
 * project in vitest.config.ts) a fresh bucket on the test gateway.
 */
export const STORE = (process.env.AGENTBAK_TEST_STORE ?? "local") as "local" | "s3";
/** Where an agent's snapshots live in a repository (layout v2). */
export const SNAPS = "tenants/acme/agents/billing-agent/snapshots";

/** A bucket on the test gateway (AGENTBAK_TEST_S3_ENDPOINT). */
export async function makeBucket(name: string, objectLock = false): Promise<void> {
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = "true";
  const { S3Client, CreateBucketCommand } = await import("@aws-sdk/client-s3");
  const c = new S3Client({ endpoint: process.env.AGENTBAK_TEST_S3_ENDPOINT, region: "us-east-1", forcePathStyle: true });
  await c.send(new CreateBucketCommand({ Bucket: name, ...(objectLock ? { ObjectLockEnabledForBucket: true } : {}) }));
}

/** The store behind a repository location, to inspect or damage it as a test must. */
export async function storeAt(location: string): Promise<any> {
  if (location.startsWith("s3://")) {
    process.env.AGENTBAK_S3_ENDPOINT = process.env.AGENTBAK_TEST_S3_ENDPOINT;
    process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = "true";
    const { S3Store } = await import("../dist/storage/s3.js");
    return new S3Store(location).init();
  }
  const { LocalStore } = await import("../dist/storage/local.js");
  return new LocalStore(location);
}

export interface TestAgent {
  tmp: string;
  home: string;
  dir: string;
  /** the repository: a folder, or s3://bucket/prefix in the "s3" project */
  repo: string;
  config: string;
  recipient: string;
  identity: string;
  env: Record<string, string>;
  commit: string;
  run(args: string[], extraEnv?: Record<string, string | undefined>, opts?: { rss?: boolean; nodeArgs?: string[]; timeout?: number }): Promise<RunResult>;
  /** A bundle as a local file: the path itself for a folder repository, a download for a bucket. */
  file(path: string): Promise<string>;
  /** The repository's object store (folder or bucket). */
  store(): Promise<any>;
  /** Staging files and folders left behind (repository temp folder and this agent's TMPDIR). */
  leftovers(): string[];
  cleanup(): void;
}

/** makeAgent({ sizeMb: 1 }) with one committed backup: the set-up most attack files share. @throws naming the backup's exit and stderr when it fails (its folder removed) */
export async function backedUpAgent(): Promise<TestAgent> {
  const a = await makeAgent({ sizeMb: 1 });
  const r = await a.run(["backup"]);
  if (r.code !== 0) {
    a.cleanup();
    throw new Error(`backup exited ${r.code}: ${r.stderr}`);
  }
  return a;
}

/**
 * A backedUpAgent() for the describe this is called in: made before its tests (beforeAll), removed after them
 * (afterAll). `a`: the agent, once made; `t(name)`: a path in its temp folder.
 */
export function describeBackedUpAgent(): { readonly a: TestAgent; t(name: string): string } {
  let agent: TestAgent | undefined;
  beforeAll(async () => {
    agent = await backedUpAgent();
  }, 120_000);
  afterAll(() => agent?.cleanup());
  return {
    get a() {
      if (!agent) throw new Error("the describe's agent is made in its beforeAll: use it inside a test");
      return agent;
    },
    t: (name) => join(agent!.tmp, name),
  };
}

/** Flips one bit of `file` at `offset` (from the end when negative), in place. */
export function flipByte(file: string, offset: number): void {
  const fd = openSync(file, "r+");
  try {
    const at = offset < 0 ? statSync(file).size + offset : offset;
    const b = Buffer.alloc(1);
    readSync(fd, b, 0, 1, at);
    b[0]! ^= 0x10;
    writeSync(fd, b, 0, 1, at);
  } finally {
    closeSync(fd);
  }
}

/** A fresh agent folder with its own AGENTBAK_HOME (throwaway keys) and an initialised repository. */
export async function makeAgent(opts: { sizeMb?: number; seed?: number; agentId?: string; tenant?: string } = {}): Promise<TestAgent> {
  const tmp = mkdtempSync(join(tmpdir(), "agentbak-test-"));
  const home = join(tmp, "home");
  // a temp root of its own: drill and verify temp folders of parallel tests never mix
  mkdirSync(join(tmp, "tmp"));
  const env = { AGENTBAK_HOME: home, TMPDIR: join(tmp, "tmp") };
  const kg = await run(["keygen", "--out", home, "--json"], { env });
  if (kg.code !== 0) throw new Error(`keygen failed: ${kg.stderr}`);
  const recipient = readFileSync(join(home, "age-recipient.txt"), "utf8").trim();
  const dir = join(tmp, "agent");
  mkdirSync(dir);
  const g = generateAgent(dir, { recipient, sizeMb: opts.sizeMb ?? 2, seed: opts.seed ?? 1, agentId: opts.agentId, tenant: opts.tenant });
  let repo = join(dir, "backups");
  if (STORE === "s3") {
    const bucket = `t-${randomBytes(5).toString("hex")}`;
    await makeBucket(bucket);
    repo = `s3://${bucket}/repo`;
    const cfg = JSON.parse(readFileSync(g.config, "utf8"));
    writeFileSync(g.config, JSON.stringify({ ...cfg, repository: repo }, null, 2));
  }
  const init = await run(["init"], { cwd: dir, env });
  if (init.code !== 0) throw new Error(`init failed: ${init.stderr}`);
  return {
    tmp,
    home,
    dir,
    repo,
    config: g.config,
    recipient,
    identity: join(home, "age-identity.txt"),
    env,
    commit: g.commit,
    run: (args, extraEnv = {}, o = {}) => run(args, { cwd: dir, env: { ...env, ...extraEnv }, ...o }),
    async file(path) {
      if (!path.startsWith("s3://")) return path;
      const key = path.slice(repo.length + 1);
      const out = join(tmp, "downloads", `${randomBytes(4).toString("hex")}-${basename(key)}`);
      mkdirSync(join(tmp, "downloads"), { recursive: true });
      await (await storeAt(repo)).download(key, out);
      return out;
    },
    store: () => storeAt(repo),
    leftovers: () => [
      ...(STORE === "local" && existsSync(join(repo, "tmp")) ? readdirSync(join(repo, "tmp")) : []),
      ...readdirSync(join(tmp, "tmp")).filter((e) => e.startsWith("agentbak-")),
    ],
    cleanup: () => rmSync(tmp, { recursive: true, force: true }),
  };
}

/**
 * A drill spec written into `dir`: `base` (a spec in drills/) with absolute
 * invariant and worker paths, changed by `patch`. @returns its path.
 */
export function writeSpec(dir: string, name: string, base: string, patch: (s: any) => void): string {
  const s = JSON.parse(readFileSync(base, "utf8"));
  s.invariants = [join(ROOT, "drills/invariants/reference/*.sql")];
  s.worker.command = ["node", join(ROOT, "fixtures/agent/worker.js")];
  patch(s);
  const p = join(dir, `${name}.json`);
  writeFileSync(p, JSON.stringify(s));
  return p;
}

/**
 * The leases held in a local repository's `locks` folder of an agent: grants
 * (`<name>/<token>.lease`, kept once let go so a token is never issued twice)
 * not marked released. @returns their paths relative to `locks`.
 */
/**
 * The lease grants under `locks` that a live process holds: not released, and its process still running (a grant
 * of a process that is gone is taken over by the next acquirer on this host, repository/lease.ts: it holds nothing).
 */
export function liveLeases(locks: string): string[] {
  return heldLeases(locks).filter((f) => {
    const pid = JSON.parse(readFileSync(join(locks, f), "utf8")).pid;
    try {
      process.kill(pid, 0);
      return true;
    } catch (e) {
      return (e as NodeJS.ErrnoException).code === "EPERM";
    }
  });
}

export function heldLeases(locks: string): string[] {
  if (!existsSync(locks)) return [];
  return readdirSync(locks, { recursive: true })
    .map(String)
    .filter((f) => f.endsWith(".lease") && JSON.parse(readFileSync(join(locks, f), "utf8")).released !== true);
}

/** Parses the single JSON document a --json command printed. */
export function json<T = any>(r: RunResult): T {
  try {
    return JSON.parse(r.stdout) as T;
  } catch {
    throw new Error(`not JSON (exit ${r.code}): ${r.stdout}\nstderr: ${r.stderr}`);
  }
}

/** A URL on 127.0.0.1 where nothing listens: connections are refused (an unreachable repository). */
export async function closedPort(): Promise<string> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return `http://127.0.0.1:${port}`;
}

/** Another host: the same keys and signers as `a`, none of its trusted state. */
export function secondHome(a: TestAgent, name: string): Record<string, string> {
  const home = join(a.tmp, name);
  mkdirSync(home);
  for (const f of ["age-identity.txt", "age-recipient.txt", "signing-key", "signing-key.pub", "allowed_signers"]) cpSync(join(a.home, f), join(home, f));
  return { AGENTBAK_HOME: home };
}

/**
 * Waits (up to a minute) until process `pid` is stopped, as AGENTBAK_PAUSE_STEP stops it at its step (SIGSTOP:
 * state "T" in /proc). @returns whether it stopped
 */
export async function pausedAtStep(pid: number): Promise<boolean> {
  const stopped = () => readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.startsWith("T");
  for (const end = Date.now() + 60_000; !stopped() && Date.now() < end; ) await new Promise((r) => setTimeout(r, 20));
  return stopped();
}

/** An agent whose `models/adapter.bin` (3 MiB) is stored as chunks (the chunk store's edge tests). */
export async function chunkedAgent(): Promise<TestAgent> {
  const a = await makeAgent({ sizeMb: 1 });
  mkdirSync(join(a.dir, "models"));
  writeFileSync(join(a.dir, "models/adapter.bin"), randomBytes(3 * 1024 * 1024));
  const cfg = JSON.parse(readFileSync(a.config, "utf8"));
  writeFileSync(a.config, JSON.stringify({ ...cfg, files: [...cfg.files, "models/*.bin"] }, null, 2));
  return a;
}

/** The chunk objects of an agent in a folder repository (`<2 hex>/<64 hex>`), sorted. */
export const chunkFiles = (a: TestAgent, agentDir = "tenants/acme/agents/billing-agent") =>
  readdirSync(join(a.repo, agentDir, "chunks"), { recursive: true })
    .map(String)
    .filter((f) => /^[0-9a-f]{2}\/[0-9a-f]{64}$/.test(f))
    .sort();
