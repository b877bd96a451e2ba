// Issue 32, the fifth attack (repository side): what a damaged or hostile repository can make agentbak say about the
// chunk store, the newest snapshot and an export's output, each case through the real binary on a real agent with a
// 3 MiB file stored as chunks in a folder repository. See docs/security-edges.md, "Fifth attack (repository side)".
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cpSync, existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { chunkedAgent, chunkFiles, json, makeAgent, type TestAgent } from "../helpers.js";

const AGENT_DIR = "tenants/acme/agents/billing-agent";

describe("[E1] a chunk deleted behind the known-chunks index", () => {
  let a: TestAgent;
  beforeAll(async () => {
    a = await chunkedAgent();
    expect((await a.run(["backup"])).code).toBe(0);
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E1] the next backup stores it again: the new snapshot verifies (never committed naming a chunk the repository lacks)", async () => {
    const victim = chunkFiles(a)[0]!;
    rmSync(join(a.repo, AGENT_DIR, "chunks", victim));
    const b = await a.run(["backup", "--json"]);
    expect(b.code, b.stderr).toBe(0);
    expect(existsSync(join(a.repo, AGENT_DIR, "chunks", victim))).toBe(true);
    const v = await a.run(["verify", json(b).snapshot_id, "--identity", a.identity]);
    expect(v.code, v.stderr).toBe(0);
  });
});

describe("[E1] the newest snapshot this host committed, gone from the repository or damaged there", () => {
  let a: TestAgent;
  let first: string;
  let second: string;
  let saved: string;
  const snaps = () => join(a.repo, AGENT_DIR, "snapshots");
  const newestFiles = () => readdirSync(snaps()).filter((f) => f.startsWith(second));

  beforeAll(async () => {
    a = await chunkedAgent();
    first = json(await a.run(["backup", "--json"])).snapshot_id;
    second = json(await a.run(["backup", "--json"])).snapshot_id;
    saved = join(a.tmp, "saved");
    mkdirSync(saved);
    for (const f of newestFiles()) cpSync(join(snaps(), f), join(saved, f));
  }, 120_000);
  afterAll(() => a?.cleanup());
  const putBack = () => {
    for (const f of readdirSync(saved)) cpSync(join(saved, f), join(snaps(), f));
  };

  it("[E1] deleted (bundle, commit marker, page index): status warns (3) naming both sequences; restore latest and verify latest are 14, never the older one as latest", async () => {
    for (const f of newestFiles()) rmSync(join(snaps(), f));
    try {
      const s = await a.run(["status", "--json"]);
      expect(s.code, s.stderr).toBe(3);
      const snap = json(s).agents[0].checks.filter((c: any) => c.name === "snapshot" && c.state === "warn");
      expect(snap.map((c: any) => c.detail).join("\n")).toMatch(/newest verified snapshot is sequence 1, but this host committed sequence 2 there/);
      const r = await a.run(["restore", "latest", "--target", join(a.tmp, "t1"), "--yes"]);
      expect(r.code, r.stderr).toBe(14);
      expect(r.stderr).toMatch(/rollback: latest of acme\/billing-agent in .* is sequence 1, but this host committed sequence 2 there/);
      expect(existsSync(join(a.tmp, "t1"))).toBe(false);
      expect((await a.run(["verify", "latest"])).code).toBe(14);
      // what is there stays usable on purpose: by its id, or latest with --allow-rollback
      expect((await a.run(["verify", first])).code).toBe(0);
      const ok = await a.run(["restore", "latest", "--target", join(a.tmp, "t2"), "--yes", "--allow-rollback", "--json"]);
      expect([0, 3], ok.stderr).toContain(ok.code);
      expect(json(ok).plan.snapshot_id).toBe(first);
    } finally {
      putBack();
    }
  });

  it("[E1] its bundle damaged (one byte flipped in the signature): restore latest is 14 naming sequence 2, not the older snapshot restored", async () => {
    const bundle = join(snaps(), `${second}.agentbak`);
    const b = readFileSync(bundle);
    b[700] = b[700]! ^ 0xff; // inside manifest.json or manifest.sig: the signature no longer verifies
    writeFileSync(bundle, b);
    try {
      const r = await a.run(["restore", "latest", "--target", join(a.tmp, "t3"), "--yes"]);
      expect(r.code, r.stderr).toBe(14);
      expect(r.stderr).toMatch(/committed sequence 2 there/);
      expect(existsSync(join(a.tmp, "t3"))).toBe(false);
    } finally {
      putBack();
    }
  });

  it("[E1] put back: status and restore latest as before (the newest is sequence 2)", async () => {
    const s = await a.run(["status", "--json"]);
    expect(json(s).agents[0].checks.some((c: any) => /this host committed/.test(c.detail))).toBe(false);
    const r = await a.run(["verify", "latest", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    expect(json(r).snapshot_id).toBe(second);
  });
});

describe("[E1] export never replaces a name at --out", () => {
  let a: TestAgent;
  beforeAll(async () => {
    a = await chunkedAgent();
    expect((await a.run(["backup"])).code).toBe(0);
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E1] --out a symbolic link to nothing: 2, the link left as it was and nothing written where it points", async () => {
    const out = join(a.tmp, "out.agentbak");
    const where = join(a.tmp, "nowhere.agentbak");
    symlinkSync(where, out);
    const r = await a.run(["export", "latest", "-o", out, "--identity", a.identity]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/--out .*out\.agentbak exists; name a new file/);
    expect(lstatSync(out).isSymbolicLink()).toBe(true);
    expect(existsSync(where)).toBe(false);
    expect(readdirSync(a.tmp).filter((f) => f.startsWith(".agentbak-export"))).toEqual([]);
  });

  it("[E1] a new name: exported, and the staging folder is gone", async () => {
    const out = join(a.tmp, "fresh.agentbak");
    const r = await a.run(["export", "latest", "-o", out, "--identity", a.identity]);
    expect(r.code, r.stderr).toBe(0);
    expect((await a.run(["verify", out])).code).toBe(0);
    expect(readdirSync(a.tmp).filter((f) => f.startsWith(".agentbak-export"))).toEqual([]);
  });
});
