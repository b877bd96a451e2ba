/**
 * `npm run bench -- --only restore [--shapes ...] [--runs N]`: the restore rows
 * alone, per shape, in one run: the stock pipeline's restore (`age -d | zstd -d
 * | tar x`, plus the shape's pg_restore), the same followed by `sync` (agentbak
 * fsyncs what it restores; the stock pipeline fsyncs nothing), and agentbak's
 * restore with the default integrity and `--integrity digest`. Each ratio is
 * given by wall time and by CPU seconds (the machine is shared: CPU is steadier).
 */
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { bin, fmt, measure, type Measured } from "./bench-measure.js";
import { openShape, type Shape, type ShapeName } from "./bench-shapes.js";

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
const best = (xs: Measured[]) => xs.reduce((a, b) => (b.seconds < a.seconds ? b : a));

export interface RestoreResult {
  shape: ShapeName;
  commands: Record<string, { seconds: number; cpu_seconds: number; peak_rss_mib: number }>;
}

/** One shape: a stock backup and a full agentbak backup, then `runs` of each restore; the best of each counts. */
export async function restoreBench(o: { name: ShapeName; dir: string; tmp: string; home: string; recipient: string; scale: number; root: string; env: Record<string, string>; runs: number; log: (s: string) => void }): Promise<RestoreResult> {
  const s: Shape = await openShape(o.name, o.dir, o.tmp, o.recipient, o.scale, o.root);
  const commands: RestoreResult["commands"] = {};
  const record = (k: string, m: Measured) => {
    commands[k] = { seconds: Number(fmt(m.seconds, 3)), cpu_seconds: Number(fmt(m.cpuSeconds, 3)), peak_rss_mib: Number(fmt(m.rssMiB, 1)) };
    o.log(`  ${o.name.padEnd(9)} ${k.padEnd(22)} ${fmt(m.seconds, 3).padStart(8)} s  cpu ${fmt(m.cpuSeconds, 2).padStart(7)} s  rss ${fmt(m.rssMiB, 0).padStart(5)} MiB`);
  };
  try {
    const env = { ...o.env, ...s.env };
    const work = join(o.tmp, `stock-${s.name}`);
    const copy = join(work, "copy");
    const out = join(work, "out.age");
    mkdirSync(work, { recursive: true });
    const plain = s.plainPaths.map(q).join(" ");
    await measure(["sh", "-c", `set -e; rm -rf ${q(copy)}; mkdir -p ${q(copy)}; set -- ${q(copy)}\n${s.prepare}\ntar -cf - -C ${q(copy)} . ${plain ? `-C ${q(s.dir)} ${plain}` : ""} | zstd -3 -T0 -q | age -r ${o.recipient} > ${q(out)}`], { env });
    await measure(["sh", "-c", `find ${q(s.dir)} -type f -exec cat {} + > /dev/null`]);
    const { Repository } = await import(join(o.root, "dist", "repository", "repository.js"));
    await Repository.init(join(s.dir, "backups"));
    record("full", await measure(["node", bin, "backup", "--no-incremental"], { cwd: s.dir, env }));
    const runs: Record<string, Measured[]> = { stock_restore: [], stock_restore_sync: [], restore: [], restore_digest: [] };
    for (let i = 0; i < o.runs; i++) {
      for (const sync of [false, true]) {
        const back = join(work, `back-${i}-${sync}`);
        mkdirSync(back);
        const extra = await s.stockRestoreExtra(`stock_${i}_${sync ? "s" : "n"}`, back);
        const m = await measure(["sh", "-c", `set -e; age -d -i ${q(join(o.home, "age-identity.txt"))} ${q(out)} | zstd -d -q | tar -x -C ${q(back)}${extra ? `; ${extra}` : ""}${sync ? "; sync" : ""}`], { env });
        runs[sync ? "stock_restore_sync" : "stock_restore"]!.push(m);
        rmSync(back, { recursive: true, force: true });
      }
      for (const [step, extra] of [["restore", []], ["restore_digest", ["--integrity", "digest"]]] as const) {
        const target = join(o.tmp, `restored-${s.name}-${step}-${i}`);
        runs[step]!.push(await measure(["node", bin, "restore", "latest", "--target", target, "--yes", "--allow-rollback", ...extra, ...(await s.restoreArgs(`${step}_${i}`))], { cwd: s.dir, env, okCodes: [0, 3] }));
        rmSync(target, { recursive: true, force: true });
      }
    }
    for (const [k, ms] of Object.entries(runs)) record(k, best(ms));
    rmSync(work, { recursive: true, force: true });
  } finally {
    await s.stop();
    rmSync(s.dir, { recursive: true, force: true });
  }
  return { shape: o.name, commands };
}

/** Per shape: each restore against the stock pipeline with and without `sync`, by wall and by CPU. */
export function restoreRows(rs: RestoreResult[]): string[] {
  const lines = ["| shape | stock (+sync) wall s / CPU s | restore wall s / CPU s | × stock+sync wall / CPU | digest wall s / CPU s | × stock+sync wall / CPU |", "|---|---|---|---|---|---|"];
  for (const r of rs) {
    const c = r.commands;
    const st = c.stock_restore!, sy = c.stock_restore_sync!, re = c.restore!, di = c.restore_digest!;
    const x = (a: number, b: number) => `${fmt(a / b, 2)}×`;
    lines.push(`| ${r.shape} | ${fmt(st.seconds)} (${fmt(sy.seconds)}) / ${fmt(st.cpu_seconds)} (${fmt(sy.cpu_seconds)}) | ${fmt(re.seconds)} / ${fmt(re.cpu_seconds)} | ${x(re.seconds, sy.seconds)} / ${x(re.cpu_seconds, sy.cpu_seconds)} | ${fmt(di.seconds)} / ${fmt(di.cpu_seconds)} | ${x(di.seconds, sy.seconds)} / ${x(di.cpu_seconds, sy.cpu_seconds)} |`);
  }
  return lines;
}
