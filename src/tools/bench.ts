/**
 * `npm run bench -- --size-mb 1024`: generates the reference database at the
 * requested size, then times `agentbak backup` (the real binary) against the
 * same work done by the stock pipeline in the same run:
 *   sqlite3 .backup, then tar | zstd -3 -T0 | age -r
 * and prints wall times, the ratio, throughput and agentbak's peak RSS (from
 * getrusage of the child, via python3, or /proc polling as a fallback).
 * Also times `verify --identity` and `restore`, an incremental after updating
 * 1% of rows, and (when restic is installed) restic's full and follow-up
 * backup of the same database copy, for the incremental's size comparison.
 *
 * And the agent interface's checkpoint: a small agent (10 MiB database,
 * workspace, memory files) takes incremental checkpoints through a running
 * `agentbak serve` (POST /v1/backups), a few rows written before each as a
 * sub-task would; the median is printed beside `agentbak backup --incremental`
 * for the same work. `--only checkpoint` runs this part alone.
 */
import { execa } from "execa";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { homePaths } from "../home.js";

const root = resolve(fileURLToPath(import.meta.url), "../../..");
const bin = join(root, "bin", "agentbak.js");

function arg(name: string, def: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1]! : def;
}

/** Runs a command, returning wall seconds and the child's peak RSS in MiB. */
async function measure(cmd: string[], opts: { cwd?: string; env?: Record<string, string>; okCodes?: number[] } = {}): Promise<{ seconds: number; rssMiB: number }> {
  // dirty pages left by the step before are flushed first (not timed), so no command pays for another's writeback
  const wrapper = `import os, resource, subprocess, sys, time
os.sync()
t = time.monotonic()
r = subprocess.run(sys.argv[1:])
dt = time.monotonic() - t
print(f"{dt} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}", file=sys.stderr)
sys.exit(r.returncode)`;
  const r = await execa("python3", ["-c", wrapper, ...cmd], { cwd: opts.cwd, env: opts.env, reject: false, stdout: "ignore" });
  const last = String(r.stderr).trim().split("\n").at(-1)!.split(" ");
  if (!(opts.okCodes ?? [0]).includes(r.exitCode ?? -1)) throw new Error(`${cmd.join(" ")} exited ${r.exitCode}: ${r.stderr}`);
  return { seconds: Number(last[0]), rssMiB: Number(last[1]) / 1024 };
}

const fmt = (n: number, d = 2) => n.toFixed(d);
const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[xs.length >> 1]!;

