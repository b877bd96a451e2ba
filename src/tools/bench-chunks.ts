/**
 * `npm run bench -- --only chunks`: the chunk engine (src/chunks/) on the
 * mixed shape, before it is wired into backup (issue 35, phase 2):
 *
 *   - FastCDC's throughput in memory;
 *   - the mixed agent's `files` through a ChunkWriter into a local-folder
 *     store: the first time (every chunk new), again (the stat cache answers),
 *     and again without the stat cache (read, cut and hashed; nothing new);
 *   - how much of each kind of state dedupes after the bench's 1% change
 *     (SQLite file, pg_dump -Fc as captured today and with -Z0, the LanceDB
 *     table as captured today (an Arrow stream) and as its own files, an
 *     adapter with 1 MiB rewritten in the middle): the share of bytes whose
 *     chunks were already stored.
 */
import { execa } from "execa";
import { createHash } from "node:crypto";
import { closeSync, mkdirSync, openSync, readdirSync, statSync, writeSync } from "node:fs";
import { open } from "node:fs/promises";
import { join, relative } from "node:path";
import { fmt, root } from "./bench-measure.js";
import { cachedShape, openShape, randomStream } from "./bench-shapes.js";

const MiB = 2 ** 20;

/** Every regular file under `dir`, sorted. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name))
    .sort();
}

/** The chunks of files (sha256 -> length), cut as the chunk store cuts them. */
async function chunkSet(files: string[]): Promise<Map<string, number>> {
  const { handleChunks } = await import(join(root, "dist", "chunks", "fastcdc.js"));
  const out = new Map<string, number>();
  for (const f of files) {
    const fh = await open(f);
    for await (const c of handleChunks(fh) as AsyncIterable<Buffer>) out.set(createHash("sha256").update(c).digest("hex"), c.length);
    await fh.close();
  }
  return out;
}

/** Of `after`'s bytes, the share in chunks `before` already had, and the new bytes. */
async function dedupe(before: string[], after: string[]): Promise<{ share: number; newMB: number; totalMB: number }> {
  const b = await chunkSet(before);
  const a = await chunkSet(after);
  let total = 0;
  let fresh = 0;
  for (const [d, n] of a) {
    total += n;
    if (!b.has(d)) fresh += n;
  }
  return { share: total ? 1 - fresh / total : 1, newMB: fresh / 1e6, totalMB: total / 1e6 };
}

