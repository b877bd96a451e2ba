// Timestamp formats told apart by SQLite itself: epoch seconds and milliseconds never overlap, and 0, -1 or a counter is no timestamp.
import { describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { describeOtherFormat, isTimestamp, otherFormat, quoteIdent } from "../../../../src/state/sqlite/timestamps.js";

const db = new Database(":memory:");
db.exec(`CREATE TABLE "we""ird" (v)`);
const ins = db.prepare(`INSERT INTO "we""ird" VALUES (?)`);
const values: unknown[] = [0, -1, 42, 1_772_000_000, 1_772_000_000.5, 1_772_000_000_000, "2026-03-01T10:00:00.000Z", "2026-03-01 10:00:00", "soon", null];
for (const v of values) ins.run(v);
const matching = (f: "epoch_s" | "epoch_ms" | "iso8601") =>
  (db.prepare(`SELECT v FROM ${quoteIdent('we"ird')} WHERE ${isTimestamp(quoteIdent("v"), f)} ORDER BY rowid`).all() as { v: unknown }[]).map((r) => r.v);

const matching2 = (d: Database.Database, f: "epoch_s" | "epoch_ms" | "iso8601") => d.prepare(`SELECT v FROM t WHERE ${isTimestamp(quoteIdent("v"), f)}`).pluck().all();

describe("timestamps", () => {
  it("each format matches only its own values", () => {
    expect(matching("epoch_s")).toEqual([1_772_000_000, 1_772_000_000.5]);
    expect(matching("epoch_ms")).toEqual([1_772_000_000_000]);
    expect(matching("iso8601")).toEqual(["2026-03-01T10:00:00.000Z", "2026-03-01 10:00:00"]);
  });

  it("otherFormat names the commonest other format, how many and an example; describeOtherFormat says what to set", () => {
    const o = otherFormat(db, { table: 'we"ird', column: "v", format: "epoch_ms" });
    expect(o).toEqual({ format: "epoch_s", count: 2, example: "1772000000" });
    expect(describeOtherFormat(0, { database: "state", table: "leases", column: "until", format: "epoch_ms" }, o!)).toBe(
      'timers[0] (state.leases.until): 2 stored value(s) are epoch_s timestamps (e.g. 1772000000), but its "format" is "epoch_ms" (the default): a restore leaves them unmoved; set "format": "epoch_s"',
    );
    const clean = new Database(":memory:");
    clean.exec("CREATE TABLE t (v); INSERT INTO t VALUES (1772000000000), (0)");
    expect(otherFormat(clean, { table: "t", column: "v", format: "epoch_ms" })).toBeNull();
    expect(() => otherFormat(clean, { table: "t", column: "missing", format: "epoch_ms" })).toThrow(/missing/);
  });

  it("epoch numbers stored as text match no format and are named as such; other text (a word, digits out of range, a decimal) is not; '42' is no ISO 8601 timestamp (SQLite would read it as a Julian day)", () => {
    const text = new Database(":memory:");
    text.exec("CREATE TABLE t (v TEXT); INSERT INTO t VALUES ('1772000000'), ('1772000001'), ('1772000000000'), ('42'), ('soon'), ('1772000000.5'), ('')");
    for (const f of ["epoch_s", "epoch_ms", "iso8601"] as const) expect(matching2(text, f)).toEqual([]);
    const o = otherFormat(text, { table: "t", column: "v", format: "epoch_s" });
    expect(o).toEqual({ format: "epoch_s", count: 2, example: "1772000000", asText: true });
    expect(describeOtherFormat(1, { database: "state", table: "t", column: "v", format: "epoch_s" }, o!)).toBe(
      'timers[1] (state.t.v): 2 stored value(s) are epoch_s timestamps stored as text (e.g. "1772000000"), which no "format" moves: a restore leaves them unmoved; store them as numbers (INTEGER)',
    );
  });
});
