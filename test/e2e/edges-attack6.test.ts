// Issue 32, the sixth attack (agent side): cases the earlier attacks did not try, each through the real binary
// against a real agent: a PostgreSQL source whose state changed without moving its fingerprint (E9), a SQLite file
// or LanceDB data file changed in place with its size and mtime kept (E9), restore-request targets that name another folder than they
// spell (E6). See docs/security-edges.md, "Sixth attack (agent side)".
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFileSync } from "node:child_process";
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, statSync, symlinkSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { mcpStdio, tool } from "../agentapi-helpers.js";
import { json, backedUpAgent, makeAgent, run, type TestAgent } from "../helpers.js";
import { patchConfig, server, sql, type Server } from "../sourcekit.js";
import { manifestOf } from "../craft.js";

describe("[E9] a PostgreSQL source changed by setval(..., false) on an UNLOGGED sequence is not taken for unchanged", () => {
  let a: TestAgent;
  let live: Server;
  const backup = async (...args: string[]) => {
    const r = await a.run(["backup", "--json", ...args], { AGENT_PG_URL: live.target });
    expect(r.code, r.stderr).toBe(0);
    return json(r);
  };
  const pgOf = async (r: any) => manifestOf(await a.file(r.path)).components.find((c: any) => c.kind === "postgres");

  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
    live = await server("postgres", a.tmp);
    // over 512 KiB of dump, so that it is chunked and its fingerprint recorded (a reused entry needs one)
    await sql(live.target, `CREATE TABLE notes (id bigserial PRIMARY KEY, body text NOT NULL) WITH (autovacuum_enabled = false);
      INSERT INTO notes (body) SELECT md5(g::text) || md5((g * 7)::text) FROM generate_series(1, 20000) g;
      CREATE UNLOGGED SEQUENCE tickets; SELECT setval('tickets', 5, false);`);
    await sql(live.target, "VACUUM ANALYZE");
    patchConfig(a, (c) => (c.sources = [{ name: "conversations", kind: "postgres", url: "env:AGENT_PG_URL" }]));
  }, 180_000);
  afterAll(async () => {
    await live?.stop();
    a?.cleanup();
  });

  it("[E9] --skip-if-unchanged takes a snapshot, and a plain backup dumps the source again (the stored dump held the old value)", async () => {
    const first = await backup("--skip-if-unchanged");
    expect(first.status).toBe("committed");
    expect((await backup("--skip-if-unchanged")).status).toBe("unchanged"); // nothing changed: the check still works
    const before = (await sql(live.target, "SELECT pg_current_snapshot()::text AS s"))[0].s;
    await sql(live.target, "SELECT setval('tickets', 777, false)");
    // the attack's premise: no transaction id was taken, the snapshot is the one the fingerprint read
    expect((await sql(live.target, "SELECT pg_current_snapshot()::text AS s"))[0].s).toBe(before);
    const second = await backup("--skip-if-unchanged");
    expect(second.status).toBe("committed");
    expect(second.snapshot_id).not.toBe(first.snapshot_id);
    await sql(live.target, "SELECT setval('tickets', 778, false)");
    const third = await backup();
    const [p2, p3] = [await pgOf(second), await pgOf(third)];
    expect(p3.fingerprint).not.toBe(p2.fingerprint);
    expect(p3.sha256).not.toBe(p2.sha256); // dumped again: the new value is in it
  }, 180_000);
});

describe("[E9] a SQLite file changed in place, its size, header and mtime kept, is not taken for unchanged", () => {
  let a: TestAgent;
  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E9] bytes of a row rewritten with the old mtime put back: --skip-if-unchanged takes a snapshot holding them", async () => {
    const db = join(a.dir, "state/agent.sqlite");
    // one connection that checkpoints and closes: everything in the main file, no -wal left to move
    execFileSync("sqlite3", [db, "PRAGMA wal_checkpoint(TRUNCATE);"]);
    const first = json(await a.run(["backup", "--json", "--skip-if-unchanged"]));
    expect(first.status).toBe("committed");
    await new Promise((r) => setTimeout(r, 2100));
    expect(json(await a.run(["backup", "--json", "--skip-if-unchanged"])).status).toBe("unchanged");
    // the agent rewrites a value in place, same length, and puts the file's times back
    const st = statSync(db, { bigint: true });
    const ref = join(a.tmp, "times");
    writeFileSync(ref, "");
    execFileSync("touch", ["-r", db, ref]); // the times to the nanosecond
    const bytes = readFileSync(db);
    const at = bytes.indexOf("refund");
    expect(at).toBeGreaterThan(100); // not in the header: its change counter stays
    const fd = openSync(db, "r+");
    writeSync(fd, Buffer.from("REFUND"), 0, 6, at);
    closeSync(fd);
    execFileSync("touch", ["-r", ref, db]);
    expect(statSync(db, { bigint: true }).mtimeNs).toBe(st.mtimeNs);
    expect(statSync(db, { bigint: true }).size).toBe(st.size);
    const second = json(await a.run(["backup", "--json", "--skip-if-unchanged"]));
    expect(second.status).toBe("committed");
    expect(second.snapshot_id).not.toBe(first.snapshot_id);
    const target = join(a.tmp, "restored");
    const r = await a.run(["restore", second.snapshot_id, "--target", target, "--yes", "--identity", a.identity]);
    expect([0, 3], r.stderr).toContain(r.code);
    expect(readFileSync(join(target, "state/agent.sqlite")).includes("REFUND")).toBe(true);
  }, 180_000);
});

