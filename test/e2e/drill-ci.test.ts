// `agentbak drill` as a CI job and a cron job runs it: JUnit XML valid against
// a schema (test/fixtures/junit.xsd, checked by xmllint), testcase names unique
// by scenario and phase, a time on each, warnings never shown as passes; the
// XML and job summary also when the drill cannot run; credential references
// resolved as restore resolves them; quiet on success without a TTY.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import { cpSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, ROOT, type TestAgent } from "../helpers.js";

const XSD = join(ROOT, "test", "fixtures", "junit.xsd");
const REFERENCE = join(ROOT, "drills", "reference-agent.json");
const CHECKS_ONLY = join(ROOT, "drills", "checks-only.json");

/** Validates a JUnit file against the schema with xmllint (libxml2-utils; .ci/run installs it). */
async function validate(file: string): Promise<void> {
  const r = await execa("xmllint", ["--noout", "--schema", XSD, file], { reject: false });
  expect(r.exitCode, `${r.stderr}\n${readFileSync(file, "utf8").slice(0, 3000)}`).toBe(0);
}

/** The testcases of a JUnit file: name, time and what it holds. */
function testcases(xml: string): { name: string; classname: string; time: string | undefined; body: string }[] {
  return [...xml.matchAll(/<testcase ([^>]*?)(\/>|>([\s\S]*?)<\/testcase>)/g)].map((m) => {
    const attr = (k: string) => m[1]!.match(new RegExp(`(?:^|\\s)${k}="([^"]*)"`))?.[1];
    return { name: attr("name")!, classname: attr("classname")!, time: attr("time"), body: m[3] ?? "" };
  });
}

let a: TestAgent;
beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
  // credentials a restore here resolves: a file relative to the agent's folder, and a scheme with a checker
  const cfg = JSON.parse(readFileSync(a.config, "utf8"));
  cfg.credentials.push({ name: "vault", ref: "vault:kv/billing" });
  cfg.restore = { credentialCheck: { vault: ["sh", "-c", 'test "$0" = vault:kv/billing'] } };
  writeFileSync(a.config, JSON.stringify(cfg, null, 2));
  mkdirSync(join(a.dir, "secrets"));
  writeFileSync(join(a.dir, "secrets", "smtp-password"), "not read by agentbak\n");
  const b = await a.run(["backup"]);
  if (b.code !== 0) throw new Error(b.stderr);
}, 180_000);
afterAll(() => a?.cleanup(), 60_000);

