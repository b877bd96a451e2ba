/**
 * `npm run bench -- --fleet`: issue 36's fleet figures with the real binary.
 * N small agents (one SQLite file of a few hundred KiB each, copied from one
 * template and made distinct) in one repository, split over H host files,
 * each run by its own `agentbak serve --host` process (every 10 s,
 * maxConcurrent 4):
 *
 *   round 1   every agent captured (the hosts started, until every agent committed)
 *   round 2   10% of the agents changed, the hosts started again: until the changed
 *             ones committed (the unchanged ones are checked in between, silently)
 *   per round: PUTs and bytes written (AGENTBAK_STORE_COUNTS of every host process),
 *             peak RSS of each host process (VmHWM)
 *   then      `snapshots --all` and `status --all` (median of 3, from a fresh home: no
 *             header cache), and the requests one `snapshots --all` makes
 *
 *   --agents N        default 1000
 *   --hosts H         default 3
 *   --changed F       the fraction changed in round 2 (default 0.1)
 *   --db-kib K        each agent's database (default 256)
 *   --before BIN      also time `snapshots --all` with another build's bin/agentbak.js (e.g. main's before the catalog)
 * The repository is a new bucket on AGENTBAK_BENCH_S3_ENDPOINT when set, else a folder.
 */
import { execa, type ResultPromise } from "execa";
import { copyFileSync, cpSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { bin, fmt, measure, median } from "./bench-measure.js";

const MiB = 2 ** 20;

export interface FleetOptions {
  tmp: string;
  env: Record<string, string>;
  home: string;
  recipient: string;
  agents: number;
  hosts: number;
  changed: number;
  dbKiB: number;
  before: string | null;
  log: (s: string) => void;
}

interface Round {
  seconds: number;
  commits: number;
  failed: number;
  puts: number;
  bytes: number;
  requests: number;
  rssMiB: number[];
}

const name = (i: number) => `agent-${String(i).padStart(4, "0")}`;

/** The agents' folders, their configs and the hosts' files; one template database copied and made distinct. */
async function makeFleet(o: FleetOptions, repo: string): Promise<{ dirs: string[]; hostFiles: string[] }> {
  const Database = (await import("better-sqlite3")).default;
  const template = join(o.tmp, "template.sqlite");
  const db = new Database(template);
  db.exec("CREATE TABLE notes (id INTEGER PRIMARY KEY, agent TEXT, body BLOB)");
  const ins = db.prepare("INSERT INTO notes (agent, body) VALUES ('template', randomblob(?))");
  // random bytes compress to themselves: the bundle is about the database's size
  db.transaction(() => {
    for (let n = 0; n < o.dbKiB; n++) ins.run(1000);
  })();
  db.close();
  const dirs: string[] = [];
  for (let i = 0; i < o.agents; i++) {
    const dir = join(o.tmp, "agents", name(i));
    mkdirSync(join(dir, "state"), { recursive: true });
    copyFileSync(template, join(dir, "state", "agent.sqlite"));
    const d = new Database(join(dir, "state", "agent.sqlite"));
    d.prepare("UPDATE notes SET agent = ? WHERE id = 1").run(name(i));
    d.close();
    writeFileSync(join(dir, "agentbak.json"), JSON.stringify({ agent: { id: name(i), tenant: "fleet" }, repository: repo, recipients: [o.recipient], databases: [{ name: "state", path: "state/agent.sqlite" }] }));
    dirs.push(dir);
  }
  const hostFiles: string[] = [];
  for (let h = 0; h < o.hosts; h++) {
    const file = join(o.tmp, `host-${h + 1}.json`);
    const mine = dirs.filter((_, i) => i % o.hosts === h).map((d) => ({ config: join(d, "agentbak.json") }));
    writeFileSync(file, JSON.stringify({ hostId: `bench-host-${h + 1}`, maxConcurrent: 4, defaults: { schedule: { every: "10s" } }, agents: mine }));
    hostFiles.push(file);
    // each host its own home (its own unchanged-check state), the same keys
    cpSync(o.home, join(o.tmp, `home-${h + 1}`), { recursive: true });
  }
  return { dirs, hostFiles };
}

/** The peak RSS (VmHWM) of a process, MiB; 0 once it is gone. */
function peakRss(pid: number): number {
  try {
    const m = readFileSync(`/proc/${pid}/status`, "utf8").match(/VmHWM:\s+(\d+) kB/);
    return m ? Number(m[1]) / 1024 : 0;
  } catch {
    return 0;
  }
}

/** Starts every host, waits for `want` commits in all, stops them (SIGTERM), and sums what they wrote. */
async function round(o: FleetOptions, hostFiles: string[], want: number, what: string): Promise<Round> {
  const counts = join(o.tmp, `counts-${what}.jsonl`);
  const t0 = Date.now();
  let commits = 0;
  let failed = 0;
  let last = t0;
  const procs: ResultPromise[] = hostFiles.map((f, h) => {
    const p = execa("node", [bin, "serve", "--host", f, "--listen", "127.0.0.1:0"], { env: { ...o.env, AGENTBAK_HOME: join(o.tmp, `home-${h + 1}`), AGENTBAK_STORE_COUNTS: counts, NO_COLOR: "1" }, reject: false, stdin: "ignore" });
    let buf = "";
    p.stderr!.on("data", (d: Buffer) => {
      buf += d;
      for (let nl = buf.indexOf("\n"); nl >= 0; nl = buf.indexOf("\n")) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (/backup \S+: committed/.test(line)) {
          commits++;
          last = Date.now();
        } else if (/backup \S+: failed/.test(line)) {
          failed++;
          o.log(`  ${line}`);
        }
      }
    });
    return p;
  });
  const rss = hostFiles.map(() => 0);
  let lastLog = 0;
  while (commits + failed < want) {
    await new Promise((r) => setTimeout(r, 500));
    procs.forEach((p, i) => (rss[i] = Math.max(rss[i]!, peakRss(p.pid!))));
    if (procs.some((p) => p.exitCode !== null && p.exitCode !== undefined)) throw new Error(`a host process exited during ${what}`);
    if (Date.now() - lastLog > 30_000) {
      lastLog = Date.now();
      o.log(`  ${what}: ${commits} committed, ${failed} failed, ${fmt((Date.now() - t0) / 1000, 0)} s`);
    }
  }
  procs.forEach((p, i) => (rss[i] = Math.max(rss[i]!, peakRss(p.pid!))));
  for (const p of procs) p.kill("SIGTERM");
  const codes = await Promise.all(procs.map(async (p) => (await p).exitCode));
  if (codes.some((c) => c !== 0)) throw new Error(`a host process exited ${codes.join(", ")} after SIGTERM`);
  let puts = 0;
  let bytes = 0;
  let requests = 0;
  for (const line of readFileSync(counts, "utf8").split("\n").filter(Boolean)) {
    const c = JSON.parse(line) as { counts: Record<string, number>; bytes_put: number };
    // an append is a GET and a PUT of the whole object on S3
    puts += (c.counts.put ?? 0) + (c.counts.upload ?? 0) + (c.counts.append ?? 0);
    bytes += c.bytes_put;
    requests += Object.values(c.counts).reduce((n, x) => n + x, 0) + (c.counts.append ?? 0);
  }
  return { seconds: (last - t0) / 1000, commits, failed, puts, bytes, requests, rssMiB: rss };
}

