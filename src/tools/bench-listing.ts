/**
 * `npm run bench -- --fleet --only list`: issue 36 point 4, the fleet's listing alone, at 1,000 agents and
 * 20,000 snapshots, without capturing 20,000 times.
 *
 * Set-up: one real agent (a SQLite file of --db-kib KiB) is backed up --snapshots times by the real binary
 * (`backup`, the database changed between runs): real signed bundles, commit markers, page indexes and its
 * catalog record. Every other agent's snapshots folder gets the same objects under its own key (bundle, commit
 * marker and page index copied byte for byte: the bundles' manifests still name the first agent, so a listing of
 * one such agent from its objects calls them invalid; a listing from the records never opens a bundle), and its
 * catalog record is made by the tool's own code: the first agent's listing (Repository.list) with the agent's id,
 * summarized (catalog.ts summarize) and signed with this host's signing key, as a backup writes it.
 *
 * Each agent's status record is the first agent's facts (status/gather.ts agentFacts) under its own id, signed.
 *
 * Measured, each through the real binary with AGENTBAK_STORE_COUNTS (wall and CPU seconds, peak RSS):
 * `snapshots --all` and `status --all` from an empty host cache (cold: before and after the tenant's summary
 * holds their records), then again (warm, the median of 3), after 10% of the catalog records were written again
 * (as a round of backups of 10% of the agents does), and with --fresh. Then the bucket is emptied and deleted.
 *
 *   --agents N      default 1000
 *   --snapshots S   per agent, default 20
 *   --db-kib K      the real agent's database, default 16
 * The repository is a new bucket on AGENTBAK_BENCH_S3_ENDPOINT when set, else a folder; `--keep` keeps it (and
 * the run's folder with the signing home) for listings by hand.
 */
import { execa } from "execa";
import { cpSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { bin, fmt, measure, median } from "./bench-measure.js";
import { context } from "../commands/context.js";
import { committedObjects, summarize } from "../repository/catalog.js";
import { keys, snapshotsDir } from "../repository/layout.js";
import { signRecord } from "../crypto/signed.js";
import { NS } from "../crypto/sshsig.js";
import { mapLimit } from "../limit.js";
import { openStore } from "../storage/open.js";
import { agentFacts } from "../status/gather.js";

export interface ListingOptions {
  tmp: string;
  env: Record<string, string>;
  home: string;
  recipient: string;
  agents: number;
  snapshots: number;
  dbKiB: number;
  /** keep the bucket (and print its URL) for runs by hand after the bench: profiles, a build against another */
  keep?: boolean;
  log: (s: string) => void;
}

const TENANT = "fleet";
const name = (i: number) => `agent-${String(i).padStart(4, "0")}`;

/** A new bucket (or folder) for the repository; `drop` empties and deletes the bucket. */
async function repository(o: ListingOptions): Promise<{ repo: string; drop: () => Promise<void> }> {
  const endpoint = process.env.AGENTBAK_BENCH_S3_ENDPOINT;
  if (!endpoint) return { repo: join(o.tmp, "repo"), drop: async () => {} };
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = "true";
  process.env.AGENTBAK_S3_ENDPOINT = o.env.AGENTBAK_S3_ENDPOINT = endpoint;
  const s3 = await import("@aws-sdk/client-s3");
  const client = new s3.S3Client({ endpoint, region: process.env.AWS_REGION ?? "us-east-1", forcePathStyle: true });
  const bucket = `bench-list-${Date.now().toString(36)}`;
  await client.send(new s3.CreateBucketCommand({ Bucket: bucket }));
  const drop = async () => {
    for (;;) {
      const r = await client.send(new s3.ListObjectsV2Command({ Bucket: bucket, MaxKeys: 1000 }));
      const objs = (r.Contents ?? []).map((c) => ({ Key: c.Key! }));
      if (!objs.length) break;
      await client.send(new s3.DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: objs, Quiet: true } }));
    }
    await client.send(new s3.DeleteBucketCommand({ Bucket: bucket }));
  };
  return { repo: `s3://${bucket}/fleet`, drop };
}

