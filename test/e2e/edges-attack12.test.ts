// Issue 32, the twelfth attack (docs/security-edges.md): fencing after copy, activate with records swapped in,
// and the PostgreSQL source against a live server. Each case failed on the build before its fix, through the
// real binary, real repositories copied with `copy`, and a real PostgreSQL server started on 127.0.0.1.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import pg from "pg";
import { cpSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, describeBackedUpAgent, makeAgent, secondHome, type TestAgent } from "../helpers.js";
import { patchConfig, server, sql, type Server } from "../sourcekit.js";

const EXIT = { failure: 1, verify: 13, locked: 11, policy: 14 };
const ACCEPT = ["--yes", "--accept-unresolved", "--reason", "attack12"];

describe("[E13] activate trusts a restore record only in the folder it was restored into", () => {
  const shared = describeBackedUpAgent();
  const t = shared.t;
  const restore = async (target: string, extra: string[] = []) => {
    const r = await shared.a.run(["restore", "latest", "--target", target, "--yes", "--json", ...extra]);
    expect([0, 3], r.stderr).toContain(r.code); // 3: the fixture's credentials are absent here
    return json(r).generation as number;
  };

  it("[E13] the newer restore's whole .agentbak moved into an older, superseded one is refused (13) naming both folders, never activated at the newer generation", async () => {
    expect(await restore(t("older"))).toBe(1);
    expect(await restore(t("newer"))).toBe(2);
    rmSync(join(t("older"), ".agentbak"), { recursive: true });
    cpSync(join(t("newer"), ".agentbak"), join(t("older"), ".agentbak"), { recursive: true });
    for (const args of [["activate", "--target", t("older"), ...ACCEPT], ["reconcile", "--target", t("older")]]) {
      const r = await shared.a.run(args);
      expect(r.code, r.stderr).toBe(EXIT.verify);
      expect(r.stderr).toContain(`${join(t("older"), ".agentbak/restore.json")} belongs to the restore into ${t("newer")}, not ${t("older")}`);
    }
    // the genuine one still activates
    const ok = await shared.a.run(["activate", "--target", t("newer"), ...ACCEPT]);
    expect(ok.code, ok.stderr).toBe(3); // activated, with the accepted operation named
    expect(ok.stderr).toContain("activated billing-agent at generation 2");
  });

  it("[E13] another agent's restore record moved in is refused (13), never 'activated other-agent' over this agent's files", async () => {
    const other = join(shared.a.dir, "other-agent.json");
    const c = JSON.parse(readFileSync(shared.a.config, "utf8"));
    c.agent.id = "other-agent";
    writeFileSync(other, JSON.stringify(c, null, 2));
    expect((await shared.a.run(["backup", "-c", other])).code).toBe(0);
    await restore(t("other"), ["-c", other]);
    await restore(t("mine"));
    rmSync(join(t("mine"), ".agentbak"), { recursive: true });
    cpSync(join(t("other"), ".agentbak"), join(t("mine"), ".agentbak"), { recursive: true });
    const r = await shared.a.run(["activate", "--target", t("mine"), ...ACCEPT]);
    expect(r.code, r.stderr).toBe(EXIT.verify);
    expect(r.stderr).toContain(`belongs to the restore into ${t("other")}, not ${t("mine")}`);
    expect(r.stderr).not.toContain("activated other-agent");
  });
});

describe("[E5] one generation issued twice by restores that could not reach each other's repository", () => {
  const shared = describeBackedUpAgent();
  const t = shared.t;

  it("[E5] after both are reachable again, neither holder is current: fence check 14 and activate 14 naming both; the next restore is above them", async () => {
    const b = t("repo-b");
    expect((await shared.a.run(["copy", "--from", shared.a.repo, "--to", b])).code).toBe(0);
    const fresh = (n: string) => secondHome(shared.a, n);
    // the copy away: a restore from the original names it (3) and issues 1
    renameSync(b, `${b}.away`);
    let r = await shared.a.run(["restore", "latest", "--target", t("s1"), "--yes", "--json"]);
    expect(r.code, r.stderr).toBe(3);
    expect(json(r).generation).toBe(1);
    // the original away, another host: a restore from the copy names it and issues 1 too
    renameSync(`${b}.away`, b);
    renameSync(shared.a.repo, `${shared.a.repo}.away`);
    const h2 = fresh("h2");
    r = await shared.a.run(["restore", "latest", "--repo", b, "--target", t("s2"), "--yes", "--json"], h2);
    expect(r.code, r.stderr).toBe(3);
    expect(json(r).generation).toBe(1);
    renameSync(`${shared.a.repo}.away`, shared.a.repo);
    // both reachable: each holder of generation 1 is fenced, from either repository and either host
    for (const [target, env, repo] of [["s1", {}, shared.a.repo], ["s2", h2, b], ["s1", fresh("h3"), b], ["s2", fresh("h4"), shared.a.repo]] as const) {
      const f = await shared.a.run(["fence", "check", "--repo", repo, "--target", t(target), "--generation", "1"], env);
      expect(f.code, f.stderr).toBe(EXIT.policy);
      expect(f.stderr).toMatch(/generation 1 was issued 2 times \(to .*s[12] from .*; to .*s[12] from .*\)/);
      expect(f.stderr).toContain("no holder of it is current");
    }
    const act = await shared.a.run(["activate", "--target", t("s1"), ...ACCEPT]);
    expect(act.code, act.stderr).toBe(EXIT.policy);
    expect(act.stderr).toContain("generation 1 was issued 2 times");
    // a restore issues one above both, and that one is current everywhere
    r = await shared.a.run(["restore", "latest", "--target", t("s3"), "--yes", "--json"]);
    expect([0, 3]).toContain(r.code);
    expect(json(r).generation).toBe(2);
    for (const repo of [shared.a.repo, b]) expect((await shared.a.run(["fence", "check", "--repo", repo, "--target", t("s3"), "--generation", "2"], fresh(`h5${repo.length}`))).code).toBe(0);
  });
});

