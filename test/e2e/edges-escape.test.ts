// Issue 32, trust at the edges, through the real binary and server: text an agent, its database, a bundle
// or a provider controls never reaches a terminal raw (shown escaped; JSON keeps it exact), and labels and
// restore-request fields holding such characters are refused at input [E2]; state sources quote every
// identifier, give up on a held lock after a stated timeout, report a bad connection in one line, and never
// echo a password [E9]; a timer whose stored values are not of its declared format is named at backup and
// never moved 1000-fold at restore [E12].
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import pg from "pg";
import { Redis } from "ioredis";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, type TestAgent } from "../helpers.js";
import { api, makeToken, mcpStdio, startServer, tool } from "../agentapi-helpers.js";
import { craft, manifestOf } from "../craft.js";
import { plain, Term } from "../pty.js";
import { patchConfig, server, sql, type Server } from "../sourcekit.js";

// what an agent would plant: clear the screen and turn red; reverse the rest of the line; return to column 0
const ESC = "\x1b[2J\x1b[31m";
const RLO = "\u202e";
const SHOWN = { ESC: "\\x1b[2J\\x1b[31m", RLO: "\\u202e", CR: "\\x0d" };
const OP_ID = `dlv-${RLO}fdp.exe`;
const OP_KEY = `idem-${ESC}red`;
const CURSOR = `9999-12-31T00:00:00.000Z\rapproved by ops`;
const TABLE = `notes${ESC}x`;

/** None of the planted characters reached the terminal raw. */
function noRaw(r: { stdout: string; stderr: string }, what: string): void {
  for (const [name, raw] of [["ESC[2J", "\x1b[2J"], ["ESC[31m", "\x1b[31m"], ["U+202E", RLO], ["CR", "\r"]] as const)
    expect(r.stdout + r.stderr, `${what}: raw ${name}`).not.toContain(raw);
}

let a: TestAgent;
let backup: { snapshot_id: string; path: string };

/** A config beside the agent's, changed by `patch`. @returns its path. */
function configWith(name: string, patch: (c: any) => void): string {
  const c = JSON.parse(readFileSync(a.config, "utf8"));
  patch(c);
  const p = join(a.dir, `${name}.json`);
  writeFileSync(p, JSON.stringify(c, null, 2));
  return p;
}

beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
  // the agent writes hostile text into its own state: the open operation's id and key, a cursor, a table name
  const db = new Database(join(a.dir, "state/agent.sqlite"));
  db.prepare("UPDATE deliveries SET delivery_id = ?, idempotency_key = ? WHERE status = 'attempted'").run(OP_ID, OP_KEY);
  db.prepare("UPDATE deliveries SET delivered_at = ? WHERE delivery_id = (SELECT max(delivery_id) FROM deliveries WHERE status = 'delivered')").run(CURSOR);
  db.exec(`CREATE TABLE "${TABLE}" (id INTEGER PRIMARY KEY); INSERT INTO "${TABLE}" VALUES (1), (2), (3);`);
  db.close();
  const r = await a.run(["backup", "--json"]);
  expect(r.code, r.stderr).toBe(0);
  backup = json(r);
  backup.path = await a.file(backup.path);
}, 120_000);
afterAll(() => a?.cleanup());

