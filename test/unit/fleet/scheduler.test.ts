/**
 * The host scheduler (src/fleet/scheduler.ts), on a simulated clock: rounds on
 * a fixed grid spread over the interval, seeded jitter, at most maxConcurrent
 * running, an agent never twice at once, missed rounds coalesced into one run.
 */
import { describe, expect, it } from "vitest";
import { Scheduler, type ScheduledAgent } from "../../../src/fleet/scheduler.js";

const MIN = 60_000;
const T0 = Date.UTC(2026, 11, 1, 12, 0, 0);
const agents = (n: number, o: Partial<ScheduledAgent> = {}): ScheduledAgent[] =>
  Array.from({ length: n }, (_, i) => ({ key: `acme/a${String(i).padStart(3, "0")}`, everyMs: 10 * MIN, jitterMs: MIN, lastRunAt: T0 - 1000, ...o }));

/**
 * Runs the clock from `from` to `to` in steps; every started run takes `runMs`
 * (a function of the key allowed). @returns the starts, and the most that ran at once.
 */
function simulate(s: Scheduler, from: number, to: number, o: { stepMs?: number; runMs?: (key: string) => number } = {}) {
  const step = o.stepMs ?? 1000;
  const ends = new Map<string, number>();
  const starts: { key: string; at: number }[] = [];
  let peak = 0;
  for (let t = from; t <= to; t += step) {
    for (const [k, end] of [...ends]) if (end <= t) (s.finish(k, t, true), ends.delete(k));
    for (const k of s.take(t)) {
      expect(ends.has(k), `${k} started twice at once`).toBe(false);
      starts.push({ key: k, at: t });
      ends.set(k, t + (o.runMs?.(k) ?? 0));
    }
    peak = Math.max(peak, ends.size);
  }
  return { starts, peak };
}

