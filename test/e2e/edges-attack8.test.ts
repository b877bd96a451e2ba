// The eighth attack on issue 32's surfaces (docs/security-edges.md, "Eighth attack"): cases no earlier round
// wrote, tried through the real binary and server. Each case fails without its fix.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, type TestAgent } from "../helpers.js";
import { mcpStdio, tool } from "../agentapi-helpers.js";
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

describe("[E6] a decision is written once", () => {
  it("[E6] a denied request whose decision record was deleted from the repository is not pending again: approve, deny, requests and get_restore_request answer 13 naming the audit entry (was: listed pending, approved and restored; the log then held both a denial and an approval)", async () => {
    expect((await a.run(["backup", "--json"])).code).toBe(0);
    const c = await mcpStdio(a, ["--tier", "restore-request"]);
    const req = await tool(c, "request_restore", { snapshot: "latest", reason: "roll back" });
    expect(req.isError, req.text).toBe(false);
    const id = req.data.request_id as string;
    const denied = await a.run(["deny", id, "--reason", "no", "--yes"]);
    expect(denied.code, denied.stderr).toBe(0);
    rmSync(join(a.repo, `tenants/acme/agents/billing-agent/requests/${id}.decision.json`));
    const target = join(a.tmp, "after-denial");
    const approved = await a.run(["approve", id, "--yes", "--target", target, "--identity", a.identity]);
    expect(approved.code, approved.stderr).toBe(13);
    expect(approved.stderr).toMatch(/audit log entry \d+ records its decision, but .*\.decision\.json is missing/);
    expect(existsSync(target)).toBe(false);
    expect((await a.run(["requests"])).code).toBe(13);
    expect((await a.run(["deny", id, "--reason", "again", "--yes"])).code).toBe(13);
    const seen = await tool(c, "get_restore_request", { request_id: id });
    expect(seen.isError).toBe(true);
    expect(seen.text).toContain("records its decision");
    await c.close();
    const log = await a.run(["audit", "verify", "--json"]);
    expect(log.code, log.stderr).toBe(0);
  }, 120_000);
});