/** Checkpoints of a small agent through the running server, and the CLI's time for the same backup. */
async function checkpointBench(tmp: string, env: Record<string, string>, recipient: string, runs: number) {
  const agent = join(tmp, "agent-small");
  const gen = await import(join(root, "fixtures", "agent", "generate.js"));
  gen.generateAgent(agent, { recipient, sizeMb: 10 });
  // every checkpoint measured is an incremental (no full one falls due among them)
  const cfgFile = join(agent, "agentbak.json");
  writeFileSync(cfgFile, JSON.stringify({ ...JSON.parse(readFileSync(cfgFile, "utf8")), incremental: { enabled: false, fullEvery: 100 } }, null, 2));
  await execa("node", [bin, "init"], { cwd: agent, env });
  const Database = (await import("better-sqlite3")).default;
  // a sub-task's worth of new state before each checkpoint
  const work = (n: number) => {
    const db = new Database(join(agent, "state", "agent.sqlite"));
    const ins = db.prepare("INSERT INTO messages (conversation_id, role, content, created_at) VALUES (?, 'assistant', ?, ?)");
    db.transaction(() => {
      for (let i = 0; i < 20; i++) ins.run(`bench-${n}`, `step ${n}.${i}: checked the invoice and drafted a reply`, new Date().toISOString());
    })();
    db.close();
  };
  const { token } = JSON.parse(String((await execa("node", [bin, "token", "create", "--tenant", "acme", "--agent", "billing-agent", "--tier", "checkpoint", "--json"], { cwd: agent, env })).stdout));
  const server = execa("node", [bin, "serve", "--listen", "127.0.0.1:0"], { cwd: agent, env, reject: false });
  let log = "";
  const url = await new Promise<string>((resolve, reject) => {
    server.stderr!.on("data", (d: Buffer) => {
      log += d;
      const m = log.match(/agent interface on (http:\/\/\S+)/);
      if (m) resolve(m[1]!);
    });
    void server.then(() => reject(new Error(`server exited: ${log}`)));
  });
  const checkpoint = async (body: unknown) => {
    const t0 = performance.now();
    const r = await fetch(`${url}/v1/backups`, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: JSON.stringify(body) });
    const receipt = (await r.json()) as { kind?: string };
    if (r.status !== 201) throw new Error(`checkpoint answered ${r.status}: ${JSON.stringify(receipt)}`);
    return { seconds: (performance.now() - t0) / 1000, kind: receipt.kind };
  };
  try {
    const first = await checkpoint({}); // the full snapshot the incrementals build on; the server warms up
    const server_s: number[] = [];
    for (let i = 0; i < runs; i++) {
      work(i);
      const c = await checkpoint({ incremental: true });
      if (c.kind !== "incremental") throw new Error(`checkpoint ${i} was ${c.kind}`);
      server_s.push(c.seconds);
    }
    const cli_s: number[] = [];
    for (let i = 0; i < Math.min(runs, 5); i++) {
      work(runs + i);
      cli_s.push((await measure(["node", bin, "backup", "--incremental"], { cwd: agent, env })).seconds);
    }
    const full_s: number[] = [];
    for (let i = 0; i < 3; i++) full_s.push((await measure(["node", bin, "backup", "--no-incremental"], { cwd: agent, env })).seconds);
    await execa("node", [bin, "backup", "--incremental", "--skip-if-unchanged"], { cwd: agent, env });
    const unchanged_s = (await measure(["node", bin, "backup", "--incremental", "--skip-if-unchanged"], { cwd: agent, env })).seconds;
    // `snapshots` over 200 real snapshots of this agent (checkpoints through the server until there are 200)
    const count = async () => (JSON.parse(String((await execa("node", [bin, "snapshots", "--json"], { cwd: agent, env })).stdout)) as unknown[]).length;
    for (let n = await count(), i = 0; n < 200; n++, i++) {
      work(1000 + i);
      await checkpoint({ incremental: true });
    }
    const listed = await count();
    rmSync(homePaths(env.AGENTBAK_HOME!).cache.dir, { recursive: true, force: true });
    const snapshots_cold = (await measure(["node", bin, "snapshots"], { cwd: agent, env })).seconds;
    const warm: number[] = [];
    for (let i = 0; i < 3; i++) warm.push((await measure(["node", bin, "snapshots"], { cwd: agent, env })).seconds);
    const snapshots_warm = median(warm);
    const node_startup = (await measure(["node", "-e", "0"])).seconds;
    return {
      cli_full_median_seconds: Number(fmt(median(full_s), 3)),
      cli_unchanged_seconds: Number(fmt(unchanged_s, 3)),
      snapshots_listed: listed,
      snapshots_cold_seconds: Number(fmt(snapshots_cold, 3)),
      snapshots_warm_seconds: Number(fmt(snapshots_warm, 3)),
      node_startup_seconds: Number(fmt(node_startup, 3)),
      database_mib: Number(fmt(statSync(join(agent, "state", "agent.sqlite")).size / 2 ** 20, 1)),
      first_full_seconds: Number(fmt(first.seconds, 3)),
      server_median_seconds: Number(fmt(median(server_s), 3)),
      server_runs: server_s.map((x) => Number(fmt(x, 3))),
      cli_median_seconds: Number(fmt(median(cli_s), 3)),
      cli_runs: cli_s.map((x) => Number(fmt(x, 3))),
      goal_seconds: 0.3,
    };
  } finally {
    server.kill("SIGTERM");
    await server;
  }
}

