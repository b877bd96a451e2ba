/**
 * Leases and deadlines: declared timer columns rebased at restore, so a lease
 * taken before the snapshot does not look fresh (or long expired) to the
 * restored agent. `shift` adds the time elapsed since the snapshot, like
 * restoring Redis TTLs minus the elapsed time; `expire` ends leases still in
 * the future, so the work is claimed again. Only timestamps of the declared
 * format move (state/sqlite/timestamps.ts); values of another format are left as
 * they were and named in a warning.
 */
import type { Config } from "../config/schema.js";
import { usageError } from "../errors.js";
import { openDefensive } from "../state/sqlite/open.js";
import { describeOtherFormat, isTimestamp, otherFormat, quoteIdent as q } from "../state/sqlite/timestamps.js";

type Timer = Config["timers"][number];

/** What a rebase moved (or will move): recorded in the plan and the restore receipt. */
export interface TimerMove {
  database: string;
  table: string;
  column: string;
  mode: Timer["mode"];
  format: Timer["format"];
  /** milliseconds added to every value (shift), or null (expire) */
  shift_ms: number | null;
  /** expire: the new value of leases still in the future */
  to: string | number | null;
  /** rows changed; null in a plan */
  rows: number | null;
}

/** The moves the config declares, for a snapshot made at `created` restored at `now` (pure; rows unknown). */
export function planTimers(timers: Timer[], created: Date, now: Date): TimerMove[] {
  const elapsed = Math.max(0, now.getTime() - created.getTime());
  return timers.map((t) => ({
    database: t.database,
    table: t.table,
    column: t.column,
    mode: t.mode,
    format: t.format,
    shift_ms: t.mode === "shift" ? (t.format === "epoch_s" ? Math.round(elapsed / 1000) * 1000 : elapsed) : null,
    to: t.mode === "expire" ? (t.format === "epoch_ms" ? now.getTime() : t.format === "epoch_s" ? Math.floor(now.getTime() / 1000) : now.toISOString()) : null,
    rows: null,
  }));
}

/**
 * SQL for the instant `strftime(…, args)` written in the shape of the text already in `c`: its separator (`T` or
 * a space), its precision (minutes, seconds, milliseconds, a date alone) and its zone (`Z`, an offset kept as it
 * was, or none). An agent compares these strings as text (`lease < datetime('now')`): a value rewritten from
 * "2026-12-07 13:00:00" into "2026-12-07T12:00:00.000Z" sorts after every time of that day, so an expired lease
 * would stay held until midnight.
 */
export function inShapeOf(c: string, args: string): string {
  const offset = `CASE WHEN length(${c}) > 16 AND ${c} GLOB '*[+-][0-9][0-9]:[0-9][0-9]' THEN substr(${c}, -6) END`;
  const time = `CASE WHEN substr(${c}, 20, 1) = '.' THEN '%H:%M:%f' WHEN substr(${c}, 17, 1) = ':' THEN '%H:%M:%S' ELSE '%H:%M' END`;
  const fmt = `CASE WHEN length(${c}) = 10 THEN '%Y-%m-%d' ELSE '%Y-%m-%d' || substr(${c}, 11, 1) || ${time} END`;
  const zone = `CASE WHEN ${c} GLOB '*[Zz]' THEN substr(${c}, -1) ELSE coalesce(${offset}, '') END`;
  return `strftime(${fmt}, ${args}, coalesce(${offset}, '+00:00')) || ${zone}`;
}

/** The UPDATE for one move, and its parameter. Values that are not timestamps of the declared format are left alone. */
function statement(m: TimerMove): { sql: string; param: number | string } {
  const c = q(m.column);
  const mine = isTimestamp(c, m.format);
  const iso = (expr: string) => `strftime('%Y-%m-%dT%H:%M:%fZ', ${expr})`;
  if (m.mode === "shift") {
    if (m.format === "iso8601") return { sql: `UPDATE ${q(m.table)} SET ${c} = ${inShapeOf(c, `${c}, :p`)} WHERE ${mine}`, param: `+${(m.shift_ms! / 1000).toFixed(3)} seconds` };
    return { sql: `UPDATE ${q(m.table)} SET ${c} = ${c} + :p WHERE ${mine}`, param: m.format === "epoch_s" ? m.shift_ms! / 1000 : m.shift_ms! };
  }
  if (m.format === "iso8601") return { sql: `UPDATE ${q(m.table)} SET ${c} = ${inShapeOf(c, ":p")} WHERE ${mine} AND ${iso(c)} > ${iso(":p")}`, param: m.to as string };
  return { sql: `UPDATE ${q(m.table)} SET ${c} = :p WHERE ${mine} AND ${c} > :p`, param: m.to as number };
}

/**
 * Applies the moves to the restored databases (name -> file), one transaction
 * per move, and returns them with the rows each changed, and a warning for
 * each column holding timestamps of another format than declared (left as they were).
 * @throws AgentbakError(2) naming the timer when its table or column is not there.
 */
export function applyTimers(moves: TimerMove[], databases: Map<string, string>): { moves: TimerMove[]; warnings: string[] } {
  const warnings: string[] = [];
  const moved = moves.map((m, i) => {
    const file = databases.get(m.database);
    if (!file) throw usageError(`timers[${i}]: no restored database named "${m.database}"`);
    const db = openDefensive(file, { readonly: false });
    try {
      const s = statement(m);
      const rows = db.transaction(() => db.prepare(s.sql).run({ p: s.param }).changes)();
      const other = otherFormat(db, m);
      if (other) warnings.push(describeOtherFormat(i, m, other));
      return { ...m, rows };
    } catch (e) {
      throw usageError(`timers[${i}] (${m.database}.${m.table}.${m.column}): ${(e as Error).message}`);
    } finally {
      db.close();
    }
  });
  return { moves: moved, warnings };
}