/** The first agent, backed up `snapshots` times by the real binary; @returns its folder. */
async function realAgent(o: ListingOptions, repo: string): Promise<string> {
  const Database = (await import("better-sqlite3")).default;
  const dir = join(o.tmp, "agents", name(0));
  mkdirSync(join(dir, "state"), { recursive: true });
  const db = new Database(join(dir, "state", "agent.sqlite"));
  db.exec("CREATE TABLE notes (id INTEGER PRIMARY KEY, body BLOB)");
  db.prepare("INSERT INTO notes (body) SELECT randomblob(1000) FROM (WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < ?) SELECT x FROM n)").run(o.dbKiB);
  writeFileSync(join(dir, "agentbak.json"), JSON.stringify({ agent: { id: name(0), tenant: TENANT }, repository: repo, recipients: [o.recipient], databases: [{ name: "state", path: "state/agent.sqlite" }] }));
  await execa("node", [bin, "init"], { cwd: dir, env: o.env });
  for (let i = 0; i < o.snapshots; i++) {
    db.prepare("INSERT INTO notes (body) VALUES (randomblob(1000))").run();
    await execa("node", [bin, "backup"], { cwd: dir, env: o.env });
  }
  db.close();
  return dir;
}

/** Every other agent: the first one's snapshot objects under its own folder, and its record signed as a backup signs it. */
async function copies(o: ListingOptions, repo: string): Promise<{ sign: (i: number) => Promise<void> }> {
  process.env.AGENTBAK_HOME = o.home;
  const ctx = context({ repo }, { configless: true });
  const r = await ctx.repository();
  const store = await openStore(repo);
  const first = { tenant: TENANT, agent: name(0) };
  const list = await r.list(ctx.trust, first);
  const dir0 = snapshotsDir(first);
  const objectKeys = await store.list(`${dir0}/`);
  const bodies = await mapLimit(objectKeys, 16, async (k) => [k.slice(dir0.length), (await store.get(k))!] as const);
  const key = ctx.signingKey();
  // every agent's status record says what the first one's objects say (as its backups wrote it)
  const facts = await agentFacts(r, ctx.trust, first);
  const sign = async (i: number) => {
    const a = { tenant: TENANT, agent: name(i) };
    const dir = snapshotsDir(a);
    const rec = summarize(a, list.map((e) => ({ ...e, agent_id: a.agent })), committedObjects(objectKeys.map((k) => dir + k.slice(dir0.length)), dir), new Date());
    await store.put(keys.catalog(a), JSON.stringify(signRecord(rec, key, NS.receipt)));
  };
  const status = (i: number) => r.writeStatusRecord({ tenant: TENANT, agent: name(i) }, { ...facts }, key);
  const todo = Array.from({ length: o.agents - 1 }, (_, i) => i + 1).flatMap((i) => bodies.map(([rel, body]) => ({ k: `${snapshotsDir({ tenant: TENANT, agent: name(i) })}${rel}`, body })));
  let done = 0;
  await mapLimit(todo, 64, async (t) => {
    await store.put(t.k, t.body);
    if (++done % 10_000 === 0) o.log(`  ${done} of ${todo.length} objects copied`);
  });
  await mapLimit(Array.from({ length: o.agents - 1 }, (_, i) => i + 1), 64, async (i) => (await sign(i), await status(i)));
  o.log(`  ${o.agents - 1} agents copied (${bodies.length} objects each, ${bodies.reduce((n, [, b]) => n + b.length, 0)} bytes) and their catalog and status records signed`);
  return { sign };
}

