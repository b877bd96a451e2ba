// Issue 32, the fifteenth attack (docs/security-edges.md "Fifteenth attack"): the spool made immutable under a
// backup and a flush. Each case failed on the build before its fix, through the real binary, a real immutable
// folder (chattr +i: the tests run as root, which modes do not stop) and the S3 gateway of AGENTBAK_TEST_S3_ENDPOINT.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { closedPort, json, makeAgent, makeBucket, SNAPS, type TestAgent } from "../helpers.js";

const endpoint = process.env.AGENTBAK_TEST_S3_ENDPOINT;

/** Whether chattr +i works here (root on a filesystem with the attribute). */
async function immutableWorks(dir: string): Promise<boolean> {
  const r = await execa("chattr", ["+i", dir], { reject: false });
  if (r.exitCode === 0) await execa("chattr", ["-i", dir]);
  return r.exitCode === 0;
}

describe.skipIf(!endpoint)("[E10] a spool folder that can not be written", () => {
  let a: TestAgent;
  let closed: string;
  let first: string;
  const up = () => ({ AGENTBAK_S3_ENDPOINT: endpoint! });
  const snaps = () => join(a.home, "spool", readdirSync(join(a.home, "spool"))[0]!, SNAPS);
  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
    const bucket = `edges15-${randomBytes(4).toString("hex")}`;
    await makeBucket(bucket);
    writeFileSync(a.config, JSON.stringify({ ...JSON.parse(readFileSync(a.config, "utf8")), repository: `s3://${bucket}/repo` }, null, 2));
    expect((await a.run(["init"], up())).code).toBe(0);
    closed = await closedPort();
    const r = await a.run(["backup", "--json"], { AGENTBAK_S3_ENDPOINT: closed });
    expect(r.code, r.stderr).toBe(3);
    first = json(r).snapshot_id;
  }, 180_000);
  afterAll(async () => {
    await execa("chattr", ["-i", snaps()], { reject: false });
    a?.cleanup();
  });

  it("[E10] the spool's folder immutable, the repository down: the backup says it was spooling, that nothing was kept, and what was spooled stays", async (ctx) => {
    if (!(await immutableWorks(snaps()))) ctx.skip();
    await execa("chattr", ["+i", snaps()]);
    try {
      const r = await a.run(["backup"], { AGENTBAK_S3_ENDPOINT: closed });
      // before the fix: exit 1, "agentbak: EPERM: operation not permitted, open '<spool>/…/.tmp-….pageindex-…'"
      expect(r.code, r.stderr).toBe(1);
      expect(r.stderr.trim().split("\n")).toHaveLength(1);
      expect(r.stderr).toContain(`is unreachable (`);
      expect(r.stderr).toContain(`and spooling the backup into ${join(a.home, "spool")}`);
      expect(r.stderr).toContain("nothing was committed or spooled (what was spooled before stays there): EPERM");
      expect(readdirSync(snaps()).filter((f) => f.endsWith(".agentbak"))).toEqual([`${first}.agentbak`]);
    } finally {
      await execa("chattr", ["-i", snaps()]);
    }
  });

  it("[E10] a flush whose spooled copy can not be removed: uploaded once, said so (3), the next flush finds it already there", async (ctx) => {
    if (!(await immutableWorks(snaps()))) ctx.skip();
    await execa("chattr", ["+i", snaps()]);
    try {
      const f = await a.run(["flush"], up());
      // before the fix: exit 1, "agentbak: ENOTDIR: not a directory, scandir '<spool>/…/<id>.agentbak'" - the bundle uploaded all the same
      expect(f.code, f.stderr).toBe(3);
      expect(f.stderr).not.toContain("ENOTDIR");
      expect(f.stderr).toContain("1 spooled snapshot(s) uploaded");
      expect(f.stderr).toContain(`spooled snapshot ${first} is committed in s3://`);
      expect(f.stderr).toContain("but its spooled copy could not be removed (EPERM: operation not permitted, unlink");
      const again = await a.run(["flush", "--json"], up());
      expect(again.code, again.stderr).toBe(3);
      expect(json(again)[0]).toMatchObject({ flushed: [], already: [first] });
    } finally {
      await execa("chattr", ["-i", snaps()]);
    }
    const last = await a.run(["flush", "--json"], up());
    expect(last.code, last.stderr).toBe(0);
    expect(json(last)[0]).toMatchObject({ flushed: [], already: [first], warnings: [] });
    const list = json(await a.run(["snapshots", "--json"], up()));
    expect(list.map((s: { snapshot_id: string }) => s.snapshot_id)).toEqual([first]);
  });
});
