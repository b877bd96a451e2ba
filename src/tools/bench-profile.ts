/**
 * Summaries of V8 CPU profiles (`node --cpu-prof`, one file per thread) for
 * `npm run bench -- --profile DIR`: where a command's time went, per thread,
 * as self time by function and inclusive time of agentbak's own functions
 * (the stages: a function's inclusive time holds the stages it calls).
 */
import { readdirSync, readFileSync } from "node:fs";
import { basename, join } from "node:path";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** One thread's profile, summarised. */
export interface ThreadSummary {
  file: string;
  wallMs: number;
  /** the thread waited (I/O, timers, child processes, other threads) */
  idleMs: number;
  gcMs: number;
  self: { fn: string; ms: number }[];
  inclusive: { fn: string; ms: number }[];
}

const label = (f: ProfileNode["callFrame"]) => {
  const file = f.url ? basename(f.url.replace(/^file:\/\//, "")) : "";
  const name = f.functionName || "(anonymous)";
  return `${name.length > 48 ? `${name.slice(0, 45)}...` : name}${file ? ` ${file}:${f.lineNumber + 1}` : ""}`;
};
/** agentbak's own code: the packed bundle and the tsc output */
const ours = (url: string) => /\/dist\//.test(url) && !/node_modules/.test(url);

/** Summarises one .cpuprofile file. */
export function summarizeProfile(file: string, top = 12): ThreadSummary {
  const p = JSON.parse(readFileSync(file, "utf8")) as CpuProfile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<string, number>();
  const incl = new Map<string, number>();
  let idle = 0;
  let gc = 0;
  p.samples.forEach((id, i) => {
    const dt = (p.timeDeltas[i + 1] ?? p.timeDeltas[i] ?? 0) / 1000;
    const n = byId.get(id)!;
    const name = n.callFrame.functionName;
    if (name === "(idle)") idle += dt;
    if (name === "(garbage collector)") gc += dt;
    const l = label(n.callFrame);
    self.set(l, (self.get(l) ?? 0) + dt);
    const seen = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const c = byId.get(cur)!;
      if (!ours(c.callFrame.url)) continue;
      const k = label(c.callFrame);
      if (seen.has(k)) continue;
      seen.add(k);
      incl.set(k, (incl.get(k) ?? 0) + dt);
    }
  });
  const sorted = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]).slice(0, top).map(([fn, ms]) => ({ fn, ms: Math.round(ms) }));
  return { file: basename(file), wallMs: Math.round((p.endTime - p.startTime) / 1000), idleMs: Math.round(idle), gcMs: Math.round(gc), self: sorted(self), inclusive: sorted(incl) };
}

/** Every thread's profile in a folder (the main thread's first: the largest wall time). */
export function summarizeDir(dir: string, top = 12): ThreadSummary[] {
  const files = readdirSync(dir).filter((f) => f.endsWith(".cpuprofile"));
  return files.map((f) => summarizeProfile(join(dir, f), top)).sort((a, b) => b.wallMs - a.wallMs);
}

/** The summaries as text lines. */
export function profileText(threads: ThreadSummary[]): string[] {
  const out: string[] = [];
  for (const t of threads) {
    out.push(`  thread ${t.file}: ${t.wallMs} ms profiled, idle ${t.idleMs} ms, GC ${t.gcMs} ms`);
    out.push(`    self:      ${t.self.slice(0, 8).map((s) => `${s.fn} ${s.ms}`).join("; ")}`);
    out.push(`    inclusive: ${t.inclusive.slice(0, 10).map((s) => `${s.fn} ${s.ms}`).join("; ")}`);
  }
  return out;
}
