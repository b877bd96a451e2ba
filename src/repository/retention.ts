/**
 * Retention rules with restic's semantics, as a pure function: keep-last N
 * newest; keep-hourly/daily/weekly/monthly/yearly N keep the newest snapshot
 * in each of the N most recent periods that have one; keep-within D keeps
 * everything within D of the newest snapshot. Periods are UTC.
 */

export interface RetentionPolicy {
  last?: number;
  hourly?: number;
  daily?: number;
  weekly?: number;
  monthly?: number;
  yearly?: number;
  /** milliseconds */
  within?: number;
}

export interface Dated {
  id: string;
  time: Date;
}

const pad = (n: number, w = 2) => String(n).padStart(w, "0");

/** ISO 8601 week-numbering year and week. */
function isoWeek(d: Date): string {
  const t = new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate()));
  const day = t.getUTCDay() || 7;
  t.setUTCDate(t.getUTCDate() + 4 - day);
  const yearStart = new Date(Date.UTC(t.getUTCFullYear(), 0, 1));
  const week = Math.ceil(((t.getTime() - yearStart.getTime()) / 86_400_000 + 1) / 7);
  return `${t.getUTCFullYear()}-W${pad(week)}`;
}

const BUCKETS: [keyof RetentionPolicy, string, (d: Date) => string][] = [
  ["hourly", "hourly", (d) => `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}T${pad(d.getUTCHours())}`],
  ["daily", "daily", (d) => `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}`],
  ["weekly", "weekly", isoWeek],
  ["monthly", "monthly", (d) => `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}`],
  ["yearly", "yearly", (d) => `${d.getUTCFullYear()}`],
];

/** True when the policy keeps nothing by rule (forget refuses to run it). */
export const isEmptyPolicy = (p: RetentionPolicy) => Object.values(p).every((v) => v === undefined);

/**
 * Applies the rules. @returns the reasons each kept snapshot is kept (by id) and the ids to remove, newest first.
 */
export function applyRetention(snaps: Dated[], p: RetentionPolicy): { keep: Map<string, string[]>; remove: string[] } {
  const sorted = [...snaps].sort((a, b) => b.time.getTime() - a.time.getTime() || (a.id < b.id ? 1 : -1));
  const keep = new Map<string, string[]>();
  const why = (id: string, r: string) => keep.set(id, [...(keep.get(id) ?? []), r]);
  sorted.slice(0, p.last ?? 0).forEach((s, i) => why(s.id, `last ${i + 1}/${p.last}`));
  for (const [key, label, bucket] of BUCKETS) {
    const n = p[key];
    if (!n) continue;
    let last: string | null = null;
    let count = 0;
    for (const s of sorted) {
      if (count >= n) break;
      const b = bucket(s.time);
      if (b !== last) {
        last = b;
        count++;
        why(s.id, `${label} ${b}`);
      }
    }
  }
  if (p.within !== undefined && sorted.length) {
    const newest = sorted[0]!.time.getTime();
    for (const s of sorted) if (newest - s.time.getTime() <= p.within) why(s.id, `within ${Math.round(p.within / 3_600_000)}h of the newest`);
  }
  return { keep, remove: sorted.filter((s) => !keep.has(s.id)).map((s) => s.id) };
}

/**
 * The recovery point objective against what is restorable: a warning when
 * the newest verified snapshot (status ok) is older than `rpoMinutes`, or
 * when there is none; null when the objective holds.
 */
export function rpoWarning(entries: { status: string; created_at: string | null }[], who: string, rpoMinutes: number, now: Date): string | null {
  const newest = Math.max(...entries.filter((e) => e.status === "ok" && e.created_at).map((e) => Date.parse(e.created_at!)));
  if (!Number.isFinite(newest)) return `${who} has no verified snapshot: the recovery point objective (${rpoMinutes} minutes) is missed`;
  const age = (now.getTime() - newest) / 60_000;
  return age > rpoMinutes ? `newest verified snapshot of ${who} is ${age.toFixed(1)} minutes old, older than the recovery point objective (${rpoMinutes} minutes)` : null;
}
