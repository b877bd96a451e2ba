// Issue 32 (trust at the edges), reconcile and activate through the real
// binary: reconciliation is per operation, never per key, re-reads the
// restored database and reads only a capped, named part of a provider's
// answer [E3]; probes (and liveness commands) are contained: own process
// group, scrubbed environment, killed whole at their timeout [E8]; activate
// trusts only signed state: an edited restore.json or reconcile.json is
// refused naming the file [E13].
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, ROOT, writeSpec, type TestAgent } from "../helpers.js";

const SECRET = "tok-edge-7d1e04b2";
const EXIT = { ok: 0, usage: 2, warnings: 3, noKey: 12, verify: 13, policy: 14 };

/** A provider: GET /v1/deliveries/<key> answered by the handler set for that key (404 when none), every request logged. */
class Provider {
  url = "";
  log: { key: string; headers: IncomingMessage["headers"] }[] = [];
  handlers = new Map<string, (res: ServerResponse) => void>();
  private server = createServer((req, res) => {
    const key = decodeURIComponent((req.url ?? "").split("/").pop() ?? "");
    this.log.push({ key, headers: req.headers });
    const h = this.handlers.get(key);
    if (h) return h(res);
    res.writeHead(404, { "content-type": "application/json" }).end('{"error":"no such key"}');
  });
  async start() {
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }
  stop = () => new Promise<void>((r) => this.server.close(() => r()));
  answer(key: string, status: number, body: unknown) {
    this.handlers.set(key, (res) => res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body)));
  }
  hits = (key: string) => this.log.filter((l) => l.key === key).length;
}

let a: TestAgent;
const provider = new Provider();
const audit = () => readFileSync(join(a.repo, "tenants/acme/agents/billing-agent/audit.jsonl"), "utf8");
const lastAudit = () => JSON.parse(audit().trim().split("\n").at(-1)!);
/** The agent's config changed by `patch`, written to its own file. @returns its path. */
const configVariant = (name: string, patch: (c: any) => void) => {
  const c = JSON.parse(readFileSync(a.config, "utf8"));
  patch(c);
  const p = join(a.dir, `${name}.json`);
  writeFileSync(p, JSON.stringify(c, null, 2));
  return p;
};
const deliveries = (target: string) => {
  const db = new Database(join(target, "state/agent.sqlite"), { readonly: true });
  try {
    return Object.fromEntries((db.prepare("SELECT delivery_id, status, provider_receipt FROM deliveries WHERE delivery_id IN ('dlv-share-1', 'dlv-share-2', 'dlv-task-open-1')").all() as any[]).map((r) => [r.delivery_id, r]));
  } finally {
    db.close();
  }
};
const setStatus = (target: string, id: string, status: string) => {
  const db = new Database(join(target, "state/agent.sqlite"));
  db.prepare("UPDATE deliveries SET status = ? WHERE delivery_id = ?").run(status, id);
  db.close();
};
const restore = async (name: string, env: Record<string, string> = {}) => {
  const t = join(a.tmp, name);
  const r = await a.run(["restore", "latest", "--target", t, "--yes", "--json"], env);
  expect([EXIT.ok, EXIT.warnings], r.stderr).toContain(r.code);
  return t;
};
/** Whether a process runs (a zombie waiting for its reaper does not). */
const running = (pid: number) => {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
};

beforeAll(async () => {
  await provider.start();
  a = await makeAgent({ sizeMb: 1 });
  // beside the generated open operation (dlv-task-open-1, send_invoice: retry-safe, key idem-task-open-1), two that
  // share one key: a charge (escalate) and an invoice (retry-safe); the escalate one comes first in the query's order
  const db = new Database(join(a.dir, "state/agent.sqlite"));
  // this agent's schema lets two deliveries share a key (the reference schema makes it UNIQUE)
  db.exec(`PRAGMA foreign_keys = OFF;
    BEGIN;
    CREATE TABLE deliveries_shared (delivery_id TEXT PRIMARY KEY, task_id TEXT NOT NULL REFERENCES tasks(task_id), idempotency_key TEXT NOT NULL,
      status TEXT NOT NULL CHECK (status IN ('pending','attempted','delivered','queued','held')), provider_receipt TEXT, attempted_at TEXT, delivered_at TEXT);
    INSERT INTO deliveries_shared SELECT * FROM deliveries;
    DROP TABLE deliveries;
    ALTER TABLE deliveries_shared RENAME TO deliveries;
    COMMIT;`);
  const at = "2026-11-30T00:00:00.000Z";
  for (const [n, kind] of [[1, "charge_card"], [2, "send_invoice"]] as const) {
    db.prepare("INSERT INTO tasks (task_id, kind, payload, status, worker_id, lease_until, created_at) VALUES (?, ?, '{}', 'running', 'worker-a', 1, ?)").run(`task-share-${n}`, kind, at);
    db.prepare("INSERT INTO deliveries (delivery_id, task_id, idempotency_key, status, attempted_at) VALUES (?, ?, 'idem-shared', 'attempted', ?)").run(`dlv-share-${n}`, `task-share-${n}`, at);
  }
  db.close();
  mkdirSync(join(a.dir, "secrets"));
  writeFileSync(join(a.dir, "secrets/smtp-password"), SECRET + "\n");
  const c = JSON.parse(readFileSync(a.config, "utf8"));
  c.reconcile.probe.http = { url: `${provider.url}/v1/deliveries/{idempotency_key}`, headers: { authorization: "Bearer {credential:mail}" } };
  c.reconcile.timeoutSeconds = 1;
  writeFileSync(a.config, JSON.stringify(c, null, 2));
  const r = await a.run(["backup"]);
  expect(r.code, r.stderr).toBe(0);
});
afterAll(async () => {
  await provider.stop();
  a.cleanup();
});

