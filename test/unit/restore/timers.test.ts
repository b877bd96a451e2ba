// Lease and deadline rebasing at restore: the plan is pure, the apply runs on a real SQLite file.
import { afterAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { applyTimers, planTimers } from "../../../src/restore/timers.js";
import { AgentbakError } from "../../../src/errors.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-timers-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const created = new Date("2026-03-01T10:00:00.000Z");
const now = new Date("2026-03-01T12:30:00.400Z"); // 2.5 h and 400 ms later
const timer = (mode: "shift" | "expire", format: "epoch_ms" | "epoch_s" | "iso8601", column = "until") => ({ database: "main", table: "leases", column, mode, format });

describe("planTimers", () => {
  it("shift adds the elapsed time (whole seconds for epoch_s); expire names now in the column's format", () => {
    const elapsed = now.getTime() - created.getTime();
    const p = planTimers([timer("shift", "epoch_ms"), timer("shift", "epoch_s"), timer("expire", "epoch_ms"), timer("expire", "epoch_s"), timer("expire", "iso8601")] as any, created, now);
    expect(p.map((m) => m.shift_ms)).toEqual([elapsed, 9_000_000, null, null, null]);
    expect(p.map((m) => m.to)).toEqual([null, null, now.getTime(), Math.floor(now.getTime() / 1000), now.toISOString()]);
    expect(p.every((m) => m.rows === null && m.database === "main" && m.table === "leases")).toBe(true);
  });

  it("a snapshot from the future (clock skew) shifts by nothing, never backwards", () => {
    expect(planTimers([timer("shift", "epoch_ms")] as any, now, created)[0]!.shift_ms).toBe(0);
  });
});

describe("applyTimers", () => {
  const db = (rows: [string, unknown][]) => {
    const file = join(tmp, `${Math.random().toString(36).slice(2)}.sqlite`);
    const d = new Database(file);
    d.exec("CREATE TABLE leases (id TEXT PRIMARY KEY, until)");
    const ins = d.prepare("INSERT INTO leases VALUES (?, ?)");
    for (const r of rows) ins.run(...r);
    d.close();
    return file;
  };
  const read = (file: string) => Object.fromEntries(new Database(file, { readonly: true }).prepare("SELECT id, until FROM leases").all().map((r: any) => [r.id, r.until]));

  it("shift moves every epoch_ms timestamp by the elapsed time and leaves other values alone, with a warning naming them", () => {
    const t0 = created.getTime() - 60_000;
    const file = db([["a", t0], ["b", t0 + 1000], ["s", 1_772_000_000], ["n", null], ["x", "soon"]]);
    const { moves, warnings } = applyTimers(planTimers([timer("shift", "epoch_ms")] as any, created, now), new Map([["main", file]]));
    const elapsed = now.getTime() - created.getTime();
    expect(moves[0]!.rows).toBe(2);
    expect(read(file)).toEqual({ a: t0 + elapsed, b: t0 + 1000 + elapsed, s: 1_772_000_000, n: null, x: "soon" });
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain("until");
  });

  it("expire ends only leases still in the future (iso8601), past ones keep their value", () => {
    const file = db([["past", "2026-03-01T09:00:00.000Z"], ["future", "2026-03-02T00:00:00.000Z"]]);
    const { moves } = applyTimers(planTimers([timer("expire", "iso8601")] as any, created, now), new Map([["main", file]]));
    expect(moves[0]!.rows).toBe(1);
    expect(read(file)).toEqual({ past: "2026-03-01T09:00:00.000Z", future: now.toISOString() });
  });

  it("a timer naming a database that was not restored, or a missing column, is a usage error naming the timer", () => {
    const file = db([]);
    const moves = planTimers([timer("shift", "epoch_ms", "nope")] as any, created, now);
    expect(() => applyTimers(moves, new Map())).toThrow(/timers\[0\]: no restored database named "main"/);
    let err: unknown;
    try { applyTimers(moves, new Map([["main", file]])); } catch (e) { err = e; }
    expect(err).toBeInstanceOf(AgentbakError);
    expect((err as AgentbakError).code).toBe(2);
    expect((err as Error).message).toMatch(/^timers\[0\] \(main\.leases\.nope\)/);
  });
});
