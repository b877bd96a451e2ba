// restore --integrity full|quick|digest: how much of each database is checked
// beyond its signed sha256. A bundle signed over a database whose rows do not
// match the manifest's counts (re-signed with the agent's own key, so only the
// checks can notice) is refused by full and quick and let through by digest;
// a good bundle restores the same bytes under every policy.
import { execa } from "execa";
import { copyFileSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ageEncrypt, craft, join, makeTar, manifestOf, sha } from "../craft.js";
import { json, makeAgent, type TestAgent } from "../helpers.js";
import { compress } from "zstd-napi";

let a: TestAgent;
let good: string;
let lying: string;

/** Every regular file under `dir`, as paths relative to it. */
function walk(dir: string, rel = ""): string[] {
  return readdirSync(join(dir, rel), { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(dir, join(rel, e.name)) : [join(rel, e.name)]));
}

/** `bundle` opened with the stock tools, its database changed by `sql`, and signed again with the agent's key. */
async function rebundle(t: TestAgent, bundle: string, change: string | ((file: string) => void), name: string, also?: (m: any) => void, dbPath?: string): Promise<string> {
  const outer = join(t.tmp, `${name}-outer`);
  const plain = join(t.tmp, `${name}-plain`);
  mkdirSync(outer);
  mkdirSync(plain);
  await execa("tar", ["-xf", bundle, "-C", outer]);
  await execa("sh", ["-c", `age -d -i '${t.identity}' '${join(outer, "payload.age")}' | zstd -d -q | tar -x -C '${plain}'`]);
  const m = manifestOf(bundle);
  const db = m.components.find((c: any) => c.kind === "sqlite" && (dbPath === undefined || c.path === dbPath));
  if (typeof change === "string") await execa("sqlite3", [join(plain, db.path), change]);
  else change(join(plain, db.path));
  const bytes = readFileSync(join(plain, db.path));
  const tarred = await makeTar(walk(plain).map((p) => ({ name: p, data: readFileSync(join(plain, p)) })));
  const out = join(t.tmp, `${name}.agentbak`);
  await craft({
    baseManifest: m,
    payloadAge: await ageEncrypt(compress(tarred), [t.recipient]),
    tarSize: tarred.length,
    keyFile: join(t.home, "signing-key"),
    out,
    patch: (x) => {
      const c = x.components.find((y: any) => y.path === db.path);
      Object.assign(c, { sha256: sha(bytes), size: bytes.length });
      also?.(x);
    },
  });
  return out;
}

beforeAll(async () => {
  a = await makeAgent();
  const b = json(await a.run(["backup", "--json"]));
  expect(b.snapshot_id).toBeTruthy();
  good = await a.file(b.path);
  lying = await rebundle(a, good, "DELETE FROM messages WHERE rowid % 2 = 0;", "lying");
}, 120_000);

afterAll(() => a?.cleanup());

