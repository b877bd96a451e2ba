/**
 * Seeded randomness for the fleet: a scheduler's jitter and a fleet drill's
 * sample are reproducible from their seed (a drill report names it), and
 * another implementation can reproduce them: draw i of seed s is the first
 * 48 bits of sha256("<s>\0<label>\0<i>") as a fraction of 2^48.
 */
import { createHash, randomBytes } from "node:crypto";

/** A fraction in [0, 1) determined by the seed, a label and a counter. */
export function draw(seed: string, label: string, i: number): number {
  const h = createHash("sha256").update(`${seed}\0${label}\0${i}`).digest();
  return h.readUIntBE(0, 6) / 2 ** 48;
}

/** A fresh seed to report (16 hex digits), for a run that was given none. */
export const newSeed = (): string => randomBytes(8).toString("hex");

/**
 * The first `k` of `items` in a seeded random order (a Fisher–Yates shuffle
 * driven by draw(seed, label, i)); every subset of size k is equally likely.
 */
export function sample<T>(items: readonly T[], k: number, seed: string, label = "sample"): T[] {
  const a = [...items];
  const n = Math.min(k, a.length);
  for (let i = 0; i < n; i++) {
    const j = i + Math.floor(draw(seed, label, i) * (a.length - i));
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a.slice(0, n);
}
