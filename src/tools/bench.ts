/**
 * `npm run bench`: issue 35's goals table, measured for every agent shape
 * (bench-shapes.ts: reference, ledger, blobs, mixed) side by side with the
 * baselines in the same run, with the real binary:
 *
 *   full backup              vs restic (the consistent copy it needs, then `restic backup`)
 *   restore (default)        vs the stock pipeline's restore: age -d | zstd -d | tar x (+ pg_restore)
 *   restore --integrity digest, the same
 *   incremental after 1% of rows, time / the full backup's
 *   nothing changed (--skip-if-unchanged), time / full and absolute
 *   `agentbak --version` and `snapshots` (the shape's small repository)
 *   second snapshot after a few new rows: bytes and time / the first's
 *   peak RSS of every agentbak command
 *
 * One table per shape, a summary (rows x shapes, "measured (ratio) met/NOT"),
 * and with --json FILE the same as JSON with the date, commit and machine.
 *
 *   --shapes reference,ledger,blobs,mixed   which shapes (default all)
 *   --size-mb N      the reference database's size (default 1024), times --scale
 *   --scale F        every shape's size (default 1; 0.1 for a quick run)
 *   --runs N         full backups and stock pipelines per shape; the best counts (default 1)
 *   --cache DIR      generated shapes (default <tmpdir>/agentbak-bench-cache)
 *   --profile DIR    every agentbak command under node --cpu-prof; a summary per command
 *   --json FILE      write the results as JSON
 *   --generate-only  generate (cache) the shapes and stop
 *   --keep           keep the run's folder
 *   --only checkpoint  the agent interface's checkpoint bench alone (bench-checkpoint.ts)
 *   --only chunks      the chunk engine on the mixed shape (bench-chunks.ts): throughput, stat cache, dedupe
 *   --only second      the second-snapshot row alone (bench-second.ts; --shapes, default mixed): no restic needed
 *   --only restore     the restore rows alone (bench-restore.ts; --shapes, --runs): stock restore with and
 *                      without `sync`, restore, restore --integrity digest, by wall and CPU
 *   --only startup     the start-up figures alone (bench-startup.ts): --version, snapshots, nothing changed,
 *                      medians beside node -e 0's; a full run measures them first too
 *   --startup-runs N   runs of each start-up figure (default 21)
 *   --fleet --only list  the fleet's listing alone (bench-listing.ts): `snapshots --all`/`status --all` over
 *                      --agents (1000) x --snapshots (20), cold and warm host cache, requests counted
 *   --fleet            issue 36's fleet figures alone (bench-fleet.ts): N agents over H `serve --host`
 *                      processes, a round of all and one of 10% changed, `snapshots --all`, `status --all`
 *                      (--agents N, --hosts H, --changed F, --db-kib K, --before BIN; a bucket on
 *                      AGENTBAK_BENCH_S3_ENDPOINT when set)
 */
import { execa } from "execa";
import { cpus, availableParallelism, tmpdir, totalmem } from "node:os";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { checkpointBench, checkpointRows } from "./bench-checkpoint.js";
import { chunkBench } from "./bench-chunks.js";
import { fleetBench } from "./bench-fleet.js";
import { listingBench } from "./bench-listing.js";
import { restoreBench, restoreRows, type RestoreResult } from "./bench-restore.js";
import { secondBench, secondRows, type SecondResult } from "./bench-second.js";
import { bin, fmt, measure, root, type Measured } from "./bench-measure.js";
import { profileText, summarizeDir, type ThreadSummary } from "./bench-profile.js";
import { startupBench, startupRows } from "./bench-startup.js";
import { cachedShape, duBytes, openShape, SHAPE_BYTES, SHAPES, type Shape, type ShapeName } from "./bench-shapes.js";

function arg(name: string, def: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1]! : def;
}
const flag = (name: string) => process.argv.includes(`--${name}`);
const log = (s: string) => void process.stderr.write(s + "\n");
const MiB = 2 ** 20;

