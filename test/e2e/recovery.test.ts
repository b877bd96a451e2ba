// The recovery protocol through the real binary: restore -> reconcile ->
// activate against a real HTTP provider (and a command probe), rebased
// timers, runtime compatibility, liveness of the original runtime, and the
// signed, hash-chained audit log of every step and every refusal.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import Database from "better-sqlite3";
import canonicalize from "canonicalize";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, type TestAgent } from "../helpers.js";
import { manifestOf } from "../craft.js";
import { NS, verifyMessage } from "../../dist/crypto/sshsig.js";
import { verifyChainText } from "../../dist/crypto/chainlog.js";
import { loadTrust } from "../../dist/crypto/trust.js";

const SECRET = "tok-LIVE-5f3a9c7e";

/** A provider that answers GET /v1/deliveries/<key> from `answers` and logs every request. */
class Provider {
  server: Server;
  url = "";
  log: { method: string; key: string; headers: IncomingMessage["headers"] }[] = [];
  answers = new Map<string, { status: number; body?: unknown }[]>();
  constructor() {
    this.server = createServer((req, res) => {
      const key = decodeURIComponent((req.url ?? "").split("/").pop() ?? "");
      this.log.push({ method: req.method ?? "", key, headers: req.headers });
      const q = this.answers.get(key) ?? [{ status: 404, body: { error: "no such key" } }];
      const a = q.length > 1 ? q.shift()! : q[0]!;
      res.writeHead(a.status, { "content-type": "application/json" });
      res.end(JSON.stringify(a.body ?? {}));
    });
  }
  async start() {
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }
  hits = (key: string) => this.log.filter((l) => l.key === key).length;
}

const audit = async (t: TestAgent) =>
  String(await (await t.store()).get("tenants/acme/agents/billing-agent/audit.jsonl"))
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
const signedBy = (e: any) => verifyMessage(e.receipt_signature, NS.receipt, Buffer.from(canonicalize(e.receipt)!));
const deliveries = (target: string) => {
  const db = new Database(join(target, "state/agent.sqlite"), { readonly: true });
  try {
    return Object.fromEntries((db.prepare("SELECT delivery_id, status, provider_receipt FROM deliveries WHERE delivery_id LIKE 'dlv-task-open-%'").all() as any[]).map((r) => [r.delivery_id, r]));
  } finally {
    db.close();
  }
};
const patchConfig = (t: TestAgent, patch: (c: any) => void, file = t.config) => {
  const c = JSON.parse(readFileSync(t.config, "utf8"));
  patch(c);
  writeFileSync(file, JSON.stringify(c, null, 2));
  return file;
};

/** Open operations of four kinds beside the generated one (task-open-1, send_invoice: retry-safe). */
function addOpenOperations(t: TestAgent): void {
  const db = new Database(join(t.dir, "state/agent.sqlite"));
  const at = "2026-11-30T00:00:00.000Z";
  db.transaction(() => {
    for (const [n, kind] of [[2, "charge_card"], [3, "send_reminder"], [4, "send_reminder"]] as const) {
      db.prepare("INSERT INTO tasks (task_id, kind, payload, status, worker_id, lease_until, created_at) VALUES (?, ?, '{}', 'running', 'worker-a', 1, ?)").run(`task-open-${n}`, kind, at);
      db.prepare("INSERT INTO deliveries (delivery_id, task_id, idempotency_key, status, attempted_at) VALUES (?, ?, ?, 'attempted', ?)").run(`dlv-task-open-${n}`, `task-open-${n}`, `idem-task-open-${n}`, at);
    }
  })();
  db.close();
}

let a: TestAgent;
const provider = new Provider();
let snapshot: any;

