/**
 * `npm run bench -- --only second [--shapes mixed]`: issue 35's "second snapshot" row alone, as the full bench
 * measures it (benchShape): a full snapshot, then 20 new rows in the SQLite database and `backup --incremental`;
 * the second's bytes (growth of the repository folder) and time against the first's; then, with nothing changed,
 * `backup --incremental --skip-if-unchanged` twice (the first remembers the state, the second is the "nothing
 * changed" row: its time against the first's, and its status). It needs no restic.
 */
import { execa } from "execa";
import { join } from "node:path";
import { fmt, measure, root, type Measured } from "./bench-measure.js";
import { profileText, summarizeDir } from "./bench-profile.js";
import { cachedShape, duBytes, openShape, SHAPE_BYTES, type ShapeName } from "./bench-shapes.js";

const MiB = 2 ** 20;

export interface SecondResult {
  shape: string;
  description: string;
  first: { seconds: number; cpu_seconds: number; bytes: number };
  second: { seconds: number; cpu_seconds: number; bytes: number };
  bytes_ratio: number;
  time_ratio: number;
  /** nothing changed: `backup --incremental --skip-if-unchanged` after one that remembered the state */
  unchanged: { seconds: number; cpu_seconds: number; bytes: number; status: string };
  unchanged_ratio: number;
  /** the second backup's warnings (a source dumped in full says why) */
  second_warnings: string[];
}

/** The second-snapshot figures of one shape. */
export async function secondBench(o: { name: ShapeName; tmp: string; cache: string; scale: number; env: Record<string, string>; recipient: string; bin: string; log: (s: string) => void; profile?: string }): Promise<SecondResult> {
  const size = Math.round((o.name === "reference" ? 1024 * MiB : SHAPE_BYTES[o.name]) * o.scale);
  const cached = await cachedShape(o.name, size, o.cache, root, o.log);
  const s = await openShape(o.name, cached.dir, o.tmp, o.recipient, o.scale, root);
  try {
    o.log(`== ${o.name}: ${s.description}`);
    const env = { ...o.env, ...s.env };
    const repo = join(s.dir, "backups");
    await execa("node", [o.bin, "init"], { cwd: s.dir, env });
    await execa("sh", ["-c", `find '${s.dir}' -type f -exec cat {} + > /dev/null`]); // the page cache warm, as in the full bench
    const run = async (label: string, args: string[]): Promise<[Measured, number]> => {
      const before = await duBytes(repo);
      // --profile DIR: each command under --cpu-prof, summarised per thread after it (bench-profile.ts)
      const dir = o.profile ? join(o.profile, `${o.name}-${label}`) : null;
      const m = await measure(["node", ...(dir ? ["--cpu-prof", "--cpu-prof-dir", dir] : []), o.bin, ...args], { cwd: s.dir, env, okCodes: [0, 3] });
      const bytes = (await duBytes(repo)) - before;
      o.log(`  ${label.padEnd(7)} ${fmt(m.seconds, 3).padStart(8)} s  cpu ${fmt(m.cpuSeconds, 2).padStart(7)} s  ${fmt(bytes / 1e6, 2).padStart(9)} MB  rss ${fmt(m.rssMiB, 0)} MiB`);
      if (dir) for (const line of profileText(summarizeDir(dir, 8))) o.log(`    ${line}`);
      return [m, bytes];
    };
    const [first, firstBytes] = await run("first", ["backup", "--no-incremental"]);
    await s.touchFew(20);
    const [second, secondBytes] = await run("second", ["backup", "--incremental", "--json"]);
    const warnings = (JSON.parse(second.stdout) as { warnings: string[] }).warnings;
    for (const w of warnings) o.log(`    warning: ${w}`);
    await run("remember", ["backup", "--incremental", "--skip-if-unchanged", "--json"]);
    const [unchanged, unchangedBytes] = await run("unchanged", ["backup", "--incremental", "--skip-if-unchanged", "--json"]);
    const status = (JSON.parse(unchanged.stdout) as { status: string }).status;
    const fig = (m: Measured, bytes: number) => ({ seconds: Number(fmt(m.seconds, 3)), cpu_seconds: Number(fmt(m.cpuSeconds, 3)), bytes });
    return {
      shape: o.name,
      description: s.description,
      first: fig(first, firstBytes),
      second: fig(second, secondBytes),
      bytes_ratio: secondBytes / firstBytes,
      time_ratio: second.seconds / first.seconds,
      unchanged: { ...fig(unchanged, unchangedBytes), status },
      unchanged_ratio: unchanged.seconds / first.seconds,
      second_warnings: warnings,
    };
  } finally {
    await s.stop();
  }
}

/** The rows `--only second` prints. */
export const secondRows = (r: SecondResult): string[] => [
  `second snapshot of ${r.shape} (${r.description}):`,
  `  bytes: ${fmt(r.second.bytes / 1e6, 2)} MB of ${fmt(r.first.bytes / 1e6, 1)} MB = ${fmt(r.bytes_ratio * 100, 2)}% (goal <= 1%) ${r.bytes_ratio <= 0.01 ? "met" : "NOT"}`,
  `  time:  ${fmt(r.second.seconds)} s of ${fmt(r.first.seconds)} s = ${fmt(r.time_ratio, 3)} (goal <= 0.2) ${r.time_ratio <= 0.2 ? "met" : "NOT"}; CPU ${fmt(r.second.cpu_seconds)} of ${fmt(r.first.cpu_seconds)} s`,
  `  nothing changed (${r.unchanged.status}): ${fmt(r.unchanged.seconds, 3)} s = ${fmt(r.unchanged_ratio, 3)} of the first (goal <= 0.1 and <= 0.3 s) ${r.unchanged_ratio <= 0.1 && r.unchanged.seconds <= 0.3 ? "met" : "NOT"}; CPU ${fmt(r.unchanged.cpu_seconds)} s`,
];