/** Runs the listing bench. @returns the table's lines and the figures. */
export async function listingBench(o: ListingOptions): Promise<{ lines: string[]; json: Record<string, unknown> }> {
  const { repo, drop } = await repository(o);
  try {
    let t = Date.now();
    await realAgent(o, repo);
    o.log(`${name(0)}: ${o.snapshots} backups in ${fmt((Date.now() - t) / 1000, 1)} s; repository ${repo}`);
    t = Date.now();
    const { sign } = await copies(o, repo);
    o.log(`set-up of ${o.agents} agents in ${fmt((Date.now() - t) / 1000, 1)} s`);
    const lister = join(o.tmp, "home-lister");
    let n = 0;
    const run = async (args: string[]) => {
      const countsFile = join(o.tmp, `counts-${n++}.jsonl`);
      const m = await measure(["node", bin, ...args, "--repo", repo, "--json"], { cwd: o.tmp, env: { ...o.env, AGENTBAK_HOME: lister, AGENTBAK_STORE_COUNTS: countsFile }, okCodes: [0, 3] });
      // the repository's requests (a bucket's are over the network); a host's own spool folder's are not counted
      const counts: Record<string, number> = {};
      for (const line of readFileSync(countsFile, "utf8").split("\n").filter(Boolean)) {
        const t = JSON.parse(line) as { url: string; counts: Record<string, number> };
        if (t.url.startsWith(repo)) for (const [op, c] of Object.entries(t.counts)) counts[op] = (counts[op] ?? 0) + c;
      }
      const out = JSON.parse(m.stdout) as unknown[] | { agents: unknown[] };
      return { seconds: m.seconds, cpuSeconds: m.cpuSeconds, rssMiB: m.rssMiB, counts, n: Array.isArray(out) ? out.length : out.agents.length };
    };
    const cold = async (args: string[]) => {
      rmSync(lister, { recursive: true, force: true });
      cpSync(o.home, lister, { recursive: true });
      rmSync(join(lister, "cache"), { recursive: true, force: true });
      return run(args);
    };
    const warm = async (args: string[]) => {
      const runs = [await run(args), await run(args), await run(args)];
      return { ...runs[0]!, seconds: median(runs.map((x) => x.seconds)), cpuSeconds: median(runs.map((x) => x.cpuSeconds)), rssMiB: Math.max(...runs.map((x) => x.rssMiB)) };
    };
    const rows: [string, Awaited<ReturnType<typeof run>>][] = [];
    const row = (what: string, r: Awaited<ReturnType<typeof run>>) => {
      rows.push([what, r]);
      o.log(`${what}: ${JSON.stringify(r)}`);
    };
    row("`snapshots --all`, empty host cache, no summary yet (it writes one)", await cold(["snapshots", "--all"]));
    row("`snapshots --all`, empty host cache, from the summary", await cold(["snapshots", "--all"]));
    row("`snapshots --all` again (median of 3)", await warm(["snapshots", "--all"]));
    row("`status --all`, empty host cache, status records not in the summary yet (it rewrites it)", await cold(["status", "--all"]));
    row("`status --all`, empty host cache, from the summary", await cold(["status", "--all"]));
    row("`status --all` again (median of 3)", await warm(["status", "--all"]));
    const changed = Array.from({ length: o.agents }, (_, i) => i).filter((i) => i > 0 && i % 10 === 0);
    await mapLimit(changed, 64, sign);
    row(`\`snapshots --all\` after ${changed.length} records were written again`, await run(["snapshots", "--all"]));
    row(`\`status --all\` after that`, await run(["status", "--all"]));
    row("`snapshots --all --fresh`", await run(["snapshots", "--all", "--fresh"]));
    const lines = [
      `| listing of ${o.agents} agents, ${rows[0]![1].n} snapshots | wall | CPU | peak RSS | requests |`,
      `|---|---|---|---|---|`,
      ...rows.map(([what, r]) => `| ${what} | ${fmt(r.seconds, 2)} s | ${fmt(r.cpuSeconds, 2)} s | ${fmt(r.rssMiB, 0)} MiB | ${Object.entries(r.counts).map(([k, v]) => `${v} ${k}`).join(", ")} |`),
    ];
    return { lines, json: { repository: repo, agents: o.agents, snapshots: rows[0]![1].n, rows: rows.map(([what, r]) => ({ what, ...r })) } };
  } finally {
    if (o.keep) o.log(`kept the repository ${repo} (home ${o.home}); delete the bucket when done`);
    else await drop();
  }
}
