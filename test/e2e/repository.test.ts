// One repository over one storage interface: every case here runs against a
// local folder and (the "s3" project) an S3 bucket, through the real binary.
// Each of the first cases failed on agentbak 0.1 (issue 10).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { createHash } from "node:crypto";
import { execa } from "execa";
import { appendFileSync, cpSync, existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, ROOT, SNAPS, STORE, storeAt, type TestAgent } from "../helpers.js";
import { manifestOf } from "../craft.js";
import { decodeCacheFile, encodeCacheFile } from "../../src/repository/headercache.js";

let a: TestAgent;
const snaps: any[] = [];
const sha = (p: string) => createHash("sha256").update(readFileSync(p)).digest("hex");
const edit = (t: TestAgent, n: number) => {
  const db = new Database(join(t.dir, "state/agent.sqlite"));
  db.prepare("UPDATE messages SET content = content || ' (edit)' WHERE id % ? = 0").run(n);
  db.close();
};

beforeAll(async () => {
  a = await makeAgent({ sizeMb: 2 });
  snaps.push(json(await a.run(["backup", "--json", "--idempotency-key", "job-1"])));
  await new Promise((r) => setTimeout(r, 20));
  edit(a, 13);
  snaps.push(json(await a.run(["backup", "--json", "--incremental"])));
});
afterAll(() => a.cleanup());