/** The chunk engine measured on the mixed shape. @returns text lines and the figures as JSON */
export async function chunkBench(o: { tmp: string; cache: string; scale: number; log: (s: string) => void }): Promise<{ lines: string[]; json: Record<string, unknown> }> {
  const { chunkLengths } = await import(join(root, "dist", "chunks", "fastcdc.js"));
  const { ChunkStore } = await import(join(root, "dist", "chunks", "store.js"));
  const { LocalStore } = await import(join(root, "dist", "storage", "local.js"));
  const { generateIdentity } = await import(join(root, "dist", "crypto", "age.js"));
  const lines: string[] = [];
  const json: Record<string, unknown> = {};

  const mem = randomStream("cutter")(256 * MiB);
  chunkLengths(mem);
  const t = performance.now();
  const cpu = process.cpuUsage();
  const n = chunkLengths(mem).length;
  const used = process.cpuUsage(cpu);
  json.fastcdc_mb_s = Number(fmt(mem.length / 1e6 / ((performance.now() - t) / 1000), 0));
  json.fastcdc_mb_per_cpu_s = Number(fmt(mem.length / 1e6 / ((used.user + used.system) / 1e6), 0));
  lines.push(`FastCDC in memory        ${json.fastcdc_mb_s} MB/s, ${json.fastcdc_mb_per_cpu_s} MB per CPU second (256 MiB of incompressible bytes, ${n} chunks, mean ${fmt(mem.length / n / MiB, 2)} MiB)`);

  const cached = await cachedShape("mixed", Math.round(800e6 * o.scale), o.cache, root, o.log);
  const files = filesUnder(join(cached.dir, "files"));
  const bytes = files.reduce((s, f) => s + statSync(f).size, 0);
  const repo = new LocalStore(join(o.tmp, "chunk-repo"), { create: true });
  const cs = new ChunkStore(repo, "tenants/bench/agents/bench-agent/chunks");
  const home = join(o.tmp, "chunk-home");
  mkdirSync(home, { recursive: true });
  const id = generateIdentity();
  const writerOpts = { home, location: repo.root, scope: { tenant: "bench", agent: "bench-agent" }, recipients: [id.recipient] };
  const pass = async (statCache: boolean) => {
    const t0 = performance.now();
    const c0 = process.cpuUsage();
    const w = await cs.writer(writerOpts);
    let newBytes = 0;
    let chunks = 0;
    let read = 0;
    for (const f of files) {
      const r = await w.putFile(f, { statCache });
      newBytes += r.stats.newBytes;
      chunks += r.chunks.length;
      read += r.stats.read;
    }
    w.save();
    const c = process.cpuUsage(c0);
    return { seconds: (performance.now() - t0) / 1000, cpuSeconds: (c.user + c.system) / 1e6, newBytes, chunks, read };
  };
  const first = await pass(true);
  const second = await pass(true);
  const third = await pass(false);
  json.files = { count: files.length, mb: bytes / 1e6, first, second, third };
  lines.push(
    `files (${files.length}, ${fmt(bytes / 1e6, 0)} MB)     first ${fmt(first.seconds)} s, CPU ${fmt(first.cpuSeconds)} s (${first.chunks} chunks, ${fmt(first.newBytes / 1e6, 0)} MB stored)`,
    `  again, stat cache     ${fmt(second.seconds, 3)} s, CPU ${fmt(second.cpuSeconds, 3)} s (read ${second.read} bytes, stored ${second.newBytes})`,
    `  again, no stat cache  ${fmt(third.seconds)} s, CPU ${fmt(third.cpuSeconds)} s (read, cut and hashed; stored ${third.newBytes})`,
  );

  // what dedupes after the 1% change
  const shape = await openShape("mixed", cached.dir, o.tmp, id.recipient, o.scale, root);
  try {
    const dumps = join(o.tmp, "dumps");
    mkdirSync(dumps);
    const url = shape.env.BENCH_PG_URL!;
    const pgEnv = { PGHOST: "127.0.0.1", PGPORT: new URL(url).port, PGUSER: "agentbak", PGDATABASE: "postgres" };
    const { pgBin } = await import(join(root, "dist", "state", "sources", "postgres.js"));
    const { driverFor } = await import(join(root, "dist", "state", "sources", "index.js"));
    const lanceDir = join(shape.dir, "memory", "lance");
    const capture = async (tag: string) => {
      await execa(pgBin("pg_dump"), ["--format=custom", "--file", join(dumps, `pg-${tag}.dump`)], { env: pgEnv });
      await execa(pgBin("pg_dump"), ["--format=custom", "--compress=0", "--file", join(dumps, `pg0-${tag}.dump`)], { env: pgEnv });
      const dir = join(dumps, `lance-${tag}`);
      mkdirSync(dir);
      await driverFor("lancedb").capture({ name: "memory", kind: "lancedb" }, lanceDir, dir);
      await execa("sqlite3", [join(shape.dir, "state", "agent.sqlite"), `.backup '${join(dumps, `db-${tag}.sqlite`)}'`]);
      return { lanceFiles: filesUnder(lanceDir) };
    };
    const before = await capture("a");
    const lanceBefore = before.lanceFiles.map((f) => relative(lanceDir, f));
    await shape.changeOnePercent();
    const after = await capture("b");
    const adapter = filesUnder(join(shape.dir, "files", "adapters"))[0]!;
    const edited = join(dumps, "adapter-edited");
    await execa("cp", [adapter, edited]);
    const fd = openSync(edited, "r+");
    writeSync(fd, randomStream("edit")(MiB), 0, MiB, Math.floor(statSync(edited).size / 2));
    closeSync(fd);
    const rows: [string, Awaited<ReturnType<typeof dedupe>>][] = [
      ["SQLite file (sqlite3 .backup)", await dedupe([join(dumps, "db-a.sqlite")], [join(dumps, "db-b.sqlite")])],
      ["pg_dump -Fc (as captured today)", await dedupe([join(dumps, "pg-a.dump")], [join(dumps, "pg-b.dump")])],
      ["pg_dump -Fc -Z0", await dedupe([join(dumps, "pg0-a.dump")], [join(dumps, "pg0-b.dump")])],
      ["LanceDB as captured (Arrow stream)", await dedupe(filesUnder(join(dumps, "lance-a")), filesUnder(join(dumps, "lance-b")))],
      ["LanceDB as its own files", await dedupe(lanceBefore.map((f) => join(lanceDir, f)), after.lanceFiles)],
      ["adapter, 1 MiB rewritten in the middle", await dedupe([adapter], [edited])],
    ];
    json.dedupe_after_1pct = Object.fromEntries(rows.map(([k, v]) => [k, { share: Number(fmt(v.share, 4)), new_mb: Number(fmt(v.newMB, 2)), total_mb: Number(fmt(v.totalMB, 1)) }]));
    lines.push("dedupe after the 1% change (share of bytes already stored; new MB of total):");
    for (const [k, v] of rows) lines.push(`  ${k.padEnd(40)} ${fmt(v.share * 100, 1).padStart(5)}%  (${fmt(v.newMB, 1)} MB new of ${fmt(v.totalMB, 1)} MB)`);
  } finally {
    await shape.stop();
  }
  return { lines, json };
}
