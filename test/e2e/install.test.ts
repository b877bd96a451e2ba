// A production install: the built tree (package.json, lockfile, bin, dist,
// drills) installed with `npm ci --omit=dev`, as a deploy image would, then
// backing up and verifying a real agent with only the runtime dependencies.
// Slow: native modules are compiled when their prebuilt binaries can not be
// downloaded (here: 6 to 10 minutes on two shared cores).
import { afterAll, beforeAll, expect, it } from "vitest";
import { execa } from "execa";
import { cpSync, existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, ROOT, type TestAgent } from "../helpers.js";

let a: TestAgent;
beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
}, 180_000);
afterAll(() => a?.cleanup(), 120_000); // the installed tree is large

it("npm ci --omit=dev installs a working agentbak without TypeScript or any dev dependency", { timeout: 1_500_000 }, async () => {
  const app = join(a.tmp, "app");
  mkdirSync(app);
  for (const f of ["package.json", "package-lock.json", "bin", "dist", "drills"]) cpSync(join(ROOT, f), join(app, f), { recursive: true });
  const ci = await execa("npm", ["ci", "--omit=dev", "--prefer-offline", "--no-audit", "--no-fund"], { cwd: app, reject: false, all: true, env: { CI: "true", JOBS: "max" } }); // JOBS: node-gyp compiles with every core
  expect(ci.exitCode, String(ci.all).slice(-3000)).toBe(0);
  for (const dev of ["typescript", "vitest", "node-pty", "dependency-cruiser"]) expect(existsSync(join(app, "node_modules", dev)), dev).toBe(false);

  const bin = join(app, "bin", "agentbak.js");
  const agentbak = (args: string[]) => execa("node", [bin, ...args], { cwd: a.dir, env: { ...a.env, NO_COLOR: "1" }, reject: false });
  const b = await agentbak(["backup", "--json"]);
  expect(b.exitCode, b.stderr).toBe(0);
  const v = await agentbak(["verify", "latest", "--identity", a.identity, "--json"]);
  expect(v.exitCode, v.stderr).toBe(0);
  expect(json({ code: 0, stdout: String(v.stdout), stderr: "" }).deep).toBe(true);
});
