/**
 * The progress line of long work (backup, restore, verify, copy, compact,
 * drill), after restic's: per stage, bytes done of the total, the rate over the
 * last few seconds and the time left. On a terminal it is one line on stderr,
 * rewritten in place and cleared when the work ends, fails or is interrupted;
 * with `--progress` off a terminal it is JSON lines on stderr
 * (`{"stage":…,"bytes":…,"total":…}`, a last one per stage with `"done":true`)
 * for CI logs; otherwise nothing. At most one update per 100 ms either way.
 */
import type { Progress } from "../progress.js";
import { safe } from "./escape.js";

/** 1536 -> "1.5 KiB". */
export function humanSize(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  for (; n >= 1024 && i < units.length - 1; i++) n /= 1024;
  return i === 0 ? `${n} B` : `${n.toFixed(n < 10 ? 1 : 0)} ${units[i]}`;
}

/** Least time between two updates (≤ 10 a second). */
export const EVERY_MS = 100;
/** How far back the rate looks. */
export const WINDOW_MS = 5000;
/** Erases the terminal line the cursor is on and returns to its start. */
export const CLEAR = "\r\x1b[2K";

export interface ReporterOptions {
  /** "tty": one line rewritten in place; "json": JSON lines */
  mode: "tty" | "json";
  write: (s: string) => void;
  now?: () => number;
  /** the terminal's width (the line is cut to fit) */
  columns?: () => number;
}

interface Stage {
  name: string;
  total: number | undefined;
  bytes: number;
  /** (time, bytes) at each update within the rate's window, oldest first */
  samples: [number, number][];
}

/** Bytes per second over the samples (0 until there are two a moment apart). */
export function rate(samples: [number, number][]): number {
  if (samples.length < 2) return 0;
  const [t0, b0] = samples[0]!;
  const [t1, b1] = samples[samples.length - 1]!;
  return t1 > t0 ? ((b1 - b0) * 1000) / (t1 - t0) : 0;
}

/** Seconds left at `perSecond`, or undefined when not known (no total, no rate yet). */
export function eta(bytes: number, total: number | undefined, perSecond: number): number | undefined {
  if (total === undefined || perSecond <= 0) return undefined;
  return Math.max(0, Math.ceil((total - bytes) / perSecond));
}

/** 75 -> "1:15", 3725 -> "1:02:05". */
export function clock(s: number): string {
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const ss = String(s % 60).padStart(2, "0");
  return h ? `${h}:${String(m).padStart(2, "0")}:${ss}` : `${m}:${ss}`;
}

/** The terminal line for a stage: "writing payload  12.0 MiB / 200 MiB  6%  48 MiB/s  ETA 0:04". */
export function line(s: { name: string; bytes: number; total: number | undefined }, perSecond: number): string {
  const parts = [safe(s.name)];
  if (s.total !== undefined) {
    parts.push(`${humanSize(s.bytes)} / ${humanSize(s.total)}`, `${s.total ? Math.min(100, Math.floor((s.bytes * 100) / s.total)) : 100}%`);
  } else if (s.bytes) parts.push(humanSize(s.bytes));
  if (perSecond > 0) parts.push(`${humanSize(Math.round(perSecond))}/s`);
  const left = eta(s.bytes, s.total, perSecond);
  if (left !== undefined) parts.push(`ETA ${clock(left)}`);
  return parts.join("  ");
}

/** Draws stages as they go; `stop()` ends the last and clears the line. */
export class Reporter implements Progress {
  private cur: Stage | null = null;
  private last = Number.NEGATIVE_INFINITY;
  private drawn = false;
  private readonly now: () => number;

  constructor(private readonly o: ReporterOptions) {
    this.now = o.now ?? Date.now;
  }

  stage(name: string, total?: number): (bytes: number) => void {
    this.finish();
    const s: Stage = { name, total, bytes: 0, samples: [] };
    this.cur = s;
    this.update(true);
    return (n) => {
      if (this.cur !== s) return;
      s.bytes += n;
      this.update(false);
    };
  }

  /**
   * Clears the terminal line; with `finished`, the current stage ends first
   * (its last JSON line). A failure or an interrupt leaves it unfinished.
   */
  stop(finished: boolean): void {
    if (finished) this.finish();
    this.cur = null;
    if (this.drawn) this.o.write(CLEAR);
    this.drawn = false;
  }

  private finish(): void {
    const s = this.cur;
    if (!s) return;
    this.cur = null;
    if (this.o.mode === "json") this.o.write(JSON.stringify({ stage: s.name, bytes: s.bytes, total: s.total ?? null, done: true }) + "\n");
  }

  private update(force: boolean): void {
    const t = this.now();
    if (!force && t - this.last < EVERY_MS) return;
    this.last = t;
    const s = this.cur!;
    s.samples.push([t, s.bytes]);
    while (s.samples.length > 2 && s.samples[1]![0] <= t - WINDOW_MS) s.samples.shift();
    if (this.o.mode === "json") return this.o.write(JSON.stringify({ stage: s.name, bytes: s.bytes, total: s.total ?? null }) + "\n");
    const width = Math.max(1, (this.o.columns?.() ?? 80) - 1);
    this.o.write(CLEAR + line(s, rate(s.samples)).slice(0, width));
    this.drawn = true;
  }
}