/** The goals of issue 35, one per row. */
const ROWS = [
  { key: "restore", label: "restore vs age|zstd|tar", goal: "<= 1.5x" },
  { key: "restore_digest", label: "restore --integrity digest vs age|zstd|tar", goal: "<= 1.1x" },
  { key: "full", label: "full backup vs restic", goal: "<= 1.0x" },
  { key: "incremental", label: "incremental after 1% of rows / full", goal: "<= 0.2" },
  { key: "unchanged", label: "nothing changed / full (300 MiB and up)", goal: "<= 0.1, <= 0.3 s" },
  { key: "version", label: "agentbak --version", goal: "<= 0.15 s" },
  { key: "snapshots", label: "snapshots (small repo)", goal: "<= 0.25 s" },
  { key: "second_bytes", label: "second snapshot bytes / first", goal: "<= 1%" },
  { key: "second_time", label: "second snapshot time / first", goal: "<= 0.2" },
  { key: "rss", label: "peak RSS of any command", goal: "<= 150 MiB" },
] as const;
type RowKey = (typeof ROWS)[number]["key"];

/** One cell of the goals table: what was measured, against what, and whether the goal is met (null: not applicable). */
interface Cell {
  /** measured (ratio), for the summary */
  short: string;
  /** with the baseline, for the shape's own table */
  text: string;
  ratio: number | null;
  met: boolean | null;
}

interface ShapeResult {
  shape: ShapeName;
  description: string;
  state_mib: number;
  generated_seconds: number;
  cells: Record<RowKey, Cell>;
  /** every timed command: agentbak's and the baselines' */
  commands: Record<string, { seconds: number; cpu_seconds: number; peak_rss_mib: number }>;
  bytes: Record<string, number>;
  unchanged_status: string;
  profiles: Record<string, ThreadSummary[]>;
}

interface Ctx {
  tmp: string;
  env: Record<string, string>;
  home: string;
  recipient: string;
  runs: number;
  profile: string | null;
  version: Measured;
}

const shellQuote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
const best = (xs: Measured[]) => xs.reduce((a, b) => (b.seconds < a.seconds ? b : a));
const verdict = (met: boolean | null) => (met === null ? "" : met ? " met" : " NOT");
const cellFor = (short: string, text: string, ratio: number | null, met: boolean | null): Cell => ({ short: short + verdict(met), text: text + verdict(met), ratio, met });

/** The stock pipeline (consistent copy, tar | zstd | age) and its restore, and restic on the same copy, for one shape. */
async function baselines(s: Shape, c: Ctx, record: (k: string, m: Measured) => void) {
  const work = join(c.tmp, `stock-${s.name}`);
  const copy = join(work, "copy");
  const out = join(work, "out.age");
  const plain = s.plainPaths.map(shellQuote).join(" ");
  const prepare = `set -e; rm -rf ${shellQuote(copy)}; mkdir -p ${shellQuote(copy)}; set -- ${shellQuote(copy)}\n${s.prepare}\n`;
  const stock = `${prepare}tar -cf - -C ${shellQuote(copy)} . ${plain ? `-C ${shellQuote(s.dir)} ${plain}` : ""} | zstd -3 -T0 -q | age -r ${c.recipient} > ${shellQuote(out)}`;
  const env = { ...c.env, ...s.env };
  const stocks: Measured[] = [];
  const restores: Measured[] = [];
  for (let i = 0; i < c.runs; i++) {
    mkdirSync(work, { recursive: true });
    stocks.push(await measure(["sh", "-c", stock], { env }));
    const back = join(work, "back");
    mkdirSync(back);
    const extra = await s.stockRestoreExtra(`stock_${i}`, back);
    restores.push(await measure(["sh", "-c", `set -e; age -d -i ${shellQuote(join(c.home, "age-identity.txt"))} ${shellQuote(out)} | zstd -d -q | tar -x -C ${shellQuote(back)}${extra ? `; ${extra}` : ""}`], { env }));
    rmSync(work, { recursive: true, force: true });
  }
  record("stock_backup", best(stocks));
  record("stock_restore", best(restores));
  // restic: the same consistent copy, then `restic backup` of it and the plain paths
  const resticEnv = { ...env, RESTIC_PASSWORD: "throwaway-bench-password", RESTIC_REPOSITORY: join(c.tmp, `restic-${s.name}`), RESTIC_CACHE_DIR: join(c.tmp, "restic-cache") };
  await execa("restic", ["init", "-q"], { env: resticEnv });
  const resticScript = `${prepare}restic backup -q ${shellQuote(copy)} ${s.plainPaths.map((p) => shellQuote(join(s.dir, p))).join(" ")}`;
  record("restic_prepare_only", await measure(["sh", "-c", prepare], { env }));
  const before = await duBytes(resticEnv.RESTIC_REPOSITORY);
  record("restic_full", await measure(["sh", "-c", resticScript], { env: resticEnv }));
  const resticFullBytes = (await duBytes(resticEnv.RESTIC_REPOSITORY)) - before;
  return { resticScript, resticEnv, resticFullBytes };
}

