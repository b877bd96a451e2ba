/**
 * Tenth attack on issue 32's surfaces (docs/security-edges.md "Tenth attack"):
 * reconcile command probes through the real binary, real SQLite files, real
 * processes and signals.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, type TestAgent } from "../helpers.js";

let a: TestAgent;
const EXTRA = 5;
beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
  // five more open operations, each with its own idempotency key, beside the generated one
  const db = new Database(join(a.dir, "state/agent.sqlite"));
  const at = "2026-11-30T00:00:00.000Z";
  for (let n = 1; n <= EXTRA; n++) {
    db.prepare("INSERT INTO tasks (task_id, kind, payload, status, worker_id, lease_until, created_at) VALUES (?, 'send_invoice', '{}', 'running', 'worker-a', 1, ?)").run(`task-a10-${n}`, at);
    db.prepare("INSERT INTO deliveries (delivery_id, task_id, idempotency_key, status, attempted_at) VALUES (?, ?, ?, 'attempted', ?)").run(`dlv-a10-${n}`, `task-a10-${n}`, `idem-a10-${n}`, at);
  }
  db.close();
  const b = await a.run(["backup", "--json"]);
  expect(b.code, b.stderr).toBe(0);
}, 180_000);
afterAll(() => a?.cleanup());

const running = (pid: number) => {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
};

describe("[E2] the drill's job summary (GitHub Markdown) and JUnit XML hold a hostile ref as data", () => {
  it("[E2] a drill ref with a backtick, an <img>, ESC, U+202E and a bare URL: the summary neither ends its code span, adds markup or a link, nor holds a raw control; the XML parses", async () => {
    const junit = join(a.tmp, "a10-ref.xml");
    const summary = join(a.tmp, "a10-ref.md");
    const ref = "x`<img src=x onerror=alert(1)>\x1b[2J\u202e https://evil.example/p www.evil.example op@evil.example";
    const r = await a.run(["drill", ref, "--no-report", "--junit", junit], { GITHUB_STEP_SUMMARY: summary });
    expect(r.code).not.toBe(0);
    const md = readFileSync(summary, "utf8");
    // a backtick only escaped (\`), never one that opens or ends a code span; < and > as entities
    expect(md).not.toMatch(/[\x1b\u202e<>]|(^|[^\\])`/m);
    // a bare URL, www. or an address: GitHub's autolink extension would make each a link; their ':', '.', '@' are escaped
    expect(md).not.toMatch(/https:\/\/|www\.evil|[^\\]@evil/);
    expect(md).toContain("www\\.evil.example op\\@evil.example");
    expect(md).toContain("https\\://evil.example/p");
    const xml = readFileSync(junit, "utf8");
    expect(xml).not.toMatch(/[\x1b\u202e]|<img/);
    expect(xml).toContain("&lt;img src=x onerror=alert(1)&gt;\\x1b[2J\\u202e");
  });
});

describe("[E8] command probes: group, environment, time", () => {
  it("[E8] six open operations, a hanging probe whose grandchild ignores SIGTERM: done within timeout × attempts, every grandchild gone, no AWS_* or AGENTBAK_* reaches it", async () => {
    const log = join(a.tmp, "a10-probe.log");
    const script = join(a.tmp, "a10-probe.mjs");
    writeFileSync(
      script,
      `import { spawn } from "node:child_process"; import { appendFileSync } from "node:fs";
const g = spawn(process.execPath, ["-e", "process.on('SIGTERM',()=>{}); setInterval(()=>{}, 1000)"], { stdio: "ignore" });
appendFileSync(${JSON.stringify(log)}, JSON.stringify({ pid: process.pid, grandchild: g.pid, env: Object.keys(process.env) }) + "\\n");
setInterval(() => {}, 1000);`,
    );
    const c = JSON.parse(readFileSync(a.config, "utf8"));
    c.reconcile.probe = { command: [process.execPath, script] };
    c.reconcile.timeoutSeconds = 1;
    c.reconcile.attempts = 2;
    const cfg = join(a.dir, "a10-hang.json");
    writeFileSync(cfg, JSON.stringify(c, null, 2));
    const t = join(a.tmp, "a10-hang");
    const r0 = await a.run(["restore", "latest", "--target", t, "--yes", "--json"]);
    expect([0, 3], r0.stderr).toContain(r0.code);
    const t0 = Date.now();
    const r = await a.run(["reconcile", "--target", t, "-c", cfg, "--json"], { AWS_SECRET_ACCESS_KEY: "aws-a10-secret", AWS_ACCESS_KEY_ID: "AKIA-A10", AGENTBAK_S3_SECRET: "s3-a10" });
    const wall = (Date.now() - t0) / 1000;
    expect(r.code, r.stderr).toBe(3);
    expect(r.stdout + r.stderr).not.toMatch(/aws-a10-secret|s3-a10/);
    const starts = readFileSync(log, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    const ops = json(r).operations as { outcome: string; attempts: number }[];
    console.log(`A10 reconcile: ${ops.length} open operations, ${starts.length} probe starts, wall ${wall.toFixed(1)} s (timeout 1 s × 2 attempts)`);
    for (const s of starts) {
      expect(s.env.filter((k: string) => /^AWS_|^AGENTBAK_(?!GENERATION$)/.test(k))).toEqual([]);
      expect(running(s.pid)).toBe(false);
      expect(running(s.grandchild)).toBe(false);
    }
    for (const o of ops) expect(o).toMatchObject({ outcome: "unknown", resolved: false });
    // the whole reconcile within timeout × attempts (2 s): not 2 attempts for each of the 6 operations (12 starts,
    // 15 s before the fix) — the first operation takes the time, the later ones are not asked and say why
    expect(ops).toHaveLength(EXTRA + 1);
    expect(starts.length).toBeLessThanOrEqual(3);
    const notAsked = ops.filter((o: any) => o.attempts === 0);
    expect(notAsked.length).toBeGreaterThanOrEqual(EXTRA - 1);
    for (const o of notAsked as any[]) expect(o.detail).toBe("not asked: reconcile's time (timeout × attempts) ran out");
    expect(existsSync(t)).toBe(true);
  });
});
