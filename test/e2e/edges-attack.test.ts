// Issue 32, the second attack on the trust edges: cases the first round's tests did not
// write, each through the real binary on a real agent (SQLite file, git workspace,
// FIFOs made with mkfifo). See docs/security-edges.md for the whole list.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, type TestAgent } from "../helpers.js";
import { api, makeToken, mcpHttp, startServer, tool, type Server } from "../agentapi-helpers.js";

let a: TestAgent;
beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
}, 120_000);
afterAll(() => a?.cleanup());

describe("[E3] prototype names in the agent's data are data", () => {
  it("[E3] open operations of kind constructor / toString (one under key __proto__): the backup commits; they take the default strategy, not Object's", async () => {
    const db = new Database(join(a.dir, "state/agent.sqlite"));
    db.exec(`INSERT INTO tasks VALUES ('task-p1', 'constructor', '{}', 'running', NULL, NULL, NULL, '2026-11-01T00:00:00Z', NULL);
             INSERT INTO deliveries VALUES ('dlv-p1', 'task-p1', '__proto__', 'attempted', NULL, '2026-11-01T00:00:00Z', NULL);
             INSERT INTO tasks VALUES ('task-p2', 'toString', '{}', 'running', NULL, NULL, NULL, '2026-11-01T00:00:00Z', NULL);
             INSERT INTO deliveries VALUES ('dlv-p2', 'task-p2', 'idem-p2', 'attempted', NULL, '2026-11-01T00:00:00Z', NULL);`);
    db.close();
    const b = await a.run(["backup", "--json"]);
    expect(b.code, b.stderr).toBe(0);
    const plan = await a.run(["restore", "latest", "--target", join(a.tmp, "proto-target"), "--dry-run", "--json"]);
    expect([0, 3], plan.stderr).toContain(plan.code); // 3: the fixture's credentials are missing here
    const ops = json(plan).plan.open_operations as { id: string; kind: string; strategy: string }[];
    expect(ops.filter((o) => o.id === "dlv-p1" || o.id === "dlv-p2").map((o) => [o.id, o.kind, o.strategy])).toEqual([
      ["dlv-p1", "constructor", "observe"],
      ["dlv-p2", "toString", "observe"],
    ]);
    // the configured kind still gets its own strategy
    expect(ops.find((o) => o.kind === "send_invoice")?.strategy).toBe("retry-safe");
  }, 120_000);
});

describe("[E11] a body field the interface does not know is refused, never dropped", () => {
  let srv: Server;
  let rq: { token: string };
  let first: string;
  let latest: string;
  beforeAll(async () => {
    rq = await makeToken(a, "acme", "billing-agent", "restore-request");
    srv = await startServer(a);
    first = (await api(srv.url, rq.token, "POST", "/v1/backups", { body: {} })).body.snapshot_id;
    latest = (await api(srv.url, rq.token, "POST", "/v1/backups", { body: {} })).body.snapshot_id;
    expect(first).not.toBe(latest);
  }, 120_000);
  afterAll(() => srv?.stop(), 60_000);

  it("[E11] POST /v1/restores naming the snapshot as snapshot_id (not snapshot): 400 naming the field, no request recorded for the latest snapshot", async () => {
    const before = (await a.run(["requests", "--json"])).stdout;
    const r = await api(srv.url, rq.token, "POST", "/v1/restores", { body: { snapshot_id: first, reason: "roll back the bad import" } });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.error.code).toBe(2);
    expect(r.body.error.message).toContain('"snapshot_id"');
    expect((await a.run(["requests", "--json"])).stdout).toBe(before);
    // spelled right, it is the snapshot asked for
    const ok = await api(srv.url, rq.token, "POST", "/v1/restores", { body: { snapshot: first, reason: "roll back the bad import" } });
    expect(ok.status, JSON.stringify(ok.body)).toBe(202);
    expect(ok.body.snapshot_id).toBe(first);
  }, 60_000);

  it("[E11] POST /v1/backups with a misspelt or prototype key (labl, __proto__): 400 naming it, no checkpoint taken", async () => {
    for (const raw of ['{"labl":"x"}', '{"__proto__":{"label":"p"}}']) {
      const r = await api(srv.url, rq.token, "POST", "/v1/backups", { raw });
      expect(r.status, raw).toBe(400);
      expect(r.body.error.message).toMatch(/"(labl|__proto__)"/);
    }
    const list = await api(srv.url, rq.token, "GET", "/v1/snapshots");
    expect(list.body.snapshots.at(-1).snapshot_id).toBe(latest);
  }, 60_000);

  it("[E11] MCP: request_restore with snapshot_id is an error naming it, not a request for the latest snapshot", async () => {
    const c = await mcpHttp(srv.url, rq.token);
    try {
      const r = await tool(c, "request_restore", { snapshot_id: first, reason: "roll back" });
      expect(r.isError).toBe(true);
      expect(r.text).toContain("snapshot_id");
      const ok = await tool(c, "request_restore", { snapshot: first, reason: "roll back" });
      expect(ok.isError, ok.text).toBe(false);
      expect(ok.data.snapshot_id).toBe(first);
    } finally {
      await c.close();
    }
  }, 60_000);
});