function checkpointRows(c: Awaited<ReturnType<typeof checkpointBench>>): string[] {
  return [
    `checkpoint via server   median ${c.server_median_seconds} s over ${c.server_runs.length} incrementals (POST /v1/backups; ${c.database_mib} MiB db, workspace; goal <= ${c.goal_seconds} s)`,
    `same backup via CLI     median ${c.cli_median_seconds} s over ${c.cli_runs.length} (agentbak backup --incremental, a new process each; goal <= 0.6 s)`,
    `small agent CLI full    median ${c.cli_full_median_seconds} s over 3 (agentbak backup --no-incremental; goal <= 1.0 s); nothing changed ${c.cli_unchanged_seconds} s`,
    `snapshots (${c.snapshots_listed} listed)  ${c.snapshots_warm_seconds} s warm, ${c.snapshots_cold_seconds} s with no header cache (goal <= 0.3 s; node -e 0 takes ${c.node_startup_seconds} s)`,
  ];
}

type Env = Record<string, string>;
type Run = { seconds: number; rssMiB: number };

/** The reference agent at the requested size, its config trimmed to the database (the same work on both sides), and its repository. */
async function benchAgent(tmp: string, recipient: string, sizeMb: number): Promise<{ agent: string; dbPath: string; dbBytes: number }> {
  const agent = join(tmp, "agent");
  process.stderr.write(`generating a ${sizeMb} MiB reference database in ${agent} ...\n`);
  const g0 = Date.now();
  const gen = await import(join(root, "fixtures", "agent", "generate.js"));
  gen.generateAgent(agent, { recipient, sizeMb });
  const dbPath = join(agent, "state", "agent.sqlite");
  const dbBytes = statSync(dbPath).size;
  process.stderr.write(`generated ${fmt(dbBytes / 2 ** 20, 0)} MiB in ${fmt((Date.now() - g0) / 1000, 1)} s\n`);
  // the same work on both sides: the database only
  const cfg = JSON.parse(readFileSync(join(agent, "agentbak.json"), "utf8"));
  delete cfg.workspace;
  cfg.files = [];
  writeFileSync(join(agent, "agentbak.json"), JSON.stringify(cfg, null, 2));
  const { Repository } = await import("../repository/repository.js");
  await Repository.init(join(agent, "backups"));
  return { agent, dbPath, dbBytes };
}

/** `runs` full backups each way, alternating: the stock pipeline (and its restore), then agentbak backup. */
async function fullBackups(tmp: string, home: string, env: Env, recipient: string, a: { agent: string; dbPath: string }, runs: number): Promise<{ ours: Run[]; theirs: Run[]; stockRestore: Run[] }> {
  const stock = join(tmp, "stock");
  mkdirSync(stock);
  const stockScript = `set -e; sqlite3 '${a.dbPath}' ".backup '${stock}/state.sqlite'"; tar -C '${stock}' -cf - state.sqlite | zstd -3 -T0 -q | age -r ${recipient} > '${stock}/out.age'`;
  // warm the page cache once so neither side pays for the first read
  await execa("sh", ["-c", `cat '${a.dbPath}' > /dev/null`]);
  const ours: Run[] = [];
  const theirs: Run[] = [];
  const stockRestore: Run[] = [];
  for (let i = 0; i < runs; i++) {
    theirs.push(await measure(["sh", "-c", stockScript]));
    // the stock restore of what the stock pipeline wrote
    const back = join(stock, "back");
    mkdirSync(back);
    stockRestore.push(await measure(["sh", "-c", `age -d -i '${homePaths(home).identity}' '${stock}/out.age' | zstd -d -q | tar -x -C '${back}'`]));
    rmSync(back, { recursive: true, force: true });
    rmSync(join(stock, "state.sqlite"), { force: true });
    rmSync(join(stock, "out.age"), { force: true });
    ours.push(await measure(["node", bin, "backup"], { cwd: a.agent, env }));
  }
  return { ours, theirs, stockRestore };
}

