// kill -9 at every instrumented step of backup and restore, and I/O faults
// (ENOSPC on a small tmpfs, a read-only filesystem): the repository lists only
// bundles that verify, a target holds exactly the old or the new state, and
// leftovers are swept by the next run.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, type TestAgent } from "./helpers.js";
import { CRASH_STEPS } from "../dist/crashpoint.js";

let a: TestAgent;
beforeAll(async () => {
  a = await makeAgent({ sizeMb: 2 });
});
afterAll(() => a.cleanup());

async function listedAllVerify(t: TestAgent): Promise<number> {
  const s = json(await t.run(["snapshots", "--json"]));
  for (const e of s) {
    expect(e.status, e.problem).toBe("ok");
    const v = await t.run(["verify", e.snapshot_id, "--identity", t.identity]);
    expect(v.code, v.stderr).toBe(0);
  }
  return s.length;
}

describe("kill -9 during backup", () => {
  it.each(CRASH_STEPS.backup)("at %s: only verifiable bundles are listed; the next run sweeps leftovers and sequences stay unique", async (step) => {
    const r = await a.run(["backup", "--idempotency-key", `k-${step}`], { AGENTBAK_CRASH_STEP: step });
    expect(r.code).toBe(-1); // killed by a signal
    await listedAllVerify(a);
    const after = await a.run(["backup", "--json", "--idempotency-key", `k-${step}`]);
    expect(after.code, after.stderr).toBe(0);
    const rec = json(after);
    expect(await (await a.store()).head(rec.path.slice(a.repo.length + 1))).not.toBe(null);
    expect(a.leftovers()).toEqual([]);
    const seqs = json(await a.run(["snapshots", "--json"])).map((e: any) => e.sequence);
    expect(new Set(seqs).size).toBe(seqs.length);
    // the idempotency key gives exactly one snapshot, whichever side of the crash published it
    const again = json(await a.run(["backup", "--json", "--idempotency-key", `k-${step}`]));
    expect(again.snapshot_id).toBe(rec.snapshot_id);
  });
});

describe("kill -9 during restore", () => {
  it.each(CRASH_STEPS.restore)("at %s: the target is absent or a complete, suspended restore", async (step) => {
    const target = join(a.tmp, `crash-${step}`);
    const r = await a.run(["restore", "latest", "--target", target, "--yes", "--allow-rollback"], { AGENTBAK_CRASH_STEP: step });
    expect(r.code).toBe(-1);
    if (existsSync(target)) {
      // new state: every piece in place, integrity ok, and suspended
      expect(existsSync(join(target, ".agentbak/SUSPENDED"))).toBe(true);
      const ic = await execa("sqlite3", [join(target, "state/agent.sqlite"), "PRAGMA integrity_check"]);
      expect(ic.stdout).toBe("ok");
      expect(existsSync(join(target, "workspace/src/draft-reply.txt"))).toBe(true);
    }
    // the next restore sweeps the dead run's staging folder
    const again = await a.run(["restore", "latest", "--target", join(a.tmp, `after-${step}`), "--yes", "--allow-rollback"]);
    expect([0, 3]).toContain(again.code);
    expect(readdirSync(a.tmp).filter((e) => e.startsWith(".agentbak-restore-"))).toEqual([]);
  });
});

describe("I/O faults", () => {
  const mnt = () => join(a.tmp, "mnt");
  async function mount(opts: string): Promise<boolean> {
    mkdirSync(mnt(), { recursive: true });
    const r = await execa("mount", ["-t", "tmpfs", "-o", opts, "tmpfs", mnt()], { reject: false });
    return r.exitCode === 0;
  }
  const umount = () => execa("umount", [mnt()], { reject: false });

  it("ENOSPC: backup into a full filesystem exits non-zero naming errno, lists nothing, leaves no partial file", async (ctx) => {
    if (!(await mount("size=1m"))) return ctx.skip();
    try {
      const repo = join(mnt(), "repo");
      const { Repository } = await import("../dist/repository/repository.js");
      await Repository.init(repo);
      const r = await a.run(["backup", "--repo", repo]);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/ENOSPC|disk is full/);
      expect(r.stderr).toContain(repo);
      expect(r.stderr).not.toMatch(/internal error/);
      expect(json(await a.run(["snapshots", "--repo", repo, "--json"]))).toEqual([]);
      expect(readdirSync(join(repo, "tmp"))).toEqual([]);
      const snaps = join(repo, "tenants", "acme", "agents", "billing-agent", "snapshots");
      expect(existsSync(snaps) ? readdirSync(snaps) : []).toEqual([]);
    } finally {
      await umount();
    }
  });

  it("EROFS: restore under a read-only filesystem exits non-zero naming errno and writes nothing", async (ctx) => {
    expect((await a.run(["backup"])).code).toBe(0);
    if (!(await mount("size=4m,ro"))) return ctx.skip();
    try {
      const r = await a.run(["restore", "latest", "--target", join(mnt(), "t"), "--yes", "--allow-rollback"]);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/EROFS/);
      expect(readdirSync(mnt())).toEqual([]);
    } finally {
      await umount();
    }
  });
});
