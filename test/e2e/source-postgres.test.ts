// A PostgreSQL state source through the real binary against real servers: a writer keeps transferring money
// during the backup and the restored snapshot is still consistent; verify parses the dump; restore goes only
// into an empty database (recorded reference or --source); the drill restores into a throwaway server it starts
// and runs the invariants naming the source there.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pg from "pg";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, type TestAgent } from "../helpers.js";
import { drillSpec, patchConfig, server, sql, type Server } from "../sourcekit.js";
import { manifestOf } from "../craft.js";

let a: TestAgent;
let live: Server;
let spare: Server;
let backup: any;
let writes = { before: 0, after: 0 };
const ACCOUNTS = 50;

/** The agent's ledger: every transfer moves money between two accounts and bumps a counter, in one transaction. */
async function transfers(url: string, stop: () => boolean): Promise<number> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  let n = 0;
  try {
    while (!stop()) {
      const from = 1 + (n % ACCOUNTS);
      const to = 1 + ((n * 7 + 3) % ACCOUNTS);
      await c.query("BEGIN");
      await c.query("UPDATE accounts SET balance = balance - 5 WHERE id = $1", [from]);
      await c.query("UPDATE accounts SET balance = balance + 5 WHERE id = $1", [to]);
      await c.query("INSERT INTO ledger (from_id, to_id, amount, note) SELECT $1, $2, 5, repeat('x', 200) FROM generate_series(1, 3)", [from, to]);
      await c.query("UPDATE meta SET transfers = transfers + 1");
      await c.query("COMMIT");
      n++;
    }
  } finally {
    await c.end();
  }
  return n;
}

const consistency = `SELECT 'sum' AS what, sum(balance) AS got FROM accounts HAVING sum(balance) <> ${ACCOUNTS * 1000}
  UNION ALL SELECT 'ledger', count(*) FROM ledger HAVING count(*) <> 3 * (SELECT transfers FROM meta)`;

beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
  [live, spare] = await Promise.all([server("postgres", a.tmp), server("postgres", a.tmp)]);
  await sql(live.target, `CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL);
    CREATE TABLE ledger (id bigserial PRIMARY KEY, from_id int REFERENCES accounts, to_id int REFERENCES accounts, amount int, note text);
    CREATE TABLE meta (transfers bigint NOT NULL); INSERT INTO meta VALUES (0);
    INSERT INTO accounts SELECT g, 1000 FROM generate_series(1, ${ACCOUNTS}) g;
    CREATE SCHEMA audit; CREATE TABLE audit.events (id serial PRIMARY KEY, body jsonb); INSERT INTO audit.events (body) SELECT jsonb_build_object('n', g) FROM generate_series(1, 40) g;`);
  patchConfig(a, (c) => (c.sources = [{ name: "conversations", kind: "postgres", url: "env:AGENT_PG_URL", schemas: ["public", "audit"] }]));
  // seed some history, then back up while the writer keeps going
  await transfers(live.target, (() => { let i = 0; return () => i++ >= 200; })());
  let stop = false;
  const writer = transfers(live.target, () => stop);
  writes.before = Number((await sql(live.target, "SELECT transfers FROM meta"))[0].transfers);
  const r = await a.run(["backup", "--json"], { AGENT_PG_URL: live.target });
  writes.after = Number((await sql(live.target, "SELECT transfers FROM meta"))[0].transfers);
  stop = true;
  await writer;
  expect(r.code, r.stderr).toBe(0);
  backup = json(r);
  backup.path = await a.file(backup.path);
}, 180_000);

afterAll(async () => {
  await Promise.allSettled([live?.stop(), spare?.stop()]);
  a?.cleanup();
});

