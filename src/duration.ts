/** Durations as people write them (30s, 5m, 2h, 7d, 1w): flags, the config and the host file spell them one way. */
import { usageError } from "./errors.js";

/**
 * Parses a duration into milliseconds: a whole number with ms, s, m, h, d or
 * w (seconds when no unit is given).
 * @throws AgentbakError(2) for anything else.
 */
export function parseDuration(s: string): number {
  const m = s.match(/^(\d+)(ms|s|m|h|d|w)?$/);
  if (!m) throw usageError(`invalid duration "${s}" (use e.g. 30s, 5m, 2h, 7d)`);
  const mult = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 }[m[2] ?? "s"]!;
  return Number(m[1]) * mult;
}