/** Runs one agentbak command in the shape's folder (under --cpu-prof with --profile), records it. */
function runner(s: Shape, c: Ctx, record: (k: string, m: Measured) => void, profiles: Record<string, ThreadSummary[]>) {
  return async (step: string, args: string[], okCodes = [0]): Promise<Measured> => {
    const dir = c.profile ? join(c.profile, `${s.name}-${step}`) : null;
    const m = await measure(["node", ...(dir ? ["--cpu-prof", `--cpu-prof-dir=${dir}`] : []), bin, ...args], { cwd: s.dir, env: { ...c.env, ...s.env }, okCodes });
    record(step, m);
    if (dir && existsSync(dir)) {
      profiles[step] = summarizeDir(dir);
      log(`profile of ${s.name} ${step} (${fmt(m.seconds, 2)} s wall, ${fmt(m.cpuSeconds, 2)} s CPU):`);
      profileText(profiles[step]).forEach((l) => log(l));
    }
    return m;
  };
}

/** The same full backup into an S3-compatible gateway, when AGENTBAK_BENCH_S3_ENDPOINT is set (e.g. test/s3/ceph-start.sh): not a goal row. */
async function s3Backup(s: Shape, c: Ctx, record: (k: string, m: Measured) => void): Promise<void> {
  const endpoint = process.env.AGENTBAK_BENCH_S3_ENDPOINT;
  if (!endpoint) return;
  const { S3Client, CreateBucketCommand } = await import("@aws-sdk/client-s3");
  const bucket = `bench-${s.name}-${Date.now()}`;
  await new S3Client({ endpoint, region: process.env.AWS_REGION ?? "us-east-1", forcePathStyle: true }).send(new CreateBucketCommand({ Bucket: bucket }));
  const env = { ...c.env, ...s.env, AGENTBAK_S3_ENDPOINT: endpoint };
  await execa("node", [bin, "init", "--repo", `s3://${bucket}/bench`], { cwd: s.dir, env });
  record("s3_full", await measure(["node", bin, "backup", "--repo", `s3://${bucket}/bench`, "--no-incremental"], { cwd: s.dir, env }));
}