describe("postgres source", () => {
  it("records the source as its own component with row counts, its snapshot time and the reference, never the URL", () => {
    expect(writes.after).toBeGreaterThan(writes.before); // the writer committed transfers while the backup ran
    const m = manifestOf(backup.path);
    const c = m.components.find((x: any) => x.kind === "postgres");
    expect(c).toMatchObject({ name: "conversations", path: "sources/conversations/dump.pgdump" });
    expect(c.records["public.accounts"]).toBe(ACCOUNTS);
    expect(c.records["audit.events"]).toBe(40);
    const transfersAtSnapshot = c.records["public.ledger"] / 3;
    expect(Number.isInteger(transfersAtSnapshot)).toBe(true);
    expect(transfersAtSnapshot).toBeGreaterThanOrEqual(200);
    const s = m.capture_instant.sources[0];
    expect(s).toMatchObject({ name: "conversations", kind: "postgres", ref: "env:AGENT_PG_URL", path: null });
    expect(s.server_version).toMatch(/^15\./);
    expect(Date.parse(s.snapshot_at)).toBeGreaterThanOrEqual(Date.parse(m.capture_instant.started_at));
    expect(Date.parse(s.snapshot_at)).toBeLessThanOrEqual(Date.parse(m.capture_instant.finished_at));
    expect(JSON.stringify(m)).not.toContain(live.target);
    expect(JSON.stringify(m)).not.toContain("127.0.0.1");
  });

  it("verify parses the dump offline", async () => {
    const r = await a.run(["verify", backup.snapshot_id, "--identity", a.identity, "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const chk = json(r).checks.find((c: any) => c.name === "source:conversations");
    expect(chk.detail).toMatch(/pg_dump archive readable; 4 tables/);
  });

  it("refuses a database that holds tables (the live one, through its reference) and writes nothing", async () => {
    const target = join(a.tmp, "restore-refused");
    const before = (await sql(live.target, "SELECT transfers FROM meta"))[0].transfers;
    const r = await a.run(["restore", backup.snapshot_id, "--target", target, "--yes"], { AGENT_PG_URL: live.target });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/source conversations: its target is not empty: the database holds public\.\w+; restore only into an empty database/);
    expect(r.stderr).not.toContain(live.target);
    expect(existsSync(target)).toBe(false);
    expect((await sql(live.target, "SELECT transfers FROM meta"))[0].transfers).toBe(before);
  });

  it("stops before writing when the reference does not resolve here, naming the flag", async () => {
    const target = join(a.tmp, "restore-unresolved");
    const r = await a.run(["restore", backup.snapshot_id, "--target", target, "--yes"], { AGENT_PG_URL: undefined });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("source conversations: env:AGENT_PG_URL does not resolve here; set it, or pass --source conversations=URL");
    expect(existsSync(target)).toBe(false);
  });

  it("restores into an empty database named with --source: same rows, consistent, counted", async () => {
    const target = join(a.tmp, "restored");
    const r = await a.run(["restore", backup.snapshot_id, "--target", target, "--yes", "--json", "--source", `conversations=${spare.target}`]);
    expect([0, 3], r.stderr).toContain(r.code);
    const res = json(r);
    expect(res.restored).toBe(true);
    const m = manifestOf(backup.path);
    const c = m.components.find((x: any) => x.kind === "postgres");
    expect(res.sources[0].records).toEqual(c.records);
    expect(res.plan.sources[0]).toMatchObject({ name: "conversations", into: "--source conversations", resolved: true });
    expect(r.stdout).not.toContain(spare.target);
    // the snapshot is one instant: balances sum up and the ledger matches the counter, although the writer ran
    expect(await sql(spare.target, consistency)).toEqual([]);
    expect(Number((await sql(spare.target, "SELECT count(*) AS n FROM ledger"))[0].n)).toBe(c.records["public.ledger"]);
    expect(Number((await sql(spare.target, "SELECT count(*) AS n FROM audit.events"))[0].n)).toBe(40);
    expect(existsSync(join(target, "state/agent.sqlite"))).toBe(true);
  });

  it("drills into a throwaway server it starts, running the invariants that name the source there", async () => {
    const pass = drillSpec(a, "pg-pass", { ledger_consistent: `-- database: conversations\n${consistency}` });
    const r = await a.run(["drill", backup.snapshot_id, "--spec", pass, "--identity", a.identity, "--no-report", "--json"]);
    expect([0, 3], r.stderr).toContain(r.code);
    const d = json(r);
    expect(d.ok).toBe(true);
    expect(d.checks.find((c: any) => c.name === "source-restore:conversations")).toMatchObject({ ok: true });
    expect(d.checks.find((c: any) => c.name === "invariant:ledger_consistent")).toMatchObject({ ok: true, detail: "no offending rows" });
    // the same pack with a check that returns rows there fails the drill: the query really ran in postgres
    const fail = drillSpec(a, "pg-fail", { rich_accounts: "-- database: conversations\nSELECT id, balance FROM accounts WHERE balance > 0 ORDER BY id LIMIT 2" });
    const f = await a.run(["drill", backup.snapshot_id, "--spec", fail, "--identity", a.identity, "--no-report", "--json"]);
    expect(f.code).toBe(15);
    const bad = json(f).checks.find((c: any) => c.name === "invariant:rich_accounts");
    expect(bad.ok).toBe(false);
    expect(bad.sample[0]).toMatchObject({ id: 1 });
    expect(a.leftovers()).toEqual([]);
  });
});