describe("[E2] names are data: a file name with ESC, a bidi control, a space or an accent", () => {
  const names = ["e\x1b[2Jx.json", "b\u202eid.json", "my notes \u00e9.json"];
  it("[E2] in the agent's files: the backup commits (exit 0), the restore writes each exact name and content; the plan shows them escaped", async () => {
    names.forEach((n, i) => writeFileSync(join(a.dir, "memory", n), JSON.stringify({ i })));
    const b = await a.run(["backup", "--json"]);
    expect(b.code, b.stderr).toBe(0);
    const target = join(a.tmp, "names-target");
    const plan = await a.run(["restore", "latest", "--target", target, "--dry-run"]);
    expect(plan.stdout + plan.stderr).toContain("memory/e\\x1b[2Jx.json");
    expect(plan.stdout + plan.stderr).toContain("memory/b\\u202eid.json");
    expect(plan.stdout + plan.stderr).not.toMatch(/[\x1b\u202e]/);
    const r = await a.run(["restore", "latest", "--target", target, "--yes"]);
    expect([0, 3], r.stderr).toContain(r.code);
    for (const [i, n] of names.entries()) expect(readFileSync(join(target, "memory", n), "utf8")).toBe(JSON.stringify({ i }));
    expect(readdirSync(join(target, "memory")).sort()).toEqual(readdirSync(join(a.dir, "memory")).sort());
  }, 120_000);

  it("[E2] a files name whose bytes are not UTF-8 (0xff, then ESC[2J): the backup commits with a warning naming it escaped (exit 3), not 'not found' (10); the other files are captured", async () => {
    const bad = Buffer.concat([Buffer.from(join(a.dir, "memory", "bad")), Buffer.from([0xff, 0x1b]), Buffer.from("[2J.json")]);
    const good = join(a.dir, "memory", "good-\u0085nel.json");
    writeFileSync(bad, "{}");
    writeFileSync(good, '{"n":1}');
    try {
      const b = await a.run(["backup", "--json"]);
      expect(b.code, b.stderr).toBe(3);
      expect(b.stderr).toContain("warning: files: memory/bad\ufffd\\x1b[2J.json: its name is not UTF-8 (shown with U+FFFD): not captured");
      expect(b.stderr).not.toContain("\x1b");
      expect(json(b).warnings).toContain("files: memory/bad\ufffd\x1b[2J.json: its name is not UTF-8 (shown with U+FFFD): not captured");
      const target = join(a.tmp, "not-utf8-target");
      const r = await a.run(["restore", json(b).snapshot_id, "--target", target, "--yes"]);
      expect([0, 3], r.stderr).toContain(r.code);
      expect(readFileSync(join(target, "memory", "good-\u0085nel.json"), "utf8")).toBe('{"n":1}');
    } finally {
      rmSync(bad);
      rmSync(good);
    }
  }, 120_000);

  it("[E2] an untracked workspace file whose name is not UTF-8: named in a warning (exit 3), escaped, never dropped unsaid (it was exit 0 and the restore lacked it)", async () => {
    const bad = Buffer.concat([Buffer.from(join(a.dir, "workspace", "ws")), Buffer.from([0xff, 0x1b]), Buffer.from("[2J.txt")]);
    writeFileSync(bad, "draft");
    try {
      const b = await a.run(["backup", "--json"]);
      expect(b.code, b.stderr).toBe(3);
      expect(b.stderr).toContain("warning: workspace: workspace/ws\ufffd\\x1b[2J.txt: its name is not UTF-8 (shown with U+FFFD): not captured");
      expect(b.stderr).not.toContain("\x1b");
    } finally {
      rmSync(bad);
    }
    expect((await a.run(["backup", "--json"])).code).toBe(0);
  }, 120_000);
});