/** The newest bundle's size as the operator reads it, and what its snapshot added to the repository (bundle, page index, commit marker). */
async function newestSizes(agent: string, env: Env): Promise<{ bundle: number; stored: number }> {
  const last = (JSON.parse(String((await execa("node", [bin, "snapshots", "--json"], { cwd: agent, env })).stdout)) as { snapshot_id: string; path: string; size: number }[]).at(-1)!;
  const dir = join(last.path, "..");
  return { bundle: last.size, stored: readdirSync(dir).filter((f) => f.startsWith(last.snapshot_id)).reduce((n, f) => n + statSync(join(dir, f)).size, 0) };
}

/** verify (with and without keys) and restore (full checks and --integrity digest) of the newest snapshot. */
async function verifyAndRestore(tmp: string, home: string, env: Env, agent: string): Promise<{ verify: Run; verifyNoKeys: Run; restore: Run; restoreDigest: Run }> {
  const verify = await measure(["node", bin, "verify", "latest", "--identity", homePaths(home).identity], { cwd: agent, env });
  // without keys: the signature and the payload digest (one read of the bundle)
  const verifyNoKeys = await measure(["node", bin, "verify", "latest"], { cwd: agent, env });
  // exit 3: completed with warnings (a credential file is absent on this machine)
  const restore = await measure(["node", bin, "restore", "latest", "--target", join(tmp, "restored"), "--yes", "--allow-rollback"], { cwd: agent, env, okCodes: [0, 3] });
  rmSync(join(tmp, "restored"), { recursive: true, force: true });
  const restoreDigest = await measure(["node", bin, "restore", "latest", "--target", join(tmp, "restored-digest"), "--yes", "--allow-rollback", "--integrity", "digest"], { cwd: agent, env, okCodes: [0, 3] });
  rmSync(join(tmp, "restored-digest"), { recursive: true, force: true });
  return { verify, verifyNoKeys, restore, restoreDigest };
}

/**
 * restic, when installed: a repository, and a backup of the same database
 * (a .backup copy) each time it is called.
 * @returns null when restic is not installed
 */
async function resticSide(tmp: string, dbPath: string): Promise<(() => Promise<{ seconds: number; bytes: number }>) | null> {
  if ((await execa("sh", ["-c", "command -v restic"], { reject: false })).exitCode !== 0) return null;
  const resticRepo = join(tmp, "restic-repo");
  const resticSrc = join(tmp, "restic-src");
  const resticEnv = { ...process.env, RESTIC_PASSWORD: "throwaway-bench-password", RESTIC_REPOSITORY: resticRepo } as Env;
  const duBytes = async (dir: string) => Number(String((await execa("du", ["-sb", dir])).stdout).split(/\s/)[0]);
  mkdirSync(resticSrc);
  await execa("restic", ["init", "-q"], { env: resticEnv });
  return async () => {
    rmSync(join(resticSrc, "state.sqlite"), { force: true });
    await execa("sqlite3", [dbPath, `.backup '${join(resticSrc, "state.sqlite")}'`]);
    const before = await duBytes(resticRepo);
    const r = await measure(["restic", "backup", "-q", resticSrc], { env: resticEnv });
    return { seconds: r.seconds, bytes: (await duBytes(resticRepo)) - before };
  };
}

/** Updates 1% of the rows of every table, at random: the change an incremental carries. */
async function updateOnePercent(dbPath: string): Promise<void> {
  const Database = (await import("better-sqlite3")).default;
  const db = new Database(dbPath);
  const updates = [
    "UPDATE messages SET content = content || ' (revised)'",
    "UPDATE memories SET text = text || ' (revised)'",
    "UPDATE events SET data = '{\"revised\":true}'",
    "UPDATE tasks SET payload = json_set(payload, '$.revised', 1)",
    "UPDATE deliveries SET provider_receipt = provider_receipt || '-r'",
    "UPDATE task_attempts SET outcome = 'ok-revised'",
  ];
  for (const u of updates) db.prepare(`${u} WHERE abs(random()) % 100 = 0`).run();
  db.close();
}

