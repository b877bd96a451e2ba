// The eighth attack on issue 32's surfaces (docs/security-edges.md, "Eighth attack"): cases no earlier round
// wrote, tried through the real binary and server. Each case fails without its fix.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { join } from "node:path";
import { json, makeAgent, type TestAgent } from "../helpers.js";
import { patchConfig } from "../sourcekit.js";

let a: TestAgent;
beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
}, 60_000);
afterAll(() => a?.cleanup());

describe("[E12] iso8601 timers keep the shape the agent wrote", () => {
  it("[E12] leases written by datetime('now') ('YYYY-MM-DD HH:MM:SS'): expire ends them and shift keeps an expired one expired, as the agent's own text comparison reads them (was: rewritten as '…T…Z', which sorts after every time of that day: held until midnight)", async () => {
    const db = new Database(join(a.dir, "state/agent.sqlite"));
    db.exec(`CREATE TABLE leases (id INTEGER PRIMARY KEY, held_until TEXT, was_until TEXT, iso TEXT, zoned TEXT);
      INSERT INTO leases VALUES (1, datetime('now', '+1 hour'), datetime('now', '-1 hour'), '2026-01-01T10:00:00.250Z', '2026-01-01T15:00:00+05:00')`);
    db.close();
    patchConfig(a, (c) => {
      c.timers = [
        { database: "state", table: "leases", column: "held_until", mode: "expire", format: "iso8601" },
        ...["was_until", "iso", "zoned"].map((column) => ({ database: "state", table: "leases", column, mode: "shift", format: "iso8601" })),
      ];
    });
    const b = await a.run(["backup", "--json"]);
    expect(b.code, b.stderr).toBe(0);
    await new Promise((r) => setTimeout(r, 2100));
    const target = join(a.tmp, "timers");
    const r = await a.run(["restore", "latest", "--target", target, "--yes", "--json"]);
    expect([0, 3], r.stderr).toContain(r.code); // 3: the fixture's credentials are missing here
    expect(r.stderr).not.toContain("timers[");
    const out = new Database(join(target, "state/agent.sqlite"), { readonly: true });
    const row = out.prepare(`SELECT held_until, was_until, iso, zoned,
      held_until <= datetime('now') AS ended, was_until < datetime('now', '-3500 seconds') AS still_expired FROM leases`).get() as any;
    out.close();
    // the agent's own query: the expired lease reads as expired, the hour-old one still as an hour old
    expect(row).toMatchObject({ ended: 1, still_expired: 1 });
    expect(row.held_until).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/);
    expect(row.was_until).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/);
    // other shapes are kept too: milliseconds and Z, an offset as written, each moved by the same time
    expect(row.iso).toMatch(/^2026-01-01T10:00:\d\d\.\d{3}Z$/);
    expect(row.zoned).toMatch(/^2026-01-01T15:00:\d\d\+05:00$/);
    const moved = Date.parse(row.iso) - Date.parse("2026-01-01T10:00:00.250Z");
    expect(moved).toBeGreaterThanOrEqual(2000);
    expect(Math.abs(Date.parse(row.zoned) - Date.parse("2026-01-01T15:00:00+05:00") - moved)).toBeLessThan(1000);
    patchConfig(a, (c) => delete c.timers);
  }, 120_000);
});