describe("[E2] agent text in the drill's CI files is data, not markup", () => {
  it("[E2] a cursor value holding HTML, a Markdown link and image, backticks and a | : the job summary shows it escaped in its one cell; the JUnit file stays well-formed", async () => {
    const hostile = "9999 <img src=x onerror=alert(1)> [approve restore](https://evil.example/) ![t](https://evil.example/t.png) `x` | y \u202e";
    const db = new Database(join(a.dir, "state/agent.sqlite"));
    db.prepare("UPDATE deliveries SET delivered_at = ? WHERE delivery_id = 'dlv-task-0000002'").run(hostile);
    db.close();
    expect((await a.run(["backup"])).code).toBe(0);
    const spec = join(a.tmp, "md-drill.json");
    writeFileSync(spec, JSON.stringify({ name: "md", invariants: [] }));
    const summary = join(a.tmp, "summary.md");
    const junit = join(a.tmp, "junit.xml");
    const r = await a.run(["drill", "latest", "--spec", spec, "--identity", a.identity, "--no-report", "--junit", junit], { GITHUB_STEP_SUMMARY: summary });
    expect([0, 3], r.stderr).toContain(r.code);
    const row = readFileSync(summary, "utf8").split("\n").find((l) => l.includes("cursor:delivery"))!;
    expect(row).toBeDefined();
    // no markup survives: no tag, no link or image syntax, no raw bidi control; the value is still readable
    expect(row).not.toMatch(/<img|\]\(|!\[|[\u202e]/);
    expect(row).toContain("&lt;img src=x onerror=alert\\(1\\)&gt;");
    expect(row).toContain("\\u202e");
    // five cells: the | in the value does not end one
    expect(row.split(/(?<!\\)\|/).length - 2).toBe(5);
    const xml = readFileSync(junit, "utf8");
    expect(existsSync(junit) && xml.startsWith("<?xml")).toBe(true);
    execFileSync("xmllint", ["--noout", junit]);
  }, 300_000);
});

describe("[E8] a probe's grandchild that leaves the process group (setsid) does not stretch reconcile", () => {
  it("[E8] it holds stdout open for 60 s: each attempt still ends at the timeout, reconcile ends within attempts x timeout (+ start-up)", async () => {
    const pids = join(a.tmp, "setsid-pids");
    mkdirSync(pids);
    const script = join(a.tmp, "setsid-probe.mjs");
    // detached: the grandchild calls setsid(), so a kill of the probe's group does not reach it; it inherits stdout
    writeFileSync(
      script,
      `import { spawn } from "node:child_process";
       const g = spawn(process.execPath, ["-e", "require('fs').writeFileSync('${pids}/' + process.pid, ''); setTimeout(() => {}, 60000)"], { stdio: ["ignore", "inherit", "ignore"], detached: true });
       g.unref();
       setInterval(() => {}, 1000);`,
    );
    const c = JSON.parse(readFileSync(a.config, "utf8"));
    c.reconcile.probe = { command: ["node", script] };
    c.reconcile.timeoutSeconds = 1;
    c.reconcile.attempts = 1;
    const cfg = join(a.dir, "setsid.json");
    writeFileSync(cfg, JSON.stringify(c, null, 2));
    expect((await a.run(["backup"])).code).toBe(0);
    const target = join(a.tmp, "setsid-target");
    const rs = await a.run(["restore", "latest", "--target", target, "--yes"]);
    expect([0, 3], rs.stderr).toContain(rs.code);
    const t0 = Date.now();
    try {
      const r = await a.run(["reconcile", "--target", target, "-c", cfg, "--json"], {}, { timeout: 120_000 });
      const seconds = (Date.now() - t0) / 1000;
      const ops = json(r).operations as { outcome: string; detail: string }[];
      expect(ops.length).toBeGreaterThanOrEqual(1);
      // the first key's one attempt ends at the timeout; the whole reconcile has timeout x attempts = 1 s (tenth
      // attack), so any other key is not asked
      expect(ops[0]!.detail).toMatch(/probe command gave no answer within 1s/);
      for (const o of ops.slice(1)) expect(o.detail).toMatch(/probe command gave no answer within [\d.]+s|^not asked: reconcile's time \(timeout × attempts\) ran out$/);
      // plus starting node and the restore's checks; never the grandchild's 60 s
      expect(seconds).toBeLessThan(1 + 10);
    } finally {
      for (const pid of readdirSync(pids).map(Number)) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          /* gone */
        }
      }
    }
  }, 180_000);
});

describe("[E3] a config key __proto__ is refused, never dropped", () => {
  it("[E3] strategies {\"__proto__\": \"escalate\"}: backup exits 2 naming the key (it was dropped, and an operation of that kind got observe); nothing written", async () => {
    const text = readFileSync(a.config, "utf8").replace('"send_invoice": "retry-safe"', '"__proto__": "escalate", "send_invoice": "retry-safe"');
    expect(text).toContain("__proto__");
    const cfg = join(a.dir, "proto-config.json");
    writeFileSync(cfg, text);
    const before = (await a.run(["snapshots", "--json"])).stdout;
    const r = await a.run(["backup", "-c", cfg]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('the key "__proto__"');
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect((await a.run(["snapshots", "--json"])).stdout).toBe(before);
  }, 60_000);
});
