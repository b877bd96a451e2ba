// Issue 11 through the real binary: secrets never enter a bundle, and every bad
// input gets a clear one-line error with its documented exit code, losing
// nothing. Test names carry the THREATS.md case ([T<n>]) or the section they
// add ([S] secrets, [I] bad input) for `npm run threats`.
import { afterAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import Database from "better-sqlite3";
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { heldLeases, json, makeAgent, run, SNAPS, type RunResult, type TestAgent } from "../helpers.js";
import { ageEncrypt, craft, makeTar, manifestOf, sha } from "../craft.js";
import { compress } from "zstd-napi";

const agents: TestAgent[] = [];
afterAll(() => agents.forEach((t) => t.cleanup()));
async function agent(sizeMb = 1): Promise<TestAgent> {
  const t = await makeAgent({ sizeMb });
  agents.push(t);
  return t;
}

const OPENAI = "sk-proj-" + "Q7".repeat(20);
const AWS = "AKIA" + "Z".repeat(16);
const GITHUB = "ghp_" + "b".repeat(36);
const SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----\n";

const config = (t: TestAgent) => JSON.parse(readFileSync(t.config, "utf8"));
const setConfig = (t: TestAgent, patch: (c: any) => void) => {
  const c = config(t);
  patch(c);
  writeFileSync(t.config, JSON.stringify(c, null, 2));
};
const gitIn = (cwd: string, ...args: string[]) =>
  execa("git", ["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "protocol.file.allow=always", ...args], { cwd });
const bundles = async (t: TestAgent) => ((await (await t.store()).list(`${SNAPS}/`)) as string[]).filter((k) => k.endsWith(".agentbak"));

/** A clear refusal: the code, one line naming what was wrong, no stack, no internal error. */
function refusedClearly(r: RunResult, code: number, re: RegExp): void {
  expect(r.code, r.stderr).toBe(code);
  expect(r.stderr).toMatch(re);
  expect(r.stderr).not.toMatch(/internal error|\n\s+at |triggerUncaughtException/);
  expect(r.stderr.trim().split("\n")).toHaveLength(1);
}

/** Everything a bundle's payload holds, unpacked with stock tools into a fresh folder. */
async function unpack(t: TestAgent, bundle: string): Promise<string> {
  const x = join(t.tmp, `x-${Math.random().toString(16).slice(2)}`);
  mkdirSync(x);
  await execa("sh", ["-c", `tar xOf '${await t.file(bundle)}' payload.age | age -d -i '${t.identity}' | zstd -d | tar x`], { cwd: x });
  return x;
}

/** Every byte of every file under `dir`, as latin1 text. */
function allBytes(dir: string): string {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => readFileSync(join(e.parentPath, e.name)).toString("latin1"))
    .join("\n");
}

describe("[S] secrets never enter a bundle", () => {
  it("[S] a key in workspace/.env is left out by name and recorded; a key in another workspace file refuses (14) naming file and line, never the value", async () => {
    const t = await agent();
    writeFileSync(join(t.dir, "workspace/.env"), `OPENAI_API_KEY=${OPENAI}\n`);
    writeFileSync(join(t.dir, "workspace/src/notes.md"), `# notes\naws ${AWS}\n`);
    const r = await t.run(["backup"]);
    refusedClearly(r, 14, /possible secret \(AWS access key id\) in workspace: src\/notes\.md \(uncommitted\) line 2/);
    expect(r.stderr).not.toContain(AWS);
    expect(r.stderr).not.toContain(".env"); // left out, so not a finding
    expect(await bundles(t)).toEqual([]);
    rmSync(join(t.dir, "workspace/src/notes.md"));
    const ok = await t.run(["backup", "--json"]);
    expect(ok.code, ok.stderr).toBe(0);
    const rec = json(ok);
    expect(rec.not_captured).toEqual([{ path: "workspace/.env", reason: "exclude", detail: 'secretScan.exclude ".env"' }]);
    expect(manifestOf(await t.file(rec.path)).not_captured).toEqual(rec.not_captured);
    const x = await unpack(t, rec.path);
    expect(allBytes(x)).not.toContain(OPENAI);
    expect(readFileSync(join(x, "workspace/changes.patch"), "utf8")).toContain("draft-reply.txt"); // the rest of the work is there
  });

  it("[S] an OpenSSH private key in a files entry refuses; warn backs up with exit 3; a BLOB column holding a key refuses", async () => {
    const t = await agent();
    writeFileSync(join(t.dir, "memory/keys.json"), JSON.stringify({ deploy: SSH_KEY }, null, 1).replace(/\\n/g, "\n"));
    const r = await t.run(["backup"]);
    refusedClearly(r, 14, /possible secret \(private key block\) in files: memory\/keys\.json line 2/);
    setConfig(t, (c) => (c.secretScan = { files: "warn" }));
    const w = await t.run(["backup", "--json"]);
    expect(w.code, w.stderr).toBe(3);
    expect(json(w).warnings).toEqual(["possible secret (private key block) in files: memory/keys.json line 2"]);
    rmSync(join(t.dir, "memory/keys.json"));
    // BLOBs: the page scan and the row scan both read them now
    const db = new Database(join(t.dir, "state/agent.sqlite"));
    const id = db.prepare("INSERT INTO memories (kind, text, embedding, created_at) VALUES ('fact', 'x', ?, 'now')").run(Buffer.concat([Buffer.from([0, 1, 2]), Buffer.from(`key=${AWS};`), Buffer.from([255])])).lastInsertRowid;
    db.close();
    const b = await t.run(["backup"]);
    refusedClearly(b, 14, new RegExp(`possible secret \\(AWS access key id\\) in database state: memories\\.embedding rowid ${id}`));
    expect(b.stderr).not.toContain(AWS);
  });

  it("[S] a credential's file is never captured: left out of the workspace and of files, recorded with its reference", async () => {
    const t = await agent();
    writeFileSync(join(t.dir, "workspace/smtp-password.txt"), "hunter2-smtp-value\n");
    writeFileSync(join(t.dir, "memory/api-token.json"), '"hunter2-api-value"\n');
    setConfig(t, (c) => (c.credentials = [{ name: "mail", ref: "file:workspace/smtp-password.txt" }, { name: "api", ref: "file:memory/api-token.json" }]));
    const r = await t.run(["backup", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const rec = json(r);
    const expected = [
      { path: "memory/api-token.json", reason: "credential", detail: "api (file:memory/api-token.json)" },
      { path: "workspace/smtp-password.txt", reason: "credential", detail: "mail (file:workspace/smtp-password.txt)" },
    ];
    expect(rec.not_captured).toEqual(expected);
    const m = manifestOf(await t.file(rec.path));
    expect(m.not_captured).toEqual(expected);
    expect(m.credentials).toEqual([{ name: "mail", ref: "file:workspace/smtp-password.txt" }, { name: "api", ref: "file:memory/api-token.json" }]);
    expect(m.components.map((c: any) => c.path)).not.toContain("files/memory/api-token.json");
    expect(allBytes(await unpack(t, rec.path))).not.toMatch(/hunter2/);
    // the restore plan says what must be provided where the agent runs
    expect(json(await t.run(["restore", "latest", "--target", join(t.tmp, "plan"), "--dry-run", "--json"])).plan.not_captured).toEqual(expected);
    // committed, the file can not be left out of the git bundle: refused
    await gitIn(join(t.dir, "workspace"), "add", "smtp-password.txt");
    await gitIn(join(t.dir, "workspace"), "commit", "-qm", "oops");
    refusedClearly(await t.run(["backup"]), 14, /workspace: smtp-password\.txt \(committed\), the file of credential mail \(file:workspace\/smtp-password\.txt\)/);
  });

  it("[S] committed files are scanned: a token in the captured commit's tree refuses, naming file and line", async () => {
    const t = await agent();
    writeFileSync(join(t.dir, "workspace/src/config.py"), `# settings\n\nTOKEN = "${GITHUB}"\n`);
    await gitIn(join(t.dir, "workspace"), "add", "src/config.py");
    await gitIn(join(t.dir, "workspace"), "commit", "-qm", "config");
    const r = await t.run(["backup"]);
    refusedClearly(r, 14, /possible secret \(GitHub token\) in workspace: src\/config\.py \(committed\) line 3/);
    expect(r.stderr).not.toContain(GITHUB);
  });

  it("[S] the exclude list is configurable: with no excluded names, a key in .env is found by its content", async () => {
    const t = await agent();
    writeFileSync(join(t.dir, "workspace/.env"), `KEY=${OPENAI}\n`);
    setConfig(t, (c) => (c.secretScan = { exclude: [] }));
    refusedClearly(await t.run(["backup"]), 14, /possible secret \(OpenAI API key\) in workspace: \.env \(uncommitted\) line 1/);
    setConfig(t, (c) => (c.secretScan = { exclude: ["*.env", ".env"], workspace: "refuse" }));
    expect((await t.run(["backup"])).code).toBe(0);
  });
});

describe("[I] a config that could never restore is refused at load (2), naming what was wrong", () => {
  let t: TestAgent;
  const cases: [string, (c: any) => void, RegExp][] = [
    ["two databases with one name", (c) => c.databases.push({ name: "state", path: "state/other.sqlite" }), /databases\.1\.name: database name "state" is used twice/],
    ["a files entry inside the workspace", (c) => c.files.push("workspace/src/*.md"), /files\.1: "workspace\/src\/\*\.md" is inside the workspace \(workspace\)/],
    ["a database inside the workspace", (c) => c.databases.push({ name: "scratch", path: "workspace/scratch.sqlite" }), /databases\.1\.path: "workspace\/scratch\.sqlite" is inside the workspace/],
    ["an agent id with ../", (c) => (c.agent.id = "../../etc"), /agent\.id: lowercase letters, digits/],
    ["a tenant with ../", (c) => (c.agent.tenant = ".."), /agent\.tenant: lowercase letters, digits/],
    ["a files entry naming a database's sidecar", (c) => c.files.push("state/agent.sqlite-wal"), /files: state\/agent\.sqlite-wal names a SQLite sidecar of a configured database/],
  ];
  it.each(cases)("[I] %s", async (_n, patch, re) => {
    t ??= await agent();
    const p = join(t.dir, `bad-${Math.random().toString(16).slice(2)}.json`);
    const c = config(t);
    patch(c);
    writeFileSync(p, JSON.stringify(c));
    writeFileSync(join(t.dir, "state/agent.sqlite-wal"), ""); // present, as under a live agent in WAL mode
    const before = await bundles(t);
    const r = await t.run(["backup", "-c", p]);
    refusedClearly(r, 2, re);
    expect(await bundles(t)).toEqual(before);
  });

  it("[I] a files symlink whose real path leaves the config folder is refused (2), through a linked file or folder", async () => {
    const t2 = await agent();
    const outside = join(t2.tmp, "outside");
    mkdirSync(outside);
    writeFileSync(join(outside, "secret.json"), '{"not": "yours"}');
    symlinkSync(join(outside, "secret.json"), join(t2.dir, "memory/linked.json"));
    refusedClearly(await t2.run(["backup"]), 2, new RegExp(`files: memory/linked\\.json is a symbolic link to ${outside}/secret\\.json, outside the config folder`));
    rmSync(join(t2.dir, "memory/linked.json"));
    symlinkSync(outside, join(t2.dir, "linked-dir"));
    setConfig(t2, (c) => c.files.push("linked-dir/secret.json"));
    refusedClearly(await t2.run(["backup"]), 2, /files: linked-dir\/secret\.json is a symbolic link to .*outside the config folder/);
    expect(await bundles(t2)).toEqual([]);
  });

  it("[T22] a files glob never takes a configured database, its sidecars, the repository or .git; the restored database is the signed one", async () => {
    const t2 = await agent();
    setConfig(t2, (c) => c.files.push("state/*", "backups/**", "**/.git/**"));
    writeFileSync(join(t2.dir, "state/notes.txt"), "kept\n");
    // a live agent: the database in WAL mode with frames not yet checkpointed, so -wal and -shm are there
    const live = new Database(join(t2.dir, "state/agent.sqlite"));
    live.pragma("wal_autocheckpoint = 0");
    live.prepare("INSERT OR REPLACE INTO agent_state VALUES ('live', 'yes')").run();
    expect(existsSync(join(t2.dir, "state/agent.sqlite-wal"))).toBe(true);
    const r = await t2.run(["backup", "--json"]);
    live.close();
    expect(r.code, r.stderr).toBe(0);
    const m = manifestOf(await t2.file(json(r).path));
    const paths = m.components.map((c: any) => c.path);
    expect(paths.filter((p: string) => p.startsWith("files/state/"))).toEqual(["files/state/notes.txt"]);
    expect(paths.filter((p: string) => /backups|\.git\//.test(p))).toEqual([]);
    const target = join(t2.tmp, "restored");
    const res = await t2.run(["restore", "latest", "--target", target, "--yes"]);
    expect([0, 3], res.stderr).toContain(res.code);
    expect(sha(readFileSync(join(target, "state/agent.sqlite")))).toBe(m.components.find((c: any) => c.kind === "sqlite").sha256);
    expect(readdirSync(join(target, "state")).sort()).toEqual(["agent.sqlite", "notes.txt"]);
  });

  it("[I] a files glob never takes agentbak's own key folder (AGENTBAK_HOME inside the config folder), even with the secret scan off", async () => {
    const t2 = await agent();
    const keys = join(t2.dir, "keys-home");
    await execa("cp", ["-a", t2.home, keys]);
    setConfig(t2, (c) => {
      c.files = ["**"];
      c.secretScan = { databases: "off", workspace: "off", files: "off" };
    });
    const r = await t2.run(["backup", "--json"], { AGENTBAK_HOME: keys });
    expect(r.code, r.stderr).toBe(0);
    const paths = manifestOf(await t2.file(json(r).path)).components.map((c: any) => c.path);
    expect(paths).toContain("files/agentbak.json");
    expect(paths.filter((p: string) => p.includes("keys-home"))).toEqual([]);
    setConfig(t2, (c) => (c.files = ["keys-home/age-identity.txt"]));
    refusedClearly(await t2.run(["backup"], { AGENTBAK_HOME: keys }), 2, /files: keys-home\/age-identity.txt names agentbak's key folder \(AGENTBAK_HOME\)/);
  });
});

describe("[I] workspace: nested repositories, submodules, the repository inside it", () => {
  it("[I] an untracked clone and a changed submodule are captured as files (no EISDIR); restore rebuilds them; their history is recorded as not captured", async () => {
    const t = await agent();
    const ws = join(t.dir, "workspace");
    const lib = join(t.tmp, "lib");
    mkdirSync(lib);
    await gitIn(lib, "init", "-q", "-b", "main");
    writeFileSync(join(lib, "lib.txt"), "library\n");
    await gitIn(lib, "add", ".");
    await gitIn(lib, "commit", "-qm", "lib");
    await gitIn(ws, "submodule", "add", "-q", lib, "vendor/lib");
    await gitIn(ws, "commit", "-qm", "submodule");
    writeFileSync(join(ws, "vendor/lib/lib.txt"), "library, patched by the agent\n");
    writeFileSync(join(ws, "vendor/lib/new.txt"), "new in the submodule\n");
    await gitIn(ws, "clone", "-q", lib, "clones/lib");
    writeFileSync(join(ws, "clones/lib/work.txt"), "agent work in a clone\n");
    const r = await t.run(["backup", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const rec = json(r);
    expect(rec.not_captured.filter((x: any) => x.reason === "nested-git").map((x: any) => x.path).sort()).toEqual(["workspace/clones/lib", "workspace/vendor/lib"]);
    const target = join(t.tmp, "restored");
    const res = await t.run(["restore", "latest", "--target", target, "--yes", "--json"]);
    expect([0, 3], res.stderr).toContain(res.code);
    expect(json(res).checks.find((c: any) => c.name === "workspace").ok).toBe(true);
    expect(readFileSync(join(target, "workspace/vendor/lib/lib.txt"), "utf8")).toBe("library, patched by the agent\n");
    expect(readFileSync(join(target, "workspace/vendor/lib/new.txt"), "utf8")).toBe("new in the submodule\n");
    expect(readFileSync(join(target, "workspace/clones/lib/work.txt"), "utf8")).toBe("agent work in a clone\n");
    expect(readFileSync(join(target, "workspace/clones/lib/lib.txt"), "utf8")).toBe("library\n");
    expect(existsSync(join(target, "workspace/clones/lib/.git"))).toBe(false);
  });

  it("[I] a repository inside the workspace is left out (never read into its own bundle)", async () => {
    const t = await agent();
    setConfig(t, (c) => (c.repository = "workspace/backups"));
    expect((await t.run(["init"])).code).toBe(0);
    const first = await t.run(["backup", "--json"]);
    expect(first.code, first.stderr).toBe(0);
    const r = await t.run(["backup", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const rec = json(r);
    expect(rec.not_captured).toEqual([{ path: "workspace/backups", reason: "repository", detail: "the backup repository" }]);
    expect(readFileSync(join(await unpack(t, rec.path), "workspace/changes.patch"), "utf8")).not.toContain("backups/");
    const target = join(t.tmp, "restored");
    const res = await t.run(["restore", "latest", "--target", target, "--yes"]);
    expect([0, 3], res.stderr).toContain(res.code);
    expect(existsSync(join(target, "workspace/backups"))).toBe(false);
  });
});

describe("[I] SQLite and workspace sources: clear errors, never an internal error", () => {
  it("[I] a rollback-journal database held under BEGIN EXCLUSIVE: 11 naming the database; --wait outlasting the lock succeeds", async () => {
    const t = await agent();
    const dbFile = join(t.dir, "state/agent.sqlite");
    const db = new Database(dbFile);
    db.pragma("journal_mode = DELETE");
    db.close();
    // a real writer in another process, holding the lock for 10 s (well beyond the 2 s waited, even on a loaded machine)
    const hold = (ms: number) =>
      execa("node", ["-e", `const D=require("better-sqlite3");const d=new D(${JSON.stringify(dbFile)});d.exec("BEGIN EXCLUSIVE");d.prepare("INSERT OR REPLACE INTO agent_state VALUES ('held','1')").run();console.log("held");setTimeout(()=>{d.exec("COMMIT");d.close()},${ms})`], { cwd: join(import.meta.dirname, "..", "..") });
    let writer = hold(10_000);
    await new Promise<void>((res) => writer.stdout!.once("data", () => res()));
    const t0 = Date.now();
    const r = await t.run(["backup", "--wait", "2s"]);
    refusedClearly(r, 11, new RegExp(`database state \\(${dbFile.replace(/[.]/g, "\\.")}\\) is locked by another process .*waited 2s\\); pass --wait to wait longer`));
    expect(Date.now() - t0).toBeLessThan(9000);
    await writer;
    writer = hold(3000);
    await new Promise<void>((res) => writer.stdout!.once("data", () => res()));
    const w = await t.run(["backup", "--wait", "20s", "--json"]);
    expect(w.code, w.stderr).toBe(0);
    await writer;
    expect(t.leftovers()).toEqual([]);
  });

  it("[I] a database path that is a folder: 2 naming it", async () => {
    const t = await agent();
    mkdirSync(join(t.dir, "state/folder.sqlite"));
    setConfig(t, (c) => (c.databases[0].path = "state/folder.sqlite"));
    refusedClearly(await t.run(["backup"]), 2, /database state: .*state\/folder\.sqlite is a folder, not an SQLite database file/);
    expect(t.leftovers()).toEqual([]);
  });

  it("[I] a live schema using load_extension in a CHECK: 13 naming the database, and nothing loads", async () => {
    const t = await agent();
    const marker = join(t.tmp, "loaded");
    await execa("sqlite3", [join(t.dir, "state/agent.sqlite"), `PRAGMA journal_mode=DELETE; CREATE TABLE evil(x CHECK (load_extension('${marker}') IS NULL));`]);
    refusedClearly(await t.run(["backup"]), 13, /database state \(.*state\/agent\.sqlite\): malformed database schema \(evil\) - unsafe use of load_extension\(\)/);
    expect(existsSync(marker)).toBe(false);
  });

  it("[I] a missing workspace folder: 10 naming it; a folder that is no git repository: 2", async () => {
    const t = await agent();
    setConfig(t, (c) => (c.workspace.path = "no-such-workspace"));
    refusedClearly(await t.run(["backup"]), 10, /workspace .*\/no-such-workspace not found/);
    mkdirSync(join(t.dir, "plain"));
    setConfig(t, (c) => (c.workspace.path = "plain"));
    refusedClearly(await t.run(["backup"]), 2, /workspace .*\/plain is not a git repository/);
  });
});

describe("signed manifests that lie are refused at parse (13), before any payload is read", () => {
  let t: TestAgent;
  let base: any;
  let payload: Buffer;
  let bundle: string;
  async function signed(name: string, patch: (m: any) => void, age = payload, tarSize?: number): Promise<string> {
    if (!t) {
      t = await agent();
      const r = json(await t.run(["backup", "--json"]));
      bundle = await t.file(r.path);
      base = manifestOf(bundle);
      const { readLayout } = await import("../../dist/bundle/outer.js");
      const l = readLayout(bundle);
      payload = readFileSync(bundle).subarray(l.payloadOffset, l.payloadOffset + l.payloadSize);
      age = payload;
    }
    const out = join(t.tmp, `${name}.agentbak`);
    await craft({ baseManifest: base, payloadAge: age, tarSize, keyFile: join(t.home, "signing-key"), out, patch });
    return out;
  }
  const verifyShallow = (f: string) => t.run(["verify", f]);

  it("[T7] sequence 5.5: 13 (a float is not a checkpoint sequence)", async () => {
    refusedClearly(await verifyShallow(await signed("float-seq", (m) => (m.sequence = 5.5))), 13, /manifest\.json: manifest invalid: sequence: /);
  });

  it("[T15] agent_id or tenant holding ../ : 13, and nothing is written outside AGENTBAK_HOME", async () => {
    for (const [k, v] of [["agent_id", "../../escape"], ["tenant", "../x"]] as const) {
      const f = await signed(`traversal-${k}`, (m) => (m[k] = v));
      refusedClearly(await verifyShallow(f), 13, new RegExp(`manifest invalid: ${k}: `));
      const r = await t.run(["restore", f, "--target", join(t.tmp, `tr-${k}`), "--yes", "--allow-other-agent"]);
      refusedClearly(r, 13, new RegExp(`${k}: `));
    }
    expect(existsSync(join(t.tmp, "escape"))).toBe(false);
    expect(existsSync(join(t.home, "..", "x"))).toBe(false);
  });

  it("[T16] a component targeting .agentbak (the restore's own markers): 13 naming it", async () => {
    const f = await signed("agentbak-target", (m) => (m.components.find((c: any) => c.kind === "file").target = ".agentbak/SUSPENDED"));
    refusedClearly(await verifyShallow(f), 13, /component "files\/memory\/[a-z]+\.json" targets "\.agentbak\/SUSPENDED", inside agentbak's own folder/);
  });

  it("[T18] a signed tar_size of 2^40 over a small payload: 13 at once, within bounded memory", async ({ task }) => {
    const f = await signed("huge-tar", () => undefined, undefined, 2 ** 40);
    const t0 = Date.now();
    const r = await t.run(["verify", f, "--identity", t.identity], {}, { rss: true });
    refusedClearly(r, 13, /payload\.tar_size 1099511627776 is more than its components can fill/);
    expect(Date.now() - t0).toBeLessThan(10_000);
    task.meta.peakRssKb = r.maxRssKb;
    expect(r.maxRssKb).toBeLessThanOrEqual(150 * 1024);
  });

  it("[T18] a small tar followed by 1 GiB of zeros, declared within the components' bound: 13, stops at the bound, bounded memory", async ({ task }) => {
    const members = [{ name: "files/a", data: Buffer.from("a") }];
    const tarBytes = await makeTar(members);
    const { CompressStream } = await import("zstd-napi");
    const z = new CompressStream({ compressionLevel: 19 });
    const parts: Buffer[] = [];
    z.on("data", (c: Buffer) => parts.push(c));
    z.write(tarBytes);
    const zero = Buffer.alloc(1 << 20);
    for (let i = 0; i < 1024; i++) z.write(zero);
    await new Promise((res) => z.end(res));
    const age = await ageEncrypt(Buffer.concat(parts), [t.recipient]);
    const f = await signed("zeros", (m) => {
      m.workspace = null;
      m.components = [{ path: "files/a", kind: "file", name: "a", sha256: sha(Buffer.from("a")), size: 1, target: "a" }];
    }, age, 22_528);
    const r = await t.run(["verify", f, "--identity", t.identity], {}, { rss: true });
    refusedClearly(r, 13, /decompressed payload exceeds its declared size of 22528 bytes/);
    task.meta.peakRssKb = r.maxRssKb;
    expect(r.maxRssKb).toBeLessThanOrEqual(150 * 1024);
  });

  it("[T15] a member name of 10,000 characters: the error line names it cut short", async () => {
    const long = "files/" + "n".repeat(10_000);
    const tarBytes = await makeTar([{ name: long, data: Buffer.from("x") }]);
    const age = await ageEncrypt(compress(tarBytes), [t.recipient]);
    const f = await signed("long-name", (m) => {
      m.workspace = null;
      m.components = [{ path: "files/x", kind: "file", name: "x", sha256: sha(Buffer.from("x")), size: 1, target: "x" }];
    }, age, tarBytes.length);
    const r = await t.run(["verify", f, "--identity", t.identity]);
    refusedClearly(r, 13, /member "files\/n+…" is not listed in the manifest/);
    expect(r.stderr.length).toBeLessThan(400);
  });
});

describe("[I] restore: a bad target is refused before anything is written", () => {
  let t: TestAgent;
  const sidecars = (dir: string) => {
    mkdirSync(join(dir, "state"), { recursive: true });
    writeFileSync(join(dir, "state/agent.sqlite-wal"), Buffer.alloc(4096, 7));
    writeFileSync(join(dir, "state/agent.sqlite-shm"), Buffer.alloc(32768, 1));
  };

  it("[I] a target that is a symlink, or a dangling one: 2 up front; the link and its folder are untouched", async () => {
    t ??= await agent();
    expect((await t.run(["backup"])).code).toBe(0);
    const real = join(t.tmp, "real-target");
    mkdirSync(real);
    symlinkSync(real, join(t.tmp, "link"));
    symlinkSync(join(t.tmp, "nowhere"), join(t.tmp, "dangling"));
    for (const [name, re] of [["link", /target .*\/link is a symbolic link; pass the folder it should be/], ["dangling", /target .*\/dangling is a symbolic link to nothing/]] as const) {
      const r = await t.run(["restore", "latest", "--target", join(t.tmp, name), "--yes"]);
      refusedClearly(r, 2, re);
      expect(lstatSync(join(t.tmp, name)).isSymbolicLink()).toBe(true);
    }
    expect(readdirSync(real)).toEqual([]);
    expect(existsSync(join(t.tmp, "nowhere"))).toBe(false);
    expect(readdirSync(t.tmp).filter((e) => e.startsWith(".agentbak-restore-"))).toEqual([]);
  });

  it("[I] a target, key folder or repository that can not be made here (under /proc, /sys, below a file): 2 naming it, at once, nothing written", async () => {
    t ??= await agent();
    expect((await t.run(["backup"])).code).toBe(0);
    const file = join(t.tmp, "a-file");
    writeFileSync(file, "x");
    // Node's recursive mkdir loops forever under /proc: the timeout makes a hang fail the test
    const cases: [string[], RegExp][] = [
      [["restore", "latest", "--target", "/proc/agentbak-test/x", "--yes"], /^agentbak: target \/proc\/agentbak-test\/x: can not mkdir \/proc\/agentbak-test \(no folder can be made there, ENOENT\)$/],
      [["restore", "latest", "--target", "/proc/agentbak-test", "--yes"], /^agentbak: target \/proc\/agentbak-test: can not mkdir \/proc\/\.agentbak-restore-agentbak-test-\d+-[0-9a-f]+ \(.*ENOENT\)$/],
      [["restore", "latest", "--target", join(file, "x"), "--yes"], /target .*a-file\/x: can not lstat .*\(a part of the path is not a folder, ENOTDIR\)/],
      [["keygen", "--out", "/proc/agentbak-test-keys"], /keygen --out \/proc\/agentbak-test-keys: can not mkdir/],
      [["keygen", "--out", join(file, "keys")], /keygen --out .*a-file\/keys: can not mkdir .*ENOTDIR/],
    ];
    for (const [args, re] of cases) {
      const r = await t.run(args, {}, { timeout: 30_000 });
      refusedClearly(r, 2, re);
    }
    const fresh = join(t.tmp, "fresh-init");
    mkdirSync(fresh);
    const r = await run(["init", "--agent-id", "a1", "--tenant", "t", "--repo", join(file, "repo"), "--yes"], { cwd: fresh, env: { AGENTBAK_HOME: join(t.tmp, "home") }, timeout: 30_000 });
    refusedClearly(r, 2, /repository .*a-file\/repo: can not mkdir .*ENOTDIR/);
    expect(readdirSync(fresh)).toEqual([]);
    expect(readFileSync(file, "utf8")).toBe("x");
    expect(readdirSync(t.tmp).filter((e) => e.startsWith(".agentbak-restore-"))).toEqual([]);
  });

  it("[I] a missing config or drill spec named on the command line is 10 (not found), naming the file", async () => {
    t ??= await agent();
    refusedClearly(await t.run(["backup", "-c", join(t.tmp, "missing.json")]), 10, /config .*missing\.json: not found/);
    refusedClearly(await t.run(["drill", "latest", "--spec", join(t.tmp, "no-spec.json")]), 10, /drill spec .*no-spec\.json: no such file, and no shipped spec of that name \(shipped: [a-z-]+(, [a-z-]+)*\)/);
  });

  it("[T21] a restore that fails leaves stale sidecars in the target where they were; one that succeeds quarantines them", async () => {
    t ??= await agent();
    expect((await t.run(["backup"])).code).toBe(0);
    const target = join(t.tmp, "stale-target");
    sidecars(target);
    const before = readdirSync(target, { recursive: true }).sort();
    const other = join(t.tmp, "other-key");
    await execa("node", [join(import.meta.dirname, "..", "..", "bin", "agentbak.js"), "keygen", "--out", other]);
    const r = await t.run(["restore", "latest", "--target", target, "--yes", "--allow-rollback", "--identity", join(other, "age-identity.txt")]);
    refusedClearly(r, 12, /no identity matched/);
    expect(readdirSync(target, { recursive: true }).sort()).toEqual(before);
    expect(readdirSync(t.tmp).filter((e) => e.startsWith("stale-target.quarantine"))).toEqual([]);
    const ok = await t.run(["restore", "latest", "--target", target, "--yes", "--allow-rollback", "--json"]);
    expect(ok.code, ok.stderr).toBe(3);
    expect(json(ok).warnings.join(" ")).toMatch(/moved to .*stale-target\.quarantine-/);
    expect(existsSync(join(target, "state/agent.sqlite-wal"))).toBe(false);
  });
});

// The second adversarial sweep (a new user and an attacker, after issue 11's first): each case failed before its fix.
describe("[I] second sweep: FIFOs and devices, damaged records, secrets in messages, interrupts", () => {
  let t: TestAgent;
  const quick = { timeout: 30_000 };

  it("[I] a FIFO or device where a file belongs never blocks: files entry, -c, --identity, a bundle path, a database; 2 naming it", async () => {
    t = await agent();
    const fifo = join(t.tmp, "pipe");
    await execa("mkfifo", [fifo]);
    await execa("mkfifo", [join(t.dir, "memory", "pipe.json")]);
    setConfig(t, (c) => (c.files = ["memory/pipe.json"]));
    refusedClearly(await t.run(["backup"], {}, quick), 2, /files: memory\/pipe\.json is a FIFO, not a regular file/);
    setConfig(t, (c) => (c.files = ["memory/**"])); // a glob passes it by
    expect((await t.run(["backup"], {}, quick)).code).toBe(0);
    refusedClearly(await t.run(["snapshots", "-c", fifo], {}, quick), 2, /pipe is a FIFO, not a regular file/);
    refusedClearly(await t.run(["verify", fifo], {}, quick), 2, /pipe is a FIFO, not a regular file/);
    refusedClearly(await t.run(["verify", "latest", "--identity", fifo], {}, quick), 12, /no usable identity: cannot read .*pipe \(it is a FIFO, not a regular file\)/);
    refusedClearly(await t.run(["verify", "/dev/zero"], {}, quick), 2, /\/dev\/zero is a device, not a regular file/);
    expect(heldLeases(join(t.repo, "tenants/acme/agents/billing-agent/locks"))).toEqual([]);
  });

  it("[I] a repository record replaced by a link to /dev/zero is refused at once (no endless read)", async () => {
    t ??= await agent();
    const audit = join(t.repo, "tenants/acme/agents/billing-agent/audit.jsonl");
    const aside = `${audit}.aside`;
    await execa("mv", [audit, aside]);
    symlinkSync("/dev/zero", audit);
    try {
      const r = await t.run(["backup"], {}, quick);
      // a repository object that is no regular file is damage of the repository (13), named (issue 32 third attack, d0f594b)
      refusedClearly(r, 13, /audit\.jsonl in .* is damaged: it is a device, not a regular file/);
    } finally {
      rmSync(audit);
      await execa("mv", [aside, audit]);
    }
  });

  it("[I] damaged local records are named, never a stack: a lock of null, trusted state of null, restore.json and reconcile.json of garbage", async () => {
    t ??= await agent();
    // the agent lease's newest grant (locks/agent/<token>.lease) damaged
    const grants = join(t.repo, "tenants/acme/agents/billing-agent/locks/agent");
    const lock = join(grants, readdirSync(grants).sort().at(-1)!);
    writeFileSync(lock, "null");
    refusedClearly(await t.run(["backup"]), 11, /repository lock .*locks\/agent\/\d{16}\.lease in .* is unreadable \(not written by agentbak\); if no agentbak process uses this repository, remove that file/);
    rmSync(lock);
    const state = join(t.home, "state/acme/billing-agent.json");
    const kept = readFileSync(state, "utf8");
    writeFileSync(state, "null");
    refusedClearly(await t.run(["backup"]), 1, /trusted state .*billing-agent\.json is not a JSON object; .*must not be guessed/);
    writeFileSync(state, JSON.stringify({ highest_sequence: "x" }));
    refusedClearly(await t.run(["backup"]), 1, /holds highest_sequence = "x", not a count/);
    writeFileSync(state, kept);
    const target = join(t.tmp, "damaged-target");
    expect([0, 3]).toContain((await t.run(["restore", "latest", "--target", target, "--yes"])).code);
    writeFileSync(join(target, ".agentbak/reconcile.json"), JSON.stringify({ operations: "x" }));
    refusedClearly(await t.run(["activate", "--target", target, "--yes"]), 13, /reconcile\.json is damaged; remove it and run agentbak reconcile --target/);
    for (const bad of ["null", "garbage", "{}", "[]"]) {
      writeFileSync(join(target, ".agentbak/restore.json"), bad);
      for (const args of [["activate", "--target", target, "--yes"], ["reconcile", "--target", target], ["fence", "check", "--target", target, "--generation", "1"]])
        refusedClearly(await t.run(args), 13, /restore\.json is damaged \(not the record restore wrote\)/);
    }
  });

  it("[S] a credential with a line break is never sent, printed or logged by reconcile; --source and --repo never echo a password", async () => {
    t ??= await agent();
    setConfig(t, (c) => (c.reconcile.probe.http = { url: "http://127.0.0.1:9/v1/deliveries/{idempotency_key}", headers: { authorization: "Bearer {credential:mail}" } }));
    const target = join(t.tmp, "cred-target");
    expect([0, 3]).toContain((await t.run(["restore", "latest", "--target", target, "--yes", "--allow-rollback"])).code);
    mkdirSync(join(t.dir, "secrets"), { recursive: true });
    writeFileSync(join(t.dir, "secrets/smtp-password"), "SuperSecret-v4lue\r\nsecond\n");
    const r = await t.run(["reconcile", "--target", target]);
    expect(r.code, r.stderr).toBe(3);
    expect(r.stderr).toContain("credential mail holds a line break or NUL: not sent in header authorization");
    const everything = r.stdout + r.stderr + readFileSync(join(target, ".agentbak/reconcile.json"), "utf8") + readFileSync(join(t.repo, "tenants/acme/agents/billing-agent/audit.jsonl"), "utf8");
    expect(everything).not.toContain("SuperSecret");
    const src = await t.run(["restore", "latest", "--target", join(t.tmp, "src-t"), "--yes", "--source", "postgres://admin:SuperSecret123@127.0.0.1/db"]);
    refusedClearly(src, 2, /--source: expected NAME=URL/);
    expect(src.stderr).not.toContain("SuperSecret");
    const repo = await t.run(["snapshots", "--repo", "s3://AKIAEXAMPLE:SuperSecret456@bucket/x"]);
    refusedClearly(repo, 2, /must not hold credentials/);
    expect(repo.stderr).not.toContain("SuperSecret");
  });

  it("[I] Ctrl-C during a restore removes the decrypted staging folder; SIGTERM while waiting for a locked database exits 130 at once", async () => {
    const big = await agent(40);
    expect((await big.run(["backup"])).code).toBe(0);
    const parent = join(big.tmp, "rparent");
    mkdirSync(parent);
    const child = execa("node", [join(import.meta.dirname, "..", "..", "bin", "agentbak.js"), "restore", "latest", "--target", join(parent, "t"), "--yes"], { cwd: big.dir, env: { ...big.env, NO_COLOR: "1" }, reject: false });
    // wait until decrypted state is on disk in the staging folder, then stop the process there and interrupt it
    const decrypted = () => readdirSync(parent, { recursive: true }).some((e) => String(e).endsWith(".sqlite"));
    const t0 = Date.now();
    while (!decrypted() && Date.now() - t0 < 30_000) await new Promise((r) => setTimeout(r, 5));
    expect(decrypted()).toBe(true);
    child.kill("SIGSTOP");
    child.kill("SIGINT");
    child.kill("SIGCONT");
    const res = await child;
    expect(res.exitCode, res.stderr).toBe(130);
    expect(readdirSync(parent)).toEqual([]); // no staging folder, no decrypted database, no target

    const holder = new Database(join(big.dir, "state/agent.sqlite"));
    holder.exec("BEGIN IMMEDIATE"); // the write lock a backup needs
    try {
      const b = execa("node", [join(import.meta.dirname, "..", "..", "bin", "agentbak.js"), "backup", "--wait", "60s"], { cwd: big.dir, env: { ...big.env, NO_COLOR: "1" }, reject: false });
      await new Promise((r) => setTimeout(r, 1500));
      const sent = Date.now();
      b.kill("SIGTERM");
      const r = await b;
      expect(r.exitCode, r.stderr).toBe(130);
      expect(Date.now() - sent).toBeLessThan(5_000); // not the 60 s the wait allowed
    } finally {
      holder.exec("ROLLBACK");
      holder.close();
    }
    expect(readdirSync(join(big.repo, "tmp"))).toEqual([]);
  });

  it("[I] an interrupt after a snapshot's commit marker exits 130 naming the committed snapshot (listed, verifies); one just before it publishes nothing", async () => {
    const t = await agent();
    const listed = async () => json(await t.run(["snapshots", "--json"])).map((e: any) => e.snapshot_id);
    const before = await listed();
    // SIGINT once the payload or the whole bundle is written, before publishing: a plain "interrupted", nothing
    // new listed, and nothing new in the repository's snapshot folder either (an uncommitted bundle was left there
    // when the bundle's writing never yielded to the signal)
    const snapsDir = join(t.repo, "tenants/acme/agents/billing-agent/snapshots");
    const files = () => (t.repo.startsWith("s3://") || !existsSync(snapsDir) ? [] : readdirSync(snapsDir).sort());
    const filesBefore = files();
    for (const step of ["payload-written", "bundle-written"]) {
      const early = await t.run(["backup"], { AGENTBAK_INTERRUPT_STEP: step });
      expect(early.code, early.stderr).toBe(130);
      expect(early.stderr.trim()).toBe("agentbak: interrupted");
      expect(await listed()).toEqual(before);
      expect(files(), step).toEqual(filesBefore);
    }
    // SIGINT once the commit marker is written: still 130, but the line says what is done (it said only "interrupted")
    const late = await t.run(["backup"], { AGENTBAK_INTERRUPT_STEP: "published" });
    expect(late.code, late.stderr).toBe(130);
    const id = /^agentbak: interrupted after snapshot (\S+) was committed$/.exec(late.stderr.trim())?.[1];
    expect(id, late.stderr).toBeDefined();
    expect(await listed()).toEqual([...before, id]);
    expect((await t.run(["verify", id!])).code).toBe(0);
    if (!t.repo.startsWith("s3://")) expect(readdirSync(join(t.repo, "tmp"))).toEqual([]);
    // the same for a restore interrupted once its target is in place and checked
    const target = join(t.tmp, "interrupted-restore");
    const r = await t.run(["restore", id!, "--target", target, "--yes", "--allow-rollback"], { AGENTBAK_INTERRUPT_STEP: "checked" });
    expect(r.code, r.stderr).toBe(130);
    expect(r.stderr.trim().split("\n").at(-1)).toMatch(new RegExp(`^agentbak: interrupted after the restore of ${id} was placed at .*interrupted-restore \\(suspended, generation \\d+\\)$`));
    expect(existsSync(join(target, "state/agent.sqlite"))).toBe(true);
  });

  it("[I] bad names and places: keygen --principal, a label with a line break, copy of an unknown snapshot or into its source, forget --agent a/b, restore --target / or empty, an empty database file", async () => {
    t ??= await agent();
    refusedClearly(await t.run(["keygen", "--out", join(t.tmp, "k5"), "--principal", 'a b,namespaces="x"']), 2, /--principal: 1 to 64 of/);
    expect(existsSync(join(t.tmp, "k5"))).toBe(false);
    refusedClearly(await t.run(["backup", "--label", "x\n2026 forged row"]), 2, /--label: at most 200 characters, none of them control characters/);
    refusedClearly(await t.run(["copy", "--from", t.repo, "--to", join(t.tmp, "copy-x"), "20200101T000000000Z-deadbeef"]), 10, /snapshot 20200101T000000000Z-deadbeef not found/);
    refusedClearly(await t.run(["copy", "--from", t.repo, "--to", join(t.repo, "tenants")]), 2, /is inside the source repository/);
    refusedClearly(await t.run(["forget", "--agent", "a/b", "--keep-last", "1"]), 2, /--agent: not an id: "a\/b" \(lowercase letters/);
    expect(existsSync(join(t.repo, "tenants/acme/agents/a"))).toBe(false);
    const slash = await t.run(["restore", "latest", "--target", "/", "--yes"], {}, quick);
    refusedClearly(slash, 2, /target \/ (is not empty|: can not)/);
    refusedClearly(await t.run(["restore", "latest", "--target", "", "--yes"]), 2, /--target is empty/);
    const db = join(t.dir, "state/agent.sqlite");
    const aside = `${db}.aside`;
    await execa("mv", [db, aside]);
    writeFileSync(db, "");
    try {
      refusedClearly(await t.run(["backup"]), 13, /database state: .*agent\.sqlite is empty \(0 bytes\), not an SQLite database/);
    } finally {
      rmSync(db);
      await execa("mv", [aside, db]);
    }
  });
});
