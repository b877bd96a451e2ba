/**
 * When each agent of a host is backed up: a pure, deterministic scheduler
 * (the clock is passed in, jitter is seeded), so `serve --host` only starts
 * what take() returns and reports what finished.
 *
 * Each agent has rounds on a fixed grid: round k is due at
 *   k * every + offset(agent) + jitter(agent, k)
 * in epoch milliseconds, where offset spreads the agents of a host over the
 * interval (a fraction of `every` drawn from the seed and the agent's key) and
 * jitter is drawn anew each round in [0, jitter). The grid does not move with
 * how long a run takes, so each agent is captured once per interval. At most
 * `maxConcurrent` agents run at once and an agent never runs twice at once:
 * one that is due while running, or while the slots are full, waits in the
 * queue, where it appears once however many rounds it missed (they coalesce
 * into one run, which covers every round due by the time it starts).
 */
import { usageError } from "../errors.js";
import { draw } from "./random.js";

/** An agent as the scheduler sees it. */
export interface ScheduledAgent {
  /** a stable key (its config path, or tenant/agent) */
  key: string;
  everyMs: number;
  jitterMs: number;
  /** when it was last backed up, if known: the first round due is the one after it (else the current one, at once) */
  lastRunAt?: number | null;
}

/** What the scheduler knows of one agent, for status pages and tests. */
export interface AgentSchedule {
  key: string;
  /** when its next run is (or was) due; for a running agent, the round after the one it covers */
  nextDue: number;
  running: boolean;
  /** rounds that were folded into a later run instead of running on their own */
  coalesced: number;
  runs: number;
  lastFinished: number | null;
  lastOk: boolean | null;
}

interface State {
  a: ScheduledAgent;
  offset: number;
  /** the round the next run covers at least, and when it is due */
  round: number;
  dueAt: number;
  running: boolean;
  coalesced: number;
  runs: number;
  lastFinished: number | null;
  lastOk: boolean | null;
}

export class Scheduler {
  private agents = new Map<string, State>();
  private readonly maxConcurrent: number;
  private readonly seed: string;
  private runningCount = 0;

  /**
   * @param now the clock at start (epoch ms)
   * @throws AgentbakError(2) for a key given twice, an interval below 1 s, a jitter not below its interval, or maxConcurrent below 1.
   */
  constructor(agents: readonly ScheduledAgent[], o: { maxConcurrent: number; seed: string; now: number }) {
    if (!Number.isSafeInteger(o.maxConcurrent) || o.maxConcurrent < 1) throw usageError(`maxConcurrent: not a positive whole number: ${o.maxConcurrent}`);
    this.maxConcurrent = o.maxConcurrent;
    this.seed = o.seed;
    for (const a of agents) {
      if (this.agents.has(a.key)) throw usageError(`agent ${a.key} is scheduled twice`);
      if (!(a.everyMs >= 1000) || !(a.jitterMs >= 0 && a.jitterMs < a.everyMs)) throw usageError(`${a.key}: schedule.every must be at least 1s and schedule.jitter below it`);
      const s: State = { a, offset: Math.floor(draw(this.seed, `offset ${a.key}`, 0) * a.everyMs), round: 0, dueAt: 0, running: false, coalesced: 0, runs: 0, lastFinished: null, lastOk: null };
      const known = a.lastRunAt ?? null;
      // after a known run: the round after it (one far in the past is due at once, the rounds since coalesced);
      // unknown: the current round, so a fleet that starts with no record of its agents captures each of them now
      this.moveTo(s, known !== null ? this.roundAt(s, known) + 1 : this.roundAt(s, o.now));
      this.agents.set(a.key, s);
    }
  }

  /** When round k of an agent is due. */
  private due(s: State, k: number): number {
    return k * s.a.everyMs + s.offset + Math.floor(draw(this.seed, `jitter ${s.a.key}`, k) * s.a.jitterMs);
  }

  private moveTo(s: State, round: number): void {
    s.round = round;
    s.dueAt = this.due(s, round);
  }

  /** The last round due at or before `t`. */
  private roundAt(s: State, t: number): number {
    let k = Math.floor((t - s.offset) / s.a.everyMs);
    while (this.due(s, k) > t) k--;
    while (this.due(s, k + 1) <= t) k++;
    return k;
  }

  /**
   * The agents to start now, oldest due first (ties by key), as many as free
   * slots allow; they count as running until finish().
   */
  take(now: number): string[] {
    const ready = [...this.agents.values()].filter((s) => !s.running && s.dueAt <= now).sort((x, y) => x.dueAt - y.dueAt || (x.a.key < y.a.key ? -1 : 1));
    const started: string[] = [];
    for (const s of ready.slice(0, Math.max(0, this.maxConcurrent - this.runningCount))) {
      const covers = this.roundAt(s, now);
      s.coalesced += covers - s.round;
      this.moveTo(s, covers);
      s.running = true;
      this.runningCount++;
      started.push(s.a.key);
    }
    return started;
  }

  /**
   * Records that an agent's run ended at `now`; its next run is the round
   * after the one it covered (already due when the run took longer than the
   * interval: it is then taken again at once, the rounds in between coalesced).
   * @throws AgentbakError(2) for an agent that is not running.
   */
  finish(key: string, now: number, ok: boolean): void {
    const s = this.agents.get(key);
    if (!s?.running) throw usageError(`agent ${key} is not running`);
    s.running = false;
    this.runningCount--;
    this.moveTo(s, s.round + 1);
    s.runs++;
    s.lastFinished = now;
    s.lastOk = ok;
  }

  /** How many agents are due and waiting for a slot at `now`: the queue (each agent at most once). */
  queued(now: number): number {
    let n = 0;
    for (const s of this.agents.values()) if (!s.running && s.dueAt <= now) n++;
    return n;
  }

  /** When take() next returns something: the earliest due time of an agent not running (null while every slot is busy). */
  nextWake(): number | null {
    if (this.runningCount >= this.maxConcurrent) return null;
    let t: number | null = null;
    for (const s of this.agents.values()) if (!s.running) t = Math.min(t ?? Infinity, s.dueAt);
    return t;
  }

  /** Every agent's schedule, by key. */
  status(): AgentSchedule[] {
    return [...this.agents.values()].map((s) => ({
      key: s.a.key,
      nextDue: s.running ? this.due(s, s.round + 1) : s.dueAt,
      running: s.running,
      coalesced: s.coalesced,
      runs: s.runs,
      lastFinished: s.lastFinished,
      lastOk: s.lastOk,
    }));
  }
}