/** Everything measured for one shape. */
async function benchShape(s: Shape, c: Ctx, generatedSeconds: number): Promise<ShapeResult> {
  const commands: ShapeResult["commands"] = {};
  const bytes: Record<string, number> = {};
  const profiles: Record<string, ThreadSummary[]> = {};
  const all: Record<string, Measured> = {};
  const record = (k: string, m: Measured) => {
    all[k] = m;
    commands[k] = { seconds: Number(fmt(m.seconds, 3)), cpu_seconds: Number(fmt(m.cpuSeconds, 3)), peak_rss_mib: Number(fmt(m.rssMiB, 1)) };
    log(`  ${s.name.padEnd(9)} ${k.padEnd(22)} ${fmt(m.seconds, 3).padStart(8)} s  cpu ${fmt(m.cpuSeconds, 2).padStart(7)} s  rss ${fmt(m.rssMiB, 0).padStart(5)} MiB`);
  };
  const ab = runner(s, c, record, profiles);
  await execa("sh", ["-c", `find ${shellQuote(s.dir)} -type f -exec cat {} + > /dev/null`]); // warm the page cache for every side alike
  const { resticScript, resticEnv, resticFullBytes } = await baselines(s, c, record);
  bytes.restic_full = resticFullBytes;
  const repo = join(s.dir, "backups");
  const { Repository } = await import(join(root, "dist", "repository", "repository.js"));
  await Repository.init(repo);

  const fulls: Measured[] = [];
  let fullBytes = 0;
  for (let i = 0; i < c.runs; i++) {
    const before = await duBytes(repo);
    fulls.push(await ab(i ? `full_${i}` : "full", ["backup", "--no-incremental"]));
    fullBytes = (await duBytes(repo)) - before;
  }
  const full = best(fulls);
  bytes.full = fullBytes;
  // not goals, but what a restore's time is made of: the whole check with the key, and without it
  await ab("verify_identity", ["verify", "latest", "--identity", join(c.home, "age-identity.txt")]);
  await ab("verify_no_keys", ["verify", "latest"]);
  await s3Backup(s, c, record);
  // exit 3: completed with warnings (a credential reference absent here)
  for (const [step, extra] of [["restore", []], ["restore_digest", ["--integrity", "digest"]]] as const) {
    const target = join(c.tmp, `restored-${s.name}-${step}`);
    await ab(step, ["restore", "latest", "--target", target, "--yes", "--allow-rollback", ...extra, ...(await s.restoreArgs(step))], [0, 3]);
    rmSync(target, { recursive: true, force: true });
  }
  // the second snapshot: a sub-task's rows in the SQLite database, nothing else changed
  await s.touchFew(20);
  let before = await duBytes(repo);
  const second = await ab("second", ["backup", "--incremental"]);
  bytes.second = (await duBytes(repo)) - before;
  await s.changeOnePercent();
  before = await duBytes(repo);
  const inc = await ab("incremental", ["backup", "--incremental", "--skip-if-unchanged"]);
  bytes.incremental = (await duBytes(repo)) - before;
  const unchanged = await ab("unchanged", ["backup", "--incremental", "--skip-if-unchanged", "--json"]);
  const unchangedStatus = (JSON.parse(unchanged.stdout) as { status: string; kind: string }).status;
  record("restic_after_1pct", await measure(["sh", "-c", resticScript], { env: resticEnv }));
  await ab("snapshots_cold", ["snapshots"]);
  const snaps = await ab("snapshots", ["snapshots"]);

  const stateMiB = s.stateBytes / MiB;
  const ratio = (a: number, b: number) => a / b;
  const r = (x: number) => `${fmt(x, 2)}x`;
  const restore = ratio(all.restore!.seconds, all.stock_restore!.seconds);
  const restoreDigest = ratio(all.restore_digest!.seconds, all.stock_restore!.seconds);
  const vsRestic = ratio(full.seconds, all.restic_full!.seconds);
  const incR = ratio(inc.seconds, full.seconds);
  const unR = ratio(unchanged.seconds, full.seconds);
  const agentbakSteps = Object.keys(all).filter((k) => !/^(stock|restic)/.test(k));
  const peak = agentbakSteps.reduce((a, k) => (all[k]!.rssMiB > all[a]!.rssMiB ? k : a));
  const secondBytes = bytes.second! / bytes.full!;
  const secondTime = second.seconds / full.seconds;
  // CPU seconds beside wall seconds: on a machine shared with other work the wall ratio moves with the load, the CPU ratio much less
  const cpu = (a: Measured, b: Measured) => `; CPU ${fmt(a.cpuSeconds)}/${fmt(b.cpuSeconds)} s = ${fmt(a.cpuSeconds / b.cpuSeconds, 2)}`;
  const cells: Record<RowKey, Cell> = {
    restore: cellFor(`${fmt(all.restore!.seconds)} s (${r(restore)})`, `${fmt(all.restore!.seconds)} s vs ${fmt(all.stock_restore!.seconds)} s (${r(restore)}${cpu(all.restore!, all.stock_restore!)})`, restore, restore <= 1.5),
    restore_digest: cellFor(`${fmt(all.restore_digest!.seconds)} s (${r(restoreDigest)})`, `${fmt(all.restore_digest!.seconds)} s vs ${fmt(all.stock_restore!.seconds)} s (${r(restoreDigest)}${cpu(all.restore_digest!, all.stock_restore!)})`, restoreDigest, restoreDigest <= 1.1),
    full: cellFor(`${fmt(full.seconds)} s (${r(vsRestic)})`, `${fmt(full.seconds)} s vs ${fmt(all.restic_full!.seconds)} s (${r(vsRestic)}${cpu(full, all.restic_full!)})`, vsRestic, vsRestic <= 1.0),
    incremental: cellFor(`${fmt(inc.seconds)} s (${fmt(incR, 3)})`, `${fmt(inc.seconds)} s of ${fmt(full.seconds)} s (${fmt(incR, 3)}${cpu(inc, full)})`, incR, incR <= 0.2),
    unchanged: cellFor(`${fmt(unchanged.seconds, 3)} s (${fmt(unR, 3)})`, `${fmt(unchanged.seconds, 3)} s [${unchangedStatus}] of ${fmt(full.seconds)} s (${fmt(unR, 3)}${cpu(unchanged, full)})`, unR, unchanged.seconds <= 0.3 && (stateMiB < 300 || unR <= 0.1)),
    version: cellFor(`${fmt(c.version.seconds, 3)} s`, `${fmt(c.version.seconds, 3)} s (CPU ${fmt(c.version.cpuSeconds, 3)} s)`, null, c.version.seconds <= 0.15),
    snapshots: cellFor(`${fmt(snaps.seconds, 3)} s`, `${fmt(snaps.seconds, 3)} s (CPU ${fmt(snaps.cpuSeconds, 3)} s)`, null, snaps.seconds <= 0.25),
    second_bytes: cellFor(`${fmt(bytes.second! / 1e6, 2)} MB (${fmt(secondBytes * 100, 2)}%)`, `${fmt(bytes.second! / 1e6, 2)} MB of ${fmt(bytes.full! / 1e6, 1)} MB (${fmt(secondBytes * 100, 2)}%)`, secondBytes, secondBytes <= 0.01),
    second_time: cellFor(`${fmt(second.seconds)} s (${fmt(secondTime, 3)})`, `${fmt(second.seconds)} s of ${fmt(full.seconds)} s (${fmt(secondTime, 3)}${cpu(second, full)})`, secondTime, secondTime <= 0.2),
    rss: cellFor(`${fmt(all[peak]!.rssMiB, 0)} MiB`, `${fmt(all[peak]!.rssMiB, 0)} MiB (${peak})`, null, all[peak]!.rssMiB <= 150),
  };
  return { shape: s.name, description: s.description, state_mib: Number(fmt(stateMiB, 1)), generated_seconds: generatedSeconds, cells, commands, bytes, unchanged_status: unchangedStatus, profiles };
}