/** Runs the fleet bench. @returns the table's lines and the figures. */
export async function fleetBench(o: FleetOptions): Promise<{ lines: string[]; json: Record<string, unknown> }> {
  const endpoint = process.env.AGENTBAK_BENCH_S3_ENDPOINT;
  let repo = join(o.tmp, "repo");
  if (endpoint) {
    process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = "true";
    const { S3Client, CreateBucketCommand } = await import("@aws-sdk/client-s3");
    const bucket = `bench-fleet-${Date.now().toString(36)}`;
    await new S3Client({ endpoint, region: process.env.AWS_REGION ?? "us-east-1", forcePathStyle: true }).send(new CreateBucketCommand({ Bucket: bucket }));
    repo = `s3://${bucket}/fleet`;
    o.env.AGENTBAK_S3_ENDPOINT = endpoint;
  }
  let t = Date.now();
  const { dirs, hostFiles } = await makeFleet(o, repo);
  await execa("node", [bin, "init"], { cwd: dirs[0], env: o.env });
  o.log(`${o.agents} agents (${o.dbKiB} KiB databases) over ${o.hosts} hosts made in ${fmt((Date.now() - t) / 1000, 1)} s; repository ${repo}`);
  const r1 = await round(o, hostFiles, o.agents, "round 1");
  o.log(`round 1: ${JSON.stringify(r1)}`);
  const changed = dirs.filter((_, i) => i % Math.round(1 / o.changed) === 0);
  const Database = (await import("better-sqlite3")).default;
  for (const d of changed) {
    const db = new Database(join(d, "state", "agent.sqlite"));
    db.prepare("INSERT INTO notes (agent, body) VALUES ('changed', randomblob(1000))").run();
    db.close();
  }
  const r2 = await round(o, hostFiles, changed.length, "round 2");
  o.log(`round 2: ${JSON.stringify(r2)}`);
  const fresh = join(o.tmp, "home-lister");
  cpSync(o.home, fresh, { recursive: true });
  const env = { ...o.env, AGENTBAK_HOME: fresh };
  const time = async (b: string, args: string[], ok = [0, 3]) => {
    const runs = [];
    for (let i = 0; i < 3; i++) runs.push(await measure(["node", b, ...args, "--repo", repo, "--json"], { cwd: o.tmp, env, okCodes: ok }));
    return { seconds: median(runs.map((r) => r.seconds)), rssMiB: Math.max(...runs.map((r) => r.rssMiB)), entries: (JSON.parse(runs[0]!.stdout) as unknown[] | { agents: unknown[] }) };
  };
  t = Date.now();
  const snaps = await time(bin, ["snapshots", "--all"]);
  const status = await time(bin, ["status", "--all"]);
  const countsFile = join(o.tmp, "counts-list.jsonl");
  await execa("node", [bin, "snapshots", "--all", "--repo", repo, "--json"], { cwd: o.tmp, env: { ...env, AGENTBAK_STORE_COUNTS: countsFile } });
  const listCounts = JSON.parse(readFileSync(countsFile, "utf8").split("\n")[0]!).counts as Record<string, number>;
  const before = o.before ? await time(o.before, ["snapshots"]) : null;
  const n = (x: { entries: unknown }) => (Array.isArray(x.entries) ? x.entries.length : (x.entries as { agents: unknown[] }).agents.length);
  const mib = (b: number) => `${fmt(b / MiB, 1)} MiB`;
  const lines = [
    `| figure | measured |`,
    `|---|---|`,
    `| round 1: every agent captured (${r1.commits} commits, ${r1.failed} failed) | ${fmt(r1.seconds, 0)} s; ${r1.puts} PUTs, ${mib(r1.bytes)} written, ${r1.requests} requests |`,
    `| round 2: ${changed.length} of ${o.agents} changed (${r2.commits} commits, ${r2.failed} failed) | ${fmt(r2.seconds, 0)} s; ${r2.puts} PUTs, ${mib(r2.bytes)} written, ${r2.requests} requests |`,
    `| peak RSS per host process, round 1 | ${r1.rssMiB.map((x) => `${fmt(x, 0)} MiB`).join(", ")} |`,
    `| peak RSS per host process, round 2 | ${r2.rssMiB.map((x) => `${fmt(x, 0)} MiB`).join(", ")} |`,
    `| \`snapshots --all\` (${n(snaps)} snapshots; median of 3, no header cache) | ${fmt(snaps.seconds, 2)} s, ${fmt(snaps.rssMiB, 0)} MiB; ${Object.entries(listCounts).map(([k, v]) => `${v} ${k}`).join(", ")} |`,
    `| \`status --all\` (${n(status)} agents; median of 3) | ${fmt(status.seconds, 2)} s, ${fmt(status.rssMiB, 0)} MiB |`,
    ...(before ? [`| \`snapshots\` of the whole repository with ${o.before} (${n(before)} snapshots) | ${fmt(before.seconds, 2)} s, ${fmt(before.rssMiB, 0)} MiB |`] : []),
  ];
  return { lines, json: { repository: repo, agents: o.agents, hosts: o.hosts, db_kib: o.dbKiB, round1: r1, round2: { ...r2, changed: changed.length }, snapshots_all: { seconds: snaps.seconds, rss_mib: snaps.rssMiB, requests: listCounts }, status_all: { seconds: status.seconds, rss_mib: status.rssMiB }, before: before && { seconds: before.seconds } } };
}