describe("[E2] agent-controlled text reaches a terminal escaped", () => {
  it("[E2] a restore plan shows an open operation id with U+202E, its key with ESC[2J and a cursor with CR escaped; --json keeps them exact", async () => {
    const target = join(a.tmp, "plan-target");
    const r = await a.run(["restore", "latest", "--target", target, "--dry-run"]);
    expect([0, 3], r.stderr).toContain(r.code);
    noRaw(r, "restore --dry-run");
    expect(r.stdout).toContain(`open op    dlv-${SHOWN.RLO}fdp.exe key idem-${SHOWN.ESC}red`);
    expect(r.stdout).toContain(`cursor     delivery_cursor = 9999-12-31T00:00:00.000Z${SHOWN.CR}approved by ops`);
    const j = json(await a.run(["restore", "latest", "--target", target, "--dry-run", "--json"]));
    expect(j.plan.open_operations[0]).toMatchObject({ id: OP_ID, idempotency_key: OP_KEY });
    expect(j.plan.cursors.delivery_cursor).toBe(CURSOR);
    expect(existsSync(target)).toBe(false);
  });

  it("[E2] a table named with ESC[2J, quoted by a verification error, is escaped once by main; --json keeps the exact message", async () => {
    expect(manifestOf(backup.path).components.find((c: any) => c.name === "state").records[TABLE]).toBe(3);
    // a re-signed manifest (a trusted key, as a compromised backup host holds) that claims another row count for that table
    const out = join(a.tmp, "table-count.agentbak");
    const { readLayout } = await import("../../dist/bundle/outer.js");
    const l = readLayout(backup.path);
    const payload = readFileSync(backup.path).subarray(l.payloadOffset, l.payloadOffset + l.payloadSize);
    await craft({ baseManifest: manifestOf(backup.path), payloadAge: payload, keyFile: join(a.home, "signing-key"), out, patch: (m) => (m.components.find((c: any) => c.name === "state").records[TABLE] = 4) });
    const r = await a.run(["verify", out, "--identity", a.identity]);
    expect(r.code, r.stderr).toBe(13);
    noRaw(r, "verify");
    expect(r.stderr.trim()).toBe(`agentbak: database state: table notes${SHOWN.ESC}x has 3 rows, manifest says 4`);
    const j = await a.run(["verify", out, "--identity", a.identity, "--json"]);
    expect(j.code).toBe(13);
    expect(json(j).message).toBe(`database state: table ${TABLE} has 3 rows, manifest says 4`);
  });

  it("[E2] a label and an agent version planted in a re-signed manifest: snapshots, the plan and the policy refusal show them escaped", async () => {
    const { readLayout } = await import("../../dist/bundle/outer.js");
    const l = readLayout(backup.path);
    const payload = readFileSync(backup.path).subarray(l.payloadOffset, l.payloadOffset + l.payloadSize);
    // the same snapshot, re-signed in place in the repository with a label and an agent version of the agent's choosing
    const original = readFileSync(backup.path);
    const out = join(a.tmp, "label.agentbak");
    await craft({
      baseManifest: manifestOf(backup.path),
      payloadAge: payload,
      keyFile: join(a.home, "signing-key"),
      out,
      patch: (m) => ((m.label = `nightly${RLO}gpj.exe`), (m.runtime.agent_version = `1.4.2${ESC}`)),
    });
    try {
      writeFileSync(backup.path, readFileSync(out));
      const list = await a.run(["snapshots"]);
      expect(list.code, list.stderr).toBe(0);
      noRaw(list, "snapshots");
      // the 80-column listing cuts the label after escaping it; --wide shows it whole
      const wide = await a.run(["snapshots", "--wide"]);
      noRaw(wide, "snapshots --wide");
      expect(wide.stdout).toContain(`nightly${SHOWN.RLO}gpj.exe`);
      expect(json(await a.run(["snapshots", "--json"]))[0].label).toBe(`nightly${RLO}gpj.exe`);
    } finally {
      writeFileSync(backup.path, original);
    }
    const target = join(a.tmp, "runtime-target");
    const dry = await a.run(["restore", out, "--target", target, "--dry-run"]);
    noRaw(dry, "restore --dry-run of a changed runtime");
    expect(dry.stdout).toContain(`1.4.2${SHOWN.ESC}`);
    const r = await a.run(["restore", out, "--target", target, "--yes"]);
    expect(r.code, r.stderr).toBe(14);
    noRaw(r, "refused restore");
    expect(r.stderr).toMatch(/^agentbak: .*1\.4\.2\\x1b\[2J\\x1b\[31m/m);
    expect(existsSync(target)).toBe(false);
  });

  it("[E2] activate's refusal and reconcile's lines name the hostile key escaped; a probe's receipt with ESC stays exact in --json", async () => {
    const probe = join(a.tmp, "probe.mjs");
    writeFileSync(probe, `process.stdout.write(JSON.stringify({ state: "completed", receipt: "rcpt-\\u001b[2J-\\u202e" }));\n`);
    const cfg = configWith("probe-config", (c) => (c.reconcile.probe = { command: [process.execPath, probe] }));
    const target = join(a.tmp, "reconciled");
    const restored = await a.run(["restore", "latest", "--target", target, "--yes", "-c", cfg]);
    expect([0, 3], restored.stderr).toContain(restored.code);
    noRaw(restored, "restore");

    const refused = await a.run(["activate", "--target", target, "--yes", "-c", cfg]);
    expect(refused.code, refused.stderr).toBe(14);
    noRaw(refused, "activate");
    expect(refused.stderr).toContain(`idem-${SHOWN.ESC}red`);

    const r = await a.run(["reconcile", "--target", target, "-c", cfg]);
    expect(r.code, r.stderr).toBe(0);
    noRaw(r, "reconcile");
    expect(r.stderr).toContain(`idem-${SHOWN.ESC}red (send_invoice) [retry-safe]: completed -> completed, recorded by onCompleted`);
    const j = json(await a.run(["reconcile", "--target", target, "-c", cfg, "--json"]));
    expect(j.operations[0]).toMatchObject({ id: OP_ID, idempotency_key: OP_KEY, receipt: `rcpt-${"\x1b"}[2J-${RLO}` });
  });

  it("[E2] a drill's failing invariant shows its offending rows (U+202E and ESC in them) escaped", async () => {
    const dir = join(a.tmp, "inv");
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "no_open_deliveries.sql"), "SELECT delivery_id, idempotency_key FROM deliveries WHERE status = 'attempted'");
    const spec = join(a.tmp, "hostile-drill.json");
    writeFileSync(spec, JSON.stringify({ name: "hostile", invariants: [join(dir, "*.sql")] }));
    const r = await a.run(["drill", "latest", "--spec", spec, "--identity", a.identity, "--no-report"]);
    expect(r.code, r.stderr).toBe(15);
    noRaw(r, "drill");
    expect(r.stderr).toContain(`dlv-${SHOWN.RLO}fdp.exe`);
    const j = await a.run(["drill", "latest", "--spec", spec, "--identity", a.identity, "--no-report", "--json"]);
    expect(json(j).checks.find((c: any) => c.name === "invariant:no_open_deliveries").sample[0]).toEqual({ delivery_id: OP_ID, idempotency_key: OP_KEY });
  });

  it("[E2] approve on a terminal: the request's reason and proposed target (ESC[2J, U+202E) and the plan are escaped in the prompt itself", async () => {
    // a request holding what the input check now refuses (one recorded by an older agentbak, or by an agent that writes the repository)
    const { Repository } = await import("../../dist/repository/repository.js");
    const { loadTrust } = await import("../../dist/crypto/trust.js");
    const { parsePrivateKey } = await import("../../dist/crypto/sshsig.js");
    const { recordRequest } = await import("../../dist/restore/request.js");
    const repo = await Repository.open(a.repo);
    const key = parsePrivateKey(readFileSync(join(a.home, "signing-key"), "utf8"));
    const { request } = await recordRequest(repo, loadTrust(a.home), { tenant: "acme", agent: "billing-agent" }, {
      snapshot: backup.snapshot_id,
      reason: `routine${ESC}APPROVED BY SECURITY${RLO}`,
      target: `/srv/${RLO}tegrat`,
      by: "test",
      signingKey: key,
    });
    const target = join(a.tmp, "approve-target");
    const t = Term.agentbak(["approve", request.request_id, "--target", target], { cwd: a.dir, env: { ...a.env, NO_COLOR: "1" } });
    await t.waitFor(/Approve restore request/);
    t.write("n\r");
    const e = await t.exit();
    expect(e.code, plain(t.output)).toBe(14);
    for (const raw of ["\x1b[2J", "\x1b[31m", RLO]) expect(t.output).not.toContain(raw);
    const shown = plain(t.output);
    expect(shown).toContain(`reason     routine${SHOWN.ESC}APPROVED BY SECURITY${SHOWN.RLO}`);
    expect(shown).toContain(`proposed   /srv/${SHOWN.RLO}tegrat`);
    expect(shown).toContain(`open op    dlv-${SHOWN.RLO}fdp.exe key idem-${SHOWN.ESC}red`);
    expect(existsSync(target)).toBe(false);
    // the listing an operator reads first
    const list = await a.run(["requests"]);
    noRaw(list, "requests");
    expect(list.stdout).toContain(`routine${SHOWN.ESC}APPROVED`);
  });
});

