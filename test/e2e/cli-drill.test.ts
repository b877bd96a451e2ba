// `agentbak drill` after a global install: without --spec it runs the built-in
// restore checks, and a shipped spec resolves by name from any folder (the
// package's drills/, not the current folder).
import { afterAll, beforeAll, expect, it } from "vitest";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, run, type TestAgent } from "../helpers.js";

let a: TestAgent;
let elsewhere: string;
beforeAll(async () => {
  a = await makeAgent();
  const b = await a.run(["backup"]);
  expect(b.code, b.stderr).toBe(0);
  // a folder with no drills/ in it: what a global install's user stands in
  elsewhere = join(a.tmp, "elsewhere");
  mkdirSync(elsewhere);
});
afterAll(() => a?.cleanup());

const drillFrom = (args: string[]) => run(["drill", "latest", "-c", a.config, "--identity", a.identity, "--no-report", "--no-credential-warnings", "--json", ...args], { cwd: elsewhere, env: a.env });

it("without --spec runs the built-in restore checks (no invariants)", async () => {
  const r = await drillFrom([]);
  expect(r.code, r.stderr).toBe(0);
  const d = json(r);
  expect(d.ok).toBe(true);
  expect(d.spec).toBe("integrity-only");
  expect(JSON.stringify(d.checks)).not.toMatch(/invariant/i);
});

it("--spec checks-only resolves to the shipped spec from a folder without drills/, and runs its invariants", async () => {
  const r = await drillFrom(["--spec", "checks-only"]);
  expect(r.code, r.stderr).toBe(0);
  const d = json(r);
  expect(d.spec).toBe("checks-only");
  expect(JSON.stringify(d.checks)).toMatch(/invariant/i);
});

it("an unknown spec name exits 10 naming the shipped ones", async () => {
  const r = await drillFrom(["--spec", "no-such-spec"]);
  expect(r.code).toBe(10);
  expect(r.stderr).toMatch(/^agentbak: drill spec no-such-spec: no such file, and no shipped spec of that name \(shipped: checks-only, integrity-only, recovery, reference-agent\)$/);
});

it("without a config or repository, drill latest says there is no repository (2); a bundle file asks where the report goes (2)", async () => {
  const bare = { AGENTBAK_HOME: a.env.AGENTBAK_HOME!, AGENTBAK_CONFIG: undefined, AGENTBAK_REPOSITORY: undefined };
  const latest = await run(["drill", "latest"], { cwd: elsewhere, env: bare });
  expect(latest.code).toBe(2);
  expect(latest.stderr).toBe("agentbak: no repository: pass --repo, set AGENTBAK_REPOSITORY, or use a config (-c)");
  const listed = json(await a.run(["snapshots", "--json"]));
  const file = await a.file(listed[0].path);
  const f = await run(["drill", file, "--identity", a.identity], { cwd: elsewhere, env: bare });
  expect(f.code).toBe(2);
  expect(f.stderr).toContain("where should the drill report go? pass --report FILE (or --no-report), or name a repository");
});
