// The upgrade drill through the real binary: the reference agent's snapshot
// (version 1.4.2, schema 3) is restored, its next version (fixtures/agent/next.js,
// 1.5.0, schema 4) migrates it and every crash point runs under it; a next
// version whose migration fails is caught (15) with the migration's error named.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, ROOT, writeSpec, type TestAgent } from "../helpers.js";

let a: TestAgent;
const SPEC = join(ROOT, "drills", "reference-agent.json");
const NEXT = join(ROOT, "fixtures", "agent", "next.js");
// the crash points replayed under the new version (the two upgrade scenarios of the base spec are left out: they run the old pass)
const POINTS = ["after_commit_before_delivery", "after_send_before_receipt", "after_receipt_before_complete"];

beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
  const b = await a.run(["backup", "--json"]);
  expect(b.code, b.stderr).toBe(0);
});
afterAll(() => a.cleanup());

const drill = (spec: string, extra: string[] = []) => a.run(["drill", "latest", "--spec", spec, "--identity", a.identity, "--json", "--report", join(a.tmp, "report.jsonl"), ...extra], { OPENAI_API_KEY: "x" });

describe("drill --upgrade-to", () => {
  it("the next version migrates the snapshot's state (schema 3 -> 4) and recovers every crash point; both versions in the report and JUnit", async () => {
    const spec = writeSpec(a.tmp, "up", SPEC, (s) => {
      s.crashPoints = POINTS;
      s.sinkKill = false;
      delete s.upgrade;
    });
    const junit = join(a.tmp, "up.xml");
    const r = await drill(spec, ["--upgrade-to", `node ${NEXT}`, "--junit", junit]);
    expect([0, 3], r.stderr).toContain(r.code);
    const d = json(r);
    expect(d.upgrade).toEqual({ from: { version: "1.4.2", schema: 3 }, to: { version: "reference-agent 1.5.0", schema: 4 }, recovers: true, failure: null });
    expect(d.scenarios.map((s: any) => s.scenario)).toEqual([...POINTS, "upgrade", ...POINTS.map((p) => `upgrade:${p}`)]);
    for (const s of d.scenarios.filter((x: any) => x.scenario.startsWith("upgrade:"))) expect([s.scenario, s.ok, s.effects, s.died_at_point]).toEqual([s.scenario, true, 1, true]);
    // the scenarios under N+1 ran on the migrated state: their migration check sees schema 4 (the new column is there)
    expect(d.checks.filter((c: any) => c.scenario.startsWith("upgrade:") && c.name === "migration").map((c: any) => c.detail)).toEqual(POINTS.map(() => "user_version 3 -> 4"));
    const entry = JSON.parse(readFileSync(join(a.tmp, "report.jsonl"), "utf8").trim().split("\n").at(-1)!);
    expect(entry.upgrade).toEqual(d.upgrade);
    expect(entry.result).toBe("pass");
    const xml = readFileSync(junit, "utf8");
    expect(xml).toContain('<property name="upgrade_from" value="1.4.2"/>');
    expect(xml).toContain('<property name="upgrade_to" value="reference-agent 1.5.0"/>');
    expect(xml).toMatch(/name="upgrade \/ migration \/ migration"/);
    expect(xml).toMatch(/name="upgrade:after_send_before_receipt \/ after_recovery \/ exactly one effect"/);
  });

  it("a next version whose migration fails: drill fails (15), the migration's SQL error named in the output and the report", async () => {
    const spec = writeSpec(a.tmp, "broken", SPEC, (s) => {
      s.crashPoints = POINTS;
      s.sinkKill = false;
      s.upgrade = { command: ["node", NEXT], env: { WORKER_FAULT: "broken_migration" }, version: "1.5.0-broken", schemaVersion: 4 };
    });
    const r = await drill(spec);
    expect(r.code, r.stderr).toBe(15);
    const d = json(r);
    expect(d.upgrade.recovers).toBe(false);
    expect(d.upgrade.to.version).toBe("1.5.0-broken");
    expect(d.upgrade.failure).toMatch(/^migration: 1\.5\.0-broken exited 1: worker: no such table: main\.task_priorities/);
    // the migration ran in one transaction: the copy stays at schema 3, and no scenario ran under the broken version
    expect(d.upgrade.to.schema).toBe(3);
    expect(d.scenarios.map((s: any) => s.scenario)).toEqual([...POINTS, "upgrade"]);
    const entry = JSON.parse(readFileSync(join(a.tmp, "report.jsonl"), "utf8").trim().split("\n").at(-1)!);
    expect(entry.result).toBe("fail");
    expect(entry.failed_checks).toContainEqual(expect.objectContaining({ scenario: "upgrade", check: "migration", detail: expect.stringContaining("no such table: main.task_priorities") }));
    // the human output (stderr, --json aside) names it too
    const h = await a.run(["drill", "latest", "--spec", spec, "--identity", a.identity, "--no-report"], { OPENAI_API_KEY: "x" });
    expect(h.code).toBe(15);
    expect(h.stderr).toMatch(/upgrade: snapshot of 1\.4\.2 \(schema 3\) under 1\.5\.0-broken \(schema 3\): does not recover \(migration: 1\.5\.0-broken exited 1: worker: no such table: main\.task_priorities/);
  });

  it("the new version's name, when the spec gives none, is what its command prints for --version with the upgrade's environment", async () => {
    const spec = writeSpec(a.tmp, "byenv", SPEC, (s) => {
      s.crashPoints = [];
      s.sinkKill = false;
      s.upgrade = { env: { WORKER_SCHEMA: "4" }, schemaVersion: 4 };
    });
    const r = await drill(spec, ["--upgrade-to", `node ${join(ROOT, "fixtures", "agent", "worker.js")}`]);
    expect([0, 3], r.stderr).toContain(r.code);
    expect(json(r).upgrade).toEqual({ from: { version: "1.4.2", schema: 3 }, to: { version: "reference-agent 1.5.0", schema: 4 }, recovers: true, failure: null });
  });

  it("--upgrade-to with a spec that runs no worker is refused (2) before anything is restored", async () => {
    const r = await a.run(["drill", "latest", "--spec", "checks-only", "--identity", a.identity, "--no-report", "--upgrade-to", `node ${NEXT}`]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--upgrade-to needs a spec with worker and inject/);
  });
});
