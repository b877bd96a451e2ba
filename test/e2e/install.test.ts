// A production install: a global install of the packed tarball, as an
// operator or a deploy image makes it (only the runtime dependencies: no dev
// dependency, no LanceDB or AWS SDK; its size and npm's warnings), then backing
// up, verifying and drilling a real agent with it and asking its MCP server;
// the optional LanceDB named when missing and found once installed beside it.
// (One install: an `npm ci --omit=dev` of the same tree checked nothing this
// one does not.) The native modules' install scripts run (prebuild-install)
// and take the checkout's own compiled binaries as prebuilt archives from a
// local folder, as they take a downloaded one on a host that reaches GitHub:
// compiling sqlite3.c and zstd again took 3 to 13 minutes on two shared cores
// and asserted nothing more (the size a compiling install leaves is still
// counted: `compileLeftoversMb`).
import { afterAll, beforeAll, expect, it } from "vitest";
import { execa } from "execa";
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, ROOT, type TestAgent } from "../helpers.js";

let a: TestAgent;
beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
}, 180_000);
afterAll(() => a?.cleanup(), 120_000); // the installed tree is large

/** Size in MB of `dir`, and of what node-gyp leaves there when it compiles a native module (build/Release/obj*: a prebuilt binary has none). */
function sizes(dir: string): { mb: number; intermediateMb: number } {
  const kb = (args: string[]) => execFileSync("du", ["-sk", ...args], { encoding: "utf8" }).trim().split("\n").reduce((a, l) => a + Number(l.split("\t")[0]), 0);
  const found = execFileSync("find", [dir, "-path", "*/build/Release/obj*", "-prune", "-type", "d"], { encoding: "utf8" }).trim().split("\n").filter(Boolean);
  return { mb: kb([dir]) / 1024, intermediateMb: found.length ? kb(found) / 1024 : 0 };
}

/** The native modules agentbak depends on: the binary their build leaves, and prebuild-install's runtime and ABI for it (zstd-napi: `-r napi`, its package's napi_versions). */
const NATIVE = [
  { name: "better-sqlite3", binary: "better_sqlite3.node", runtime: "node", abi: process.versions.modules },
  { name: "zstd-napi", binary: "binding.node", runtime: "napi", abi: "8" },
];
const kb = (dir: string) => Number(execFileSync("du", ["-sk", dir], { encoding: "utf8" }).split("\t")[0]);

/**
 * The checkout's compiled native modules (npm ci built them for this node) as the archives prebuild-install looks
 * for in `npm_config_<package>_local_prebuilds` before downloading or compiling (prebuild-install/util.js
 * localPrebuild: `<name>-v<version>-<runtime>-v<abi>-<platform><libc>-<arch>.tar.gz`). @returns the env naming them.
 */
function localPrebuilds(dir: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const m of NATIVE) {
    const version = JSON.parse(readFileSync(join(ROOT, "node_modules", m.name, "package.json"), "utf8")).version;
    const stage = join(dir, m.name);
    mkdirSync(join(stage, "build", "Release"), { recursive: true });
    copyFileSync(join(ROOT, "node_modules", m.name, "build", "Release", m.binary), join(stage, "build", "Release", m.binary));
    execFileSync("tar", ["-czf", join(dir, `${m.name}-v${version}-${m.runtime}-v${m.abi}-${process.platform}-${process.arch}.tar.gz`), "-C", stage, "build"]);
    env[`npm_config_${m.name.replace(/-/g, "_")}_local_prebuilds`] = dir;
  }
  return env;
}

/** MB a compiling install leaves in the native modules' build folders beyond what `installed` has (the checkout's build, compiled by npm ci, minus the installed one): 0 when this install compiled them itself. */
function compileLeftoversMb(installed: string): number {
  return NATIVE.reduce((sum, m) => sum + Math.max(0, kb(join(ROOT, "node_modules", m.name, "build")) - kb(join(installed, "node_modules", m.name, "build"))) / 1024, 0);
}