function shapeTable(res: ShapeResult): string[] {
  const w = Math.max(...ROWS.map((r) => r.label.length));
  return [
    "",
    `== ${res.shape}: ${res.description} (${res.state_mib} MiB of state)`,
    ...ROWS.map((row) => `  ${row.label.padEnd(w)}  ${res.cells[row.key].text}   [goal ${row.goal}]`),
    `  commands (wall / CPU / peak RSS): ${Object.entries(res.commands).map(([k, v]) => `${k} ${v.seconds}/${v.cpu_seconds} s ${v.peak_rss_mib} MiB`).join("; ")}`,
  ];
}

function summaryTable(results: ShapeResult[]): string[] {
  const short = (c: Cell) => c.short;
  const w = Math.max(...ROWS.map((r) => r.label.length));
  const cols = results.map((r) => Math.max(r.shape.length, ...ROWS.map((row) => short(r.cells[row.key]).length)));
  return [
    "",
    "== summary: measured (ratio) met/NOT",
    `  ${"".padEnd(w)}  ${results.map((r, i) => r.shape.padEnd(cols[i]!)).join("  ")}  goal`,
    ...ROWS.map((row) => `  ${row.label.padEnd(w)}  ${results.map((r, i) => short(r.cells[row.key]).padEnd(cols[i]!)).join("  ")}  ${row.goal}`),
  ];
}

async function machine() {
  const model = cpus()[0]?.model ?? "unknown";
  const commit = (await execa("git", ["rev-parse", "HEAD"], { cwd: root, reject: false })).stdout.trim();
  const dirty = (await execa("git", ["status", "--porcelain", "--untracked-files=no"], { cwd: root, reject: false })).stdout.trim() !== "";
  return { nproc: availableParallelism(), cpu: model, ram_gib: Number(fmt(totalmem() / 2 ** 30, 1)), node: process.version, commit: dirty ? `${commit} (with uncommitted changes)` : commit };
}