describe("restore --integrity", () => {
  const restore = (bundle: string, target: string, policy?: string) =>
    a.run(["restore", bundle, "--target", join(a.tmp, target), "--yes", "--allow-rollback", "--json", ...(policy ? ["--integrity", policy] : [])]);

  it("full (the default) and quick refuse a signed database whose row counts are not the manifest's: 13, nothing placed", async () => {
    for (const policy of [undefined, "full", "quick"]) {
      const r = await restore(lying, `lying-${policy ?? "default"}`, policy);
      expect(r.code, r.stderr).toBe(13);
      expect(r.stderr).toMatch(/database state: table messages has \d+ rows, manifest says \d+/);
      expect(() => statSync(join(a.tmp, `lying-${policy ?? "default"}`))).toThrow();
    }
  });

  it("digest trusts the signed sha256 alone: the same bundle restores, and the check says what was checked", async () => {
    const r = await restore(lying, "lying-digest", "digest");
    expect([0, 3], r.stderr).toContain(r.code);
    const out = json(r);
    const check = out.checks.find((c: any) => c.name === "integrity:state");
    expect(check.detail).toMatch(/sha256 matches the signed digest \(--integrity digest\)/);
  });

  it("a good bundle restores the same database bytes under every policy, each check named", async () => {
    const m = manifestOf(good);
    const db = m.components.find((c: any) => c.kind === "sqlite");
    const details: string[] = [];
    for (const policy of ["full", "quick", "digest"]) {
      const r = await restore(good, `good-${policy}`, policy);
      expect([0, 3], r.stderr).toContain(r.code);
      details.push(json(r).checks.find((c: any) => c.name === "integrity:state").detail);
      expect(sha(readFileSync(join(a.tmp, `good-${policy}`, db.target ?? db.path)))).toBe(db.sha256);
    }
    expect(details[0]).toMatch(/^integrity_check ok/);
    expect(details[1]).toMatch(/^quick_check ok/);
    expect(details[2]).toMatch(/^sha256 matches/);
  });

  it("a database file that is not SQLite at all is refused (13) naming it, under every policy, not an internal error", async () => {
    const garbage = await rebundle(a, good, (f) => {
      const b = readFileSync(f);
      b.write("NOT A SQLITE DB!", 0);
      writeFileSync(f, b);
    }, "not-sqlite");
    for (const policy of ["full", "digest"]) {
      const r = await restore(garbage, `not-sqlite-${policy}`, policy);
      expect(r.code, r.stderr).toBe(13);
      expect(r.stderr.trim()).toMatch(/^agentbak: database state \(\S+\/state\/agent\.sqlite\): file is not a database$/);
      expect(() => statSync(join(a.tmp, `not-sqlite-${policy}`))).toThrow();
    }
  });

  it("an unknown policy is a usage error (2) naming the allowed values", async () => {
    const r = await restore(good, "bad-policy", "paranoid");
    expect(r.code).toBe(2);
    expect(r.stderr.split("\n")[0]).toMatch(/--integrity.*paranoid.*full, quick, digest/);
    expect(json(r)).toMatchObject({ code: "usage_error", exit_status: 2 });
  });

  it("a large database (its integrity_check on a worker thread, beside the row counts) with a broken index: full refuses it (13) naming the index, nothing placed; quick, which does not cross-check indexes, lets it through", async () => {
    const big = await makeAgent({ sizeMb: 40, seed: 7 });
    try {
      // a second large database: its check waits in the worker's queue behind the first's
      copyFileSync(join(big.dir, "state/agent.sqlite"), join(big.dir, "state/second.sqlite"));
      const cfg = JSON.parse(readFileSync(big.config, "utf8"));
      writeFileSync(big.config, JSON.stringify({ ...cfg, databases: [...cfg.databases, { name: "second", path: "state/second.sqlite" }] }, null, 2));
      const b = json(await big.run(["backup", "--json"]));
      const m = manifestOf(await big.file(b.path));
      expect(m.components.find((c: any) => c.kind === "sqlite").size).toBeGreaterThan(32 << 20);
      // the index b-tree keeps its entries while the schema says it indexes another column
      const broken = await rebundle(big, await big.file(b.path), "PRAGMA writable_schema=ON; UPDATE sqlite_schema SET sql='CREATE INDEX tasks_status ON tasks(kind)' WHERE name='tasks_status';", "broken");
      const run = (target: string, policy: string) => big.run(["restore", broken, "--target", join(big.tmp, target), "--yes", "--allow-rollback", "--json", "--integrity", policy]);
      const full = await run("broken-full", "full");
      expect(full.code, full.stderr).toBe(13);
      expect(full.stderr.split("\n")[0]).toMatch(/database state: integrity_check: row \d+ missing from index tasks_status/);
      expect(() => statSync(join(big.tmp, "broken-full"))).toThrow();
      expect(readdirSync(big.tmp).filter((f) => f.startsWith(".agentbak-restore-"))).toEqual([]);
      const quick = await run("broken-quick", "quick");
      expect([0, 3], quick.stderr).toContain(quick.code);
      expect(json(quick).checks.find((c: any) => c.name === "integrity:state").detail).toMatch(/^quick_check ok/);
      // a later component that cannot be placed (a 300-character file name) beside a database that would fail its check:
      // no check is in flight when the placing fails, so its error is the one reported, once, and nothing is left
      const longName = await rebundle(
        big,
        await big.file(b.path),
        "PRAGMA writable_schema=ON; UPDATE sqlite_schema SET sql='CREATE INDEX tasks_status ON tasks(kind)' WHERE name='tasks_status';",
        "long-name",
        (x) => {
          x.components.find((c: any) => c.kind === "file").target = `memory/${"n".repeat(300)}.json`;
        },
        "db/second.sqlite",
      );
      const both = await big.run(["restore", longName, "--target", join(big.tmp, "long-name"), "--yes", "--allow-rollback", "--json"]);
      expect(both.code, both.stderr).toBe(1);
      expect(both.stderr.trim().split("\n")).toEqual([expect.stringMatching(/^agentbak: .*ENAMETOOLONG.*nnnn/)]);
      expect(both.stdout.trim().split("\n").map((l) => JSON.parse(l).exit_status)).toEqual([1]);
      expect(() => statSync(join(big.tmp, "long-name"))).toThrow();
      expect(big.leftovers()).toEqual([]);
      // the good bundle of the same agent passes the worker's full check
      const ok = await big.run(["restore", b.snapshot_id, "--target", join(big.tmp, "good-full"), "--yes", "--allow-rollback", "--json"]);
      expect([0, 3], ok.stderr).toContain(ok.code);
      expect(json(ok).checks.find((c: any) => c.name === "integrity:state").detail).toMatch(/^integrity_check ok/);
    } finally {
      big.cleanup();
    }
  }, 180_000);
});