describe("[E9] PostgreSQL against a live server: locks, names and a server gone", () => {
  let a: TestAgent;
  let live: Server;
  let env: Record<string, string>;
  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
    live = await server("postgres", a.tmp);
    env = { AGENT_PG_URL: live.target };
    await sql(live.target, `CREATE TABLE "nl\nline" (id serial PRIMARY KEY, v text); INSERT INTO "nl\nline" (v) VALUES ('a'), ('b');
      CREATE TABLE big (id int, pad text); INSERT INTO big SELECT g, repeat(md5(g::text), 8) FROM generate_series(1, 150000) g;`);
    patchConfig(a, (c) => (c.sources = [{ name: "conv", kind: "postgres", url: "env:AGENT_PG_URL", lockTimeoutSeconds: 1 }]));
  }, 180_000);
  afterAll(async () => {
    await live?.stop().catch(() => undefined);
    a?.cleanup();
  });
  const holding = async (statement: string, fn: () => Promise<void>) => {
    const c = new pg.Client({ connectionString: live.target });
    await c.connect();
    try {
      await c.query(`BEGIN; ${statement}`);
      await fn();
    } finally {
      await c.query("ROLLBACK").catch(() => undefined);
      await c.end();
    }
  };

  it("[E9] a sequence another session holds makes the backup fail after lockTimeoutSeconds naming it (11), not wait for ever under the agent lock", async () => {
    await holding(`ALTER SEQUENCE "nl\nline_id_seq" RENAME TO renamed_meanwhile`, async () => {
      const r = await a.run(["backup"], env, { timeout: 60_000 }); // waited until killed before
      expect(r.code, r.stderr).toBe(EXIT.locked);
      expect(r.stderr.trim()).toBe('agentbak: source conv: sequence "public"."nl\\x0aline_id_seq" is locked by another session: not granted within 1 s (lockTimeoutSeconds)');
    });
  });

  it("[E9] a held table whose name holds a newline is named whole on one line (11), the newline escaped; JSON keeps it exact", async () => {
    await holding(`LOCK TABLE "nl\nline" IN ACCESS EXCLUSIVE MODE`, async () => {
      const r = await a.run(["backup"], env, { timeout: 60_000 });
      expect(r.code, r.stderr).toBe(EXIT.locked);
      expect(r.stderr.trim()).toBe('agentbak: source conv: table "public"."nl\\x0aline" is locked by another session: not granted within 1 s (lockTimeoutSeconds)');
      const j = await a.run(["backup", "--json"], env, { timeout: 60_000 });
      expect(json(j).message).toBe('source conv: table "public"."nl\nline" is locked by another session: not granted within 1 s (lockTimeoutSeconds)');
    });
  });

  it("[E9] the server killed (SIGKILL) while pg_dump runs: one line with exit 1, no stack, nothing committed", async () => {
    const dataDir = (await sql(live.target, "SHOW data_directory"))[0].data_directory;
    const pid = Number(readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0]);
    const run = a.run(["backup"], env);
    let seen = false;
    for (let i = 0; i < 600 && !seen; i++) {
      seen = (await execa("pgrep", ["-f", `pg_dump.*${a.tmp}`], { reject: false })).stdout.trim() !== "";
      if (!seen) await new Promise((res) => setTimeout(res, 50));
    }
    expect(seen).toBe(true);
    process.kill(pid, "SIGKILL");
    const r = await run;
    expect(r.code, r.stderr).toBe(EXIT.failure);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/^agentbak: source conv: /);
    expect(r.stderr).not.toMatch(/^\s+at |node:internal|Unhandled|internal error/m);
    expect((await a.run(["snapshots", "--json"])).stdout.trim()).toBe("[]");
  });
});