describe(`repository (${STORE})`, () => {
  it("the signed manifest records the request's idempotency key, whatever the store", async () => {
    expect(manifestOf(await a.file(snaps[0].path)).idempotency_key).toBe("job-1");
    expect(snaps[0].path.startsWith(`${a.repo}/${SNAPS}/`)).toBe(true);
  });

  it("restore latest --before T takes the newest snapshot created before T; an id created after T is refused, not ignored", async () => {
    const t = join(a.tmp, "before");
    const before = new Date(new Date(snaps[1].created_at).getTime() - 1).toISOString();
    const r = await a.run(["restore", "latest", "--before", before, "--target", t, "--dry-run", "--json"]);
    expect(r.code, r.stderr).toBe(json(r).warnings.length ? 3 : 0); // a dry run exits as the restore would
    expect(json(r).plan.snapshot_id).toBe(snaps[0].snapshot_id);
    const late = await a.run(["restore", snaps[1].snapshot_id, "--before", before, "--target", t, "--dry-run", "--json"]);
    expect(late.code).toBe(10);
    expect(late.stderr).toMatch(new RegExp(`${snaps[1].snapshot_id} was created at .*, not before`));
    expect(existsSync(t)).toBe(false);
  });

  it("a unique prefix of an id resolves; an ambiguous one is a usage error naming the candidates", async () => {
    const id: string = snaps[1].snapshot_id;
    const v = await a.run(["verify", id.slice(0, id.length - 4), "--json"]);
    expect(v.code, v.stderr).toBe(0);
    expect(json(v).snapshot_id).toBe(id);
    const amb = await a.run(["verify", id.slice(0, 8)]);
    expect(amb.code).toBe(2);
    expect(amb.stderr).toMatch(/prefix \d+ is ambiguous/);
  });

  it("restore --dry-run of an incremental lists the database it writes", async () => {
    const r = json(await a.run(["restore", snaps[1].snapshot_id, "--target", join(a.tmp, "plan"), "--dry-run", "--json"]));
    const w = r.plan.writes.find((x: any) => x.path === "state/agent.sqlite");
    expect(w).toMatchObject({ kind: "sqlite-delta" });
    expect(w.size).toBe(manifestOf(await a.file(snaps[1].path)).components.find((c: any) => c.name === "state").full_size);
  });

  it("copy into a fresh folder repository creates it, with page indexes, and the copy restores byte-equal", async () => {
    const to = join(a.tmp, "fresh-copy");
    const c = await a.run(["copy", "--from", a.repo, "--to", to, "--json"]);
    expect(c.code, c.stderr).toBe(0);
    expect(json(c).copied).toEqual(snaps.map((s) => s.snapshot_id));
    expect(existsSync(join(to, SNAPS, `${snaps[1].snapshot_id}.state.pageindex`))).toBe(true);
    const t1 = join(a.tmp, "from-copy");
    const t2 = join(a.tmp, "from-origin");
    expect([0, 3]).toContain((await a.run(["restore", snaps[1].snapshot_id, "--repo", to, "--target", t1, "--yes", "--allow-rollback"])).code);
    expect([0, 3]).toContain((await a.run(["restore", snaps[1].snapshot_id, "--target", t2, "--yes", "--allow-rollback"])).code);
    expect(sha(join(t1, "state/agent.sqlite"))).toBe(sha(join(t2, "state/agent.sqlite")));
    const again = json(await a.run(["copy", "--from", a.repo, "--to", to, "--json"]));
    expect(again.copied).toEqual([]);
  });

  /** This repository's header cache file for the listing of the agent (a spool or another repository the tests opened has its own), decoded with this host's key. */
  const agentCache = () => {
    const dir = join(a.home, "cache");
    const key = readFileSync(join(dir, "headers.key"));
    const files = readdirSync(dir)
      .filter((f) => f.startsWith("headers-") && f.endsWith(".bin"))
      .map((f) => ({ file: join(dir, f), ...decodeCacheFile(readFileSync(join(dir, f)), key)! }));
    // the listing of this agent reads only its folders, and keeps their headers in a file of its own
    const c = files.find((x) => x.url === a.repo && x.scope.startsWith("tenants/acme/agents/billing-agent/"));
    expect(c, `no header cache for ${a.repo} among ${JSON.stringify(files.map((x) => [x.url, x.scope]))}`).toBeDefined();
    return { ...c!, key: [...c!.entries.keys()].find((k) => k.includes(snaps[0].snapshot_id))! };
  };

  it("the header cache is trusted only when this host wrote it: a cached manifest edited in place is ignored and the bundle read again", async () => {
    expect((await a.run(["snapshots", "--json"])).code).toBe(0); // the cache now holds every header, under its HMAC
    expect(statSync(join(a.home, "cache", "headers.key")).mode & 0o777).toBe(0o600);
    const c = agentCache();
    const e = c.entries.get(c.key)!;
    const m = JSON.parse(e.manifest.toString("utf8"));
    // the manifest's bytes edited where they lie in the file, the HMAC left as it was
    const raw = readFileSync(c.file);
    const at = raw.indexOf(e.manifest);
    expect(at).toBeGreaterThan(0);
    const forged = Buffer.from(JSON.stringify({ ...m, label: "forged" }));
    const edited = Buffer.concat([raw.subarray(0, at - 4), Buffer.from([0, 0, forged.length >> 8, forged.length & 255]), forged, raw.subarray(at + e.manifest.length)]);
    expect(forged.length).toBeLessThan(65536);
    writeFileSync(c.file, edited);
    const r = await a.run(["snapshots", "--json"]);
    const listed = json(r).find((x: any) => x.snapshot_id === snaps[0].snapshot_id);
    expect(listed.status).toBe("ok");
    expect(listed.label).toBe(m.label); // the signed bundle's, not the cache's
    // and the cache was written afresh from the bundles
    expect(agentCache().entries.get(c.key)!.manifest.toString("utf8")).not.toMatch(/forged/);
  });

  it("the header cache's key must be 32 bytes: a cache signed with a key cut to nothing is ignored, and a new key is made", async () => {
    expect((await a.run(["snapshots", "--json"])).code).toBe(0);
    const keyFile = join(a.home, "cache", "headers.key");
    // the cache rewritten and signed (HMAC) the way agentbak signs it, with `key`
    const forge = (key: Buffer, label: string) => {
      const c = agentCache();
      const e = c.entries.get(c.key)!;
      const manifest = Buffer.from(JSON.stringify({ ...JSON.parse(e.manifest.toString("utf8")), label }));
      c.entries.set(c.key, { ...e, manifest });
      writeFileSync(c.file, encodeCacheFile(key, c.url, c.scope, c.entries));
    };
    const label = async () => json(await a.run(["snapshots", "--json"])).find((x: any) => x.snapshot_id === snaps[0].snapshot_id).label;
    // with this host's key the cache is believed: this is what makes the signing above the right one to test with
    forge(readFileSync(keyFile), "signed with the real key");
    expect(await label()).toBe("signed with the real key");
    const real = agentCache();
    writeFileSync(keyFile, "");
    writeFileSync(real.file, encodeCacheFile(Buffer.alloc(0), real.url, real.scope, real.entries));
    expect(await label()).toBe(null);
    expect(readFileSync(keyFile).length).toBe(32);
  });

  it("a drill's report goes into the repository beside the agent's snapshots, never into the working folder", async () => {
    const d = await a.run(["drill", "latest", "--spec", join(ROOT, "drills/checks-only.json"), "--identity", a.identity, "--json"]);
    expect([0, 3], d.stderr).toContain(d.code);
    expect(json(d).report_file).toBe(`${a.repo}/tenants/acme/agents/billing-agent/drills/report.jsonl`);
    expect(existsSync(join(a.dir, "agentbak-drill-report.jsonl"))).toBe(false);
    const v = await a.run(["report", "verify", "--json"]);
    expect(v.code, v.stderr).toBe(0);
    expect(json(v).entries).toBeGreaterThanOrEqual(1);
    // forget reads it: the drilled snapshot is kept as such
    const f = json(await a.run(["forget", "--keep-last", "1", "--dry-run", "--json"]));
    expect(f.kept.find((k: any) => k.snapshot_id === json(d).snapshot_id).reasons).toContain("newest snapshot that passed a drill");
  });

  it("compact rewrites the incremental as a full snapshot in this store", async () => {
    const r = await a.run(["compact", snaps[1].snapshot_id, "--identity", a.identity, "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const c = json(r);
    expect(c.replaces).toBe(snaps[1].snapshot_id);
    expect((await a.run(["verify", c.snapshot_id, "--identity", a.identity])).code).toBe(0);
  });

  it("a recipient with a bad bech32 checksum is refused at config load (2), before any snapshot is taken", async () => {
    const cfg = JSON.parse(readFileSync(a.config, "utf8"));
    const bad = cfg.recipients[0].slice(0, -1) + (cfg.recipients[0].endsWith("q") ? "p" : "q");
    const p = join(a.dir, "bad-recipient.json");
    writeFileSync(p, JSON.stringify({ ...cfg, recipients: [bad] }));
    const before = json(await a.run(["snapshots", "--json"])).length;
    const r = await a.run(["backup", "-c", p]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/recipients\.0: not an age X25519 recipient/);
    expect(r.stderr).not.toMatch(/internal error/);
    expect(json(await a.run(["snapshots", "--json"])).length).toBe(before);
  });

  it("tenants are isolated: the same agent id under two tenants has its own sequence, latest and drills", async () => {
    const g = await makeAgent({ sizeMb: 1, tenant: "globex", seed: 2 });
    try {
      // globex's agent writes into the same repository as acme's
      const cfg = JSON.parse(readFileSync(g.config, "utf8"));
      writeFileSync(g.config, JSON.stringify({ ...cfg, repository: a.repo }));
      appendFileSync(join(a.home, "allowed_signers"), readFileSync(join(g.home, "allowed_signers")));
      appendFileSync(join(g.home, "allowed_signers"), readFileSync(join(a.home, "allowed_signers")));
      const gb = json(await g.run(["backup", "--json"]));
      expect(gb.sequence).toBe(1);
      expect(gb.path).toContain("/tenants/globex/agents/billing-agent/snapshots/");
      const acmeNext = json(await a.run(["backup", "--json"]));
      expect(acmeNext.sequence).toBeGreaterThan(2);
      const gl = json(await g.run(["restore", "latest", "--target", join(g.tmp, "t"), "--dry-run", "--json"]));
      expect(gl.plan.snapshot_id).toBe(gb.snapshot_id);
      expect((await g.run(["restore", "latest", "--target", join(g.tmp, "t"), "--yes"])).code).toBe(3);
      const al = json(await a.run(["restore", "latest", "--target", join(a.tmp, "t-acme"), "--dry-run", "--json"]));
      expect(al.plan.snapshot_id).toBe(acmeNext.snapshot_id);
      const gd = json(await g.run(["drill", "latest", "--spec", join(ROOT, "drills/checks-only.json"), "--identity", g.identity, "--json"]));
      expect(gd.snapshot_id).toBe(gb.snapshot_id);
      expect(gd.tenant).toBe("globex");
      const listed = json(await g.run(["snapshots", "--json"]));
      expect(listed.map((e: any) => e.snapshot_id)).toEqual([gb.snapshot_id]);
      // globex's backup, restore, drill and listing read only globex's folders: no acme bundle was read (nor cached)
      const gkey = readFileSync(join(g.home, "cache", "headers.key"));
      const caches = readdirSync(join(g.home, "cache"))
        .filter((f) => f.startsWith("headers-") && f.endsWith(".bin"))
        .map((f) => decodeCacheFile(readFileSync(join(g.home, "cache", f)), gkey)!)
        .filter((c) => c.url === a.repo);
      expect(caches.map((c) => c.scope)).toEqual(["tenants/globex/agents/billing-agent/snapshots|agents/billing-agent"]);
      expect([...caches[0]!.entries.keys()]).toEqual([`tenants/globex/agents/billing-agent/snapshots/${gb.snapshot_id}.agentbak`]);
      const all = json(await a.run(["snapshots", "--repo", a.repo, "--agent", "billing-agent", "--tenant", "globex", "--json"]));
      expect(all.map((e: any) => e.tenant)).toEqual(["globex"]);
    } finally {
      g.cleanup();
    }
  });

  const V1 = join(ROOT, "fixtures/repositories/v1-local");
  /** An agent whose repository holds what agentbak 0.1 wrote (layout v1, bundle format 1: a full and an incremental). */
  async function v1Agent() {
    const exp = JSON.parse(readFileSync(join(V1, "expected.json"), "utf8"));
    const t = await makeAgent({ sizeMb: 1, seed: 3 });
    appendFileSync(join(t.home, "allowed_signers"), readFileSync(join(V1, "keys/test-allowed_signers")));
    cpSync(join(V1, "keys/test-page-index-key"), join(t.home, "page-index-key"));
    // the same files, in a folder or uploaded into a bucket as 0.1 laid them out there (commit objects, no config)
    const st = await storeAt(t.repo);
    for (const f of ["agentbak-repository.json", ...["full", "incremental"].flatMap((k) => [`${exp[k].snapshot_id}.agentbak`, `${exp[k].snapshot_id}.state.pageindex`].map((x) => `agents/billing-agent/${x}`)), "state/sequence-billing-agent.json", "drills/report.jsonl"]) {
      if (STORE === "s3" && f === "agentbak-repository.json") continue;
      await st.put(f, readFileSync(join(V1, "repository", f)));
    }
    if (STORE === "s3") for (const k of ["full", "incremental"]) await st.put(`agents/billing-agent/${exp[k].snapshot_id}.commit`, "{}");
    return { t, exp, identity: join(V1, "keys/test-age-identity.txt") };
  }

  it("a repository written by agentbak 0.1 (layout v1) is still read, restored from, and continued", async () => {
    const { t, exp } = await v1Agent();
    const fx = V1;
    try {
      const listed = json(await t.run(["snapshots", "--json"]));
      const old = listed.filter((e: any) => e.signer === "agentbak" && e.snapshot_id < exp.incremental.snapshot_id + "~");
      expect(old.map((e: any) => [e.snapshot_id, e.status, e.tenant, e.kind])).toEqual([
        [exp.full.snapshot_id, "ok", "acme", "full"],
        [exp.incremental.snapshot_id, "ok", "acme", "incremental"],
      ]);
      const id = join(fx, "keys/test-age-identity.txt");
      expect((await t.run(["verify", exp.incremental.snapshot_id, "--identity", id])).code).toBe(0);
      const target = join(t.tmp, "v1-restored");
      const r = await t.run(["restore", exp.incremental.snapshot_id, "--target", target, "--identity", id, "--yes"]);
      expect([0, 3], r.stderr).toContain(r.code);
      expect(sha(join(target, "state/agent.sqlite"))).toBe(exp.incremental.state_sha256);
      // the next backup continues the sequence; 0.1's page index holds keyed hashes, which no pages root (bundle
      // format 4) is made of: the first incremental asked for after the upgrade is full, and says why
      const upgraded = await t.run(["backup", "--incremental", "--json"]);
      expect(upgraded.code, upgraded.stderr).toBe(0); // routine after an upgrade: no warning
      const next = json(upgraded);
      expect(next.sequence).toBe(3);
      expect(next).toMatchObject({ kind: "full", parent: null, full_reason: `${exp.incremental.snapshot_id} was made by an earlier agentbak (bundle format 1), whose page index an incremental can not build on` });
      expect(next.warnings).toEqual([]);
      expect(next.path).toContain(`/${SNAPS}/`);
      // and the one after builds on it
      expect(json(await t.run(["backup", "--incremental", "--json"]))).toMatchObject({ kind: "incremental", parent: next.snapshot_id });
      // the drill report 0.1 kept for all agents still counts for forget
      const f = json(await t.run(["forget", "--keep-last", "1", "--dry-run", "--json"]));
      expect(f.kept.map((k: any) => k.snapshot_id)).toEqual(expect.arrayContaining([exp.incremental.snapshot_id, exp.full.snapshot_id, next.snapshot_id]));
      expect(f.kept.find((k: any) => k.snapshot_id === exp.incremental.snapshot_id).reasons).toContain("newest snapshot that passed a drill");
    } finally {
      t.cleanup();
    }
  });

  it("compact of an incremental 0.1 wrote makes a full snapshot with a page index of its own: the next incremental builds on it (exit 0)", async () => {
    const { t, exp, identity } = await v1Agent();
    try {
      const c = await t.run(["compact", exp.incremental.snapshot_id, "--identity", identity, "--json"]);
      expect(c.code, c.stderr).toBe(0);
      const compacted = json(c);
      expect(compacted.replaces).toBe(exp.incremental.snapshot_id);
      const listed = json(await t.run(["snapshots", "--json"]));
      expect(listed.find((e: any) => e.snapshot_id === compacted.snapshot_id)).toMatchObject({ kind: "full", status: "ok" });
      // the 0.1 index held keyed hashes: compact indexed the rebuilt database afresh, under this host's key
      const inc = await t.run(["backup", "--incremental", "--json"]);
      expect(inc.code, inc.stderr).toBe(0);
      expect(json(inc)).toMatchObject({ kind: "incremental", parent: compacted.snapshot_id, full_reason: null, warnings: [] });
      const target = join(t.tmp, "after-compact");
      // the compacted full is encrypted to 0.1's recipient, the incremental to this agent's: one identity file with both
      const both = join(t.tmp, "both-identities.txt");
      writeFileSync(both, readFileSync(t.identity, "utf8") + "\n" + readFileSync(identity, "utf8"));
      const r = await t.run(["restore", json(inc).snapshot_id, "--target", target, "--identity", both, "--yes"]);
      expect([0, 3], r.stderr).toContain(r.code);
      const dump = async (p: string) => (await execa("sqlite3", [p, ".dump"])).stdout;
      expect(await dump(join(target, "state/agent.sqlite"))).toBe(await dump(join(t.dir, "state/agent.sqlite")));
    } finally {
      t.cleanup();
    }
  });
});