it("npm install -g of the packed tarball: no dev dependency, no LanceDB or AWS SDK, <= 80 MB (du of the prefix, with what compiling the native modules leaves), no install-script warning; SQLite agents work, a lancedb source or S3 repository says what to install (2), LanceDB works once installed", { timeout: 1_800_000 }, async () => {
  const pack = join(a.tmp, "pack");
  const prefix = join(a.tmp, "prefix");
  mkdirSync(pack);
  // the tree `npm test` built: packing without prepack leaves dist/ alone while other tests use it
  const p = await execa("npm", ["pack", "--ignore-scripts", "--pack-destination", pack], { cwd: ROOT, reject: false });
  expect(p.exitCode, p.stderr).toBe(0);
  const tgz = join(pack, String(p.stdout).trim().split("\n").at(-1)!);
  const prebuilds = join(a.tmp, "prebuilds");
  mkdirSync(prebuilds);
  const npmEnv = { npm_config_prefix: prefix, npm_config_audit: "false", npm_config_fund: "false", CI: "true", JOBS: "max", ...localPrebuilds(prebuilds) };
  // the two native modules' install scripts allowed by name, as docs/operator-guide.md says: no warning
  const g = await execa("npm", ["install", "-g", "--prefer-offline", "--allow-scripts=better-sqlite3,zstd-napi", tgz], { env: npmEnv, reject: false });
  expect(g.exitCode, String(g.stderr).slice(-3000)).toBe(0);
  expect(String(g.stderr)).not.toMatch(/install-scripts|not yet covered/);
  const installed = join(prefix, "lib", "node_modules", "agentbak");
  for (const heavy of ["@lancedb/lancedb", "apache-arrow", "@aws-sdk/client-s3", "@aws-sdk/lib-storage"]) expect(existsSync(join(installed, "node_modules", heavy)), heavy).toBe(false);
  // only the runtime dependencies: no TypeScript, test runner or lint in an installed agentbak
  for (const dev of ["typescript", "vitest", "node-pty", "dependency-cruiser"]) expect(existsSync(join(installed, "node_modules", dev)), dev).toBe(false);
  // nor the packages esbuild bundled into dist/packed (the build's input: test/e2e/dependencies.test.ts), nor tsc's unbundled output
  for (const bundled of ["@modelcontextprotocol/sdk", "hono", "@hono/zod-openapi", "@inquirer/prompts", "commander", "execa"]) expect(existsSync(join(installed, "node_modules", bundled)), bundled).toBe(false);
  expect(existsSync(join(installed, "dist", "cli.js"))).toBe(false);
  expect(existsSync(join(prefix, "share", "man", "man1", "agentbak.1"))).toBe(true); // npm's link to dist/agentbak.1, which "files" names
  const s = sizes(prefix);
  const leftovers = compileLeftoversMb(installed);
  console.log(`global install: ${s.mb.toFixed(1)} MB, of which ${s.intermediateMb.toFixed(1)} MB node-gyp intermediates; ${leftovers.toFixed(1)} MB more had the native modules been compiled here`);
  // issue 34's goal for the whole prefix: 89.5 MB when the packages esbuild bundles into dist/packed were installed too;
  // the bound holds for an install that compiles the native modules (a host with no prebuilt binary) as for this one
  expect(s.mb + leftovers).toBeLessThanOrEqual(80);

  const bin = join(prefix, "bin", "agentbak");
  const agentbak = (args: string[]) => execa(bin, args, { cwd: a.dir, env: { ...a.env, NO_COLOR: "1" }, reject: false });
  const version = await agentbak(["--version"]);
  expect(version.stdout.trim()).toBe(JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).version);
  const b = await agentbak(["backup", "--json"]);
  expect(b.exitCode, b.stderr).toBe(0);
  const v = await agentbak(["verify", "latest", "--identity", a.identity, "--json"]);
  expect(v.exitCode, v.stderr).toBe(0);
  expect(json({ code: 0, stdout: String(v.stdout), stderr: "" }).deep).toBe(true);
  // the shipped drill spec runs the shipped reference worker (fixtures/agent, its better-sqlite3 agentbak's own)
  const drill = await agentbak(["drill", "latest", "--spec", join(installed, "drills", "reference-agent.json"), "--identity", a.identity, "--no-report", "--json"]);
  expect([0, 3], drill.stderr).toContain(drill.exitCode); // 3: warnings (the agent's credentials are not on this host)
  const d = json({ code: 0, stdout: String(drill.stdout), stderr: "" });
  expect([d.ok, d.scenarios.length, d.scenarios.every((x: { ok: boolean; effects: number }) => x.ok && x.effects === 1)]).toEqual([true, 6, true]);
  // the bundled MCP SDK and zod (classic zod is agentbak's dependency): the stdio server answers a tool call
  const call = { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "list_snapshots", arguments: {} } };
  const init = { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-03-26", capabilities: {}, clientInfo: { name: "install-test", version: "1" } } };
  const mcp = execa(bin, ["mcp"], { cwd: a.dir, env: a.env, reject: false });
  mcp.stdin!.write([init, { jsonrpc: "2.0", method: "notifications/initialized" }, call].map((m) => JSON.stringify(m)).join("\n") + "\n");
  const answered = await new Promise<string>((done) => {
    let out = "";
    mcp.stdout!.on("data", (c: Buffer) => ((out += c), out.includes('"id":2') && done(out)));
    setTimeout(() => done(out), 30_000);
  });
  mcp.kill("SIGTERM");
  await mcp;
  const listed = JSON.parse(JSON.parse(answered.trim().split("\n").at(-1)!).result.content[0].text);
  expect(listed.snapshots.map((x: { snapshot_id: string }) => x.snapshot_id)).toContain(json({ code: 0, stdout: String(b.stdout), stderr: "" }).snapshot_id);

  // a config naming a lancedb source: one line naming the package, exit 2, no snapshot
  const lance = join(a.dir, "lance.json");
  const cfg = JSON.parse(readFileSync(a.config, "utf8"));
  writeFileSync(lance, JSON.stringify({ ...cfg, sources: [{ name: "memory", kind: "lancedb", path: "memory/lance" }] }, null, 2));
  const lancedb = await import("@lancedb/lancedb"); // the checkout's copy makes the folder
  const db = await lancedb.connect(join(a.dir, "memory/lance"));
  await db.createTable("memories", Array.from({ length: 30 }, (_, i) => ({ id: i, vector: [i, i + 1, i + 2, i + 3] })));
  db.close();
  const count = async () => json({ code: 0, stdout: String((await agentbak(["snapshots", "--json"])).stdout), stderr: "" }).length;
  const before = await count();
  const missing = await agentbak(["backup", "-c", lance]);
  expect(missing.exitCode).toBe(2);
  expect(missing.stderr.trim().split("\n")).toEqual(["agentbak: source memory: a lancedb source needs @lancedb/lancedb, not installed (optional, left out of a plain install): npm install -g @lancedb/lancedb@0.31.0"]);
  expect(await count()).toBe(before);
  // an S3 repository: the SDK is named before any request is made
  const s3 = await agentbak(["snapshots", "--repo", "s3://agentbak-test-bucket/agents"]);
  expect(s3.exitCode).toBe(2);
  expect(s3.stderr.trim()).toBe("agentbak: an S3 repository needs @aws-sdk/client-s3 and @aws-sdk/lib-storage, not installed (optional, left out of a plain install): npm install -g '@aws-sdk/client-s3@^3.1175.0' '@aws-sdk/lib-storage@^3.1175.0'");

  // that command, into the same prefix: LanceDB beside agentbak, with the Arrow it brings, is found
  const l = await execa("npm", ["install", "-g", "--prefer-offline", "@lancedb/lancedb@0.31.0"], { env: npmEnv, reject: false });
  expect(l.exitCode, String(l.stderr).slice(-2000)).toBe(0);
  const ok = await agentbak(["backup", "-c", lance, "--json"]);
  expect(ok.exitCode, ok.stderr).toBe(0);
  const deep = await agentbak(["verify", "latest", "-c", lance, "--identity", a.identity]);
  expect(deep.exitCode, deep.stderr).toBe(0);
  expect(deep.stderr).toMatch(/source:memory: lancedb: 1 table\(s\) readable; row counts and vector dimensions match/); // the checks go to stderr
});