describe("the host scheduler", () => {
  it("is deterministic: the same agents, seed and clock give the same starts; another seed other times", () => {
    const run = (seed: string) => simulate(new Scheduler(agents(30), { maxConcurrent: 4, seed, now: T0 }), T0, T0 + 60 * MIN, { runMs: () => 20_000 }).starts;
    expect(run("host-a")).toEqual(run("host-a"));
    expect(run("host-b")).not.toEqual(run("host-a"));
  });

  it("each agent runs once per interval, spread over it: 100 agents every 10 min, jitter 1 min, over 2 hours", () => {
    const s = new Scheduler(agents(100), { maxConcurrent: 8, seed: "h", now: T0 });
    const { starts } = simulate(s, T0, T0 + 120 * MIN, { runMs: () => 5_000 });
    const byKey = new Map<string, number[]>();
    for (const x of starts) byKey.set(x.key, [...(byKey.get(x.key) ?? []), x.at]);
    expect(byKey.size).toBe(100);
    for (const [k, ts] of byKey) {
      expect(ts.length, k).toBeGreaterThanOrEqual(11);
      expect(ts.length, k).toBeLessThanOrEqual(13);
      for (let i = 1; i < ts.length; i++) {
        expect(ts[i]! - ts[i - 1]!, k).toBeGreaterThan(9 * MIN - 10_000);
        expect(ts[i]! - ts[i - 1]!, k).toBeLessThan(11 * MIN + 10_000);
      }
    }
    // spread: in the first interval, no minute holds more than a fifth of the agents
    const perMinute = new Map<number, number>();
    for (const x of starts.filter((x) => x.at < T0 + 10 * MIN)) perMinute.set(Math.floor((x.at - T0) / MIN), (perMinute.get(Math.floor((x.at - T0) / MIN)) ?? 0) + 1);
    expect(Math.max(...perMinute.values())).toBeLessThanOrEqual(20);
    expect(s.status().every((a) => a.coalesced === 0 && a.lastOk === true)).toBe(true);
  });

  it("at most maxConcurrent run at once; the others wait in the queue, each once, oldest due first", () => {
    const s = new Scheduler(agents(100, { lastRunAt: null }), { maxConcurrent: 4, seed: "h", now: T0 });
    const oldest = s.status().sort((x, y) => x.nextDue - y.nextDue).map((a) => a.key);
    const first = s.take(T0);
    expect(first).toEqual(oldest.slice(0, 4));
    expect(s.take(T0 + 1000)).toEqual([]);
    expect(s.queued(T0 + 1000)).toBe(96);
    expect(s.nextWake()).toBe(null);
    s.finish(first[0]!, T0 + 2000, true);
    const next = s.take(T0 + 2000);
    expect(next).toHaveLength(1);
    expect(next).toEqual([oldest[4]]);
    for (const k of [...first.slice(1), ...next]) s.finish(k, T0 + 3000, true);
    const { peak, starts } = simulate(s, T0 + 3000, T0 + 30 * MIN, { runMs: () => 30_000 });
    expect(peak).toBeLessThanOrEqual(4);
    // the backlog drains: every agent has run by the time 100 runs of 30 s on 4 slots fit
    expect(new Set([...first, ...next, ...starts.map((x) => x.key)]).size).toBe(100);
  });

  it("an agent never runs twice at once: a run longer than the interval is not overtaken; its missed rounds coalesce into one run", () => {
    const [a] = agents(1, { everyMs: MIN, jitterMs: 0, lastRunAt: null });
    const s = new Scheduler([a!], { maxConcurrent: 4, seed: "h", now: T0 });
    expect(s.take(T0)).toEqual([a!.key]);
    for (let t = T0; t < T0 + 5 * MIN; t += 1000) expect(s.take(t)).toEqual([]);
    s.finish(a!.key, T0 + 5 * MIN + 500, true);
    // due at once (the rounds it ran through), and only once
    expect(s.take(T0 + 5 * MIN + 500)).toEqual([a!.key]);
    expect(s.status()[0]!.coalesced).toBeGreaterThanOrEqual(3);
    s.finish(a!.key, T0 + 5 * MIN + 600, true);
    expect(s.take(T0 + 5 * MIN + 700)).toEqual([]);
    expect(s.status()[0]!.nextDue).toBeGreaterThan(T0 + 5 * MIN + 700);
    expect(s.status()[0]!.nextDue).toBeLessThanOrEqual(T0 + 6 * MIN + 700);
  });

  it("a clock that jumps an hour (a suspended host) gives one run per agent, not sixty", () => {
    const s = new Scheduler(agents(10, { everyMs: MIN, jitterMs: 10_000 }), { maxConcurrent: 10, seed: "h", now: T0 });
    simulate(s, T0, T0 + 2 * MIN, { runMs: () => 1000 });
    const later = T0 + 62 * MIN;
    const started = s.take(later);
    expect(started.sort()).toEqual(agents(10).map((a) => a.key).sort());
    for (const k of started) s.finish(k, later, true);
    expect(s.take(later + 1000)).toEqual([]);
    for (const a of s.status()) expect(a.coalesced).toBeGreaterThanOrEqual(57);
  });

  it("a known last run decides the first round: one 10 s ago waits for the next round, one 2 hours ago runs now", () => {
    const s = new Scheduler(
      [
        { key: "recent", everyMs: 10 * MIN, jitterMs: 0, lastRunAt: T0 - 10_000 },
        { key: "stale", everyMs: 10 * MIN, jitterMs: 0, lastRunAt: T0 - 120 * MIN },
      ],
      { maxConcurrent: 2, seed: "h", now: T0 },
    );
    expect(s.take(T0)).toEqual(["stale"]);
    const recent = s.status().find((a) => a.key === "recent")!;
    expect(recent.nextDue).toBeGreaterThan(T0 - 10_000);
    expect(recent.nextDue).toBeLessThanOrEqual(T0 + 10 * MIN);
    expect(s.nextWake()).toBe(recent.nextDue);
  });

  it("jitter is seeded and within [0, jitter) of the round's grid time", () => {
    const one = (seed: string) => {
      const s = new Scheduler([{ key: "k", everyMs: 10 * MIN, jitterMs: 3 * MIN, lastRunAt: T0 }], { maxConcurrent: 1, seed, now: T0 });
      return simulate(s, T0, T0 + 200 * MIN, { stepMs: 1000 }).starts.map((x) => x.at);
    };
    const a = one("x");
    expect(one("x")).toEqual(a);
    expect(one("y")).not.toEqual(a);
    // starts sit on a grid of 10 min (a fixed offset) plus a jitter below 3 min, and the jitter varies
    const phase = a.map((t) => (t - T0) % (10 * MIN));
    const base = Math.min(...phase);
    for (const p of phase) expect(p - base).toBeLessThan(3 * MIN);
    expect(new Set(phase).size).toBeGreaterThan(5);
  });

  it("refuses (2) a key twice, an interval below 1 s, a jitter not below its interval, maxConcurrent 0, and finishing an agent that is not running", () => {
    const mk = (as: ScheduledAgent[], max = 1) => () => new Scheduler(as, { maxConcurrent: max, seed: "h", now: T0 });
    const code2 = expect.objectContaining({ code: 2 });
    expect(mk([...agents(1), ...agents(1)])).toThrow(code2);
    expect(mk(agents(1, { everyMs: 500, jitterMs: 0 }))).toThrow(code2);
    expect(mk(agents(1, { everyMs: MIN, jitterMs: MIN }))).toThrow(code2);
    expect(mk(agents(1), 0)).toThrow(code2);
    expect(() => new Scheduler(agents(1), { maxConcurrent: 1, seed: "h", now: T0 }).finish("acme/a000", T0, true)).toThrow(code2);
  });
});
