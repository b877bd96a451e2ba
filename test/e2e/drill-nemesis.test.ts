// Fault nemeses through the real binary: each crash scenario the spec names is
// replayed under libfaketime (±1 h) and under a lost un-fsynced write (an
// LD_PRELOAD shim copies each file the worker fsyncs; after the crash the rest
// is dropped). The correct reference worker recovers in every cell; a worker
// that sends before its claim is on disk (WORKER_FAULT=unsynced_key) passes the
// plain crash point and is caught by the lost-write cell.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { execa, execaSync } from "execa";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { json, makeAgent, makeBucket, ROOT, writeSpec, type TestAgent } from "../helpers.js";

let a: TestAgent;
const SPEC = join(ROOT, "drills", "reference-agent.json");

beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
  const b = await a.run(["backup", "--json"]);
  expect(b.code, b.stderr).toBe(0);
});
afterAll(() => a.cleanup());

const drill = (spec: string, extra: string[] = []) => a.run(["drill", "latest", "--spec", spec, "--identity", a.identity, "--json", "--no-report", ...extra], { OPENAI_API_KEY: "x" });
const cell = (d: any, scenario: string, nemesis: string) => d.nemeses.find((c: any) => c.scenario === scenario && c.nemesis === nemesis);

describe("drill nemeses", () => {
  it("the correct worker recovers in every cell of the matrix (clock ±1 h, lost un-fsynced write), each listed with its checks", async () => {
    const spec = writeSpec(a.tmp, "nem", SPEC, (s) => {
      s.crashPoints = ["after_commit_before_delivery", "after_send_before_receipt"];
      s.sinkKill = true;
      s.nemeses = { after_send_before_receipt: ["clock_ahead_1h", "clock_behind_1h", "lost_write"], after_commit_before_delivery: ["lost_write"], sink_kill: ["lost_write"] };
    });
    const junit = join(a.tmp, "nem.xml");
    const r = await drill(spec, ["--junit", junit]);
    expect([0, 3], r.stderr).toContain(r.code);
    const d = json(r);
    expect(d.nemeses.map((c: any) => [c.scenario, c.nemesis, c.result])).toEqual([
      ["after_send_before_receipt", "clock_ahead_1h", "recovered"],
      ["after_send_before_receipt", "clock_behind_1h", "recovered"],
      ["after_send_before_receipt", "lost_write", "recovered"],
      ["after_commit_before_delivery", "lost_write", "recovered"],
      ["sink_kill", "lost_write", "recovered"],
    ]);
    for (const c of d.nemeses) expect(c.detail).toMatch(/^task complete, 1 effect\(s\), after [1-9]\d* restart\(s\)$/);
    // the fault was really applied: the clock shifted in the restarts, the shim copied what the worker fsynced and the rest was dropped
    const nem = (sc: string) => d.checks.find((c: any) => c.scenario === sc && c.name.startsWith("nemesis "));
    expect(nem("after_send_before_receipt~clock_ahead_1h").detail).toBe("restarts ran with the clock +1h (libfaketime)");
    expect(nem("after_send_before_receipt~clock_behind_1h").detail).toBe("restarts ran with the clock -1h (libfaketime)");
    expect(nem("after_send_before_receipt~lost_write").detail).toMatch(/^un-fsynced writes dropped: \d+ file\(s\) at their last fsync, \d+ back to the run's start, [1-9]\d* never fsynced removed$/);
    const xml = readFileSync(junit, "utf8");
    expect(xml).toContain('name="after_send_before_receipt × lost_write"');
    expect(xml).toMatch(/name="after_send_before_receipt~lost_write \/ after_recovery \/ exactly one effect"/);
  });

  it("a worker that sends before its claim is fsynced passes the plain crash point and is caught by lost_write, naming the nemesis and the check (15)", async () => {
    const spec = writeSpec(a.tmp, "unsynced", SPEC, (s) => {
      s.crashPoints = ["after_send_before_receipt"];
      s.sinkKill = false;
      s.worker.env = { WORKER_FAULT: "unsynced_key" };
      s.nemeses = { after_send_before_receipt: ["clock_ahead_1h", "lost_write"] };
    });
    const r = await drill(spec, ["--junit", join(a.tmp, "unsynced.xml")]);
    expect(r.code, r.stderr).toBe(15);
    const d = json(r);
    expect(d.scenarios.find((s: any) => s.scenario === "after_send_before_receipt")).toMatchObject({ ok: true, effects: 1 });
    expect(cell(d, "after_send_before_receipt", "clock_ahead_1h").result).toBe("recovered");
    const lost = cell(d, "after_send_before_receipt", "lost_write");
    expect(lost).toMatchObject({ result: "failed", check: "exactly one effect" });
    expect(lost.detail).toMatch(/^lost_write: exactly one effect: 2 effect\(s\) at the sink for drill-task-1/);
    expect(d.unresolved.join("\n")).toContain("after_send_before_receipt~lost_write: exactly one effect");
    const xml = readFileSync(join(a.tmp, "unsynced.xml"), "utf8");
    expect(xml).toMatch(/name="after_send_before_receipt × lost_write" time="[\d.]+">\s*<failure message="lost_write: exactly one effect: 2 effect/);
  });

  it("lost_write as a user that is not root: the workspace's read-only git objects are put back (it failed the whole drill, 1, EACCES on copyfile)", async (ctx) => {
    if (process.getuid?.() !== 0 || (await execa("sh", ["-c", "command -v setpriv"], { reject: false })).exitCode !== 0) return ctx.skip();
    // the drill runs as nobody: its worker is sealed in a user namespace, which this host must let nobody make
    const userns = await execa("setpriv", ["--reuid=nobody", "--regid=nogroup", "--clear-groups", "unshare", "-rn", "--", "ip", "link", "set", "lo", "up"], { reject: false });
    if (userns.exitCode !== 0) return ctx.skip(`nobody can not make a user namespace here (${String(userns.stderr).trim()}): the drill would run its worker unsealed`);
    const b = await makeAgent({ sizeMb: 1, seed: 7 });
    try {
      expect((await b.run(["backup"])).code).toBe(0);
      await execa("chown", ["-R", "nobody", b.tmp]);
      // git's objects are 0444: a non-root owner can replace them only by name, never open them for writing
      const ro = readdirSync(join(b.dir, "workspace/.git/objects"), { recursive: true }).map(String).filter((f) => /^[0-9a-f]{2}\/[0-9a-f]{38}$/.test(f));
      expect(ro.length).toBeGreaterThan(0);
      const spec = writeSpec(b.tmp, "nobody-lw", SPEC, (s) => {
        s.crashPoints = ["after_send_before_receipt"];
        s.sinkKill = false;
        s.nemeses = { after_send_before_receipt: ["lost_write"] };
      });
      await execa("chown", ["nobody", spec]);
      const args = ["drill", "latest", "--spec", spec, "--identity", b.identity, "--json", "--no-report"];
      const r = await execa("setpriv", ["--reuid=nobody", "--regid=nogroup", "--clear-groups", "node", join(ROOT, "bin/agentbak.js"), ...args], { cwd: b.dir, env: { ...process.env, ...b.env, NO_COLOR: "1", OPENAI_API_KEY: "x" }, reject: false, timeout: 170_000 });
      expect([0, 3], r.stderr).toContain(r.exitCode);
      const d = JSON.parse(r.stdout);
      expect(cell(d, "after_send_before_receipt", "lost_write")).toMatchObject({ result: "recovered" });
      // the report says how the worker was sealed: not root, inside a user namespace
      expect(d.network).toMatchObject({ sealed: true, detail: expect.stringContaining("inside a user namespace (unshare -rn: not root)") });
    } finally {
      b.cleanup();
    }
  }, 180_000);

  it("enospc: the restore placed again on a tmpfs half the restored size stops naming the fault (contained), and the tmpfs is unmounted", async () => {
    const spec = writeSpec(a.tmp, "enospc", SPEC, (s) => {
      s.crashPoints = [];
      s.sinkKill = false;
      s.nemeses = { restore: ["enospc"] };
    });
    const r = await drill(spec, ["--junit", join(a.tmp, "enospc.xml")]);
    expect([0, 3], r.stderr).toContain(r.code);
    const d = json(r);
    expect(d.nemeses).toHaveLength(1);
    expect(d.nemeses[0]).toMatchObject({ scenario: "restore", nemesis: "enospc", result: "contained", check: null });
    expect(d.nemeses[0].detail).toMatch(/^the restore stopped in \d+ bytes naming it: .*(ENOSPC|no space left|disk is full)/i);
    expect(d.checks).toContainEqual(expect.objectContaining({ scenario: "restore~enospc", name: "nemesis enospc", ok: true }));
    expect(readFileSync("/proc/mounts", "utf8")).not.toContain(a.tmp);
    expect(readFileSync(join(a.tmp, "enospc.xml"), "utf8")).toContain('name="restore × enospc"');
  });

  it("eio: agentbak restore run again with its target's writes failing with EIO halfway (LD_PRELOAD) stops naming EIO, nothing half-placed, the agent's repository and this host's state untouched (contained)", async () => {
    const spec = writeSpec(a.tmp, "eio", SPEC, (s) => {
      s.crashPoints = [];
      s.sinkKill = false;
      s.nemeses = { restore: ["eio"] };
    });
    const repoBefore = readdirSync(a.repo, { recursive: true }).sort();
    const homeState = () => readdirSync(a.home, { recursive: true, withFileTypes: true }).filter((e) => e.isFile()).map((e) => [join(e.parentPath, e.name), readFileSync(join(e.parentPath, e.name), "utf8")]).sort();
    const homeBefore = homeState();
    const r = await drill(spec, ["--junit", join(a.tmp, "eio.xml")]);
    expect([0, 3], r.stderr).toContain(r.code);
    const d = json(r);
    expect(d.nemeses).toHaveLength(1);
    expect(d.nemeses[0], d.nemeses[0].detail).toMatchObject({ scenario: "restore", nemesis: "eio", result: "contained", check: null });
    expect(d.nemeses[0].detail).toMatch(/^the restore stopped after [1-9]\d* bytes naming it \(exit [1-9]\d*\), nothing left in the placement folder: .*EIO: i\/o error/);
    expect(d.checks).toContainEqual(expect.objectContaining({ scenario: "restore~eio", name: "nemesis eio", ok: true }));
    expect(readFileSync(join(a.tmp, "eio.xml"), "utf8")).toContain('name="restore × eio"');
    // the child restored into a throwaway repository with a copy of AGENTBAK_HOME: no generation, lock or receipt in the
    // agent's repository, and this host's trusted state as it was
    expect(readdirSync(a.repo, { recursive: true }).sort()).toEqual(repoBefore);
    expect(homeState()).toEqual(homeBefore);
  });

  it("eio where the fault can not be made (no cc on the PATH) fails the drill (15) naming the nemesis, never a silent pass", async () => {
    const bin = join(a.tmp, "bin-without-cc");
    mkdirSync(bin, { recursive: true });
    symlinkSync(process.execPath, join(bin, "node"));
    for (const tool of ["git"]) symlinkSync(execaSync("sh", ["-c", `command -v ${tool}`]).stdout, join(bin, tool));
    const spec = writeSpec(a.tmp, "eio-nocc", SPEC, (s) => {
      s.crashPoints = [];
      s.sinkKill = false;
      s.nemeses = { restore: ["eio"] };
    });
    const r = await a.run(["drill", "latest", "--spec", spec, "--identity", a.identity, "--json", "--no-report"], { OPENAI_API_KEY: "x", PATH: bin });
    expect(r.code, r.stderr).toBe(15);
    const d = json(r);
    expect(d.nemeses[0]).toMatchObject({ scenario: "restore", nemesis: "eio", result: "failed", check: "nemesis eio" });
    expect(d.nemeses[0].detail).toMatch(/^eio: the EIO shim needs a C compiler \(cc\)/);
    expect(d.unresolved.join("\n")).toContain("nemesis eio");
  });

  it("a nemesis on a scenario the spec does not run, or a restore fault keyed by a crash point, is refused (2)", async () => {
    const wrong = writeSpec(a.tmp, "wrong", SPEC, (s) => {
      s.nemeses = { after_send_before_receipt: ["enospc"] };
    });
    const w = await drill(wrong);
    expect(w.code).toBe(2);
    expect(w.stderr).toMatch(/nemeses\.after_send_before_receipt: enospc is a fault of the restore/);
    const spec = writeSpec(a.tmp, "bad", SPEC, (s) => {
      s.crashPoints = ["after_send_before_receipt"];
      s.nemeses = { after_commit_before_delivery: ["lost_write"] };
    });
    const r = await drill(spec);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/nemeses\.after_commit_before_delivery: not a scenario of this spec/);
  });
});

// the object-store nemeses read the snapshot again from an S3 repository on the shared test gateway, through a fault proxy
describe.skipIf(!process.env.AGENTBAK_TEST_S3_ENDPOINT)("drill nemeses on the restore's reads from S3", () => {
  const s3 = { AGENTBAK_S3_ENDPOINT: process.env.AGENTBAK_TEST_S3_ENDPOINT, OPENAI_API_KEY: "x" };
  it("503 SlowDown is retried through and a reset mid-GET is resumed (recovered); a dropped part stops the restore naming the fault (contained); nothing passes silently", async () => {
    const bucket = `t-${randomBytes(5).toString("hex")}`;
    await makeBucket(bucket);
    const cfg = JSON.parse(readFileSync(a.config, "utf8"));
    writeFileSync(a.config, JSON.stringify({ ...cfg, repository: `s3://${bucket}/repo` }, null, 2));
    try {
      expect((await a.run(["init"], s3)).code).toBe(0);
      const b = await a.run(["backup", "--json"], s3);
      expect(b.code, b.stderr).toBe(0);
      const spec = writeSpec(a.tmp, "s3nem", SPEC, (s) => {
        s.crashPoints = [];
        s.sinkKill = false;
        s.nemeses = { restore: ["s3_503", "s3_reset", "s3_drop_part"] };
      });
      const r = await a.run(["drill", "latest", "--spec", spec, "--identity", a.identity, "--json", "--no-report"], s3);
      expect([0, 3], r.stderr).toContain(r.code);
      const d = json(r);
      const by = Object.fromEntries(d.nemeses.map((c: any) => [c.nemesis, c]));
      expect(by.s3_503).toMatchObject({ result: "recovered" });
      expect(by.s3_503.detail).toMatch(/^read, verified and placed through the fault \(2 of [3-9]\d* request\(s\) faulted\)/);
      expect(by.s3_reset, by.s3_reset.detail).toMatchObject({ result: "recovered" });
      expect(by.s3_reset.detail).toMatch(/^read, verified and placed through the fault \(1 of [2-9]\d* request\(s\) faulted\)/);
      expect(by.s3_drop_part, by.s3_drop_part.detail).toMatchObject({ result: "contained" });
      expect(by.s3_drop_part.detail).toMatch(/1 of \d+ request\(s\) faulted/);
    } finally {
      writeFileSync(a.config, JSON.stringify(cfg, null, 2));
    }
  });
});
