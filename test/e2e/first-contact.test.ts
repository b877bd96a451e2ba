// First contact: `init` creates the repository a hand-written config (or --repo)
// names, local or S3, idempotently; interactive init offers the databases and
// workspaces it finds; a snapshot that captures nothing warns; a new repository
// for an agent this host already backed up does not restart its sequence at 1.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, makeBucket, ROOT, run, storeAt, type TestAgent } from "../helpers.js";
import { plain, Term } from "../pty.js";
// @ts-expect-error plain JS fixture
import { generateAgent } from "../../fixtures/agent/generate.js";

let a: TestAgent;
beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
}, 180_000);
afterAll(() => a?.cleanup(), 60_000);

describe("init creates the repository a config names", () => {
  it("for a hand-written config: backup says run init, init creates it, a second init changes nothing", async () => {
    const dir = join(a.tmp, "handwritten");
    mkdirSync(dir);
    const cfg = JSON.parse(readFileSync(a.config, "utf8"));
    cfg.repository = "./repo with space";
    cfg.databases = [{ name: "state", path: join(a.dir, "state/agent.sqlite") }];
    cfg.files = [];
    delete cfg.workspace;
    const cfgPath = join(dir, "agentbak.json");
    writeFileSync(cfgPath, JSON.stringify(cfg, null, 2));
    const before = readFileSync(cfgPath, "utf8");

    const early = await a.run(["backup", "-c", cfgPath]);
    expect(early.code).toBe(10);
    expect(early.stderr).toMatch(/agentbak init/);

    const first = await a.run(["init", "-c", cfgPath, "--json"]);
    expect(first.code, first.stderr).toBe(0);
    expect(json(first)).toMatchObject({ config_created: false, repository_created: true, repository: join(dir, "repo with space") });
    expect(existsSync(join(dir, "repo with space", "agentbak-repository.json"))).toBe(true);

    const again = await a.run(["init", "-c", cfgPath, "--json"]);
    expect(again.code).toBe(0);
    expect(json(again).repository_created).toBe(false);
    expect(readFileSync(cfgPath, "utf8")).toBe(before);
    expect((await a.run(["backup", "-c", cfgPath])).code).toBe(0);
  });

  it("reads AGENTBAK_CONFIG as every other command does (flags beat it): the README's walk sets it and runs plain init", async () => {
    const dir = join(a.tmp, "byenv");
    mkdirSync(dir);
    const cfg = JSON.parse(readFileSync(a.config, "utf8"));
    cfg.repository = "./repo";
    cfg.databases = [{ name: "state", path: join(a.dir, "state/agent.sqlite") }];
    cfg.files = [];
    delete cfg.workspace;
    const cfgPath = join(dir, "agentbak.json");
    writeFileSync(cfgPath, JSON.stringify(cfg, null, 2));
    const elsewhere = join(a.tmp, "elsewhere");
    mkdirSync(elsewhere);
    const env = { ...a.env, AGENTBAK_CONFIG: cfgPath };
    const r = await run(["init", "--json"], { cwd: elsewhere, env });
    expect(r.code, r.stderr).toBe(0);
    expect(json(r)).toMatchObject({ config: cfgPath, config_created: false, repository_created: true, repository: join(dir, "repo") });
    expect(existsSync(join(elsewhere, "agentbak.json"))).toBe(false);
    expect((await run(["backup"], { cwd: elsewhere, env })).code).toBe(0);
    // --dir is a flag: it beats the environment and writes its own config there
    const own = await run(["init", "--dir", elsewhere, "--agent-id", "other-agent", "--tenant", "acme", "--yes", "--json"], { cwd: elsewhere, env });
    expect(own.code, own.stderr).toBe(0);
    expect(json(own)).toMatchObject({ config: join(elsewhere, "agentbak.json"), config_created: true });
  });

  const s3 = process.env.AGENTBAK_TEST_S3_ENDPOINT;
  it.skipIf(!s3)("init --repo s3://bucket/prefix creates it in the bucket, not a local folder called s3: (skipped without AGENTBAK_TEST_S3_ENDPOINT)", async () => {
    const bucket = `fc-${Date.now().toString(36)}`;
    await makeBucket(bucket);
    const env = { AGENTBAK_S3_ENDPOINT: s3!, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true" };
    const r = await a.run(["init", "--repo", `s3://${bucket}/fleet`, "--json"], env);
    expect(r.code, r.stderr).toBe(0);
    expect(json(r).repository_created).toBe(true);
    expect(existsSync(join(a.dir, "s3:"))).toBe(false);
    expect(await (await storeAt(`s3://${bucket}/fleet`)).get("agentbak-repository.json")).toBeTruthy();
    expect(json(await a.run(["init", "--repo", `s3://${bucket}/fleet`, "--json"], env)).repository_created).toBe(false);
    expect((await a.run(["backup", "--repo", `s3://${bucket}/fleet`], env)).code).toBe(0);
  });
});

describe("interactive init", () => {
  it("offers the SQLite files and git repositories under the folder, and the config it writes backs them up", async () => {
    const dir = join(a.tmp, "fresh agent");
    mkdirSync(dir);
    generateAgent(dir, { recipient: a.recipient, sizeMb: 1 });
    rmSync(join(dir, "agentbak.json"));
    // a second database, and a file that only looks like one by name
    const notes = new Database(join(dir, "memory", "notes.db"));
    notes.exec("CREATE TABLE n(x); INSERT INTO n VALUES (1)");
    notes.close();
    writeFileSync(join(dir, "memory", "fake.sqlite"), "not a database");
    const home = join(a.tmp, "fresh-home");

    const t = Term.agentbak(["init"], { cwd: dir, env: { AGENTBAK_HOME: home } });
    await t.waitFor(/Agent id/);
    t.write("fresh-agent\r");
    await t.waitFor(/Tenant/);
    t.write("\r");
    await t.waitFor(/SQLite databases to back up/);
    const offered = plain(t.output);
    expect(offered).toMatch(/memory\/notes\.db/);
    expect(offered).toMatch(/state\/agent\.sqlite/);
    expect(offered).not.toMatch(/fake\.sqlite|agent\.sqlite-wal/);
    t.write("\r"); // both are ticked
    await t.waitFor(/Git workspace of the agent/);
    expect(plain(t.output)).toMatch(/workspace/);
    t.write("\r"); // the first repository found
    const e = await t.exit();
    expect(e.code, plain(t.output)).toBe(0);

    const cfg = JSON.parse(readFileSync(join(dir, "agentbak.json"), "utf8"));
    expect(cfg.agent).toEqual({ id: "fresh-agent", tenant: "default" });
    expect(cfg.databases).toEqual([
      { name: "notes", path: "memory/notes.db" },
      { name: "agent", path: "state/agent.sqlite" },
    ]);
    expect(cfg.workspace).toEqual({ path: "workspace", uncommitted: "include" });
    const b = await run(["backup", "--json"], { cwd: dir, env: { AGENTBAK_HOME: home } });
    expect(b.code, b.stderr).toBe(0);
    expect(json(b).warnings).toEqual([]);
    const v = json(await run(["verify", "latest", "--json"], { cwd: dir, env: { AGENTBAK_HOME: home } }));
    expect(v.ok).toBe(true);
  });

  it("without a TTY it names the flags instead of prompting", async () => {
    const dir = join(a.tmp, "notty");
    mkdirSync(dir);
    new Database(join(dir, "state.sqlite")).exec("CREATE TABLE t(x)");
    const r = await run(["init", "--agent-id", "x", "--tenant", "t"], { cwd: dir, env: { AGENTBAK_HOME: join(a.tmp, "notty-home") } });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--database/);
    expect(existsSync(join(dir, "agentbak.json"))).toBe(false);
  });
});

