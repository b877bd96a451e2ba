// Issue 32, the fourth attack (points 5, 7 and time skew): each case through the real binary on a
// real agent and a folder repository: a generation log entry replaced by a link, FIFO or folder (E5),
// the drill report cut back to an older signed head on a host that verified further (E7), and a
// snapshot dated a year ahead by a host's clock (libfaketime) taken for the newest by status (E1).
// See docs/security-edges.md, "Fourth attack".
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { BIN, json, backedUpAgent, makeAgent, ROOT, type RunResult, type TestAgent, secondHome } from "../helpers.js";

const AGENT_DIR = "tenants/acme/agents/billing-agent";

/** The real binary with its wall clock `shift` away (libfaketime). */
async function shifted(a: TestAgent, shift: string, args: string[]): Promise<RunResult> {
  const r = await execa("faketime", ["-f", shift, "node", BIN, ...args], { cwd: a.dir, env: { ...a.env, NO_COLOR: "1", FAKETIME_DONT_FAKE_MONOTONIC: "1" }, reject: false, stdin: "ignore" });
  return { code: r.exitCode ?? -1, stdout: String(r.stdout), stderr: String(r.stderr) };
}

describe("[E5] a generation log entry that is no regular file is damage (13), not a shorter log", () => {
  let a: TestAgent;
  let fresh = 0;
  const t = (n: string) => join(a.tmp, n);
  const entry = (g: number) => join(a.repo, AGENT_DIR, "generations", `${String(g).padStart(16, "0")}.json`);

  beforeAll(async () => {
    a = await backedUpAgent();
    for (const g of [1, 2]) {
      const r = await a.run(["restore", "latest", "--target", t(`g${g}`), "--yes", "--json"], secondHome(a, `restorer-${g}`));
      expect([0, 3], r.stderr).toContain(r.code);
      expect(json(r).generation).toBe(g);
    }
  }, 180_000);
  afterAll(() => a?.cleanup());

  for (const kind of ["a link to entry 1", "a FIFO", "a folder"]) {
    it(`[E5] entry 2 replaced by ${kind}, generation.json lowered to 1: fence check --generation 1 from a fresh host is 13 naming it`, async () => {
      const rec = join(a.repo, AGENT_DIR, "generation.json");
      const [good, goodRec] = [readFileSync(entry(2)), readFileSync(rec)];
      rmSync(entry(2));
      if (kind === "a FIFO") execFileSync("mkfifo", [entry(2)]);
      else if (kind === "a folder") mkdirSync(entry(2));
      else symlinkSync(entry(1), entry(2));
      writeFileSync(rec, JSON.stringify({ ...JSON.parse(goodRec.toString()), generation: 1 }));
      try {
        const f = await a.run(["fence", "check", "--target", t("g1"), "--generation", "1"], secondHome(a, `fresh-${fresh++}`));
        expect(f.code, f.stdout + f.stderr).toBe(13);
        expect(f.stderr).toMatch(/generation log .* is damaged: tenants\/acme\/agents\/billing-agent\/generations\/0000000000000002\.json is not a regular file/);
        expect(f.stdout).not.toMatch(/is current/);
      } finally {
        rmSync(entry(2), { recursive: true, force: true });
        writeFileSync(entry(2), good);
        writeFileSync(rec, goodRec);
      }
      // put back, the log holds again: generation 1 is superseded by 2 (14), 2 is current
      expect((await a.run(["fence", "check", "--target", t("g1"), "--generation", "1"], secondHome(a, `fresh-${fresh++}`))).code).toBe(14);
    }, 60_000);
  }
});