async function main(): Promise<void> {
  const tmp = mkdtempSync(join(tmpdir(), "agentbak-bench-"));
  const keep = flag("keep");
  const shapes: Shape[] = [];
  try {
    const home = join(tmp, "home");
    const env = { ...process.env, AGENTBAK_HOME: home, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true" } as Record<string, string>;
    await execa("node", [bin, "keygen", "--out", home], { env });
    const recipient = readFileSync(join(home, "age-recipient.txt"), "utf8").trim();
    if (flag("fleet") && arg("only", "") === "list") {
      const r = await listingBench({ tmp, env, home, recipient, agents: Number(arg("agents", "1000")), snapshots: Number(arg("snapshots", "20")), dbKiB: Number(arg("db-kib", "16")), keep, log });
      const uptime = (await execa("uptime")).stdout.trim();
      process.stdout.write([`${new Date().toISOString()}, commit ${(await machine()).commit}, ${uptime}`, "", ...r.lines].join("\n") + "\n");
      const jsonFile = arg("json", "");
      if (jsonFile) writeFileSync(jsonFile, JSON.stringify({ date: new Date().toISOString(), machine: await machine(), uptime, listing: r.json }, null, 2) + "\n");
      return;
    }
    if (flag("fleet")) {
      const r = await fleetBench({ tmp, env, home, recipient, agents: Number(arg("agents", "1000")), hosts: Number(arg("hosts", "3")), changed: Number(arg("changed", "0.1")), dbKiB: Number(arg("db-kib", "256")), before: arg("before", "") || null, log });
      const uptime = (await execa("uptime")).stdout.trim();
      process.stdout.write([`${new Date().toISOString()}, commit ${(await machine()).commit}, ${uptime}`, "", ...r.lines].join("\n") + "\n");
      const jsonFile = arg("json", "");
      if (jsonFile) writeFileSync(jsonFile, JSON.stringify({ date: new Date().toISOString(), machine: await machine(), uptime, fleet: r.json }, null, 2) + "\n");
      return;
    }
    if (arg("only", "") === "checkpoint") {
      const cp = await checkpointBench(tmp, env, recipient, Number(arg("runs", "10")));
      log(["", ...checkpointRows(cp), ""].join("\n"));
      process.stdout.write(JSON.stringify({ checkpoint: cp }) + "\n");
      return;
    }
    if (arg("only", "") === "second") {
      const out: SecondResult[] = [];
      for (const name of arg("shapes", "mixed").split(",") as ShapeName[]) {
        if (!SHAPES.includes(name)) throw new Error(`--shapes: unknown shape ${name} (${SHAPES.join(", ")})`);
        out.push(await secondBench({ name, tmp, cache: arg("cache", join(tmpdir(), "agentbak-bench-cache")), scale: Number(arg("scale", "1")), env, recipient, bin, log, profile: process.argv.includes("--profile") ? arg("profile", "") : undefined }));
      }
      process.stdout.write(out.flatMap(secondRows).join("\n") + "\n");
      const jsonFile = arg("json", "");
      if (jsonFile) writeFileSync(jsonFile, JSON.stringify({ date: new Date().toISOString(), machine: await machine(), uptime: (await execa("uptime")).stdout.trim(), second: out }, null, 2) + "\n");
      return;
    }
    if (arg("only", "") === "chunks") {
      const r = await chunkBench({ tmp, cache: arg("cache", join(tmpdir(), "agentbak-bench-cache")), scale: Number(arg("scale", "1")), log });
      process.stdout.write(r.lines.join("\n") + "\n");
      const jsonFile = arg("json", "");
      if (jsonFile) writeFileSync(jsonFile, JSON.stringify({ date: new Date().toISOString(), machine: await machine(), chunks: r.json }, null, 2) + "\n");
      return;
    }
    if (arg("only", "") === "restore") {
      const out: RestoreResult[] = [];
      for (const name of arg("shapes", SHAPES.join(",")).split(",") as ShapeName[]) {
        if (!SHAPES.includes(name)) throw new Error(`--shapes: unknown shape ${name} (${SHAPES.join(", ")})`);
        const scale = Number(arg("scale", "1"));
        const size = Math.round((name === "reference" ? Number(arg("size-mb", "1024")) * MiB : SHAPE_BYTES[name]) * scale);
        const cached = await cachedShape(name, size, arg("cache", join(tmpdir(), "agentbak-bench-cache")), root, log);
        out.push(await restoreBench({ name, dir: cached.dir, tmp, home, recipient, scale, root, env, runs: Number(arg("runs", "1")), log }));
      }
      const uptime = (await execa("uptime")).stdout.trim();
      process.stdout.write([`${new Date().toISOString()}, commit ${(await machine()).commit}, ${uptime}`, "", ...restoreRows(out)].join("\n") + "\n");
      const jsonFile = arg("json", "");
      if (jsonFile) writeFileSync(jsonFile, JSON.stringify({ date: new Date().toISOString(), machine: await machine(), uptime, restore: out }, null, 2) + "\n");
      return;
    }
    const startup = await startupBench(tmp, env, recipient, Number(arg("startup-runs", "21")));
    startupRows(startup).forEach((l) => log(l));
    if (arg("only", "") === "startup") {
      process.stdout.write(startupRows(startup).join("\n") + "\n");
      const jsonFile = arg("json", "");
      if (jsonFile) writeFileSync(jsonFile, JSON.stringify({ date: new Date().toISOString(), machine: await machine(), uptime: (await execa("uptime")).stdout.trim(), startup }, null, 2) + "\n");
      return;
    }
    if ((await execa("sh", ["-c", "command -v restic"], { reject: false })).exitCode !== 0) throw new Error("restic is not installed (apt-get install restic): the full backup row is measured against it");
    const scale = Number(arg("scale", "1"));
    const names = arg("shapes", SHAPES.join(",")).split(",") as ShapeName[];
    for (const n of names) if (!SHAPES.includes(n)) throw new Error(`--shapes: unknown shape ${n} (${SHAPES.join(", ")})`);
    const cache = arg("cache", join(tmpdir(), "agentbak-bench-cache"));
    const profile = arg("profile", "") || null;
    const uptimeBefore = (await execa("uptime")).stdout.trim();
    log(`uptime before: ${uptimeBefore}`);
    // --version in a new process twice: the second counts (the binary's files are in the page cache)
    await measure(["node", bin, "--version"]);
    const c: Ctx = { tmp, env, home, recipient, runs: Number(arg("runs", "1")), profile, version: await measure(["node", bin, "--version"]) };
    const results: ShapeResult[] = [];
    for (const name of names) {
      const size = Math.round((name === "reference" ? Number(arg("size-mb", "1024")) * MiB : SHAPE_BYTES[name]) * scale);
      const cached = await cachedShape(name, size, cache, root, log);
      if (flag("generate-only")) continue;
      const s = await openShape(name, cached.dir, tmp, recipient, scale, root);
      shapes.push(s);
      log(`== ${name}: ${s.description}`);
      const res = await benchShape(s, c, cached.seconds);
      results.push(res);
      shapeTable(res).forEach((l) => log(l));
      await s.stop();
      rmSync(s.dir, { recursive: true, force: true });
    }
    const uptimeAfter = (await execa("uptime")).stdout.trim();
    const lines = [...startupRows(startup), "", ...results.flatMap(shapeTable), ...summaryTable(results), "", `uptime before: ${uptimeBefore}`, `uptime after:  ${uptimeAfter}`];
    process.stdout.write(lines.join("\n") + "\n");
    const doc = { date: new Date().toISOString(), machine: await machine(), uptime_before: uptimeBefore, uptime_after: uptimeAfter, args: process.argv.slice(2), scale, goals: ROWS, startup, shapes: results };
    const jsonFile = arg("json", "");
    if (jsonFile) writeFileSync(jsonFile, JSON.stringify(doc, null, 2) + "\n");
  } finally {
    for (const s of shapes) await s.stop().catch(() => undefined);
    if (!keep) rmSync(tmp, { recursive: true, force: true });
    else log(`kept ${tmp}`);
  }
}

main().catch((e) => {
  process.stderr.write(`bench failed: ${(e as Error).stack ?? (e as Error).message}\n`);
  process.exitCode = 1;
});