describe("a database named before the agent created it", () => {
  it("init says it does not exist yet (exit 0); backup exits 10 naming it once", async () => {
    const dir = join(a.tmp, "not-yet");
    mkdirSync(dir);
    const env = { AGENTBAK_HOME: join(a.tmp, "not-yet-home") };
    const i = await run(["init", "--agent-id", "later", "--tenant", "acme", "--database", "state=state/agent.sqlite", "--yes"], { cwd: dir, env });
    expect(i.code, i.stderr).toBe(0);
    expect(i.stdout + i.stderr).toMatch(/database: {3}state = state\/agent\.sqlite \(does not exist yet: a backup fails with 10 until it does\)/);
    const b = await run(["backup"], { cwd: dir, env });
    expect(b.code).toBe(10);
    expect(b.stderr.trim()).toMatch(/^agentbak: database state: \S+\/not-yet\/state\/agent\.sqlite: does not exist \(ENOENT\)$/);
    // once the agent made it, the same config backs it up
    mkdirSync(join(dir, "state"));
    new Database(join(dir, "state", "agent.sqlite")).exec("CREATE TABLE t(x); INSERT INTO t VALUES (1)");
    expect((await run(["backup"], { cwd: dir, env })).code).toBe(0);
  });
});

describe("scheduled drills of an agent of its own", () => {
  it("without --spec the drill line runs the restore checks alone and passes; the reference agent's invariants would fail on its tables", async () => {
    const dir = join(a.tmp, "own-agent");
    mkdirSync(dir);
    const db = new Database(join(dir, "notes.sqlite"));
    db.exec("PRAGMA journal_mode = WAL; CREATE TABLE notes(id INTEGER PRIMARY KEY, text TEXT); INSERT INTO notes(text) VALUES ('a'), ('b'), ('c')");
    db.close();
    const env = { AGENTBAK_HOME: join(a.tmp, "own-home") };
    expect((await run(["init", "--agent-id", "notes-agent", "--tenant", "acme", "--database", "notes=notes.sqlite", "--yes"], { cwd: dir, env })).code).toBe(0);
    expect((await run(["backup"], { cwd: dir, env })).code).toBe(0);
    const s = json(await run(["schedule", "--every", "1h", "--drill-every", "1d", "--json"], { cwd: dir, env }));
    const line = s.crontab.find((l: string) => / drill random /.test(l)) as string;
    expect(s.crontab[s.crontab.indexOf(line) - 2]).toMatch(/restore checks alone .*--spec/);
    // no --spec: drill's built-in checks (drills/integrity-only.json)
    expect(line).not.toMatch(/--spec/);
    const d = await run(["drill", "latest", "--json"], { cwd: dir, env });
    expect(d.code, d.stderr).toBe(0);
    const r = json(d);
    expect(r.ok).toBe(true);
    expect(JSON.stringify(r)).toMatch(/integrity/);
    // the old default: the reference agent's invariants name tables this agent does not have
    const ref = await run(["drill", "latest", "--spec", join(ROOT, "drills", "checks-only.json")], { cwd: dir, env });
    expect(ref.code).toBe(15);
    expect(ref.stdout + ref.stderr).toMatch(/invariant:budget_conserved: error: no database named state/);
  });
});