beforeAll(async () => {
  await provider.start();
  a = await makeAgent({ sizeMb: 1 });
  addOpenOperations(a);
  mkdirSync(join(a.dir, "secrets"));
  writeFileSync(join(a.dir, "secrets/smtp-password"), SECRET + "\n");
  patchConfig(a, (c) => {
    c.reconcile.probe.http = { url: `${provider.url}/v1/deliveries/{idempotency_key}`, headers: { authorization: "Bearer {credential:mail}" } };
    c.reconcile.timeoutSeconds = 1;
  });
  const r = await a.run(["backup", "--json"]);
  expect(r.code, r.stderr).toBe(0);
  snapshot = json(r);
});
afterAll(() => {
  provider.server.close();
  a.cleanup();
});

describe("restore -> reconcile -> activate", () => {
  let t1: string;
  it("the manifest records each open operation's kind and strategy, and the plan shows them", async () => {
    const m = manifestOf(await a.file(snapshot.path));
    expect(m.open_operations).toEqual([
      { id: "dlv-task-open-1", idempotency_key: "idem-task-open-1", kind: "send_invoice", strategy: "retry-safe" },
      { id: "dlv-task-open-2", idempotency_key: "idem-task-open-2", kind: "charge_card", strategy: "escalate" },
      { id: "dlv-task-open-3", idempotency_key: "idem-task-open-3", kind: "send_reminder", strategy: "observe" },
      { id: "dlv-task-open-4", idempotency_key: "idem-task-open-4", kind: "send_reminder", strategy: "observe" },
    ]);
    const dry = await a.run(["restore", "latest", "--target", join(a.tmp, "dry"), "--dry-run"]);
    expect(dry.stdout).toContain("open op    dlv-task-open-2 key idem-task-open-2 (charge_card)  sent, no receipt: reconciled by strategy escalate before activation");
  });

  it("reconcile asks the provider by key with the credential in the header only: completed recorded, retry-safe queued, escalate held, unknown left alone", async () => {
    provider.answers.set("idem-task-open-3", [{ status: 200, body: { receipt: "prov-rcpt-3" } }]);
    provider.answers.set("idem-task-open-4", [{ status: 503 }]);
    t1 = join(a.tmp, "t1");
    expect([0, 3]).toContain((await a.run(["restore", "latest", "--target", t1, "--yes"])).code);
    const t0 = Date.now();
    const r = await a.run(["reconcile", "--target", t1, "--json"]);
    expect(r.code, r.stderr).toBe(3); // unresolved operations remain
    const res = json(r);
    const by = Object.fromEntries(res.operations.map((o: any) => [o.idempotency_key, o]));
    expect(by["idem-task-open-1"]).toMatchObject({ strategy: "retry-safe", outcome: "not_found", resolution: "retry", resolved: true, applied: "onRetry", attempts: 1 });
    expect(by["idem-task-open-2"]).toMatchObject({ strategy: "escalate", outcome: "not_found", resolution: "escalated", resolved: false, applied: "onEscalate" });
    expect(by["idem-task-open-3"]).toMatchObject({ strategy: "observe", outcome: "completed", receipt: "prov-rcpt-3", resolution: "completed", resolved: true, applied: "onCompleted" });
    expect(by["idem-task-open-4"]).toMatchObject({ outcome: "unknown", resolution: "unknown", resolved: false, applied: null, attempts: 2 });
    expect(by["idem-task-open-4"].detail).toMatch(/provider answered 503 \(after 2 attempts\)/);
    expect(Date.now() - t0).toBeLessThan(30_000);
    expect(res.summary).toEqual({ operations: 4, completed: 1, retry: 1, escalated: 1, unknown: 1, unresolved: 2 });
    // the outcomes are in the restored state, through the configured SQL
    const d = deliveries(t1);
    expect(d["dlv-task-open-1"].status).toBe("queued");
    expect(d["dlv-task-open-2"].status).toBe("held");
    expect(d["dlv-task-open-3"]).toMatchObject({ status: "delivered", provider_receipt: "prov-rcpt-3" });
    expect(d["dlv-task-open-4"].status).toBe("attempted");
    // the provider was only asked (never sent to), with the credential and the generation
    expect(new Set(provider.log.map((l) => l.method))).toEqual(new Set(["GET"]));
    expect(provider.hits("idem-task-open-4")).toBe(2);
    for (const l of provider.log) expect(l.headers).toMatchObject({ authorization: `Bearer ${SECRET}`, "agentbak-generation": "1" });
    // results in .agentbak/ and a signed receipt; the credential nowhere
    const rec = JSON.parse(readFileSync(join(t1, ".agentbak/reconcile.json"), "utf8"));
    expect(rec.summary.unresolved).toBe(2);
    const e = (await audit(a)).at(-1);
    expect(e.event).toBe("reconcile");
    expect(e.receipt).toMatchObject({ kind: "reconcile-receipt", generation: 1, summary: res.summary });
    expect(signedBy(e).length).toBe(32);
    const human = await a.run(["reconcile", "--target", t1]);
    for (const text of [r.stdout, r.stderr, human.stdout, human.stderr, JSON.stringify(rec), JSON.stringify(await audit(a))]) expect(text).not.toContain(SECRET);
  });

  it("activate refuses (14) while anything is unresolved, and logs the refusal; --accept-unresolved needs --reason", async () => {
    const r = await a.run(["activate", "--target", t1, "--yes"]);
    expect(r.code).toBe(14);
    expect(r.stderr).toMatch(/2 open operation\(s\) unresolved: idem-task-open-2 \(escalated: .*\); idem-task-open-4 \(unknown: .*\); run agentbak reconcile/);
    expect(existsSync(join(t1, ".agentbak/SUSPENDED"))).toBe(true);
    const e = (await audit(a)).at(-1);
    expect(e.event).toBe("activate-refused");
    expect(e.receipt.reason).toContain("2 open operation(s) unresolved");
    expect(signedBy(e).length).toBe(32);
    expect((await a.run(["activate", "--target", t1, "--yes", "--accept-unresolved"])).code).toBe(2);
    expect((await a.run(["activate", "--target", t1, "--yes", "--accept-unresolved", "--reason", "  "])).code).toBe(2);
    expect((await a.run(["activate", "--target", t1, "--yes", "--reason", "x"])).code).toBe(2);
    expect(existsSync(join(t1, ".agentbak/SUSPENDED"))).toBe(true);
  });

  it("reconcile again asks only about the unresolved; once all are resolved activation goes through with a signed record", async () => {
    provider.answers.set("idem-task-open-2", [{ status: 200, body: { receipt: "settled-by-hand-2" } }]);
    provider.answers.set("idem-task-open-4", [{ status: 503 }, { status: 200, body: { receipt: "prov-rcpt-4" } }]);
    const asked = { 1: provider.hits("idem-task-open-1"), 3: provider.hits("idem-task-open-3") };
    const r = await a.run(["reconcile", "--target", t1, "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const res = json(r);
    expect(res.probed).toBe(2);
    expect(res.summary).toEqual({ operations: 4, completed: 3, retry: 1, escalated: 0, unknown: 0, unresolved: 0 });
    expect(res.operations.find((o: any) => o.idempotency_key === "idem-task-open-4")).toMatchObject({ receipt: "prov-rcpt-4", attempts: 2 }); // a 503, then bounded backoff, then 200
    expect(provider.hits("idem-task-open-1")).toBe(asked[1]);
    expect(provider.hits("idem-task-open-3")).toBe(asked[3]);
    expect(deliveries(t1)["dlv-task-open-2"]).toMatchObject({ status: "delivered", provider_receipt: "settled-by-hand-2" });
    const act = await a.run(["activate", "--target", t1, "--yes", "--json"]);
    expect(act.code, act.stderr).toBe(0);
    expect(json(act)).toMatchObject({ activated: true, generation: 1, unresolved: [] });
    expect(existsSync(join(t1, ".agentbak/SUSPENDED"))).toBe(false);
    const e = (await audit(a)).at(-1);
    expect(e.event).toBe("activate");
    expect(e.receipt).toMatchObject({
      kind: "activation-record",
      generation: 1,
      who: { principal: "agentbak", os_user: expect.any(String), signer: expect.stringMatching(/^SHA256:/) },
      reconciliation: { operations: 4, unresolved: 0 },
      reason: null,
      accepted_unresolved: 0,
    });
    expect(Date.parse(e.receipt.at)).toBeGreaterThan(Date.now() - 60_000);
    expect(signedBy(e).length).toBe(32);
    // the target's copy is the same record, bound to the restore record and signed (a second activate checks it)
    const { signature, restore_record_sha256, ...copy } = JSON.parse(readFileSync(join(t1, ".agentbak/activation.json"), "utf8"));
    expect(copy).toEqual(e.receipt);
    expect(signature).toMatch(/^-----BEGIN SSH SIGNATURE-----/);
    expect(restore_record_sha256).toMatch(/^[0-9a-f]{64}$/);
    // already active: reconcile refuses, activate says so
    expect((await a.run(["reconcile", "--target", t1])).code).toBe(14);
    expect(json(await a.run(["activate", "--target", t1, "--yes", "--json"])).already_active).toBe(true);
  });

  it("accepting unresolved operations with a reason signs the reason and the list into the activation record", async () => {
    provider.answers.set("idem-task-open-2", [{ status: 404 }]);
    provider.answers.set("idem-task-open-4", [{ status: 500 }]);
    const t2 = join(a.tmp, "t2");
    await a.run(["restore", "latest", "--target", t2, "--yes"]);
    expect((await a.run(["reconcile", "--target", t2])).code).toBe(3);
    const act = await a.run(["activate", "--target", t2, "--yes", "--accept-unresolved", "--reason", "INC-42: charge checked with the bank", "--json"]);
    expect(act.code, act.stderr).toBe(3);
    expect(json(act).warnings[0]).toMatch(/^activated with 2 open operation\(s\) accepted unresolved \(reason: INC-42/);
    const e = (await audit(a)).at(-1);
    expect(e.receipt).toMatchObject({ generation: 2, reason: "INC-42: charge checked with the bank", accepted_unresolved: 2 });
    expect(e.receipt.unresolved.map((u: any) => u.idempotency_key)).toEqual(["idem-task-open-2", "idem-task-open-4"]);
    expect(signedBy(e).length).toBe(32);
  });

  it("a superseded restore is neither reconciled nor activated; the whole audit log verifies as one signed chain", async () => {
    const old = join(a.tmp, "t3");
    await a.run(["restore", "latest", "--target", old, "--yes"]);
    await a.run(["restore", "latest", "--target", join(a.tmp, "t4"), "--yes"]);
    const r = await a.run(["reconcile", "--target", old]);
    expect(r.code).toBe(14);
    expect(r.stderr).toMatch(/generation 3 of billing-agent is superseded by generation 4/);
    expect(existsSync(join(old, ".agentbak/reconcile.json"))).toBe(false);
    const text = String(await (await a.store()).get("tenants/acme/agents/billing-agent/audit.jsonl"));
    const v = verifyChainText(text, loadTrust(a.home), "agentbak-receipt", "audit entry");
    expect(v.entries).toBeGreaterThan(8);
    expect((await audit(a)).map((e) => e.event)).toEqual(expect.arrayContaining(["backup", "restore", "reconcile", "activate-refused", "activate"]));
  });

  it("a command probe gets JSON on stdin and AGENTBAK_GENERATION; garbage and failures are unknown", async () => {
    const script = join(a.tmp, "probe.mjs");
    const seen = join(a.tmp, "probe-seen.jsonl");
    writeFileSync(
      script,
      `import { appendFileSync } from "node:fs";
       let s = ""; for await (const c of process.stdin) s += c;
       const q = JSON.parse(s);
       appendFileSync(${JSON.stringify(seen)}, JSON.stringify({ ...q, generation: process.env.AGENTBAK_GENERATION }) + "\\n");
       const n = q.idempotency_key.slice(-1);
       if (n === "1") console.log(JSON.stringify({ state: "completed", receipt: { id: "cmd-1" } }));
       else if (n === "2") console.log(JSON.stringify({ state: "not_found" }));
       else if (n === "3") console.log("hello");
       else process.exit(7);`,
    );
    // not a test of time: a whole reconcile (4 keys, retries of the unknown ones, a node start each) may take
    // longer than the suite's 1 s × attempts on a loaded machine, and keys not asked in time would be "not asked"
    const cfg = patchConfig(a, (c) => ((c.reconcile.probe = { command: ["node", script] }), (c.reconcile.timeoutSeconds = 20)), join(a.tmp, "command-probe.json"));
    const t = join(a.tmp, "t5");
    await a.run(["restore", "latest", "--target", t, "--yes"]);
    const r = await a.run(["reconcile", "--target", t, "-c", cfg, "--json"]);
    expect(r.code, r.stderr).toBe(3);
    const by = Object.fromEntries(json(r).operations.map((o: any) => [o.idempotency_key, o]));
    expect(by["idem-task-open-1"]).toMatchObject({ outcome: "completed", receipt: '{"id":"cmd-1"}', resolution: "completed" });
    expect(by["idem-task-open-2"]).toMatchObject({ outcome: "not_found", resolution: "escalated" });
    expect(by["idem-task-open-3"]).toMatchObject({ outcome: "unknown", resolution: "unknown" });
    expect(by["idem-task-open-3"].detail).toMatch(/printed no .* answer/);
    expect(by["idem-task-open-4"].detail).toMatch(/probe command exited 7/);
    const asked = readFileSync(seen, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    expect(asked[0]).toEqual({ id: "dlv-task-open-1", idempotency_key: "idem-task-open-1", kind: "send_invoice", generation: "5" });
  });
});

describe("liveness of the original runtime", () => {
  it("activation refuses while the pid file names a live process or the health URL answers; --isolated or a stopped runtime lets it through", async () => {
    const sleeper = execa("sleep", ["60"]);
    const health = createServer((_, res) => res.end("ok"));
    await new Promise<void>((r) => health.listen(0, "127.0.0.1", r));
    const url = `http://127.0.0.1:${(health.address() as AddressInfo).port}/health`;
    try {
      mkdirSync(join(a.dir, "run"), { recursive: true });
      writeFileSync(join(a.dir, "run/agent.pid"), `${sleeper.pid}\n`);
      const cfg = patchConfig(a, (c) => (c.runtime.liveness = { pidFile: "run/agent.pid", http: url }), join(a.dir, "liveness.json"));
      const t = join(a.tmp, "live");
      await a.run(["restore", "latest", "--target", t, "--yes", "-c", cfg]);
      const accept = ["--accept-unresolved", "--reason", "liveness test", "--yes"];
      const r = await a.run(["activate", "--target", t, ...accept]);
      expect(r.code).toBe(14);
      expect(r.stderr).toContain(`pidFile: alive, pid ${sleeper.pid}`);
      expect(r.stderr).toMatch(/http: alive, .*answered 200/);
      expect(r.stderr).toContain("pass --isolated");
      expect((await audit(a)).at(-1).event).toBe("activate-refused");
      sleeper.kill("SIGKILL");
      await sleeper.catch(() => undefined);
      const r2 = await a.run(["activate", "--target", t, ...accept]);
      expect(r2.code).toBe(14); // the health URL still answers
      expect(r2.stderr).not.toContain("pidFile: alive");
      const ok = await a.run(["activate", "--target", t, ...accept, "--isolated", "--json"]);
      expect(ok.code, ok.stderr).toBe(3);
      expect(json(ok).warnings).toContain("activated while the original runtime answers http: alive (--isolated)");
      const e = (await audit(a)).at(-1);
      expect(e.receipt).toMatchObject({ isolated: true, liveness: [{ how: "pidFile", state: "stopped" }, { how: "http", state: "alive" }] });
      // a stopped runtime needs no --isolated
      await new Promise<void>((r) => health.close(() => r()));
      const t2 = join(a.tmp, "live2");
      await a.run(["restore", "latest", "--target", t2, "--yes", "-c", cfg]);
      const ok2 = await a.run(["activate", "--target", t2, ...accept, "--json"]);
      expect(ok2.code, ok2.stderr).toBe(json(ok2).warnings.length ? 3 : 0);
      expect(json(ok2).warnings.join(" ")).not.toContain("--isolated");
      expect(json(ok2).liveness.map((l: any) => l.state)).toEqual(["stopped", "stopped"]);
    } finally {
      sleeper.kill("SIGKILL");
      health.close();
    }
  });
});

describe("timers and runtime compatibility", () => {
  let b: TestAgent;
  let created: string;
  const leaseFuture = Date.now() + 3_600_000;
  beforeAll(async () => {
    b = await makeAgent({ sizeMb: 1 });
    const db = new Database(join(b.dir, "state/agent.sqlite"));
    db.prepare("UPDATE tasks SET lease_until = ? WHERE task_id = 'task-open-1'").run(leaseFuture);
    db.exec("CREATE TABLE reminders (id INTEGER PRIMARY KEY, due_at TEXT); INSERT INTO reminders (due_at) VALUES ('2026-12-24T09:00:00.000Z'), ('not a time'), (NULL)");
    db.close();
    const r = await b.run(["backup", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    created = manifestOf(await b.file(json(r).path)).created_at;
    await new Promise((res) => setTimeout(res, 1500));
  });
  afterAll(() => b.cleanup());

  const restored = (target: string) => {
    const db = new Database(join(target, "state/agent.sqlite"), { readonly: true });
    try {
      return {
        lease: db.prepare("SELECT lease_until FROM tasks WHERE task_id = 'task-open-1'").pluck().get() as number,
        due: db.prepare("SELECT due_at FROM reminders ORDER BY id").pluck().all(),
      };
    } finally {
      db.close();
    }
  };

  it("shift: leases and deadlines move by the time since the snapshot; the plan and the receipt record what moved", async () => {
    const cfg = patchConfig(
      b,
      (c) =>
        (c.timers = [
          { database: "state", table: "tasks", column: "lease_until", mode: "shift" },
          { database: "state", table: "reminders", column: "due_at", mode: "shift", format: "iso8601" },
        ]),
      join(b.dir, "timers-shift.json"),
    );
    const t = join(b.tmp, "shift");
    const dry = await b.run(["restore", "latest", "--target", t, "--dry-run", "-c", cfg]);
    expect(dry.stdout).toMatch(/timer      state\.tasks\.lease_until  shifted by \d+ s \(time since the snapshot\)/);
    const r = await b.run(["restore", "latest", "--target", t, "--yes", "-c", cfg, "--json"]);
    expect([0, 3], r.stderr).toContain(r.code);
    const receipt = (await audit(b)).at(-1).receipt;
    const shift = Date.parse(receipt.at) - Date.parse(created);
    expect(shift).toBeGreaterThanOrEqual(1500);
    expect(receipt.timers).toEqual([
      { database: "state", table: "tasks", column: "lease_until", mode: "shift", format: "epoch_ms", shift_ms: shift, to: null, rows: 1 },
      { database: "state", table: "reminders", column: "due_at", mode: "shift", format: "iso8601", shift_ms: shift, to: null, rows: 1 },
    ]);
    const s = restored(t);
    expect(s.lease).toBe(leaseFuture + shift);
    expect(s.due).toEqual([new Date(Date.parse("2026-12-24T09:00:00.000Z") + shift).toISOString(), "not a time", null]);
  });

  it("expire: leases still in the future end at the restore time, so the work is claimed again", async () => {
    const cfg = patchConfig(b, (c) => (c.timers = [{ database: "state", table: "tasks", column: "lease_until", mode: "expire" }]), join(b.dir, "timers-expire.json"));
    const t = join(b.tmp, "expire");
    await b.run(["restore", "latest", "--target", t, "--yes", "-c", cfg]);
    const receipt = (await audit(b)).at(-1).receipt;
    expect(receipt.timers).toEqual([{ database: "state", table: "tasks", column: "lease_until", mode: "expire", format: "epoch_ms", shift_ms: null, to: Date.parse(receipt.at), rows: 1 }]);
    expect(restored(t).lease).toBe(Date.parse(receipt.at));
    const bad = patchConfig(b, (c) => (c.timers = [{ database: "state", table: "no_such", column: "x", mode: "shift" }]), join(b.dir, "timers-bad.json"));
    const nt = join(b.tmp, "bad-timer");
    const r = await b.run(["restore", "latest", "--target", nt, "--yes", "-c", bad]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/timers\[0\] \(state\.no_such\.x\): no such table: no_such/);
    expect(existsSync(nt)).toBe(false);
  });

  it("a snapshot made under another agent version or model is refused (14) and logged; declared compatible, or --allow-runtime-change with approval, restores", async () => {
    const changed = patchConfig(
      b,
      (c) => {
        c.runtime.agentVersion = "1.5.0";
        c.runtime.models.llm = "gpt-test-2026-06";
      },
      join(b.dir, "runtime-changed.json"),
    );
    const t = join(b.tmp, "rt");
    const r = await b.run(["restore", "latest", "--target", t, "--yes", "-c", changed]);
    expect(r.code).toBe(14);
    expect(r.stderr).toContain("runtime differs from the snapshot's: agent version 1.4.2 -> 1.5.0, model llm gpt-test-2026-01 -> gpt-test-2026-06");
    expect(existsSync(t)).toBe(false);
    const e = (await audit(b)).at(-1);
    expect(e.event).toBe("restore-refused");
    expect(e.receipt.reason).toContain("agent version 1.4.2 -> 1.5.0");
    expect(signedBy(e).length).toBe(32);
    // approval: the flag alone is not enough without a TTY or --yes
    expect((await b.run(["restore", "latest", "--target", t, "--allow-runtime-change", "-c", changed])).code).toBe(2);
    const dry = await b.run(["restore", "latest", "--target", t, "--allow-runtime-change", "--dry-run", "-c", changed]);
    expect(dry.stdout).toContain("runtime    agent version 1.4.2 -> 1.5.0  (needs approval)");
    const ok = await b.run(["restore", "latest", "--target", t, "--allow-runtime-change", "--yes", "-c", changed, "--json"]);
    expect([0, 3], ok.stderr).toContain(ok.code);
    expect((await audit(b)).at(-1).receipt.runtime.map((d: any) => d.key)).toEqual(["agent_version", "model:llm"]);
    const compatible = patchConfig(
      b,
      (c) => {
        c.runtime.agentVersion = "1.5.0";
        c.runtime.compatible = { agentVersion: ["1.4.*"] };
      },
      join(b.dir, "runtime-compatible.json"),
    );
    const t2 = join(b.tmp, "rt2");
    const ok2 = await b.run(["restore", "latest", "--target", t2, "--yes", "-c", compatible, "--json"]);
    expect([0, 3], ok2.stderr).toContain(ok2.code);
    expect(json(ok2).plan.policy.runtime).toEqual([{ key: "agent_version", what: "agent version", snapshot: "1.4.2", here: "1.5.0", compatible: true }]);
  });
});
