/**
 * The fleet figure: from a seeded sample of K agents each drilled at a random
 * recovery point, a one-sided lower confidence bound on the fraction of the
 * fleet that is recoverable. Clopper–Pearson (exact: its coverage is at least
 * the confidence for every true fraction) is the figure reported; Wilson's
 * score bound (closer to the nominal level, not guaranteed) is given beside it.
 * Pure functions: no clock, no disk.
 */
import { usageError } from "../errors.js";
import { draw, newSeed, sample } from "./random.js";

/** What a fleet drill reports about recoverability. */
export interface FleetFigure {
  drilled: number;
  passed: number;
  /** one-sided confidence of the bounds, e.g. 0.95 */
  confidence: number;
  /** Clopper–Pearson lower bound on the recoverable fraction: the figure */
  lower_bound: number;
  /** Wilson score lower bound, for comparison */
  lower_bound_wilson: number;
}

/** One sampled agent and the recovery point to drill it at. */
export interface FleetPick {
  agent: string;
  /** drill the newest snapshot created at or before this instant (ISO 8601) */
  at: string;
}

function checkCounts(n: number, x: number, confidence: number): void {
  if (!Number.isSafeInteger(n) || !Number.isSafeInteger(x) || n < 0 || x < 0 || x > n) throw usageError(`fleet figure: ${x} passed of ${n} drilled is not a count of a count`);
  if (!(confidence > 0 && confidence < 1)) throw usageError(`fleet figure: confidence ${confidence} is not between 0 and 1`);
}

/**
 * The standard normal quantile (Acklam's rational approximation, relative
 * error below 1.2e-9: far inside what a bound on a fraction needs).
 */
export function normalQuantile(p: number): number {
  const a = [-39.69683028665376, 220.9460984245205, -275.928510446969, 138.357751867269, -30.66479806614716, 2.506628277459239];
  const b = [-54.47609879822406, 161.5858368580409, -155.6989798598866, 66.80131188771972, -13.28068155288572];
  const c = [-0.007784894002430293, -0.3223964580411365, -2.400758277161838, -2.549732539343734, 4.374664141464968, 2.938163982698783];
  const d = [0.007784695709041462, 0.3224671290700398, 2.445134137142996, 3.754408661907416];
  const tail = (q: number) => (((((c[0]! * q + c[1]!) * q + c[2]!) * q + c[3]!) * q + c[4]!) * q + c[5]!) / ((((d[0]! * q + d[1]!) * q + d[2]!) * q + d[3]!) * q + 1);
  if (p < 0.02425) return tail(Math.sqrt(-2 * Math.log(p)));
  if (p > 1 - 0.02425) return -tail(Math.sqrt(-2 * Math.log(1 - p)));
  const q = p - 0.5;
  const r = q * q;
  return ((((((a[0]! * r + a[1]!) * r + a[2]!) * r + a[3]!) * r + a[4]!) * r + a[5]!) * q) / (((((b[0]! * r + b[1]!) * r + b[2]!) * r + b[3]!) * r + b[4]!) * r + 1);
}

/**
 * Wilson's score lower bound, one-sided: 0 when nothing was drilled.
 * @throws AgentbakError(2) for counts that are not 0 <= passed <= drilled.
 */
export function wilsonLower(drilled: number, passed: number, confidence = 0.95): number {
  checkCounts(drilled, passed, confidence);
  if (drilled === 0) return 0;
  const z = normalQuantile(confidence);
  const n = drilled;
  const p = passed / n;
  const z2 = z * z;
  const centre = p + z2 / (2 * n);
  const spread = z * Math.sqrt((p * (1 - p)) / n + z2 / (4 * n * n));
  return Math.max(0, (centre - spread) / (1 + z2 / n));
}

/** P(X >= x) for X ~ Binomial(n, p), 0 < p < 1: the terms summed in log space from x up. */
function upperTail(n: number, x: number, p: number): number {
  let lchoose = 0;
  for (let i = 1; i <= x; i++) lchoose += Math.log(n - x + i) - Math.log(i);
  const lp = Math.log(p);
  const lq = Math.log1p(-p);
  const terms = new Float64Array(n - x + 1);
  let top = -Infinity;
  for (let k = x, t = lchoose + x * lp + (n - x) * lq; k <= n; k++) {
    terms[k - x] = t;
    top = Math.max(top, t);
    t += Math.log(n - k) - Math.log(k + 1) + lp - lq;
  }
  let sum = 0;
  for (const t of terms) sum += Math.exp(t - top);
  return Math.min(1, Math.exp(top) * sum);
}

/**
 * The exact (Clopper–Pearson) one-sided lower bound: the fraction p at which
 * `passed` or more passes of `drilled` have probability 1 − confidence, found
 * by bisection on the binomial tail (it grows with p). 0 when none passed;
 * (1 − confidence)^(1/n) when all did.
 * @throws AgentbakError(2) for counts that are not 0 <= passed <= drilled.
 */
export function clopperPearsonLower(drilled: number, passed: number, confidence = 0.95): number {
  checkCounts(drilled, passed, confidence);
  const alpha = 1 - confidence;
  if (passed === 0) return 0;
  if (passed === drilled) return alpha ** (1 / drilled);
  let lo = 0;
  let hi = 1;
  for (let i = 0; i < 64 && hi - lo > 1e-15; i++) {
    const mid = (lo + hi) / 2;
    if (upperTail(drilled, passed, mid) < alpha) lo = mid;
    else hi = mid;
  }
  return lo;
}

/**
 * The fleet figure of a drill round.
 * @throws AgentbakError(2) for counts that are not 0 <= passed <= drilled.
 */
export function fleetFigure(drilled: number, passed: number, confidence = 0.95): FleetFigure {
  return { drilled, passed, confidence, lower_bound: clopperPearsonLower(drilled, passed, confidence), lower_bound_wilson: wilsonLower(drilled, passed, confidence) };
}

/**
 * Chooses `k` agents of a fleet at random (all of them when k is larger),
 * and for each a recovery point uniformly in [from, to] — or in [since, to]
 * for an agent whose history starts later (`since`: its oldest snapshot), so
 * a young agent is not drilled at an instant before it had any snapshot. The
 * same seed gives the same choice whatever order `agents` comes in. A run
 * without a seed gets a fresh one, returned so the report can name it.
 * @throws AgentbakError(2) for k below 1 or a window that ends before it starts.
 */
export function sampleFleet(
  agents: readonly string[],
  o: { k: number; seed?: string; from: Date; to: Date; since?: ReadonlyMap<string, Date> },
): { seed: string; population: number; picks: FleetPick[] } {
  if (!Number.isSafeInteger(o.k) || o.k < 1) throw usageError(`--sample: not a positive whole number: ${o.k}`);
  const to = o.to.getTime();
  if (!(to - o.from.getTime() >= 0)) throw usageError(`the recovery point window ends (${o.to.toISOString()}) before it starts (${o.from.toISOString()})`);
  const seed = o.seed ?? newSeed();
  const population = [...new Set(agents)].sort();
  const at = (agent: string) => {
    const from = Math.min(to, Math.max(o.from.getTime(), o.since?.get(agent)?.getTime() ?? -Infinity));
    return new Date(from + Math.floor(draw(seed, `point ${agent}`, 0) * (to - from + 1))).toISOString();
  };
  const picks = sample(population, o.k, seed, "agents").map((agent) => ({ agent, at: at(agent) }));
  return { seed, population: population.length, picks };
}