describe("a config that names no state", () => {
  it("backup refuses (2) and writes no snapshot: an empty one would become latest and restore nothing", async () => {
    const dir = join(a.tmp, "empty");
    mkdirSync(dir);
    const home = join(a.tmp, "empty-home");
    const i = await run(["init", "--agent-id", "empty", "--tenant", "acme", "--yes"], { cwd: dir, env: { AGENTBAK_HOME: home } });
    expect(i.code).toBe(0);
    expect(i.stderr).toMatch(/until then a backup refuses: there is nothing to back up/);
    const r = await run(["backup", "--json"], { cwd: dir, env: { AGENTBAK_HOME: home } });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/^agentbak: nothing to back up: .*agentbak\.json names no database, no state source, no file that exists and no workspace; no snapshot was written$/);
    const list = await run(["snapshots", "--json"], { cwd: dir, env: { AGENTBAK_HOME: home } });
    expect(json(list)).toEqual([]);
    expect(readdirSync(join(dir, "backups", "tmp"))).toEqual([]);
  });
});

describe("sequence across repositories", () => {
  it("a new repository continues above this host's watermark (backups and restores), so restoring from it is not a rollback", async () => {
    const t = await makeAgent({ sizeMb: 1 });
    try {
      expect(json(await t.run(["backup", "--json"])).sequence).toBe(1);
      expect(json(await t.run(["backup", "--json"])).sequence).toBe(2);

      const second = join(t.tmp, "second-repo");
      expect((await t.run(["init", "--repo", second])).code).toBe(0);
      const b = await t.run(["backup", "--repo", second, "--json"]);
      expect(b.code, b.stderr).toBe(0);
      expect(json(b).sequence).toBe(3);

      // a restore here raises the watermark too: restore sequence 3, then a third repository starts above it
      const restored = await t.run(["restore", "latest", "--repo", second, "--target", join(t.tmp, "restored"), "--yes"], { OPENAI_API_KEY: "x" });
      expect([0, 3], restored.stderr).toContain(restored.code); // 3: a credential file is absent here
      const third = join(t.tmp, "third-repo");
      expect((await t.run(["init", "--repo", third])).code).toBe(0);
      const c = json(await t.run(["backup", "--repo", third, "--json"]));
      expect(c.sequence).toBe(4);
      const dry = await t.run(["restore", "latest", "--repo", third, "--target", join(t.tmp, "restored-2"), "--dry-run", "--json"]);
      expect(dry.code, dry.stderr).toBe(json(dry).warnings.length ? 3 : 0); // not 14: no rollback refusal
      expect(json(dry).plan.policy.refusals).toEqual([]);
    } finally {
      t.cleanup();
    }
  });
});