describe("[E6] a restore request's target is restored only where it says", () => {
  let a: TestAgent;
  let agent: Client;
  const ask = async (target: string) => tool(agent, "request_restore", { snapshot: "latest", reason: "attack6", target });
  beforeAll(async () => {
    a = await backedUpAgent();
    agent = await mcpStdio(a, ["--tier", "restore-request"]);
  }, 120_000);
  afterAll(async () => {
    await agent?.close();
    a?.cleanup();
  });

  it("[E6] a target with . or .. segments or // is refused at input (it reads as one folder and is another)", async () => {
    for (const target of [`${a.dir}/../../../etc/x`, `${a.dir}/./x`, `/${a.dir}/x`, `${a.tmp}/x/..`]) {
      const r = await ask(target);
      expect(r.isError, target).toBe(true);
      expect(r.text).toContain("a path without . or .. segments or // at target");
    }
    expect(json(await a.run(["requests", "--all", "--json"]))).toEqual([]);
  });

  it("[E6] a target reached through a symbolic link (/proc/self/cwd, or a link the agent made): approve --yes refuses (2) naming where it leads, restores nothing, issues no generation", async () => {
    const ops = join(a.tmp, "ops");
    mkdirSync(ops);
    const outside = join(a.tmp, "outside");
    mkdirSync(outside);
    symlinkSync(outside, join(a.dir, "link"));
    for (const [target, leads] of [
      ["/proc/self/cwd/restored-here", join(ops, "restored-here")],
      [join(a.dir, "link", "new"), join(outside, "new")],
    ]) {
      const r = await ask(target!);
      expect(r.isError, r.text).toBe(false);
      const id = JSON.parse(r.text).request_id;
      const ap = await run(["approve", id, "--yes", "--identity", a.identity, "-c", a.config], { cwd: ops, env: a.env });
      expect(ap.code, ap.stderr).toBe(2);
      expect(ap.stderr.trim()).toBe(`agentbak: restore request ${id} proposes ${target}, which leads to ${leads} through a symbolic link: pass --target with the folder to restore into`);
      expect(readdirSync(ops)).toEqual([]);
      expect(readdirSync(outside)).toEqual([]);
      // the operator may still restore there by naming the folder (the decision is theirs, and signed as named)
    }
    // no generation was issued by the refused attempts: the next restore is the first
    const r = await a.run(["restore", "latest", "--target", join(a.tmp, "first"), "--yes", "--identity", a.identity, "--json"]);
    expect([0, 3], r.stderr).toContain(r.code);
    expect(json(r).generation).toBe(1);
  });
});

describe("[E9] a LanceDB data file changed in place under the same version is read again, not reused", () => {
  let a: TestAgent;
  const lanceOf = async (r: any) => manifestOf(await a.file(r.path)).components.find((c: any) => c.kind === "lancedb");
  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
    const lancedb = await import("@lancedb/lancedb");
    const db = await lancedb.connect(join(a.dir, "memory/lance"));
    // an Arrow stream over 512 KiB: chunked, and its fingerprint recorded
    await db.createTable("memories", Array.from({ length: 3000 }, (_, i) => ({ id: i, text: `memory number ${i} `.repeat(8), vector: Array.from({ length: 16 }, (_, j) => ((i * j) % 7) / 7) })));
    db.close();
    patchConfig(a, (c) => (c.sources = [{ name: "mem", kind: "lancedb", path: "memory/lance" }]));
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E9] a byte of the table's data file flipped, its times put back: the next backup stores what the table now holds", async () => {
    const first = json(await a.run(["backup", "--json"]));
    await new Promise((r) => setTimeout(r, 2100));
    const again = json(await a.run(["backup", "--json"]));
    expect((await lanceOf(again)).sha256).toBe((await lanceOf(first)).sha256); // unchanged: reused, as before
    const data = join(a.dir, "memory/lance/memories.lance/data");
    const file = join(data, readdirSync(data).find((f) => f.endsWith(".lance"))!);
    const ref = join(a.tmp, "times");
    writeFileSync(ref, "");
    execFileSync("touch", ["-r", file, ref]);
    const fd = openSync(file, "r+");
    const b = Buffer.alloc(1);
    readSync(fd, b, 0, 1, 1000);
    writeSync(fd, Buffer.from([b[0]! ^ 1]), 0, 1, 1000);
    closeSync(fd);
    execFileSync("touch", ["-r", ref, file]);
    await new Promise((r) => setTimeout(r, 2100));
    const r = await a.run(["backup", "--json"]);
    // read again and stored as it is now (LanceDB reads the file, the flipped byte with it), never
    // the old stream
    expect(r.code, r.stderr).toBe(0);
    expect((await lanceOf(json(r))).sha256).not.toBe((await lanceOf(first)).sha256);
  }, 180_000);
});
