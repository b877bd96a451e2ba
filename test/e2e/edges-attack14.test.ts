// Issue 32, the fourteenth attack (docs/security-edges.md "Fourteenth attack"): fencing after copy, the spool's
// set-aside notes. Each case failed on the build before its fix, through the real binary, real folders and links,
// real processes, and (the spool) the S3 gateway of AGENTBAK_TEST_S3_ENDPOINT.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import { randomBytes } from "node:crypto";
import { closeSync, cpSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, renameSync, statSync, symlinkSync, unlinkSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import { closedPort, describeBackedUpAgent, flipByte, json, makeAgent, makeBucket, SNAPS, type TestAgent } from "../helpers.js";

const ACCEPT = ["--yes", "--accept-unresolved", "--reason", "attack14"];

describe("[E5] the restore record names the folder itself, not a path through a link", () => {
  const shared = describeBackedUpAgent();
  const t = shared.t;

  it("[E5] restored through a linked parent, the link then pointed at a copy of the folder: the copy is refused (13), the folder restored into activates", async () => {
    mkdirSync(t("P1"));
    mkdirSync(t("P2"));
    symlinkSync(t("P1"), t("L"));
    const r = await shared.a.run(["restore", "latest", "--target", t("L/x"), "--yes", "--json"]);
    expect([0, 3], r.stderr).toContain(r.code);
    expect(json(r).generation).toBe(1);
    // a second copy of the restored agent, and the link moved to it
    cpSync(t("P1/x"), t("P2/x"), { recursive: true });
    unlinkSync(t("L"));
    symlinkSync(t("P2"), t("L"));
    // before the fix the copy activated ("activated billing-agent at generation 1") and the real one was 13
    const copy = await shared.a.run(["activate", "--target", t("P2/x"), ...ACCEPT]);
    expect(copy.code, copy.stderr).toBe(13);
    expect(copy.stderr).toContain(`belongs to the restore into ${t("P1/x")}, not ${t("P2/x")}`);
    expect(copy.stderr).not.toContain("activated");
    const real = await shared.a.run(["activate", "--target", t("P1/x"), ...ACCEPT]);
    expect(real.code, real.stderr).toBe(3); // activated, the fixture's open operation accepted unresolved
    expect(real.stderr).toContain("activated billing-agent at generation 1");
  });

  it("[E5] the parent restored into moved away and replaced by a link to a copy: the copy is refused (13) under the very path restored into", async () => {
    mkdirSync(t("R1"));
    mkdirSync(t("R2"));
    const r = await shared.a.run(["restore", "latest", "--target", t("R1/x"), "--yes", "--json"]);
    expect([0, 3], r.stderr).toContain(r.code);
    cpSync(t("R1/x"), t("R2/x"), { recursive: true });
    renameSync(t("R1"), t("R1.moved"));
    symlinkSync(t("R2"), t("R1"));
    // before the fix the path matched the record as text, and the copy activated
    const copy = await shared.a.run(["activate", "--target", t("R1/x"), ...ACCEPT]);
    expect(copy.code, copy.stderr).toBe(13);
    expect(copy.stderr).toContain(`belongs to the restore into ${t("R1/x")}, not ${t("R2/x")}`);
  });

  it("[E5] a folder reached through a link to it, or named with a trailing slash or '..', is the same folder", async () => {
    mkdirSync(t("Q"));
    const r = await shared.a.run(["restore", "latest", "--target", `${t("Q")}/./y/../z/`, "--yes", "--json"]);
    expect([0, 3], r.stderr).toContain(r.code);
    symlinkSync(t("Q"), t("LQ"));
    const act = await shared.a.run(["activate", "--target", `${t("LQ/z")}/`, ...ACCEPT]);
    expect(act.code, act.stderr).toBe(3);
    expect(act.stderr).toContain(`activated billing-agent at generation ${json(r).generation}`);
  });
});

const endpoint = process.env.AGENTBAK_TEST_S3_ENDPOINT;


describe.skipIf(!endpoint)("[E10] a set-aside note's pid taken by another process", () => {
  let a: TestAgent;
  let closed: string;
  const up = () => ({ AGENTBAK_S3_ENDPOINT: endpoint! });
  const spoolRoot = () => join(a.home, "spool", readdirSync(join(a.home, "spool"))[0]!);
  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
    const bucket = `edges14-${randomBytes(4).toString("hex")}`;
    await makeBucket(bucket);
    writeFileSync(a.config, JSON.stringify({ ...JSON.parse(readFileSync(a.config, "utf8")), repository: `s3://${bucket}/repo` }, null, 2));
    expect((await a.run(["init"], up())).code).toBe(0);
    closed = await closedPort();
  }, 180_000);
  afterAll(() => a?.cleanup());

  it("[E10] a flush killed after setting a bundle aside, its pid now a live process's: the next flush still names it (3)", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) {
      const r = await a.run(["backup", "--json"], { AGENTBAK_S3_ENDPOINT: closed });
      expect(r.code, r.stderr).toBe(3);
      ids.push(json(r).snapshot_id);
    }
    flipByte(join(spoolRoot(), SNAPS, `${ids[0]}.agentbak`), -3000);
    const killed = await a.run(["flush", "--json"], { ...up(), AGENTBAK_CRASH_STEP: "flush-set-aside" });
    expect(killed.code, killed.stderr).toBe(-1);
    // the killed run's pid given to another process (pids are reused): a long-lived one holds it now
    const note = join(spoolRoot(), "tenants/acme/agents/billing-agent/quarantine", `${ids[0]}.problem.json`);
    const other = execa("sleep", ["120"]);
    try {
      writeFileSync(note, JSON.stringify({ ...JSON.parse(readFileSync(note, "utf8")), pid: other.pid }));
      // before the fix: exit 0, "1 spooled snapshot(s) uploaded", the set-aside bundle named by no one while `sleep` ran
      const next = await a.run(["flush"], up());
      expect(next.code, next.stderr).toBe(3);
      expect(next.stderr).toContain(`spooled snapshot ${ids[0]} does not verify, set aside by an earlier run that did not report it`);
    } finally {
      other.kill();
      await other.catch(() => undefined);
    }
  });
});