describe("[E2] labels and restore-request fields with control, escape or bidi characters are refused at input", () => {
  const hostile = [`a${ESC}b`, `a${RLO}b`, "a\u2066b", "a\rb", "a\u200bb"];

  it("[E2] backup --label: exit 2 naming --label, nothing written", async () => {
    const before = json<any[]>(await a.run(["snapshots", "--json"])).length;
    for (const label of hostile) {
      const r = await a.run(["backup", "--label", label]);
      expect(r.code, `${JSON.stringify(label)}: ${r.stderr}`).toBe(2);
      expect(r.stderr.trim()).toMatch(/^agentbak: --label: .*control characters, escape sequences, Unicode bidi\/format controls or noncharacters$/);
      noRaw(r, "backup --label");
    }
    expect(json<any[]>(await a.run(["snapshots", "--json"])).length).toBe(before);
  });

  it("[E2] HTTP: a label, a reason or a target holding one is a 400 naming the field; nothing recorded", async () => {
    const srv = await startServer(a);
    try {
      const cp = await makeToken(a, "acme", "billing-agent", "restore-request");
      for (const s of hostile) {
        const b = await api(srv.url, cp.token, "POST", "/v1/backups", { body: { label: s } });
        expect(b.status, JSON.stringify(b.body)).toBe(400);
        expect(b.body.error).toMatchObject({ code: 2, message: expect.stringMatching(/^label: .*escape sequences, Unicode bidi\/format controls or noncharacters/) });
        const q = await api(srv.url, cp.token, "POST", "/v1/restores", { body: { snapshot: "latest", reason: s } });
        expect(q.status, JSON.stringify(q.body)).toBe(400);
        expect(q.body.error.message).toMatch(/^reason: /);
        const t = await api(srv.url, cp.token, "POST", "/v1/restores", { body: { snapshot: "latest", reason: "ok", target: `/srv/${s}` } });
        expect(t.status, JSON.stringify(t.body)).toBe(400);
        expect(t.body.error.message).toMatch(/^target: /);
      }
      // printable text in any script is still welcome
      const fine = await api(srv.url, cp.token, "POST", "/v1/restores", { body: { snapshot: "latest", reason: "café 日本語 — rollback after bad deploy" } });
      expect(fine.status, JSON.stringify(fine.body)).toBe(202);
      expect(srv.log()).not.toContain("\x1b[2J");
    } finally {
      await srv.stop();
    }
  });

  it("[E2] MCP: create_backup and request_restore refuse such a label, reason or target, naming the field", async () => {
    const c = await mcpStdio(a, ["--tier", "restore-request"]);
    try {
      for (const s of hostile) {
        const b = await tool(c, "create_backup", { label: s });
        expect(b.isError, b.text).toBe(true);
        expect(b.text).toMatch(/label/);
        expect(b.text).toMatch(/escape sequences, Unicode bidi\/format controls or noncharacters/);
        const q = await tool(c, "request_restore", { snapshot: "latest", reason: s });
        expect(q.isError, q.text).toBe(true);
        expect(q.text).toMatch(/reason/);
        const t = await tool(c, "request_restore", { snapshot: "latest", reason: "ok", target: `/x/${s}` });
        expect(t.isError, t.text).toBe(true);
        expect(t.text).toMatch(/target/);
      }
    } finally {
      await c.close();
    }
  });
});