/** The same full backup into an S3-compatible gateway, when one is configured (e.g. test/s3/ceph-start.sh). @returns null when none is */
async function s3Backup(agent: string, env: Env): Promise<Run | null> {
  const s3Endpoint = process.env.AGENTBAK_BENCH_S3_ENDPOINT ?? process.env.AGENTBAK_TEST_S3_ENDPOINT;
  if (!s3Endpoint) return null;
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = "true";
  const { S3Client, CreateBucketCommand } = await import("@aws-sdk/client-s3");
  const bucket = `bench-${Date.now()}`;
  await new S3Client({ endpoint: s3Endpoint, region: process.env.AWS_REGION ?? "us-east-1", forcePathStyle: true }).send(new CreateBucketCommand({ Bucket: bucket }));
  const s3env = { ...env, AGENTBAK_S3_ENDPOINT: s3Endpoint };
  await execa("node", [bin, "init", "--repo", `s3://${bucket}/bench`], { cwd: agent, env: s3env });
  return measure(["node", bin, "backup", "--repo", `s3://${bucket}/bench`, "--no-incremental"], { cwd: agent, env: s3env });
}

/** What the bench measured, for one document on stdout. */
interface Measured {
  dbBytes: number;
  runs: number;
  full: { ours: Run[]; theirs: Run[]; stockRestore: Run[] };
  fullSizes: { bundle: number; stored: number };
  checked: { verify: Run; verifyNoKeys: Run; restore: Run; restoreDigest: Run };
  inc: Run;
  incSizes: { bundle: number; stored: number };
  unchanged: Run;
  unchangedStatus: string;
  s3: Run | null;
  resticFull: { seconds: number; bytes: number } | null;
  resticInc: { seconds: number; bytes: number } | null;
  checkpoint: Awaited<ReturnType<typeof checkpointBench>>;
}

