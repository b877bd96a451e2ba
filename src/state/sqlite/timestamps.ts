/**
 * How a timer column (config `timers`) stores its timestamps, told apart by
 * what the values are: epoch seconds and epoch milliseconds by range, ISO 8601
 * by SQLite's own parser. A restore moves only values of the declared format,
 * and backup and restore both name a column whose values are of another one:
 * a lease in seconds shifted as if it were in milliseconds would move by
 * 1000 times the time elapsed.
 */
import type { DB } from "./open.js";

export type TimerFormat = "epoch_ms" | "epoch_s" | "iso8601";
const FORMATS: TimerFormat[] = ["epoch_ms", "epoch_s", "iso8601"];

/**
 * Where numeric timestamps of each epoch format fall: 1973-03-03 to
 * 5138-11-16 in either unit, so the two never overlap. Numbers outside both
 * (0, -1, a counter) are no timestamps: left alone, never named.
 */
export const EPOCH_RANGE = { epoch_s: [1e8, 1e11], epoch_ms: [1e11, 1e14] } as const;

/** A column or table name quoted for SQLite (the config allows plain identifiers only; quoted all the same). */
export const quoteIdent = (s: string) => `"${s.replace(/"/g, '""')}"`;

/** SQL that is true where `col` (quoted) holds a timestamp of `format`. */
export function isTimestamp(col: string, format: TimerFormat): string {
  // a date first: SQLite's parser also takes a bare number ('42') as a Julian day, which is no ISO 8601 timestamp
  if (format === "iso8601") return `(typeof(${col}) = 'text' AND ${col} GLOB '[0-9][0-9][0-9][0-9]-*' AND strftime('%Y-%m-%dT%H:%M:%fZ', ${col}) IS NOT NULL)`;
  const [lo, hi] = EPOCH_RANGE[format];
  return `(typeof(${col}) IN ('integer', 'real') AND ${col} >= ${lo} AND ${col} < ${hi})`;
}

/**
 * The values of `table.column` that are timestamps of a format other than
 * `format` (the most common such format, how many, one of them), or null when
 * there are none.
 * @throws SQLite's error when the table or column is not there.
 */
export function otherFormat(db: DB, t: { table: string; column: string; format: TimerFormat }): OtherFormat | null {
  const col = quoteIdent(t.column);
  let best: OtherFormat | null = null;
  const count = (format: TimerFormat, where: string, asText: boolean) => {
    const row = db.prepare(`SELECT count(*) AS n, min(${col}) AS example FROM ${quoteIdent(t.table)} WHERE ${where}`).get() as { n: number; example: unknown };
    if (row.n > (best?.count ?? 0)) best = { format, count: row.n, example: String(row.example).slice(0, 40), ...(asText ? { asText } : {}) };
  };
  for (const f of FORMATS.filter((x) => x !== t.format)) count(f, isTimestamp(col, f), false);
  // epoch numbers stored as text ("1772000000" in a column without INTEGER affinity) are of no format: never moved
  for (const f of ["epoch_s", "epoch_ms"] as const) {
    const [lo, hi] = EPOCH_RANGE[f];
    count(f, `typeof(${col}) = 'text' AND ${col} <> '' AND ${col} NOT GLOB '*[^0-9]*' AND CAST(${col} AS INTEGER) >= ${lo} AND CAST(${col} AS INTEGER) < ${hi}`, true);
  }
  return best;
}

/** What otherFormat found: the commonest other format, how many values and one of them; `asText` when they are epoch numbers stored as text. */
export interface OtherFormat {
  format: TimerFormat;
  count: number;
  example: string;
  asText?: boolean;
}

/**
 * What a person reads about such a column, at backup and at restore alike.
 * @param i the timer's index in the config
 */
export function describeOtherFormat(i: number, t: { database: string; table: string; column: string; format: TimerFormat }, o: OtherFormat): string {
  const at = `timers[${i}] (${t.database}.${t.table}.${t.column})`;
  if (o.asText) return `${at}: ${o.count} stored value(s) are ${o.format} timestamps stored as text (e.g. "${o.example}"), which no "format" moves: a restore leaves them unmoved; store them as numbers (INTEGER)`;
  return (
    `${at}: ${o.count} stored value(s) are ${o.format} timestamps (e.g. ${o.example}), ` +
    `but its "format" is "${t.format}"${t.format === "epoch_ms" ? " (the default)" : ""}: a restore leaves them unmoved; set "format": "${o.format}"`
  );
}
