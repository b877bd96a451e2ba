// The sealed drill through the real binary, with real namespaces (root: `unshare -n`), strace and processes: a worker
// that tries an outside address (10.255.255.1:80, unreachable in its namespace) and a server of the host's namespace
// on 127.0.0.1 has both blocked and counted while the test sink still gets its deliveries; a spec allowing 0 fails
// (15) naming them; where the namespace tools are missing (a PATH without unshare) the drill says "unsealed", and
// --require-sealed refuses (2) before running anything.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { join } from "node:path";
import { execaSync } from "execa";
import { json, makeAgent, ROOT, writeSpec, type TestAgent } from "../helpers.js";

let a: TestAgent;
let host: Server;
let hostPort = 0;
let hostConnections = 0;
let leaky: string;

/** A drill spec running the leaky worker at one crash point; `seal`: the spec's seal section. */
const spec = (name: string, seal?: object) =>
  writeSpec(a.tmp, name, join(ROOT, "drills", "reference-agent.json"), (s) => {
    s.worker.command = ["node", leaky];
    s.crashPoints = ["after_send_before_receipt"];
    s.sinkKill = false;
    if (seal) s.seal = seal;
  });
const drill = (specPath: string, extra: string[] = [], env: Record<string, string> = {}) => a.run(["drill", "latest", "--spec", specPath, "--identity", a.identity, "--no-report", "--json", ...extra], env);

beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
  host = createServer((c) => {
    hostConnections++;
    c.destroy();
  });
  await new Promise<void>((ok) => host.listen(0, "127.0.0.1", ok));
  hostPort = (host.address() as { port: number }).port;
  // the reference worker, after trying two places it must not reach; its exit (or death at a crash point) passed on
  leaky = join(a.tmp, "leaky-worker.mjs");
  writeFileSync(
    leaky,
    `import net from "node:net";
import { spawnSync } from "node:child_process";
const tryConnect = (host, port) => new Promise((ok) => { const s = net.connect({ host, port, timeout: 2000 }); s.on("connect", () => { s.destroy(); ok("connected"); }); s.on("timeout", () => { s.destroy(); ok("timeout"); }); s.on("error", (e) => ok(e.code)); });
process.stderr.write("outside: " + await tryConnect("10.255.255.1", 80) + ", host: " + await tryConnect("127.0.0.1", ${hostPort}) + "\\n");
const r = spawnSync(process.execPath, [${JSON.stringify(join(ROOT, "fixtures/agent/worker.js"))}], { stdio: "inherit" });
if (r.signal) process.kill(process.pid, r.signal);
process.exit(r.status ?? 1);
`,
  );
  const b = await a.run(["backup", "--json"]);
  expect(b.code, b.stderr).toBe(0);
}, 120_000);

afterAll(() => {
  host?.close();
  a?.cleanup();
});

describe("a sealed drill", () => {
  it("blocks and counts the worker's other connections; the sink still gets its deliveries", async () => {
    const r = await drill(spec("sealed"));
    const j = json(r);
    expect([0, 3], JSON.stringify(j.checks.filter((c: any) => !c.ok))).toContain(r.code);
    expect(j.scenarios).toEqual([expect.objectContaining({ scenario: "after_send_before_receipt", ok: true, died_at_point: true, effects: 1 })]);
    expect(j.network.sealed).toBe(true);
    const to = j.network.attempts.map((x: any) => x.to);
    expect(to).toContain("10.255.255.1:80");
    expect(to).toContain(`127.0.0.1:${hostPort}`);
    expect(j.network.attempts.find((x: any) => x.to === "10.255.255.1:80").result).toBe("ENETUNREACH");
    // each run of the worker (the crash, the restarts) tried both: counted every time
    expect(j.network.egress_blocked).toBeGreaterThanOrEqual(4);
    expect(j.network.egress_blocked % 2).toBe(0);
    expect(hostConnections).toBe(0);
    expect(j.checks.find((c: any) => c.name === "egress_blocked")).toMatchObject({ ok: false, severity: "info" });
  }, 120_000);

  it("fails (15) when the spec allows no blocked connection, naming them; JUnit has the check", async () => {
    const junit = join(a.tmp, "sealed.xml");
    const r = await drill(spec("sealed-zero", { maxEgressBlocked: 0 }), ["--junit", junit]);
    expect(r.code, r.stderr).toBe(15);
    const c = json(r).checks.find((x: any) => x.name === "egress_blocked");
    expect(c).toMatchObject({ ok: false, severity: "error", scenario: "network" });
    expect(c.detail).toMatch(/^\d+ connection attempt\(s\) blocked: .*10\.255\.255\.1:80 ×\d+ \(ENETUNREACH\).*; the spec allows 0$/);
    expect(c.detail).toContain(`127.0.0.1:${hostPort}`);
    expect(await import("node:fs").then((fs) => fs.readFileSync(junit, "utf8"))).toContain('name="network / checks / egress_blocked"');
    expect(hostConnections).toBe(0);
  }, 120_000);
});

describe("a spec with a worker that nothing starts", () => {
  it("makes no claim of the network: no worker ran (before: sealed: true, \"(0 run(s))\")", async () => {
    const idle = writeSpec(a.tmp, "idle-worker", join(ROOT, "drills", "reference-agent.json"), (s) => {
      s.crashPoints = [];
      s.sinkKill = false;
    });
    const r = await drill(idle);
    const j = json(r);
    expect([0, 3], JSON.stringify(j.checks.filter((c: any) => !c.ok))).toContain(r.code);
    expect(j.scenarios).toEqual([]);
    expect(j.network).toBeNull();
    expect(j.checks.filter((c: any) => c.scenario === "network")).toEqual([]);
    const human = await a.run(["drill", "latest", "--spec", idle, "--identity", a.identity, "--no-report"]);
    expect([0, 3]).toContain(human.code);
    expect(human.stdout + human.stderr).not.toMatch(/sealed|restore nemeses/);
  }, 120_000);
});

describe("where the worker can not be sealed (no unshare on the PATH)", () => {
  let bare: Record<string, string>;
  beforeAll(() => {
    const bin = join(a.tmp, "bare-bin");
    mkdirSync(bin);
    symlinkSync(process.execPath, join(bin, "node"));
    // the restore's own tools (the workspace is rebuilt with git), and nothing of the namespace tools
    for (const tool of ["git"]) symlinkSync(execaSync("sh", ["-c", `command -v ${tool}`]).stdout, join(bin, tool));
    bare = { PATH: bin };
  });

  // why the worker can not be sealed, as the drill reports it (the namespace command is unshare -n as root, -rn not)
  let why = "";

  it("without --require-sealed, runs unsealed and says so", async () => {
    const r = await drill(spec("unsealed"), [], bare);
    const j = json(r);
    expect(j.network).toMatchObject({ sealed: false, egress_blocked: 0, detail: expect.stringMatching(/^unsealed: unshare -r?n -- ip link set lo up: not found$/) });
    why = j.network.detail.slice("unsealed: ".length);
    expect(j.checks.find((c: any) => c.name === "sealed")).toMatchObject({ ok: false, severity: "info" });
    expect(hostConnections).toBeGreaterThan(0); // unsealed, the worker did reach the host's server
  }, 120_000);

  it("--require-sealed refuses (2) before running anything, naming what the drill reported", async () => {
    expect(why).not.toBe("");
    const before = hostConnections;
    const r = await drill(spec("must-seal"), ["--require-sealed"], bare);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`drill --require-sealed: the worker can not be sealed here (${why}); nothing was run`);
    expect(hostConnections).toBe(before);
  });
});