/** The bench's figures, as printed on stdout (JSON). */
function figures(x: Measured) {
  const best = (xs: { seconds: number }[]) => Math.min(...xs.map((r) => r.seconds));
  const { ours, theirs, stockRestore } = x.full;
  const { verify, verifyNoKeys, restore, restoreDigest } = x.checked;
  const oursS = best(ours);
  const theirsS = best(theirs);
  const mib = x.dbBytes / 2 ** 20;
  const bundleBytes = x.fullSizes.bundle;
  return {
    size_mib: Math.round(mib),
    runs: x.runs,
    agentbak_backup_seconds: Number(fmt(oursS, 3)),
    stock_pipeline_seconds: Number(fmt(theirsS, 3)),
    ratio: Number(fmt(oursS / theirsS, 3)),
    agentbak_throughput_mib_s: Number(fmt(mib / oursS, 1)),
    stock_throughput_mib_s: Number(fmt(mib / theirsS, 1)),
    agentbak_peak_rss_mib: Number(fmt(Math.max(...ours.map((r) => r.rssMiB)), 1)),
    bundle_mib: Number(fmt(bundleBytes / 2 ** 20, 1)),
    stock_restore_seconds: Number(fmt(best(stockRestore), 3)),
    verify_identity_seconds: Number(fmt(verify.seconds, 3)),
    verify_no_keys_seconds: Number(fmt(verifyNoKeys.seconds, 3)),
    verify_no_keys_gb_s: Number(fmt(bundleBytes / 1e9 / verifyNoKeys.seconds, 2)),
    restore_digest_seconds: Number(fmt(restoreDigest.seconds, 3)),
    unchanged_seconds: Number(fmt(x.unchanged.seconds, 3)),
    unchanged_status: x.unchangedStatus,
    verify_peak_rss_mib: Number(fmt(verify.rssMiB, 1)),
    restore_seconds: Number(fmt(restore.seconds, 3)),
    restore_peak_rss_mib: Number(fmt(restore.rssMiB, 1)),
    incremental_seconds: Number(fmt(x.inc.seconds, 3)),
    incremental_mib: Number(fmt(x.incSizes.bundle / 2 ** 20, 2)),
    incremental_size_ratio: Number(fmt(x.incSizes.bundle / bundleBytes, 4)),
    full_stored_mib: Number(fmt(x.fullSizes.stored / 2 ** 20, 2)),
    incremental_stored_mib: Number(fmt(x.incSizes.stored / 2 ** 20, 2)),
    incremental_stored_ratio: Number(fmt(x.incSizes.stored / x.fullSizes.stored, 4)),
    incremental_time_ratio: Number(fmt(x.inc.seconds / oursS, 3)),
    incremental_peak_rss_mib: Number(fmt(x.inc.rssMiB, 1)),
    s3_backup_seconds: x.s3 ? Number(fmt(x.s3.seconds, 3)) : null,
    s3_throughput_mib_s: x.s3 ? Number(fmt(mib / x.s3.seconds, 1)) : null,
    s3_peak_rss_mib: x.s3 ? Number(fmt(x.s3.rssMiB, 1)) : null,
    restic:
      x.resticFull && x.resticInc
        ? {
            full_seconds: Number(fmt(x.resticFull.seconds, 3)),
            full_mib: Number(fmt(x.resticFull.bytes / 2 ** 20, 1)),
            incremental_seconds: Number(fmt(x.resticInc.seconds, 3)),
            incremental_mib: Number(fmt(x.resticInc.bytes / 2 ** 20, 2)),
            incremental_size_ratio: Number(fmt(x.resticInc.bytes / x.resticFull.bytes, 4)),
          }
        : "not installed here",
    checkpoint: x.checkpoint,
    all_agentbak_runs: ours,
    all_stock_runs: theirs,
  };
}

/** The figures for people (stderr), each beside its goal. */
function figureRows(out: ReturnType<typeof figures>, s3: boolean): string[] {
  return [
    "",
    `database                ${out.size_mib} MiB`,
    `agentbak backup         ${out.agentbak_backup_seconds} s  (${out.agentbak_throughput_mib_s} MiB/s, peak RSS ${out.agentbak_peak_rss_mib} MiB, bundle ${out.bundle_mib} MiB)`,
    `stock pipeline          ${out.stock_pipeline_seconds} s  (${out.stock_throughput_mib_s} MiB/s)  sqlite3 .backup; tar | zstd -3 -T0 | age -r`,
    `ratio agentbak/stock    ${out.ratio}  (goal: <= 1.3)`,
    `ratio agentbak/restic   ${typeof out.restic === "string" ? "-" : fmt(out.agentbak_backup_seconds / out.restic.full_seconds, 2)}  (full backup of the same database; goal: <= 1.0)`,
    `verify --identity       ${out.verify_identity_seconds} s  (peak RSS ${out.verify_peak_rss_mib} MiB)`,
    `verify (no keys)        ${out.verify_no_keys_seconds} s  (${out.verify_no_keys_gb_s} GB/s of bundle; goal: >= 1 GB/s)`,
    `restore                 ${out.restore_seconds} s  (peak RSS ${out.restore_peak_rss_mib} MiB); --integrity digest ${out.restore_digest_seconds} s`,
    `stock restore           ${out.stock_restore_seconds} s  age -d | zstd -d | tar x; ratio ${fmt(out.restore_seconds / out.stock_restore_seconds, 2)} (digest ${fmt(out.restore_digest_seconds / out.stock_restore_seconds, 2)}; goal: <= 1.5)`,
    `nothing changed         ${out.unchanged_seconds} s  (backup --skip-if-unchanged: ${out.unchanged_status}; goal: <= 0.5 s)`,
    `incremental (1% rows)   ${out.incremental_seconds} s  (${out.incremental_time_ratio} of full; goal <= 0.2), peak RSS ${out.incremental_peak_rss_mib} MiB`,
    `  its bytes             bundle ${out.incremental_mib} MiB (${(out.incremental_size_ratio * 100).toFixed(2)}% of the full's); added to the repository with its page index ${out.incremental_stored_mib} MiB (${(out.incremental_stored_ratio * 100).toFixed(2)}% of the full's ${out.full_stored_mib} MiB; goal <= 3%)`,
    `backup to S3 gateway    ${s3 ? `${out.s3_backup_seconds} s  (${out.s3_throughput_mib_s} MiB/s, peak RSS ${out.s3_peak_rss_mib} MiB)` : "skipped (set AGENTBAK_BENCH_S3_ENDPOINT)"}`,
    ...checkpointRows(out.checkpoint),
    typeof out.restic === "string"
      ? `restic                  ${out.restic}`
      : `restic (same copy)      full ${out.restic.full_seconds} s, ${out.restic.full_mib} MiB; after the update ${out.restic.incremental_seconds} s, +${out.restic.incremental_mib} MiB (${(out.restic.incremental_size_ratio * 100).toFixed(2)}% of its full)`,
    "",
  ];
}