describe("[E3] reconciliation is per operation, never per key", () => {
  it("[E3] two open operations sharing one idempotency key get one result each; the stricter strategy (escalate) wins and activate refuses", async () => {
    provider.handlers.clear(); // the provider knows no key
    const t = await restore("e3-shared");
    const r = await a.run(["reconcile", "--target", t, "--json"]);
    expect(r.code, r.stderr).toBe(EXIT.warnings);
    const ops = json(r).operations;
    expect(ops.map((o: any) => o.id)).toEqual(["dlv-share-1", "dlv-share-2", "dlv-task-open-1"]);
    // the retry-safe invoice shares its key with an escalate charge: both are held for a person, nothing is queued to resend
    for (const o of ops.slice(0, 2)) expect(o).toMatchObject({ idempotency_key: "idem-shared", strategy: "escalate", outcome: "not_found", resolution: "escalated", resolved: false, applied: "onEscalate" });
    expect(ops[1].detail).toMatch(/key shared by 2 open operations: asked once/);
    expect(ops[2]).toMatchObject({ strategy: "retry-safe", resolution: "retry", resolved: true, applied: "onRetry" });
    expect(provider.hits("idem-shared")).toBe(1);
    const d = deliveries(t);
    expect([d["dlv-share-1"].status, d["dlv-share-2"].status, d["dlv-task-open-1"].status]).toEqual(["held", "held", "queued"]);
    expect(json(r).summary).toMatchObject({ operations: 3, escalated: 2, retry: 1, unresolved: 2 });
    const act = await a.run(["activate", "--target", t, "--yes"]);
    expect(act.code, act.stderr).toBe(EXIT.policy);
    expect(act.stderr).toMatch(/2 open operation\(s\) unresolved: idem-shared \(escalated: .*\); idem-shared \(escalated: /);
    expect(existsSync(join(t, ".agentbak/SUSPENDED"))).toBe(true);
  });

  it("[E3] activate re-reads the restored database: a row the snapshot listed that is open again refuses activation, whatever reconcile.json says", async () => {
    for (const k of ["idem-shared", "idem-task-open-1"]) provider.answer(k, 200, { receipt: `rcpt-${k}` });
    const t = await restore("e3-reopened");
    const r = await a.run(["reconcile", "--target", t, "--json"]);
    expect(r.code, r.stderr).toBe(EXIT.ok);
    expect(json(r).summary).toMatchObject({ operations: 3, completed: 3, unresolved: 0 });
    setStatus(t, "dlv-task-open-1", "attempted"); // open again in the state the agent would run on
    const act = await a.run(["activate", "--target", t, "--yes", "--json"]);
    expect(act.code, act.stderr).toBe(EXIT.policy);
    expect(act.stderr).toMatch(/1 open operation\(s\) unresolved: idem-task-open-1 \(still open in the restored database: openOperations\.sql lists id "dlv-task-open-1"\)/);
    expect(lastAudit().receipt.reason).toContain("still open in the restored database");
    setStatus(t, "dlv-task-open-1", "delivered");
    const ok = await a.run(["activate", "--target", t, "--yes", "--json"]);
    expect(ok.code, ok.stderr).toBe(EXIT.ok);
    expect(json(ok)).toMatchObject({ activated: true, unresolved: [] });
  });

  it("[E3] a row the snapshot did not list, written as open into the restored database after reconcile, refuses activation (it was activated, 0): named as never reconciled, and counted when accepted", async () => {
    for (const k of ["idem-shared", "idem-task-open-1"]) provider.answer(k, 200, { receipt: `rcpt-${k}` });
    const t = await restore("e3-since");
    const r = await a.run(["reconcile", "--target", t, "--json"]);
    expect(r.code, r.stderr).toBe(EXIT.ok);
    expect(json(r).summary).toMatchObject({ completed: 3, unresolved: 0 });
    const db = new Database(join(t, "state/agent.sqlite"));
    db.prepare("INSERT INTO deliveries (delivery_id, task_id, idempotency_key, status) VALUES ('dlv-since', 'task-open-1', 'idem-since', 'attempted')").run();
    db.close();
    const act = await a.run(["activate", "--target", t, "--yes"]);
    expect(act.code, act.stderr).toBe(EXIT.policy);
    expect(act.stderr).toContain('1 open operation(s) unresolved: idem-since (listed by openOperations.sql in the restored database, not in the snapshot: never reconciled (id "dlv-since"))');
    expect(existsSync(join(t, ".agentbak/SUSPENDED"))).toBe(true);
    const accepted = await a.run(["activate", "--target", t, "--yes", "--accept-unresolved", "--reason", "INC-7: checked by hand", "--json"]);
    expect(accepted.code, accepted.stderr).toBe(EXIT.warnings);
    expect(json(accepted)).toMatchObject({ activated: true, unresolved: [{ id: "dlv-since", idempotency_key: "idem-since" }] });
    expect(accepted.stderr).toContain("activated with 1 open operation(s) accepted unresolved");
  });

  it("[E3] a command probe's 64 KiB is counted in bytes: 30 000 three-byte characters (90 KB) are a failed probe, not a receipt", async () => {
    const script = join(a.tmp, "wide-probe.mjs");
    // 30 000 characters fit under 65 536 when characters are counted; the bytes (90 000) do not
    writeFileSync(script, `process.stdout.write(JSON.stringify({ state: "completed", receipt: "\\u20ac".repeat(30000) }));`);
    const cmd = configVariant("e3-wide-command", (c) => ((c.reconcile.probe = { command: ["node", script] }), (c.reconcile.timeoutSeconds = 20))); // not a test of time: every key asked however slow node starts
    const t = await restore("e3-wide-command");
    const r = await a.run(["reconcile", "--target", t, "-c", cmd, "--json"]);
    expect(r.code, r.stderr).toBe(EXIT.warnings);
    for (const o of json(r).operations) {
      expect(o).toMatchObject({ outcome: "unknown", receipt: null, resolved: false });
      expect(o.detail).toMatch(/probe command's answer is larger than 64 KiB: not read/);
    }
    expect(deliveries(t)["dlv-task-open-1"].provider_receipt).toBeNull();
  });

  it("[E3] an outcome SQL that leaves the row open does not resolve the operation", async () => {
    for (const k of ["idem-shared", "idem-task-open-1"]) provider.answer(k, 200, { receipt: `rcpt-${k}` });
    const cfg = configVariant("e3-keeps-open", (c) => (c.reconcile.onCompleted.sql = "UPDATE deliveries SET provider_receipt = :receipt WHERE delivery_id = :id"));
    const t = await restore("e3-keeps-open");
    const r = await a.run(["reconcile", "--target", t, "-c", cfg, "--json"]);
    expect(r.code, r.stderr).toBe(EXIT.warnings);
    for (const o of json(r).operations) {
      expect(o).toMatchObject({ outcome: "completed", resolution: "completed", applied: "onCompleted", resolved: false });
      expect(o.detail).toMatch(/onCompleted ran, but still open in the restored database: openOperations\.sql lists id/);
    }
    expect((await a.run(["activate", "--target", t, "-c", cfg, "--yes"])).code).toBe(EXIT.policy);
  });

  it("[E3] a provider answer over 64 KiB is a failed probe (unknown, named), by Content-Length or streamed; only the fields receiptFields names are stored", async () => {
    const big = { receipt: "rcpt-big", pad: "A".repeat(100 * 1024) };
    provider.answer("idem-shared", 200, big);
    // streamed in chunks, no Content-Length: counted as it arrives
    provider.handlers.set("idem-task-open-1", (res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.write('{"receipt": "rcpt-streamed", "pad": "');
      for (let i = 0; i < 20; i++) res.write("B".repeat(8 * 1024));
      res.end('"}');
    });
    const t = await restore("e3-large");
    const r = await a.run(["reconcile", "--target", t, "--json"]);
    expect(r.code, r.stderr).toBe(EXIT.warnings);
    for (const o of json(r).operations) {
      expect(o).toMatchObject({ outcome: "unknown", receipt: null, resolved: false });
      expect(o.detail).toMatch(/provider's answer is larger than 64 KiB: not read/);
    }
    // a command probe printing more than 64 KiB: the same
    const script = join(a.tmp, "big-probe.mjs");
    writeFileSync(script, `process.stdout.write(JSON.stringify({ state: "completed", receipt: "r", pad: "C".repeat(100 * 1024) }));`);
    const cmd = configVariant("e3-big-command", (c) => ((c.reconcile.probe = { command: ["node", script] }), (c.reconcile.timeoutSeconds = 20))); // not a test of time: every key asked however slow node starts
    const t2 = await restore("e3-large-command");
    const r2 = await a.run(["reconcile", "--target", t2, "-c", cmd, "--json"]);
    expect(r2.code, r2.stderr).toBe(EXIT.warnings);
    for (const o of json(r2).operations) expect(o.detail).toMatch(/probe command's answer is larger than 64 KiB: not read/);

    // the provider's body holds personal data beside the receipt: only the named field is kept, in the state and every record
    const body = { receipt: { id: "rcpt-77", card: "4111-PII-SECRET" }, customer: { email: "pii-secret@example.com" } };
    for (const k of ["idem-shared", "idem-task-open-1"]) provider.answer(k, 200, body);
    const named = configVariant("e3-receipt-fields", (c) => (c.reconcile.receiptFields = ["receipt.id"]));
    const t3 = await restore("e3-receipt-fields");
    const r3 = await a.run(["reconcile", "--target", t3, "-c", named, "--json"]);
    expect(r3.code, r3.stderr).toBe(EXIT.ok);
    for (const o of json(r3).operations) expect(o).toMatchObject({ outcome: "completed", receipt: "rcpt-77" });
    expect(deliveries(t3)["dlv-task-open-1"].provider_receipt).toBe("rcpt-77");
    const stored = r3.stdout + readFileSync(join(t3, ".agentbak/reconcile.json"), "utf8") + audit() + readFileSync(join(t3, "state/agent.sqlite")).toString("latin1");
    expect(stored).not.toMatch(/PII-SECRET|pii-secret/);
    // a named field the answer lacks: no receipt, so not completed
    const missing = configVariant("e3-receipt-missing", (c) => (c.reconcile.receiptFields = ["receipt.number"]));
    const t4 = await restore("e3-receipt-missing");
    const r4 = await a.run(["reconcile", "--target", t4, "-c", missing, "--json"]);
    expect(json(r4).operations[0]).toMatchObject({ outcome: "unknown", detail: expect.stringMatching(/provider answered 200 without receipt\.number in a JSON body/) });
    // a field path that is not one is a config error naming the key
    const bad = configVariant("e3-receipt-bad", (c) => (c.reconcile.receiptFields = ["receipt..id"]));
    const rb = await a.run(["reconcile", "--target", t4, "-c", bad]);
    expect(rb.code).toBe(EXIT.usage);
    expect(rb.stderr).toMatch(/reconcile\.receiptFields\.0/);
  });
});

describe("[E8] probes are contained", () => {
  it("[E8] a command probe gets only PATH/HOME-like basics, the env its config passes (credentials filled) and AGENTBAK_GENERATION: never AGENTBAK_IDENTITY or the operator's environment", async () => {
    const seen = join(a.tmp, "probe-env.jsonl");
    const script = join(a.tmp, "env-probe.mjs");
    writeFileSync(
      script,
      `import { appendFileSync } from "node:fs";
       let s = ""; for await (const c of process.stdin) s += c;
       appendFileSync(${JSON.stringify(seen)}, JSON.stringify(process.env) + "\\n");
       console.log(JSON.stringify({ state: "completed", receipt: "cmd-" + JSON.parse(s).idempotency_key }));`,
    );
    const operatorEnv = { AGENTBAK_IDENTITY: readFileSync(a.identity, "utf8"), AGENTBAK_SIGNING_KEY_FILE: join(a.home, "signing-key"), OPERATOR_SECRET: "op-secret-1", AWS_SECRET_ACCESS_KEY: "aws-secret-2" };
    const basics = ["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "AGENTBAK_GENERATION"];
    /** reconciles a fresh restore with `cfg` and @returns the environment the probe saw, once per distinct key */
    const probeEnvs = async (name: string, cfg: string) => {
      rmSync(seen, { force: true });
      const t = await restore(name);
      const r = await a.run(["reconcile", "--target", t, "-c", cfg, "--json"], operatorEnv);
      // the probe could still read AGENTBAK_IDENTITY from /proc/$PPID/environ: named (3), never printed
      expect(r.code, r.stderr).toBe(EXIT.warnings);
      expect(r.stderr).toMatch(/AGENTBAK_IDENTITY is in agentbak's environment and a command probe ran as the same user: it can read it from \/proc\/<agentbak's pid>\/environ/);
      expect(json(r).warnings).toHaveLength(1);
      expect(r.stdout + r.stderr).not.toMatch(/AGE-SECRET-KEY/);
      const envs = readFileSync(seen, "utf8").trim().split("\n").map((l) => JSON.parse(l));
      for (const env of envs) expect(JSON.stringify(env)).not.toMatch(/AGE-SECRET-KEY|op-secret-1|aws-secret-2/);
      expect(envs).toHaveLength(2); // one per distinct key
      return { t, envs };
    };
    // a probe configured without an environment: the basics and its generation, nothing of the operator's
    const plain = await probeEnvs("e8-env-plain", configVariant("e8-env-plain", (c) => (c.reconcile.probe = { command: ["node", script] })));
    for (const env of plain.envs) {
      expect(Object.keys(env).filter((k) => !basics.includes(k))).toEqual([]);
      expect(env).toMatchObject({ AGENTBAK_GENERATION: expect.stringMatching(/^\d+$/), PATH: process.env.PATH });
    }
    // what the config passes, credentials filled
    const cfg = configVariant("e8-env", (c) => (c.reconcile.probe = { command: ["node", script], env: { PROVIDER_TOKEN: "Bearer {credential:mail}", REGION: "eu-1" } }));
    const { t, envs } = await probeEnvs("e8-env", cfg);
    for (const env of envs) {
      expect(env).toMatchObject({ PROVIDER_TOKEN: `Bearer ${SECRET}`, REGION: "eu-1" });
      expect(Object.keys(env).filter((k) => !basics.includes(k)).sort()).toEqual(["PROVIDER_TOKEN", "REGION"]);
    }
    // the identity by file: nothing for a probe to find in agentbak's environment, no warning
    rmSync(seen, { force: true });
    const byFile = await a.run(["reconcile", "--target", await restore("e8-env-file"), "-c", cfg, "--json"], { AGENTBAK_IDENTITY_FILE: a.identity });
    expect(byFile.code, byFile.stderr).toBe(EXIT.ok);
    expect(json(byFile).warnings).toEqual([]);
    // AGENTBAK_* is agentbak's: a config can not set it
    const reserved = configVariant("e8-reserved", (c) => (c.reconcile.probe = { command: ["node", script], env: { AGENTBAK_IDENTITY: "x" } }));
    const rr = await a.run(["reconcile", "--target", t, "-c", reserved]);
    expect(rr.code).toBe(EXIT.usage);
    expect(rr.stderr).toMatch(/reconcile\.probe\.env\.AGENTBAK_IDENTITY: .*an AGENTBAK_\* name/);
  });

  it("[E8] a probe that hangs and forks a grandchild ignoring SIGTERM: its whole group is killed at the timeout, nothing keeps running, and reconcile ends within attempts x timeout", async () => {
    const pids = join(a.tmp, "hang-pids");
    mkdirSync(pids);
    const script = join(a.tmp, "hang-probe.mjs");
    // the grandchild inherits stdout (so a runner waiting for the pipe to close waits for it too) and ignores SIGTERM
    writeFileSync(
      script,
      `import { spawn } from "node:child_process";
       process.on("SIGTERM", () => {});
       spawn(process.execPath, ["-e", "process.on('SIGTERM', () => {}); require('fs').writeFileSync('${pids}/' + process.pid, ''); setInterval(() => {}, 1000)"], { stdio: ["ignore", "inherit", "inherit"] });
       setInterval(() => {}, 1000);`,
    );
    const cfg = configVariant("e8-hang", (c) => {
      c.reconcile.probe = { command: ["node", script] };
      c.reconcile.timeoutSeconds = 1;
      c.reconcile.attempts = 2;
    });
    const t = await restore("e8-hang");
    const t0 = Date.now();
    const r = await a.run(["reconcile", "--target", t, "-c", cfg, "--json"], {}, { timeout: 40_000 });
    const seconds = (Date.now() - t0) / 1000;
    expect(r.code, r.stderr).toBe(EXIT.warnings);
    // the whole reconcile within timeout x attempts = 2 s (tenth attack: before, 2 distinct keys x (2 x 1 s + 0.25 s)
    // = 4.5 s, and an agent with n open operations made it n times as long), plus starting node
    expect(seconds).toBeGreaterThanOrEqual(2);
    expect(seconds).toBeLessThan(2 + 4);
    const ops = json(r).operations as { outcome: string; attempts: number; detail: string }[];
    for (const o of ops) expect(o).toMatchObject({ outcome: "unknown", resolved: false });
    // the first key had both attempts (the second cut to the time left); the other key was not asked
    expect(ops[0]!.attempts).toBe(2);
    expect(ops[0]!.detail).toMatch(/probe command gave no answer within [\d.]+s \(its process group was killed\)/);
    const unasked = ops.filter((o) => o.attempts === 0);
    expect(unasked.length).toBeGreaterThanOrEqual(1);
    for (const o of unasked) expect(o.detail).toBe("not asked: reconcile's time (timeout × attempts) ran out");
    const forked = readdirSync(pids).map(Number);
    expect(forked).toHaveLength(2);
    await new Promise((res) => setTimeout(res, 200));
    expect(forked.filter(running)).toEqual([]);
  });

  it("[E8] a liveness command is contained the same way: a hanging one with a SIGTERM-ignoring grandchild is unknown at its timeout, leaves nothing running, and sees no AGENTBAK_IDENTITY", async () => {
    const pids = join(a.tmp, "live-pids");
    mkdirSync(pids);
    const envFile = join(a.tmp, "live-env.json");
    const script = join(a.tmp, "hang-liveness.mjs");
    writeFileSync(
      script,
      `import { spawn } from "node:child_process";
       import { writeFileSync } from "node:fs";
       writeFileSync(${JSON.stringify(envFile)}, JSON.stringify(process.env));
       process.on("SIGTERM", () => {});
       spawn(process.execPath, ["-e", "process.on('SIGTERM', () => {}); require('fs').writeFileSync('${pids}/' + process.pid, ''); setInterval(() => {}, 1000)"], { stdio: "inherit" });
       setInterval(() => {}, 1000);`,
    );
    const cfg = configVariant("e8-liveness", (c) => (c.runtime.liveness = { command: ["node", script], timeoutSeconds: 1 }));
    const t = await restore("e8-liveness");
    const t0 = Date.now();
    const r = await a.run(["activate", "--target", t, "-c", cfg, "--yes", "--accept-unresolved", "--reason", "liveness test"], { AGENTBAK_IDENTITY: readFileSync(a.identity, "utf8") }, { timeout: 30_000 });
    expect(r.code).toBe(EXIT.policy);
    expect(r.stderr).toMatch(/command: unknown, .*no answer within 1s/);
    expect((Date.now() - t0) / 1000).toBeLessThan(1 + 4);
    const forked = readdirSync(pids).map(Number);
    expect(forked).toHaveLength(1);
    await new Promise((res) => setTimeout(res, 200));
    expect(forked.filter(running)).toEqual([]);
    expect(readFileSync(envFile, "utf8")).not.toMatch(/AGENTBAK_IDENTITY|AGE-SECRET-KEY/);
  });

  it("[E8] in a drill a command probe gets AGENTBAK_SINK_URL (and asks the sink with it), never the AGENTBAK_IDENTITY the drill was given", async () => {
    const seen = join(a.tmp, "drill-probe-env.jsonl");
    const script = join(a.tmp, "sink-probe.mjs");
    writeFileSync(
      script,
      `import { appendFileSync } from "node:fs";
       let s = ""; for await (const c of process.stdin) s += c;
       appendFileSync(${JSON.stringify(seen)}, JSON.stringify(process.env) + "\\n");
       const res = await fetch(process.env.AGENTBAK_SINK_URL + "/" + encodeURIComponent(JSON.parse(s).idempotency_key));
       if (res.status === 404) console.log(JSON.stringify({ state: "not_found" }));
       else if (res.status === 200) console.log(JSON.stringify({ state: "completed", receipt: (await res.json()).receipt }));
       else console.log(JSON.stringify({ state: "unknown" }));`,
    );
    const cfg = configVariant("e8-drill", (c) => (c.reconcile.probe = { command: ["node", script] }));
    const spec = writeSpec(a.tmp, "e8-drill-spec", join(ROOT, "drills", "recovery.json"), (s) => {
      s.reconcileFaults = [];
      s.splitBrain = false;
    });
    const r = await a.run(["drill", "latest", "--spec", spec, "-c", cfg, "--json"], { AGENTBAK_IDENTITY: readFileSync(a.identity, "utf8"), OPENAI_API_KEY: "x" }, { timeout: 120_000 });
    const d = json(r);
    expect(d.scenarios.map((s: any) => [s.scenario, s.ok])).toEqual([
      ["reconcile_a", true],
      ["reconcile_b", true],
    ]);
    const envs = readFileSync(seen, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    expect(envs.length).toBeGreaterThanOrEqual(4); // 2 keys x 2 rounds
    for (const env of envs) {
      expect(env.AGENTBAK_SINK_URL).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/deliveries$/);
      expect(Object.keys(env).filter((k) => k.startsWith("AGENTBAK_")).sort()).toEqual(["AGENTBAK_GENERATION", "AGENTBAK_SINK_URL"]);
      expect(JSON.stringify(env)).not.toMatch(/AGE-SECRET-KEY/);
    }
  });
});

describe("[E13] activate trusts only signed state", () => {
  let t: string;
  let saved: string;
  let other: string;
  const rec = () => join(t, ".agentbak/reconcile.json");
  const edit = (file: string, patch: (r: any) => void) => {
    const r = JSON.parse(readFileSync(file, "utf8"));
    patch(r);
    writeFileSync(file, JSON.stringify(r, null, 2) + "\n");
  };
  beforeAll(async () => {
    provider.handlers.clear();
    provider.answer("idem-shared", 200, { receipt: "rcpt-shared" });
    // an earlier restore of the same agent, in which everything was resolved
    provider.answer("idem-task-open-1", 200, { receipt: "rcpt-1" });
    other = await restore("e13-other");
    expect((await a.run(["reconcile", "--target", other])).code).toBe(EXIT.ok);
    // the current one: the provider is down for one key
    provider.answer("idem-task-open-1", 503, { error: "down" });
    t = await restore("e13");
    const r = await a.run(["reconcile", "--target", t, "--json"]);
    expect(r.code, r.stderr).toBe(EXIT.warnings);
    expect(json(r).operations.map((o: any) => o.resolution)).toEqual(["completed", "completed", "unknown"]);
    saved = join(a.tmp, "e13-reconcile.json");
    copyFileSync(rec(), saved);
  });

  it("[E13] reconcile.json with an unknown flipped to completed is refused (13) naming the file, by activate and by reconcile", async () => {
    edit(rec(), (r) => {
      Object.assign(r.operations[2], { outcome: "completed", resolution: "completed", resolved: true, receipt: "forged", applied: "onCompleted" });
      r.summary = { ...r.summary, completed: 3, unknown: 0, unresolved: 0 };
    });
    for (const args of [["activate", "--target", t, "--yes"], ["reconcile", "--target", t]]) {
      const r = await a.run(args);
      expect(r.code, r.stderr).toBe(EXIT.verify);
      expect(r.stderr).toContain(`${rec()} was changed after agentbak signed it (signature does not match); remove it and run agentbak reconcile --target ${t} again`);
    }
    expect(existsSync(join(t, ".agentbak/SUSPENDED"))).toBe(true);
  });

  it("[E13] reconcile.json with an operation removed, or unsigned, is refused (13) naming the file", async () => {
    copyFileSync(saved, rec());
    edit(rec(), (r) => r.operations.splice(2, 1));
    let r = await a.run(["activate", "--target", t, "--yes"]);
    expect(r.code, r.stderr).toBe(EXIT.verify);
    expect(r.stderr).toContain(`${rec()} was changed after agentbak signed it`);
    copyFileSync(saved, rec());
    edit(rec(), (r) => delete r.signature);
    r = await a.run(["activate", "--target", t, "--yes"]);
    expect(r.code, r.stderr).toBe(EXIT.verify);
    expect(r.stderr).toContain(`${rec()} is not signed`);
    // the genuine record: activate refuses for the unknown operation (14), not for the file
    copyFileSync(saved, rec());
    const act = await a.run(["activate", "--target", t, "--yes"]);
    expect(act.code, act.stderr).toBe(EXIT.policy);
    expect(act.stderr).toMatch(/1 open operation\(s\) unresolved: idem-task-open-1 \(unknown: /);
  });

  it("[E13] restore.json edited (an open operation removed, or its config pointed elsewhere) is refused (13) naming the file, before any probe runs", async () => {
    const file = join(t, ".agentbak/restore.json");
    const kept = readFileSync(file);
    edit(file, (r) => r.open_operations.splice(2, 1));
    for (const args of [["activate", "--target", t, "--yes"], ["reconcile", "--target", t]]) {
      const r = await a.run(args);
      expect(r.code, r.stderr).toBe(EXIT.verify);
      expect(r.stderr).toContain(`${file} was changed after agentbak signed it`);
    }
    writeFileSync(file, kept);
    const marker = join(a.tmp, "e13-pwned");
    const evil = configVariant("e13-evil", (c) => (c.reconcile.probe = { command: ["sh", "-c", `touch ${marker}; echo '{"state":"completed","receipt":"x"}'`] }));
    edit(file, (r) => (r.config = evil));
    const r = await a.run(["reconcile", "--target", t]);
    expect(r.code, r.stderr).toBe(EXIT.verify);
    expect(existsSync(marker)).toBe(false);
    writeFileSync(file, kept);
    const act = await a.run(["activate", "--target", t, "--yes"]);
    expect(act.stderr).toMatch(/1 open operation\(s\) unresolved: idem-task-open-1 \(unknown: /); // intact again
  });

  it("[E13] a genuine, signed reconcile.json of another restore of the same agent (everything resolved there) is refused (13)", async () => {
    copyFileSync(join(other, ".agentbak/reconcile.json"), rec());
    const r = await a.run(["activate", "--target", t, "--yes"]);
    expect(r.code, r.stderr).toBe(EXIT.verify);
    expect(r.stderr).toContain(`${rec()} belongs to another restore (not to generation`);
    copyFileSync(saved, rec());
  });

  it("[E13] a target restored without a signing key is refused (13); reconcile without one is 12, before it asks anyone", async () => {
    const noKey = { AGENTBAK_SIGNING_KEY_FILE: join(a.tmp, "no-such-key") };
    const u = await restore("e13-unsigned", noKey);
    expect(JSON.parse(readFileSync(join(u, ".agentbak/restore.json"), "utf8")).signature).toBeUndefined();
    const act = await a.run(["activate", "--target", u, "--yes", "--accept-unresolved", "--reason", "test"]);
    expect(act.code, act.stderr).toBe(EXIT.verify);
    expect(act.stderr).toContain(`${join(u, ".agentbak/restore.json")} is not signed`);
    const hits = provider.log.length;
    const rc = await a.run(["reconcile", "--target", t], noKey);
    expect(rc.code, rc.stderr).toBe(EXIT.noKey);
    expect(rc.stderr).toMatch(/signing key missing/);
    expect(provider.log.length).toBe(hits);
    rmSync(u, { recursive: true, force: true });
  });
});

describe("[E13] 'already active' only for a restore agentbak activated", () => {
  it("[E13] a SUSPENDED marker removed by hand, or an activation record moved in, is refused (13), never 'already active'; a superseded active restore is 14", async () => {
    for (const k of ["idem-shared", "idem-task-open-1"]) provider.answer(k, 200, { receipt: `rcpt-${k}` });
    const active = await restore("e13-active");
    expect((await a.run(["reconcile", "--target", active])).code).toBe(EXIT.ok);
    expect((await a.run(["activate", "--target", active, "--yes"])).code).toBe(EXIT.ok);
    // a second activate of the genuine one: already active (0)
    const again = await a.run(["activate", "--target", active, "--yes", "--json"]);
    expect(again.code, again.stderr).toBe(EXIT.ok);
    expect(json(again)).toMatchObject({ activated: false, already_active: true });

    // a newer restore whose marker the agent removed: never reconciled, never activated
    const hand = await restore("e13-hand");
    rmSync(join(hand, ".agentbak/SUSPENDED"));
    let r = await a.run(["activate", "--target", hand, "--yes", "--json"]);
    expect(r.code, r.stderr).toBe(EXIT.verify);
    expect(json(r)).toMatchObject({ exit_status: EXIT.verify, message: expect.stringContaining("never activated it") });
    expect(r.stdout).not.toContain("already_active");
    expect(r.stderr).toContain(`${hand} is not suspended, but agentbak never activated it (no .agentbak/activation.json`);
    // the genuine, signed activation record of the other restore, moved in
    copyFileSync(join(active, ".agentbak/activation.json"), join(hand, ".agentbak/activation.json"));
    r = await a.run(["activate", "--target", hand, "--yes"]);
    expect(r.code, r.stderr).toBe(EXIT.verify);
    expect(r.stderr).toContain(`${join(hand, ".agentbak/activation.json")} belongs to another restore`);
    // an activation record edited (or written by hand): its signature does not match
    const forged = JSON.parse(readFileSync(join(active, ".agentbak/activation.json"), "utf8"));
    forged.generation += 1;
    writeFileSync(join(hand, ".agentbak/activation.json"), JSON.stringify(forged));
    r = await a.run(["activate", "--target", hand, "--yes"]);
    expect(r.code, r.stderr).toBe(EXIT.verify);
    expect(r.stderr).toContain("was changed after agentbak signed it");

    // the earlier active restore is superseded by that newer one: not "already active" (0) but 14, naming it
    r = await a.run(["activate", "--target", active, "--yes"]);
    expect(r.code, r.stderr).toBe(EXIT.policy);
    expect(r.stderr).toMatch(/is superseded by generation \d+; this restore must not keep running: stop it/);
  });
});

describe("[E8] an idempotency key can not steer the probe to another endpoint", () => {
  it("[E8] keys '..' and '.' (dot segments URL parsing removes): never sent with the credential; the operation stays unknown, named", async () => {
    const dots = await makeAgent({ sizeMb: 1, seed: 5 });
    try {
      const db = new Database(join(dots.dir, "state/agent.sqlite"));
      const at = "2026-11-30T00:00:00.000Z";
      for (const [n, key] of [[1, ".."], [2, "."]] as const) {
        db.prepare("INSERT INTO tasks (task_id, kind, payload, status, worker_id, lease_until, created_at) VALUES (?, 'send_invoice', '{}', 'running', 'worker-a', 1, ?)").run(`task-dot-${n}`, at);
        db.prepare("INSERT INTO deliveries (delivery_id, task_id, idempotency_key, status, attempted_at) VALUES (?, ?, ?, 'attempted', ?)").run(`dlv-dot-${n}`, `task-dot-${n}`, key, at);
      }
      db.close();
      mkdirSync(join(dots.dir, "secrets"));
      writeFileSync(join(dots.dir, "secrets/smtp-password"), SECRET + "\n");
      const c = JSON.parse(readFileSync(dots.config, "utf8"));
      // /v1/deliveries/.. is /v1/ and /v1/deliveries/. is /v1/deliveries/ once parsed: other endpoints (the provider's key "")
      c.reconcile.probe.http = { url: `${provider.url}/v1/deliveries/{idempotency_key}`, headers: { authorization: "Bearer {credential:mail}" } };
      c.reconcile.timeoutSeconds = 1;
      c.reconcile.attempts = 1;
      writeFileSync(dots.config, JSON.stringify(c, null, 2));
      expect((await dots.run(["backup"])).code).toBe(0);
      provider.handlers.clear();
      provider.log = [];
      // what those other endpoints would answer: 200 with a receipt, which would mark the delivery done
      provider.answer("", 200, { receipt: "another-endpoint" });
      const t = join(dots.tmp, "dots");
      expect([EXIT.ok, EXIT.warnings]).toContain((await dots.run(["restore", "latest", "--target", t, "--yes"])).code);
      const r = await dots.run(["reconcile", "--target", t, "--json"]);
      const ops = json(r).operations.filter((o: any) => o.id.startsWith("dlv-dot-"));
      expect(ops).toHaveLength(2);
      for (const o of ops) {
        expect(o).toMatchObject({ outcome: "unknown", receipt: null, resolved: false });
        expect(o.detail).toMatch(/idempotency_key "\.\.?" is a dot segment of a URL path \(it would ask another endpoint of the provider\): not sent/);
      }
      // nothing reached another endpoint; the ordinary key was asked
      expect(provider.log.map((l) => l.key)).toEqual(["idem-task-open-1"]);
    } finally {
      dots.cleanup();
    }
  });
});
