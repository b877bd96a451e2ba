// restore --integrity full|quick|digest: how much of each database is checked
// beyond its signed sha256. A bundle signed over a database whose rows do not
// match the manifest's counts (re-signed with the agent's own key, so only the
// checks can notice) is refused by full and quick and let through by digest;
// a good bundle restores the same bytes under every policy. The default
// (attested) re-runs integrity_check only where the signed manifest does not
// attest it passed at backup on exactly the restored image.
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
      const ok = await big.run(["restore", b.snapshot_id, "--target", join(big.tmp, "good-full"), "--yes", "--allow-rollback", "--json", "--integrity", "full"]);
      expect([0, 3], ok.stderr).toContain(ok.code);
      expect(json(ok).checks.find((c: any) => c.name === "integrity:state").detail).toMatch(/^integrity_check ok/);
    } finally {
      big.cleanup();
    }
  }, 180_000);
});

describe("restore's default: integrity_check attested at backup for these bytes, or re-run", () => {
  const restore = (bundle: string, target: string, ...more: string[]) => a.run(["restore", bundle, "--target", join(a.tmp, target), "--yes", "--allow-rollback", "--json", ...more]);
  const detail = (r: { stdout: string }) => json(r).checks.find((c: any) => c.name === "integrity:state").detail as string;
  /** the integrity record of the newest restore receipt in the agent's audit log */
  const receipt = async () => {
    const lines = String(await (await a.store()).get("tenants/acme/agents/billing-agent/audit.jsonl")).trim().split("\n").map((l) => JSON.parse(l));
    return lines.filter((l) => l.event === "restore").at(-1).receipt;
  };
  const breakIndex = "PRAGMA writable_schema=ON; UPDATE sqlite_schema SET sql='CREATE INDEX tasks_status ON tasks(kind)' WHERE name='tasks_status';";

  it("a full snapshot's manifest attests its integrity_check for its sha256; the default restore does not re-run it and says so in its output and signed receipt", async () => {
    const db = manifestOf(good).components.find((c: any) => c.kind === "sqlite");
    expect(db.integrity_checked).toBe(db.sha256);
    const r = await restore(good, "attested");
    expect([0, 3], r.stderr).toContain(r.code);
    expect(detail(r)).toMatch(/^attested at backup: integrity_check passed on these exact bytes \(sha256 [0-9a-f]{12}, signed in the manifest\), not re-run/);
    expect((await receipt()).integrity).toEqual({ state: "attested" });
    expect(sha(readFileSync(join(a.tmp, "attested", db.target)))).toBe(db.sha256);
    await restore(good, "attested-full", "--integrity", "full");
    expect((await receipt()).integrity).toEqual({ state: "integrity_check" });
  });

  it("the human output names the check that established each database, one line each", async () => {
    const run = (target: string, ...more: string[]) => a.run(["restore", good, "--target", join(a.tmp, target), "--yes", "--allow-rollback", ...more]);
    const def = await run("human-default");
    expect([0, 3], def.stderr).toContain(def.code);
    expect((def.stdout + def.stderr).split("\n").filter((l) => l.startsWith("✓ integrity:"))).toEqual([expect.stringMatching(/^✓ integrity:state: attested at backup: integrity_check passed on these exact bytes/)]);
    const full = await run("human-full", "--integrity", "full");
    expect((full.stdout + full.stderr).split("\n").filter((l) => l.startsWith("✓ integrity:"))).toEqual(["✓ integrity:state: integrity_check ok; row counts and user_version match the manifest"]);
  });

  it("the attestation is what the default relies on: an index broken under a signed attestation for the broken bytes restores by default, and --integrity full refuses it (13)", async () => {
    // only the signer can make this bundle (it is re-signed with the agent's key): the attestation is as trusted as the signer
    const forged = await rebundle(a, good, breakIndex, "forged-attestation", (x) => {
      const c = x.components.find((y: any) => y.kind === "sqlite");
      c.integrity_checked = c.sha256;
    });
    const def = await restore(forged, "forged-default");
    expect([0, 3], def.stderr).toContain(def.code);
    expect(detail(def)).toMatch(/^attested at backup/);
    const full = await restore(forged, "forged-full", "--integrity", "full");
    expect(full.code, full.stderr).toBe(13);
    expect(full.stderr.split("\n")[0]).toMatch(/database state: integrity_check: row \d+ missing from index tasks_status/);
  });

  it("an attestation for other bytes, or none, falls back to integrity_check: a broken index is refused (13), a sound change restores and says why the check ran", async () => {
    // the attestation still names the backup's bytes, not these
    const stale = await rebundle(a, good, breakIndex, "stale-attestation");
    const refused = await restore(stale, "stale");
    expect(refused.code, refused.stderr).toBe(13);
    expect(refused.stderr.split("\n")[0]).toMatch(/integrity_check: row \d+ missing from index tasks_status/);
    expect(() => statSync(join(a.tmp, "stale"))).toThrow();
    const sound = await rebundle(a, good, "UPDATE messages SET content = content || '!' WHERE rowid = 1;", "sound-change");
    const r = await restore(sound, "sound");
    expect([0, 3], r.stderr).toContain(r.code);
    expect(detail(r)).toMatch(/^integrity_check ok \(re-run: the manifest's integrity_checked names other bytes than this image\)/);
    expect((await receipt()).integrity).toEqual({ state: "integrity_check" });
    const none = await rebundle(a, good, "UPDATE messages SET content = content || '?' WHERE rowid = 1;", "no-attestation", (x) => delete x.components.find((y: any) => y.kind === "sqlite").integrity_checked);
    const n = await restore(none, "none");
    expect([0, 3], n.stderr).toContain(n.code);
    expect(detail(n)).toMatch(/^integrity_check ok \(re-run: no integrity check at backup is attested for this image\)/);
  });

  it("an incremental between integrity checks attests nothing and its default restore runs integrity_check; a checked incremental is attested by its rebuilt pages root", async () => {
    const change = () => execa("sqlite3", [join(a.dir, "state/agent.sqlite"), "UPDATE messages SET content = content || ' (edited)' WHERE rowid % 50 = 0;"]);
    await change();
    const inc = json(await a.run(["backup", "--incremental", "--json"]));
    expect(inc.databases_read).toBe("in-place"); // link 1 of integrityEvery 5: no integrity_check at backup
    const c = manifestOf(await a.file(inc.path)).components.find((x: any) => x.name === "state");
    expect(c.kind).toBe("sqlite-delta");
    expect(c.integrity_checked).toBeUndefined();
    const r = await restore(inc.snapshot_id, "between-checks");
    expect([0, 3], r.stderr).toContain(r.code);
    expect(detail(r)).toMatch(/^integrity_check ok \(re-run: no integrity check at backup is attested for this image\)/);
    expect((await receipt()).integrity).toEqual({ state: "integrity_check" });
    const cfg = JSON.parse(readFileSync(a.config, "utf8"));
    writeFileSync(a.config, JSON.stringify({ ...cfg, incremental: { ...cfg.incremental, integrityEvery: 1 } }));
    await change();
    const checked = json(await a.run(["backup", "--incremental", "--json"]));
    expect(checked.databases_read).toBe("copy");
    const d = manifestOf(await a.file(checked.path)).components.find((x: any) => x.name === "state");
    expect(d.kind).toBe("sqlite-delta");
    expect(d.integrity_checked).toBe(d.full_pages_sha256);
    const r2 = await restore(checked.snapshot_id, "checked-link");
    expect([0, 3], r2.stderr).toContain(r2.code);
    expect(detail(r2)).toMatch(/^attested at backup: integrity_check passed on these exact bytes \(pages root [0-9a-f]{12}/);
    expect((await receipt()).integrity).toEqual({ state: "attested" });
  });
});

describe("a database of INDEX_DIGEST_FROM (8 MiB) and more, with an index: quick_check and the index digests at backup (format 8)", () => {
  let big: TestAgent;
  let full: string;
  let fullId: string;
  const restore = (bundle: string, target: string, ...more: string[]) => big.run(["restore", bundle, "--target", join(big.tmp, target), "--yes", "--allow-rollback", "--json", ...more]);
  const detail = (r: { stdout: string }) => json(r).checks.find((c: any) => c.name === "integrity:state").detail as string;
  const receipt = async () => {
    const lines = String(await (await big.store()).get("tenants/acme/agents/billing-agent/audit.jsonl")).trim().split("\n").map((l) => JSON.parse(l));
    return lines.filter((l) => l.event === "restore").at(-1).receipt;
  };
  beforeAll(async () => {
    big = await makeAgent({ sizeMb: 12 });
    const b = json(await big.run(["backup", "--json"]));
    full = await big.file(b.path);
    fullId = b.snapshot_id;
  }, 180_000);
  afterAll(() => big?.cleanup());

  it("the manifest (format 8) attests the index digest check for its sha256, not integrity_check; the default restore does not re-run a check and says which passed, in its output and signed receipt", async () => {
    const m = manifestOf(full);
    const db = m.components.find((c: any) => c.kind === "sqlite");
    expect(db.size).toBeGreaterThanOrEqual(8 * 1024 * 1024);
    expect([m.format_version, db.index_digest_checked, db.integrity_checked]).toEqual([8, db.sha256, undefined]);
    const r = await restore(full, "attested");
    expect([0, 3], r.stderr).toContain(r.code);
    expect(detail(r)).toMatch(/^attested at backup: quick_check and the index digests \(every index holds exactly its table's entries, no UNIQUE duplicates\) passed on these exact bytes \(sha256 [0-9a-f]{12}, signed in the manifest\), not re-run/);
    expect((await receipt()).integrity).toEqual({ state: "attested" });
    expect(sha(readFileSync(join(big.tmp, "attested", db.target)))).toBe(db.sha256);
    const f = await restore(full, "attested-full", "--integrity", "full");
    expect(detail(f)).toBe("integrity_check ok; row counts and user_version match the manifest");
    expect((await receipt()).integrity).toEqual({ state: "integrity_check" });
  }, 180_000);

  it("export leaves index_digest_checked out and stays format 4; its restore re-runs integrity_check", async () => {
    const out = join(big.tmp, "exported", "full.agentbak");
    const e = await big.run(["export", fullId, "-o", out, "--identity", big.identity, "--json"]);
    expect(e.code, e.stderr).toBe(0);
    expect(json(e).format_version).toBe(4);
    const db = manifestOf(out).components.find((c: any) => c.kind === "sqlite");
    expect([db.index_digest_checked, db.integrity_checked]).toEqual([undefined, undefined]);
    const r = await restore(out, "exported-restore");
    expect([0, 3], r.stderr).toContain(r.code);
    expect(detail(r)).toMatch(/^integrity_check ok \(re-run: no integrity check at backup is attested for this image\)/);
  }, 180_000);

  it("an attestation for other bytes, or none, falls back to integrity_check and says why", async () => {
    const sound = await rebundle(big, full, "UPDATE messages SET content = content || '!' WHERE rowid = 1;", "sound-change");
    const r = await restore(sound, "sound");
    expect([0, 3], r.stderr).toContain(r.code);
    expect(detail(r)).toMatch(/^integrity_check ok \(re-run: the manifest's index_digest_checked names other bytes than this image\)/);
    const none = await rebundle(big, full, "UPDATE messages SET content = content || '?' WHERE rowid = 1;", "no-attestation", (x) => delete x.components.find((y: any) => y.kind === "sqlite").index_digest_checked);
    const n = await restore(none, "none");
    expect([0, 3], n.stderr).toContain(n.code);
    expect(detail(n)).toMatch(/^integrity_check ok \(re-run: no integrity check at backup is attested for this image\)/);
  }, 180_000);

  it("a checked incremental is attested by its rebuilt pages root under the index digest check; one between checks attests nothing", async () => {
    const change = () => execa("sqlite3", [join(big.dir, "state/agent.sqlite"), "UPDATE messages SET content = content || ' (edited)' WHERE rowid % 50 = 0;"]);
    await change();
    const inc = json(await big.run(["backup", "--incremental", "--json"]));
    expect(inc.databases_read).toBe("in-place");
    const c = manifestOf(await big.file(inc.path)).components.find((x: any) => x.name === "state");
    expect([c.kind, c.integrity_checked, c.index_digest_checked]).toEqual(["sqlite-delta", undefined, undefined]);
    const cfg = JSON.parse(readFileSync(big.config, "utf8"));
    writeFileSync(big.config, JSON.stringify({ ...cfg, incremental: { ...cfg.incremental, integrityEvery: 1 } }));
    await change();
    const checked = json(await big.run(["backup", "--incremental", "--json"]));
    expect(checked.databases_read).toBe("copy");
    const m = manifestOf(await big.file(checked.path));
    const d = m.components.find((x: any) => x.name === "state");
    expect([m.format_version, d.kind, d.index_digest_checked, d.integrity_checked]).toEqual([8, "sqlite-delta", d.full_pages_sha256, undefined]);
    const r2 = await restore(checked.snapshot_id, "checked-link");
    expect([0, 3], r2.stderr).toContain(r2.code);
    expect(detail(r2)).toMatch(/^attested at backup: quick_check and the index digests .* passed on these exact bytes \(pages root [0-9a-f]{12}/);
  }, 180_000);

  it("refuses (13) a database whose index does not hold its table's entries, as integrity_check finds it, naming the check and the index; nothing is published", async () => {
    const t = await makeAgent({ sizeMb: 12 });
    try {
      const file = join(t.dir, "state/agent.sqlite");
      await execa("sqlite3", [file, "PRAGMA writable_schema=ON; UPDATE sqlite_schema SET sql='CREATE INDEX tasks_status ON tasks(kind)' WHERE name='tasks_status';"]);
      expect((await execa("sqlite3", [file, "PRAGMA quick_check"])).stdout).toBe("ok");
      expect((await execa("sqlite3", [file, "PRAGMA integrity_check"])).stdout).toMatch(/row \d+ missing from index tasks_status/);
      const r = await t.run(["backup"]);
      expect(r.code, r.stderr).toBe(13);
      expect(r.stderr.split("\n")[0]).toBe("agentbak: database state: snapshot failed quick_check + index digests: index tasks_status does not hold the entries of table tasks's rows (their digests differ)");
      expect(json(await t.run(["snapshots", "--json"]))).toEqual([]);
    } finally {
      await t.cleanup();
    }
  }, 180_000);
});