async function main(): Promise<void> {
  const sizeMb = Number(arg("size-mb", "1024"));
  const keep = process.argv.includes("--keep");
  const tmp = mkdtempSync(join(tmpdir(), "agentbak-bench-"));
  try {
    const home = join(tmp, "home");
    const env = { ...process.env, AGENTBAK_HOME: home } as Env;
    await execa("node", [bin, "keygen", "--out", home], { env });
    const recipient = readFileSync(homePaths(home).recipient, "utf8").trim();
    if (arg("only", "") === "checkpoint") {
      const c = await checkpointBench(tmp, env, recipient, Number(arg("runs", "10")));
      process.stderr.write(["", ...checkpointRows(c), ""].join("\n"));
      process.stdout.write(JSON.stringify({ checkpoint: c }) + "\n");
      return;
    }
    const a = await benchAgent(tmp, recipient, sizeMb);
    const runs = Number(arg("runs", "2"));
    const full = await fullBackups(tmp, home, env, recipient, a, runs);
    const fullSizes = await newestSizes(a.agent, env);
    const checked = await verifyAndRestore(tmp, home, env, a.agent);
    const restic = await resticSide(tmp, a.dbPath);
    const resticFull = restic ? await restic() : null;
    await updateOnePercent(a.dbPath);
    // --skip-if-unchanged records the state's fingerprint; it changed, so this is an incremental like any other
    const inc = await measure(["node", bin, "backup", "--incremental", "--skip-if-unchanged"], { cwd: a.agent, env });
    const incSizes = await newestSizes(a.agent, env);
    // nothing changed since: no bundle is written
    const unchanged = await measure(["node", bin, "backup", "--incremental", "--skip-if-unchanged"], { cwd: a.agent, env });
    const unchangedStatus = (JSON.parse(String((await execa("node", [bin, "backup", "--incremental", "--skip-if-unchanged", "--json"], { cwd: a.agent, env })).stdout)) as { status: string }).status;
    const resticInc = restic ? await restic() : null;
    const s3 = await s3Backup(a.agent, env);
    const checkpoint = await checkpointBench(tmp, env, recipient, 10);
    const out = figures({ dbBytes: a.dbBytes, runs, full, fullSizes, checked, inc, incSizes, unchanged, unchangedStatus, s3, resticFull, resticInc, checkpoint });
    process.stderr.write(figureRows(out, s3 !== null).join("\n"));
    process.stdout.write(JSON.stringify(out) + "\n");
  } finally {
    if (!keep) rmSync(tmp, { recursive: true, force: true });
    else process.stderr.write(`kept ${tmp}\n`);
  }
}

main().catch((e) => {
  process.stderr.write(`bench failed: ${(e as Error).message}\n`);
  process.exitCode = 1;
});