describe("[E7] report verify keeps this host's trusted state as audit verify does, and names the agent", () => {
  let a: TestAgent;
  const report = () => join(a.repo, AGENT_DIR, "drills/report.jsonl");
  const head = () => join(a.repo, AGENT_DIR, "drills/report.head.json");
  const drill = () => a.run(["drill", "latest", "--spec", join(ROOT, "drills/checks-only.json"), "--identity", a.identity]);

  beforeAll(async () => {
    a = await backedUpAgent();
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E7] the report cut to 2 entries with the older genuine head put back: 13 on the host that verified 3", async () => {
    for (let i = 0; i < 2; i++) expect([0, 3]).toContain((await drill()).code);
    const [twoLines, twoHead] = [readFileSync(report(), "utf8"), readFileSync(head())];
    expect([0, 3]).toContain((await drill()).code);
    const v = await a.run(["report", "verify"]);
    expect(v.code, v.stderr).toBe(0);
    expect(v.stdout + v.stderr).toMatch(/3 entries verified \(acme\/billing-agent\)/);
    const [whole, wholeHead] = [readFileSync(report(), "utf8"), readFileSync(head())];
    writeFileSync(report(), twoLines);
    writeFileSync(head(), twoHead);
    try {
      const r = await a.run(["report", "verify"]);
      expect(r.code, r.stdout + r.stderr).toBe(13);
      expect(r.stderr).toMatch(/drills\/report\.jsonl in .* was cut short or replaced: this host's trusted state .* names 3 entries .* holds only 2/);
      // another host, which never verified it, can not tell (the head and the log agree)
      expect((await a.run(["report", "verify"], secondHome(a, "other-host"))).code).toBe(0);
    } finally {
      writeFileSync(report(), whole);
      writeFileSync(head(), wholeHead);
    }
    expect((await a.run(["report", "verify"])).code).toBe(0);
  }, 180_000);

  it("[E7] report verify FILE names the agent its entries are of, and refuses another agent's with --agent (13)", async () => {
    const file = join(a.tmp, "copied-report.jsonl");
    cpSync(report(), file);
    const ok = await a.run(["report", "verify", file, "--json"]);
    expect(ok.code, ok.stderr).toBe(0);
    expect(json(ok).agents).toEqual(["acme/billing-agent"]);
    const other = await a.run(["report", "verify", file, "--agent", "support-agent", "--tenant", "acme"]);
    expect(other.code, other.stdout + other.stderr).toBe(13);
    expect(other.stderr).toMatch(/entry 0 is a drill of "acme\/billing-agent", not of acme\/support-agent \(another agent's report\)/);
  }, 60_000);
});

describe("[E1] a snapshot dated beyond the clock skew is never status's newest", () => {
  let a: TestAgent;
  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
    const c = JSON.parse(readFileSync(a.config, "utf8"));
    writeFileSync(a.config, JSON.stringify({ ...c, objectives: { ...c.objectives, rpoMinutes: 1440 } }, null, 2));
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E1] faketime +365d backup, status 2 days later: the RPO age is the real newest's (48 h, stale) and the future one is named", async () => {
    const real = await a.run(["backup", "--json"]);
    expect(real.code, real.stderr).toBe(0);
    const future = await shifted(a, "+365d", ["backup", "--json"]);
    expect(future.code, future.stderr).toBe(0);
    const [realId, futureId] = [json(real).snapshot_id, json(future).snapshot_id];
    const st = await shifted(a, "+2d", ["status", "--json"]);
    expect(st.code, st.stderr).toBe(3);
    const ag = json(st).agents[0];
    expect(ag.last_snapshot.snapshot_id).toBe(realId);
    expect(ag.last_snapshot.age_seconds).toBeGreaterThanOrEqual(2 * 86400 - 60);
    const snap = ag.checks.filter((c: { name: string }) => c.name === "snapshot");
    expect(snap.map((c: { state: string }) => c.state)).toEqual(["warn", "warn"]);
    expect(snap[0].detail).toContain(`claims a creation time in the future: ${futureId}`);
    expect(snap[1].detail).toMatch(/^stale: newest verified snapshot is (2\.0 d|4[78]\.\d h) old/);
    // restore refuses the same snapshot by the same rule
    const r = await shifted(a, "+2d", ["restore", futureId, "--target", join(a.tmp, "t-future"), "--dry-run"]);
    expect(r.stderr).toMatch(/claims a creation time in the future/);
  }, 180_000);
});
