// Retention rules on a synthetic calendar, against restic's documented semantics
// (the newest snapshot in each of the N most recent periods that have one).
import { describe, expect, it } from "vitest";
import { applyRetention } from "../../../src/repository/retention.js";

const at = (iso: string) => ({ id: iso, time: new Date(iso) });
// a calendar: several snapshots a day for some days, gaps, week and month and year boundaries
const cal = [
  "2025-12-30T10:00:00Z", "2025-12-31T23:00:00Z",
  "2026-01-01T00:30:00Z", "2026-01-01T12:00:00Z",
  "2026-01-04T09:00:00Z", "2026-01-05T09:00:00Z", "2026-01-05T18:00:00Z",
  "2026-01-11T08:00:00Z", "2026-01-12T08:00:00Z",
  "2026-02-01T00:00:00Z", "2026-02-28T23:59:00Z",
  "2026-03-01T06:00:00Z", "2026-03-01T06:40:00Z", "2026-03-01T07:10:00Z", "2026-03-01T07:50:00Z",
].map(at);
const kept = (p: Parameters<typeof applyRetention>[1]) => [...applyRetention(cal, p).keep.keys()].sort();

describe("retention (restic semantics)", () => {
  it("keep-last keeps the N newest", () => {
    expect(kept({ last: 3 })).toEqual(["2026-03-01T06:40:00Z", "2026-03-01T07:10:00Z", "2026-03-01T07:50:00Z"]);
  });
  it("keep-hourly keeps the newest of each of the last N hours that have a snapshot", () => {
    expect(kept({ hourly: 3 })).toEqual(["2026-02-28T23:59:00Z", "2026-03-01T06:40:00Z", "2026-03-01T07:50:00Z"]);
  });
  it("keep-daily skips days without snapshots", () => {
    expect(kept({ daily: 4 })).toEqual(["2026-01-12T08:00:00Z", "2026-02-01T00:00:00Z", "2026-02-28T23:59:00Z", "2026-03-01T07:50:00Z"]);
  });
  it("keep-weekly uses ISO weeks (Jan 4 2026 is a Sunday: the end of week 1)", () => {
    // W09: Feb 28 (Sat) and Mar 1 (Sun) -> Mar 1 07:50; W05: Feb 1; W03: Jan 12 (Mon); W02: Jan 11 (Sun) beats Jan 5; W01: Jan 4
    expect(kept({ weekly: 5 })).toEqual(["2026-01-04T09:00:00Z", "2026-01-11T08:00:00Z", "2026-01-12T08:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T07:50:00Z"]);
    // 2025-12-30 .. 2026-01-04 are all ISO week 2026-W01
    expect(kept({ weekly: 7 })).toContain("2026-01-04T09:00:00Z");
    expect(kept({ weekly: 7 })).not.toContain("2026-01-01T12:00:00Z");
  });
  it("keep-monthly and keep-yearly", () => {
    expect(kept({ monthly: 2 })).toEqual(["2026-02-28T23:59:00Z", "2026-03-01T07:50:00Z"]);
    expect(kept({ yearly: 5 })).toEqual(["2025-12-31T23:00:00Z", "2026-03-01T07:50:00Z"]);
  });
  it("keep-within keeps everything within the duration of the newest snapshot", () => {
    expect(kept({ within: 2 * 3_600_000 })).toEqual(["2026-03-01T06:00:00Z", "2026-03-01T06:40:00Z", "2026-03-01T07:10:00Z", "2026-03-01T07:50:00Z"]);
  });
  it("rules combine as a union, and every kept snapshot says why", () => {
    const r = applyRetention(cal, { last: 1, daily: 2, monthly: 3 });
    expect(r.keep.get("2026-03-01T07:50:00Z")).toEqual(["last 1/1", "daily 2026-03-01", "monthly 2026-03"]);
    expect([...r.keep.keys()].sort()).toEqual(["2026-01-12T08:00:00Z", "2026-02-28T23:59:00Z", "2026-03-01T07:50:00Z"]);
    expect(r.remove.length + r.keep.size).toBe(cal.length);
  });
});
