// A PostgreSQL source that did not change since the snapshot that stored it is not dumped again (issue 35,
// docs/chunk-store.md "Unchanged sources"): through the real binary against a real PostgreSQL 15 server started in a
// temp folder. The first backup records the dump's fingerprint beside its chunks (format 6); a second backup with
// nothing changed reuses that entry (same chunks and digest, and no table is read: the server's own seq_scan
// counters do not move) and restores to the same rows; a changed row, or only a nextval, is dumped again.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { json, makeAgent, type TestAgent } from "../helpers.js";
import { patchConfig, server, sql, type Server } from "../sourcekit.js";
import { manifestOf } from "../craft.js";

let a: TestAgent;
let live: Server;
let spare: Server;
const ROWS = 20_000;

/** Sequential scans of the agent's tables so far, as the server counts them (a dump or a count reads each once). */
async function scans(): Promise<number> {
  // a backend's counters reach the shared statistics when it exits: pg_dump's and agentbak's have, a moment ago
  await new Promise((r) => setTimeout(r, 1500));
  return Number((await sql(live.target, "SELECT sum(seq_scan) AS n FROM pg_stat_user_tables"))[0].n);
}

const pgOf = (m: any) => m.components.find((c: any) => c.kind === "postgres");
const backup = async () => {
  const r = await a.run(["backup", "--json"], { AGENT_PG_URL: live.target });
  expect(r.code, r.stderr).toBe(0);
  return { ...json(r), manifest: manifestOf(await a.file(json(r).path)), stderr: r.stderr };
};
const restoreInto = async (id: string, db: string) => {
  await sql(spare.target, `CREATE DATABASE ${db}`);
  const url = spare.target.replace(/\/postgres$/, `/${db}`);
  const r = await a.run(["restore", id, "--target", `${a.tmp}/restored-${db}`, "--yes", "--allow-rollback", "--json", "--source", `conversations=${url}`]);
  expect([0, 3], r.stderr).toContain(r.code);
  return url;
};
const digest = (url: string) => sql(url, "SELECT count(*)::int AS n, md5(string_agg(id || ':' || body, ',' ORDER BY id)) AS h FROM notes");

beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
  [live, spare] = await Promise.all([server("postgres", a.tmp), server("postgres", a.tmp)]);
  // ~2.5 MB of hex: a dump well above the 512 KiB from which it is chunked (a fingerprint is kept only beside chunks)
  await sql(live.target, `CREATE TABLE notes (id bigserial PRIMARY KEY, body text NOT NULL) WITH (autovacuum_enabled = false);
    INSERT INTO notes (body) SELECT md5(g::text) || md5((g * 7)::text) || md5((g * 13)::text) || md5((g * 31)::text) FROM generate_series(1, ${ROWS}) g;
    CREATE SEQUENCE tickets;`);
  // analyzed now, so that no autovacuum takes a transaction id between the backups below (that would be a change)
  await sql(live.target, "VACUUM ANALYZE");
  patchConfig(a, (c) => (c.sources = [{ name: "conversations", kind: "postgres", url: "env:AGENT_PG_URL" }]));
}, 180_000);

afterAll(async () => {
  await Promise.allSettled([live?.stop(), spare?.stop()]);
  a?.cleanup();
});

describe("an unchanged postgres source", () => {
  let first: any;
  let second: any;

  it("the first backup dumps it into the chunk store and records its fingerprint in the signed manifest (format 6)", async () => {
    first = await backup();
    const c = pgOf(first.manifest);
    expect(first.manifest.format_version).toBe(6);
    expect(c.fingerprint).toMatch(/^[0-9a-f]{64}$/);
    expect(c.chunks.length).toBeGreaterThanOrEqual(1);
    expect(c.records["public.notes"]).toBe(ROWS);
  });

  it("a second backup with nothing changed reads no table: the stored entry is reused, and restores to the same rows", async () => {
    const before = await scans();
    second = await backup();
    expect(await scans()).toBe(before);
    const [c1, c2] = [pgOf(first.manifest), pgOf(second.manifest)];
    expect(c2).toEqual(c1);
    // the instant is this capture's own (its snapshot sees exactly what the stored dump holds)
    expect(Date.parse(second.manifest.capture_instant.sources[0].snapshot_at)).toBeGreaterThan(Date.parse(first.manifest.capture_instant.sources[0].snapshot_at));
    const url = await restoreInto(second.snapshot_id, "second");
    expect(await digest(url)).toEqual(await digest(live.target));
    expect((await digest(url))[0].n).toBe(ROWS);
  });

  it("a changed row is dumped again: a new fingerprint, the tables read, and the restore holds the change", async () => {
    await sql(live.target, "UPDATE notes SET body = 'changed' WHERE id = 777");
    const before = await scans();
    const third = await backup();
    expect(await scans()).toBeGreaterThan(before);
    expect(pgOf(third.manifest).fingerprint).not.toBe(pgOf(second.manifest).fingerprint);
    const url = await restoreInto(third.snapshot_id, "third");
    expect((await sql(url, "SELECT body FROM notes WHERE id = 777"))[0].body).toBe("changed");
    expect(await digest(url)).toEqual(await digest(live.target));
  });

  it("a nextval alone (no transaction id, no WAL needed) changes the fingerprint: dumped again with the sequence's value", async () => {
    const last = await backup();
    expect(pgOf(last.manifest).fingerprint).toBe(pgOf((await backup()).manifest).fingerprint);
    await sql(live.target, "SELECT nextval('tickets'), nextval('tickets')");
    const after = await backup();
    expect(pgOf(after.manifest).fingerprint).not.toBe(pgOf(last.manifest).fingerprint);
    const url = await restoreInto(after.snapshot_id, "seq");
    expect((await sql(url, "SELECT last_value::int AS v FROM tickets"))[0].v).toBe(2);
  });
});

describe("backup --skip-if-unchanged with a postgres source", () => {
  it("writes no snapshot while the database is unchanged, and a new one after a write", async () => {
    const first = await a.run(["backup", "--skip-if-unchanged", "--json"], { AGENT_PG_URL: live.target });
    expect(first.code, first.stderr).toBe(0);
    const again = await a.run(["backup", "--skip-if-unchanged", "--json"], { AGENT_PG_URL: live.target });
    expect(again.code, again.stderr).toBe(0);
    expect(json(again)).toMatchObject({ status: "unchanged", snapshot_id: json(first).snapshot_id });
    await sql(live.target, "INSERT INTO notes (body) VALUES ('one more')");
    const changed = await a.run(["backup", "--skip-if-unchanged", "--json"], { AGENT_PG_URL: live.target });
    expect(changed.code, changed.stderr).toBe(0);
    expect(json(changed).status).toBe("committed");
    expect(json(changed).snapshot_id).not.toBe(json(first).snapshot_id);
  });
});
