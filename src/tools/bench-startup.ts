/**
 * `npm run bench -- --only startup` (and the start of every full run): issue
 * 35's start-up figures on a small agent (2 MiB database, workspace, memory
 * files): `agentbak --version`, `snapshots` and a backup with nothing changed
 * (`--skip-if-unchanged`), each run `runs` times interleaved with `node -e 0`,
 * the baseline of the same moment. The medians are reported with the
 * baseline's beside them: on a shared machine the difference from `node -e 0`
 * is the tool's own part, the absolute time is what the goal names.
 */
import { execa } from "execa";
import { join } from "node:path";
import { bin, fmt, measure, median, root, type Measured } from "./bench-measure.js";

const GOALS = { version: 0.15, snapshots: 0.25, unchanged: 0.3 } as const;
type Figure = keyof typeof GOALS;
const COMMANDS: Record<Figure | "node", string[]> = {
  node: ["node", "-e", "0"],
  version: ["node", bin, "--version"],
  snapshots: ["node", bin, "snapshots"],
  unchanged: ["node", bin, "backup", "--skip-if-unchanged", "--json"],
};

/** One figure: medians of wall and CPU seconds, with the baseline's of the same runs. */
export interface StartupFigure {
  seconds: number;
  cpu_seconds: number;
  baseline_seconds: number;
  baseline_cpu_seconds: number;
  goal_seconds: number;
  met: boolean;
}

/** The three start-up figures on a fresh small agent. */
export async function startupBench(tmp: string, env: Record<string, string>, recipient: string, runs: number): Promise<{ runs: number; figures: Record<Figure, StartupFigure> }> {
  const agent = join(tmp, "agent-startup");
  const gen = await import(join(root, "fixtures", "agent", "generate.js"));
  gen.generateAgent(agent, { recipient, sizeMb: 2 });
  await execa("node", [bin, "init"], { cwd: agent, env });
  await execa("node", [bin, "backup"], { cwd: agent, env });
  // the first --skip-if-unchanged records the fingerprint (a snapshot); the runs measured then find nothing changed
  await execa("node", [bin, "backup", "--skip-if-unchanged"], { cwd: agent, env });
  const got: Record<Figure | "node", Measured[]> = { node: [], version: [], snapshots: [], unchanged: [] };
  for (let i = 0; i < runs; i++)
    for (const [k, cmd] of Object.entries(COMMANDS) as [Figure | "node", string[]][]) {
      const m = await measure(cmd, { cwd: agent, env });
      if (k === "unchanged" && JSON.parse(m.stdout).status !== "unchanged") throw new Error(`startup bench: the backup measured as unchanged took a snapshot: ${m.stdout.slice(0, 300)}`);
      got[k].push(m);
    }
  const med = (ms: Measured[], f: (m: Measured) => number) => Number(fmt(median(ms.map(f)), 3));
  const base = { seconds: med(got.node, (m) => m.seconds), cpu: med(got.node, (m) => m.cpuSeconds) };
  const figure = (k: Figure): StartupFigure => {
    const seconds = med(got[k], (m) => m.seconds);
    return { seconds, cpu_seconds: med(got[k], (m) => m.cpuSeconds), baseline_seconds: base.seconds, baseline_cpu_seconds: base.cpu, goal_seconds: GOALS[k], met: seconds <= GOALS[k] };
  };
  return { runs, figures: { version: figure("version"), snapshots: figure("snapshots"), unchanged: figure("unchanged") } };
}

/** The figures as lines of text. */
export function startupRows(s: Awaited<ReturnType<typeof startupBench>>): string[] {
  const label: Record<Figure, string> = { version: "agentbak --version", snapshots: "snapshots (small repo)", unchanged: "backup, nothing changed" };
  return [
    `start-up, small agent: medians of ${s.runs} runs each, interleaved with node -e 0 (the baseline of the same moment)`,
    ...(Object.keys(label) as Figure[]).map((k) => {
      const f = s.figures[k];
      const d = (a: number, b: number) => `${a - b >= 0 ? "+" : ""}${fmt(a - b, 3)}`;
      return `  ${label[k].padEnd(24)} ${fmt(f.seconds, 3)} s (goal <= ${f.goal_seconds} s) ${f.met ? "met" : "NOT"}; node -e 0 ${fmt(f.baseline_seconds, 3)} s, ${d(f.seconds, f.baseline_seconds)} s; CPU ${fmt(f.cpu_seconds, 3)} s vs ${fmt(f.baseline_cpu_seconds, 3)} s (${d(f.cpu_seconds, f.baseline_cpu_seconds)})`;
    }),
  ];
}