describe("[E12] timers whose stored values are not of the declared format", () => {
  let t: TestAgent;
  const leaseS = Math.floor(Date.now() / 1000) + 3600; // an hour ahead, in epoch seconds, as the agent stores it
  const cfg = (name: string, timer: Record<string, unknown>) => {
    const c = JSON.parse(readFileSync(t.config, "utf8"));
    c.timers = [{ database: "state", table: "tasks", column: "lease_until", mode: "shift", ...timer }];
    const p = join(t.dir, `${name}.json`);
    writeFileSync(p, JSON.stringify(c, null, 2));
    return p;
  };
  const lease = (dir: string) => {
    const db = new Database(join(dir, "state/agent.sqlite"), { readonly: true });
    try {
      return db.prepare("SELECT lease_until FROM tasks WHERE task_id = 'task-open-1'").pluck().get() as number;
    } finally {
      db.close();
    }
  };
  beforeAll(async () => {
    t = await makeAgent({ sizeMb: 1, seed: 3 });
    const db = new Database(join(t.dir, "state/agent.sqlite"));
    db.prepare("UPDATE tasks SET lease_until = ? WHERE task_id = 'task-open-1'").run(leaseS);
    db.close();
  }, 120_000);
  afterAll(() => t?.cleanup());

  it("[E12] a shift timer left at the default format (epoch_ms) over epoch seconds: the backup completes with a warning naming format (exit 3); the restore leaves the lease unmoved instead of moving it 1000-fold", async () => {
    const ms = cfg("timers-default", {});
    const b = await t.run(["backup", "-c", ms, "--json"]);
    expect(b.code, b.stderr).toBe(3);
    const why = `timers[0] (state.tasks.lease_until): 1 stored value(s) are epoch_s timestamps (e.g. ${leaseS}), but its "format" is "epoch_ms" (the default): a restore leaves them unmoved; set "format": "epoch_s"`;
    expect(json(b).warnings).toContain(why);
    expect(b.stderr).toContain(`warning: ${why}`);
    await new Promise((r) => setTimeout(r, 2100)); // time passes between the snapshot and the restore
    const target = join(t.tmp, "restored-default");
    const r = await t.run(["restore", json(b).snapshot_id, "--target", target, "--yes", "-c", ms, "--json"]);
    expect(r.code, r.stderr).toBe(3);
    expect(json(r).warnings).toContain(why);
    expect(lease(target)).toBe(leaseS); // before: leaseS + ~2100, i.e. 35 minutes later for 2 seconds elapsed
  });

  it("[E12] declared as epoch_s, the same column backs up without a warning and shifts by the seconds elapsed", async () => {
    const s = cfg("timers-seconds", { format: "epoch_s" });
    const b = await t.run(["backup", "-c", s, "--json"]);
    expect(b.code, b.stderr).toBe(0);
    expect(json(b).warnings).toEqual([]);
    await new Promise((r) => setTimeout(r, 2100));
    const target = join(t.tmp, "restored-seconds");
    const r = await t.run(["restore", json(b).snapshot_id, "--target", target, "--yes", "-c", s, "--json"]);
    expect([0, 3], r.stderr).toContain(r.code);
    expect(json(r).warnings.filter((w: string) => w.startsWith("timers"))).toEqual([]);
    const moved = lease(target) - leaseS;
    expect(moved).toBeGreaterThanOrEqual(2);
    expect(moved).toBeLessThan(60);
  });

  it("[E12] epoch seconds stored as text (a column without INTEGER affinity): backup and restore name them (exit 3), never a silent no-op", async () => {
    const db = new Database(join(t.dir, "state/agent.sqlite"));
    db.exec("CREATE TABLE IF NOT EXISTS text_leases (id TEXT PRIMARY KEY, until TEXT)");
    db.prepare("INSERT OR REPLACE INTO text_leases VALUES ('l1', ?)").run(String(leaseS));
    db.close();
    const s = cfg("timers-text", { table: "text_leases", column: "until", format: "epoch_s" });
    const why = `timers[0] (state.text_leases.until): 1 stored value(s) are epoch_s timestamps stored as text (e.g. "${leaseS}"), which no "format" moves: a restore leaves them unmoved; store them as numbers (INTEGER)`;
    const b = await t.run(["backup", "-c", s, "--json"]);
    expect(b.code, b.stderr).toBe(3);
    expect(json(b).warnings).toContain(why);
    const target = join(t.tmp, "restored-text");
    const r = await t.run(["restore", json(b).snapshot_id, "--target", target, "--yes", "-c", s, "--json"]);
    expect(r.code, r.stderr).toBe(3);
    expect(json(r).warnings).toContain(why);
    const back = new Database(join(target, "state/agent.sqlite"), { readonly: true });
    expect(back.prepare("SELECT until FROM text_leases WHERE id = 'l1'").pluck().get()).toBe(String(leaseS));
    back.close();
  });

  it("[E12] a timer naming a column that is not there is a warning at backup (a restore with that config would refuse)", async () => {
    const bad = cfg("timers-missing", { column: "no_such_column" });
    const b = await t.run(["backup", "-c", bad, "--json"]);
    expect(b.code, b.stderr).toBe(3);
    expect(json(b).warnings.join("\n")).toMatch(/timers\[0\] \(state\.tasks\.no_such_column\): no such column: "?no_such_column.*; a restore with this config refuses \(exit 2\)$/m);
  });
});

describe("[E9] state sources: identifiers, locks, connection errors, passwords", () => {
  let s: TestAgent;
  let live: Server;
  let spare: Server;
  let rlive: Server;
  let snapshot: { snapshot_id: string; path: string };
  // names PostgreSQL allows and a careless tool breaks: a RAISE placeholder, a quote, the dollar tag the count check used, a capital
  const TABLES = [`public."100%"`, `public."say ""hi"""`, `public."x$agentbak$y"`, `public."it's"`, `"Mixed".t`];
  const PW = "s3cret-pw-Z9";

  /** A session of its own (a migration, an operator's psql) that holds what it takes until released. */
  async function session(url: string) {
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    await c.query("SET lock_timeout = '60s'");
    return { c, q: (q: string) => c.query(q), end: () => c.end() };
  }
  const withPassword = (url: string) => url.replace("://agentbak@", `://agentbak:${PW}@`);
  /** An empty server of `kind`, stopped after the tests. */
  const servers: Server[] = [];
  const fresh = async (kind: "postgres" | "redis") => {
    const x = await server(kind, s.tmp);
    servers.push(x);
    return x;
  };

  beforeAll(async () => {
    s = await makeAgent({ sizeMb: 1, seed: 5 });
    [live, spare, rlive] = await Promise.all([server("postgres", s.tmp), server("postgres", s.tmp), server("redis", s.tmp)]);
    await sql(live.target, `CREATE SCHEMA "Mixed";
      ${TABLES.map((t, i) => `CREATE TABLE ${t} (id int PRIMARY KEY, note text); INSERT INTO ${t} SELECT g, 'row ' || g FROM generate_series(1, ${i + 2}) g;`).join("\n")}`);
    const r = new Redis(rlive.target);
    await r.set("wf:run:1", "state");
    r.disconnect();
    patchConfig(s, (c) => (c.sources = [
      { name: "conv", kind: "postgres", url: "env:AGENT_PG_URL", schemas: ["public", "Mixed"] },
      { name: "wf", kind: "redis", url: "env:AGENT_REDIS_URL", patterns: ["wf:*"] },
    ]));
    const b = await s.run(["backup", "--json"], { AGENT_PG_URL: live.target, AGENT_REDIS_URL: rlive.target });
    expect(b.code, b.stderr).toBe(0);
    snapshot = json(b);
    snapshot.path = await s.file(snapshot.path);
  }, 180_000);
  afterAll(async () => {
    await Promise.allSettled([live, spare, rlive, ...servers].map((x) => x?.stop()));
    s?.cleanup();
  });

  it("[E9] tables named with %, a double quote and $agentbak$, and a schema with a capital, back up and restore with their row counts checked", async () => {
    const rec = manifestOf(snapshot.path).components.find((c: any) => c.kind === "postgres").records;
    expect(rec).toEqual({ "Mixed.t": 6, "public.100%": 2, 'public.say "hi"': 3, "public.x$agentbak$y": 4, "public.it's": 5 });
    const v = await s.run(["verify", snapshot.snapshot_id, "--identity", s.identity, "--json"]);
    expect(v.code, v.stderr).toBe(0);
    // a manifest that claims another count for the % table: the restore's count check still bites (13) and rolls back
    const { readLayout } = await import("../../dist/bundle/outer.js");
    const l = readLayout(snapshot.path);
    const wrong = join(s.tmp, "wrong-count.agentbak");
    const payload = readFileSync(snapshot.path).subarray(l.payloadOffset, l.payloadOffset + l.payloadSize);
    await craft({ baseManifest: manifestOf(snapshot.path), payloadAge: payload, keyFile: join(s.home, "signing-key"), out: wrong, patch: (m) => (m.components.find((c: any) => c.kind === "postgres").records["public.100%"] = 7) });
    const bad = await s.run(["restore", wrong, "--target", join(s.tmp, "wrong"), "--yes", "--source", `conv=${spare.target}`, "--source", `wf=${(await fresh("redis")).target}`]);
    expect(bad.code, bad.stderr).toBe(13);
    expect(bad.stderr).toMatch(/source conv: restore rolled back: .*agentbak: table public\.100% has 2 rows, manifest says 7/);
    expect(await sql(spare.target, "SELECT count(*)::int AS n FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')")).toEqual([{ n: 0 }]);
    // the real snapshot restores every table, rows and all
    const r = await s.run(["restore", snapshot.snapshot_id, "--target", join(s.tmp, "restored"), "--yes", "--json", "--source", `conv=${spare.target}`, "--source", `wf=${(await fresh("redis")).target}`]);
    expect([0, 3], r.stderr).toContain(r.code);
    expect(json(r).sources.find((x: any) => x.name === "conv").records).toEqual(rec);
    for (const [i, t] of TABLES.entries()) expect(await sql(spare.target, `SELECT count(*)::int AS n FROM ${t}`), t).toEqual([{ n: i + 2 }]);
  });

  it("[E9] a table another session holds locked: the backup gives up after lockTimeoutSeconds (exit 11 naming the table) instead of waiting under the agent lock", async () => {
    const holder = await session(live.target);
    try {
      await holder.q(`BEGIN; LOCK TABLE public."100%" IN ACCESS EXCLUSIVE MODE`);
      patchConfig(s, (c) => (c.sources[0].lockTimeoutSeconds = 1));
      const t0 = Date.now();
      const r = await s.run(["backup"], { AGENT_PG_URL: live.target, AGENT_REDIS_URL: rlive.target }, { timeout: 90_000 });
      expect(r.code, r.stderr).toBe(11);
      expect(r.stderr.trim()).toBe(`agentbak: source conv: table "public"."100%" is locked by another session: not granted within 1 s (lockTimeoutSeconds)`);
      expect(Date.now() - t0).toBeLessThan(30_000);
      // the default, unset: 10 s
      patchConfig(s, (c) => delete c.sources[0].lockTimeoutSeconds);
      const t1 = Date.now();
      const d = await s.run(["backup"], { AGENT_PG_URL: live.target, AGENT_REDIS_URL: rlive.target }, { timeout: 90_000 });
      expect(d.code, d.stderr).toBe(11);
      expect(d.stderr).toMatch(/not granted within 10 s \(lockTimeoutSeconds\)/);
      expect(Date.now() - t1).toBeGreaterThanOrEqual(9_500);
    } finally {
      await holder.q("ROLLBACK").catch(() => undefined);
      await holder.end();
      patchConfig(s, (c) => delete c.sources[0].lockTimeoutSeconds);
    }
    // the agent lock went with it: the next backup runs
    expect((await s.run(["backup"], { AGENT_PG_URL: live.target, AGENT_REDIS_URL: rlive.target })).code).toBe(0);
  });

  it("[E9] pg_dump's own wait for a lock (a session queued for the table after it was counted) also ends after lockTimeoutSeconds, exit 11 naming it", async () => {
    patchConfig(s, (c) => (c.sources[0].lockTimeoutSeconds = 3));
    // the count reads "Mixed".t first and public."x$agentbak$y" last: the last is held, so the capture pauses there while holding "Mixed".t
    const last = await session(live.target);
    const queued = await session(live.target);
    const watcher = await session(live.target);
    try {
      await last.q(`BEGIN; LOCK TABLE public."x$agentbak$y" IN ACCESS EXCLUSIVE MODE`);
      const run = s.run(["backup"], { AGENT_PG_URL: live.target, AGENT_REDIS_URL: rlive.target }, { timeout: 120_000 });
      const locks = (mode: string, granted: boolean) =>
        watcher.q(`SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'Mixed' AND c.relname = 't' AND l.mode = '${mode}' AND l.granted = ${granted}`);
      for (const end = Date.now() + 30_000; !(await locks("AccessShareLock", true)).rowCount && Date.now() < end; ) await new Promise((r) => setTimeout(r, 10));
      // a migration asks for "Mixed".t while the capture holds it: it queues, and pg_dump's lock queues behind it
      const migration = queued.q(`BEGIN; LOCK TABLE "Mixed".t IN ACCESS EXCLUSIVE MODE`).catch(() => undefined);
      for (const end = Date.now() + 30_000; !(await locks("AccessExclusiveLock", false)).rowCount && Date.now() < end; ) await new Promise((r) => setTimeout(r, 10));
      await last.q("ROLLBACK");
      const r = await run;
      await migration;
      expect(r.code, r.stderr).toBe(11);
      expect(r.stderr.trim()).toBe(`agentbak: source conv: table "Mixed".t is locked by another session: pg_dump's lock not granted within 3 s (lockTimeoutSeconds)`);
    } finally {
      for (const x of [last, queued]) await x.q("ROLLBACK").catch(() => undefined);
      await Promise.all([last.end(), queued.end(), watcher.end()]);
      patchConfig(s, (c) => delete c.sources[0].lockTimeoutSeconds);
    }
  });

  it("[E9] a --source target that can not be reached or refuses the login is one line with the client's code (exit 1), never an internal error, never the URL or its password", async () => {
    const target = join(s.tmp, "unreachable");
    const redisOk = (await fresh("redis")).target;
    const pgOk = (await fresh("postgres")).target;
    const cases: [string[], RegExp][] = [
      ...[`postgres://agentbak:${PW}@127.0.0.1:1/postgres`, `postgres://agentbak:${PW}@localhost:1/postgres`, withPassword(pgOk).replace("agentbak:", "nobody:"), `postgres://agentbak:${PW}@no-such-host.invalid/postgres`].map(
        (u): [string[], RegExp] => [["--source", `conv=${u}`, "--source", `wf=${redisOk}`], /^agentbak: source conv: checking its target: .*\b(ECONNREFUSED|ENOTFOUND|EAI_AGAIN|28000)\b/],
      ),
      [["--source", `conv=${pgOk}`, "--source", `wf=redis://:${PW}@127.0.0.1:1/0`], /^agentbak: source wf: checking its target: .*\bECONNREFUSED\b/],
    ];
    for (const [flags, want] of cases) {
      const r = await s.run(["restore", snapshot.snapshot_id, "--target", target, "--yes", ...flags]);
      expect(r.code, `${flags.join(" ")}: ${r.stderr}`).toBe(1);
      expect(r.stderr.trim().split("\n"), r.stderr).toHaveLength(1);
      expect(r.stderr).toMatch(want);
      expect(r.stderr).not.toMatch(/internal error|\n\s+at /);
      expect(r.stdout + r.stderr).not.toContain(PW);
      expect(existsSync(target)).toBe(false);
    }
    // a drill reports it as its failed sources check, in the same words
    const spec = join(s.tmp, "sources-spec.json");
    writeFileSync(spec, JSON.stringify({ name: "sources", invariants: [] }));
    const d = await s.run(["drill", snapshot.snapshot_id, "--spec", spec, "--identity", s.identity, "--no-report", ...cases[0]![0]]);
    expect(d.code, d.stderr).toBe(15);
    expect(d.stderr).toMatch(/✗ {3}sources: source conv: checking its target: connect ECONNREFUSED 127\.0\.0\.1:1$/m);
    expect(d.stdout + d.stderr).not.toContain(PW);
    // not a URL of the source's kind at all: a usage error that does not echo the value
    const r = await s.run(["restore", snapshot.snapshot_id, "--target", target, "--yes", "--source", `conv=mysql://root:${PW}@db/x`]);
    expect(r.code).toBe(2);
    expect(r.stderr.trim()).toBe("agentbak: --source conv: not a postgres:// or postgresql:// URL (the value given is not shown: it may hold a password)");
  });

  it("[E9] a backup whose source connection fails says so in one line with the code, and no password, in the message and the JSON error", async () => {
    for (const [env, want] of [
      [{ AGENT_PG_URL: `postgres://agentbak:${PW}@127.0.0.1:1/postgres`, AGENT_REDIS_URL: rlive.target }, /^source conv: connect ECONNREFUSED 127\.0\.0\.1:1$/],
      [{ AGENT_PG_URL: live.target, AGENT_REDIS_URL: `redis://:${PW}@127.0.0.1:1/0` }, /^source wf: .*ECONNREFUSED/],
    ] as const) {
      const r = await s.run(["backup", "--json"], env);
      expect(r.code, r.stderr).toBe(1);
      expect(json(r).message).toMatch(want);
      expect(r.stdout + r.stderr).not.toContain(PW);
      expect(r.stderr).not.toMatch(/internal error|\n\s+at /);
    }
  });

  it("[E9] the one redaction every echoed error goes through: a URL's password, up to the last @ of its authority, becomes ***", async () => {
    const { redactUrls } = await import("../../dist/facts.js");
    expect(redactUrls(`connect to postgres://agentbak:${PW}@127.0.0.1:5432/db failed`)).toBe("connect to postgres://agentbak:***@127.0.0.1:5432/db failed");
    expect(redactUrls(`redis://:${PW}@h:6379/0 and postgresql://u:p@ss@host/x?a=b`)).toBe("redis://:***@h:6379/0 and postgresql://u:***@host/x?a=b");
    for (const t of ["no URL: a:b@c", "https://host/path:x@y", "s3://bucket/prefix", "postgres://agentbak@127.0.0.1/db"]) expect(redactUrls(t)).toBe(t);
  });

  it("[E9] a probe or liveness URL with user:password@ in it is refused at config load (exit 2), the password not echoed", async () => {
    const c = JSON.parse(readFileSync(s.config, "utf8"));
    c.runtime.liveness = { http: `http://ops:${PW}@127.0.0.1:1/health` };
    c.reconcile.probe = { http: { url: `https://ops:${PW}@api.example.invalid/v1/deliveries/{idempotency_key}`, headers: {} } };
    const cfg = join(s.dir, "credential-urls.json");
    writeFileSync(cfg, JSON.stringify(c));
    const r = await s.run(["backup", "-c", cfg]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("reconcile.probe.http.url: no user:password@ in the URL (credentials belong in headers)");
    expect(r.stderr).toContain("runtime.liveness.http: no user:password@ in the URL (credentials belong in headers)");
    expect(r.stdout + r.stderr).not.toContain(PW);
  });
});