describe("JUnit for CI", () => {
  it("a full drill: valid XML, names unique by scenario and phase, a time on each, a warning is skipped (not a pass)", async () => {
    const spec = join(a.tmp, "reference.json");
    const s = JSON.parse(readFileSync(REFERENCE, "utf8"));
    s.invariants = [join(ROOT, "drills/invariants/reference/*.sql")];
    s.worker.command = ["node", join(ROOT, "fixtures/agent/worker.js")];
    writeFileSync(spec, JSON.stringify(s));
    const junit = join(a.tmp, "full.xml");
    // OPENAI_API_KEY is absent: the llm credential is a warning
    const r = await a.run(["drill", "latest", "--spec", spec, "--identity", a.identity, "--no-report", "--junit", junit, "--json"], { OPENAI_API_KEY: undefined });
    expect(r.code, r.stderr).toBe(3);
    const d = json(r);
    // two warnings: the absent credential, and the snapshot's open operation this spec does not reconcile
    expect(d.warnings).toEqual([expect.stringMatching(/credential:llm: env:OPENAI_API_KEY: missing/), expect.stringMatching(/open operations: 1 open operation\(s\) in the snapshot, not reconciled/)]);
    await validate(junit);
    const xml = readFileSync(junit, "utf8");
    const cases = testcases(xml);
    expect(cases.length).toBe(d.checks.length);
    expect(cases.length).toBeGreaterThan(100);
    const names = cases.map((c) => c.name);
    expect(new Set(names).size).toBe(names.length);
    expect(names).toContain("after_send_before_receipt / after_crash / invariant:task_completed_twice");
    expect(names).toContain("after_send_before_receipt / after_recovery / invariant:task_completed_twice");
    for (const c of cases) expect(Number(c.time), c.name).toBeGreaterThanOrEqual(0);
    const llm = cases.find((c) => c.name === "restore / checks / credential:llm")!;
    expect(llm.body).toMatch(/<skipped message="warning: env:OPENAI_API_KEY: missing/);
    expect(xml).toMatch(/<testsuites name="agentbak drill" tests="\d+" failures="0" errors="0" skipped="2" time="[\d.]+">/);
  });

  it("a drill that cannot run (snapshot not found) still writes valid XML and the job summary, saying why", async () => {
    const junit = join(a.tmp, "missing.xml");
    const summary = join(a.tmp, "summary-missing.md");
    const r = await a.run(["drill", "20200101T000000000Z-deadbeef", "--spec", CHECKS_ONLY, "--no-report", "--junit", junit], { GITHUB_STEP_SUMMARY: summary });
    expect(r.code).toBe(10);
    await validate(junit);
    const [c] = testcases(readFileSync(junit, "utf8"));
    expect(c!.body).toMatch(/<error message="snapshot 20200101T000000000Z-deadbeef not found[^"]*" type="not_found">/);
    expect(readFileSync(summary, "utf8")).toMatch(/agentbak drill checks\\-only: could not run[\s\S]*not found.*exit 10, not_found/);
  });

  it("an untrusted signing key: exit 13, and the XML says so", async () => {
    // another host's trust: its own allowed_signers, without this agent's signer
    const home = join(a.tmp, "other-home");
    cpSync(a.home, home, { recursive: true });
    writeFileSync(join(home, "allowed_signers"), "");
    const bundle = json(await a.run(["snapshots", "--json"]))[0].path;
    const junit = join(a.tmp, "untrusted.xml");
    const r = await a.run(["drill", bundle, "--spec", CHECKS_ONLY, "--no-report", "--junit", junit], { AGENTBAK_HOME: home });
    expect(r.code, r.stderr).toBe(13);
    await validate(junit);
    expect(readFileSync(junit, "utf8")).toMatch(/<error message="[^"]*(not trusted|allowed_signers)[^"]*" type="verification_failed">/);
  });
});

describe("credentials and cron", () => {
  it("resolves file: against the agent's folder and other schemes with restore.credentialCheck, as restore does", async () => {
    const r = await a.run(["drill", "latest", "--spec", CHECKS_ONLY, "--identity", a.identity, "--no-report", "--json"], { OPENAI_API_KEY: "set" });
    expect(r.code, r.stderr).toBe(0);
    const d = json(r);
    expect(d.credentials).toEqual([
      { name: "llm", ref: "env:OPENAI_API_KEY", status: "present" },
      { name: "mail", ref: "file:secrets/smtp-password", status: "present" },
      { name: "vault", ref: "vault:kv/billing", status: "present" },
    ]);
    expect(d.warnings).toEqual([]);
  });

  it("is quiet on success without a TTY, and --no-credential-warnings (for cron) records an absent credential without exit 3", async () => {
    const quiet = await a.run(["drill", "latest", "--spec", CHECKS_ONLY, "--identity", a.identity, "--no-report"], { OPENAI_API_KEY: "set" });
    expect(quiet.code, quiet.stderr).toBe(0);
    expect(quiet.stdout + quiet.stderr).toBe("");

    const cron = await a.run(["drill", "latest", "--spec", CHECKS_ONLY, "--identity", a.identity, "--no-report", "--no-credential-warnings"], { OPENAI_API_KEY: undefined });
    expect(cron.code, cron.stderr).toBe(0);
    expect(cron.stdout + cron.stderr).toBe("");
    const j = json(await a.run(["drill", "latest", "--spec", CHECKS_ONLY, "--identity", a.identity, "--no-report", "--no-credential-warnings", "--json"], { OPENAI_API_KEY: undefined }));
    expect(j.warnings).toEqual([]);
    expect(j.unresolved).toEqual([expect.stringMatching(/credential llm \(env:OPENAI_API_KEY\) is missing here/)]);
    expect(j.checks.find((c: any) => c.name === "credential:llm")).toMatchObject({ ok: false, severity: "info" });

    // a drill with a warning is not quiet
    const loud = await a.run(["drill", "latest", "--spec", CHECKS_ONLY, "--identity", a.identity, "--no-report"], { OPENAI_API_KEY: undefined });
    expect(loud.code).toBe(3);
    expect(loud.stderr).toMatch(/warning: .*credential:llm/);
    // a quiet run prints nothing on success; this one is loud, and its last line says exit 3, not a plain pass
    expect(loud.stderr.trim().split("\n").at(-1)).toMatch(/drill passed \(\d+ checks\) with 1 warning\(s\); exit 3$/);
  });
});
