// The seventh attack on issue 32's surfaces (docs/security-edges.md, "Seventh attack"): the features no attack had
// seen (recall parity, the sealed drill, the upgrade drill and its nemeses, status records, format 7, the stat
// cache, S3 read resume), tried through the real binary. Each case fails without its fix.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import * as sqliteVec from "sqlite-vec";
import { execa } from "execa";
import { readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { BIN, json, makeAgent, ROOT, writeSpec, type TestAgent } from "../helpers.js";
import { patchConfig } from "../sourcekit.js";

let a: TestAgent;
beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
}, 60_000);
afterAll(() => a?.cleanup());

const mountsUnder = (dir: string) => readFileSync("/proc/mounts", "utf8").split("\n").filter((l) => l.includes(dir));

describe("recall parity", () => {
  it("[E1] a vec0 store holding NaN and infinite vectors is backed up (was: every backup refused, 2, 'NaN is not allowed') and its drill passes (was: 15, a NaN answer pushed a neighbour out)", async () => {
    const db = new Database(join(a.dir, "state/agent.sqlite"));
    sqliteVec.load(db);
    db.exec("CREATE VIRTUAL TABLE mv USING vec0(embedding float[4])");
    const v = db.prepare("INSERT INTO mv (rowid, embedding) VALUES (?, ?)");
    for (let i = 1; i <= 30; i++) v.run(BigInt(i), new Float32Array([i % 3 ? i : NaN, i % 5 ? 1 : Infinity, 0, 1]));
    db.close();
    patchConfig(a, (c) => (c.recall = [{ store: "state", table: "mv", probes: 30 }]));
    const b = await a.run(["backup", "--json"]);
    expect(b.code, b.stderr).toBe(0);
    const spec = join(a.tmp, "recall.json");
    writeFileSync(spec, JSON.stringify({ name: "recall", invariants: [], recall: {} }));
    const d = await a.run(["drill", json(b).snapshot_id, "--spec", spec, "--identity", a.identity, "--no-report", "--json"]);
    expect([0, 3], d.stderr).toContain(d.code);
    const r = json(d).recall[0];
    expect(r).toMatchObject({ store: "state.mv", probes: 30, mean_recall: 1, ok: true });
    expect(json(d).checks.find((c: any) => c.name === "recall:state.mv").detail).toBe("recall@10 1.0000 over 30 probe(s), threshold 0.99");
    // a finite probe's recorded neighbours are ten finite vectors (rowids neither a multiple of 3 nor of 5)
    const { stdout } = await execa("tar", ["xOf", await a.file(json(b).path), "manifest.json"]);
    const p1 = JSON.parse(stdout).recall[0].probes.find((p: any) => p.id === 1);
    expect(p1.neighbours).toHaveLength(10);
    for (const n of p1.neighbours) expect(n % 3 && n % 5).toBeTruthy();
    patchConfig(a, (c) => delete c.recall);
  }, 120_000);
});

describe("the enospc nemesis", () => {
  const spec = () => writeSpec(a.tmp, "enospc", join(ROOT, "drills", "reference-agent.json"), (s) => {
    s.crashPoints = [];
    s.sinkKill = false;
    s.nemeses = { restore: ["enospc"] };
  });
  /** Starts the drill and sends `signal` once its tmpfs is mounted. */
  async function killMidCell(signal: "SIGTERM" | "SIGKILL") {
    const p = execa("node", [BIN, "drill", "latest", "--spec", spec(), "--identity", a.identity, "--json", "--no-report"], { cwd: a.dir, env: { ...a.env, OPENAI_API_KEY: "x", NO_COLOR: "1" }, reject: false });
    let seen = false;
    for (let i = 0; i < 6000 && !seen; i++) {
      seen = mountsUnder(a.tmp).length > 0;
      if (!seen) await new Promise((r) => setTimeout(r, 5));
    }
    expect(seen).toBe(true);
    p.kill(signal);
    return p;
  }

  it("[E2] SIGTERM while the restore is placed on its tmpfs: exit 130, the tmpfs unmounted and the drill's temp folder gone (was: both left, EBUSY)", async () => {
    expect((await a.run(["backup", "--json"])).code).toBe(0);
    const r = await killMidCell("SIGTERM");
    expect(r.exitCode).toBe(130);
    expect(mountsUnder(a.tmp)).toEqual([]);
    expect(readdirSync(join(a.tmp, "tmp"))).toEqual([]);
  }, 120_000);

  it("[E2] kill -9 mid-cell leaves the tmpfs (nothing can catch it); the next drill unmounts it and sweeps the folder (was: its sweep threw EBUSY)", async () => {
    const r = await killMidCell("SIGKILL");
    expect(r.signal).toBe("SIGKILL");
    expect(mountsUnder(a.tmp)).toHaveLength(1);
    const next = await a.run(["drill", "latest", "--spec", join(ROOT, "drills", "reference-agent.json"), "--identity", a.identity, "--json", "--no-report"], { OPENAI_API_KEY: "x" });
    expect([0, 3], next.stderr).toContain(next.code);
    expect(mountsUnder(a.tmp)).toEqual([]);
    expect(readdirSync(join(a.tmp, "tmp"))).toEqual([]);
  }, 180_000);
});

describe("status --all and the status records", () => {
  it("[E3] a genuine older status record put back (a drill that passed) does not hide the failed drill after it, nor after the newer record was deleted first (was: status --all 0, 'last drill passed')", async () => {
    expect((await a.run(["backup", "--json"])).code).toBe(0);
    const spec = (name: string, invariants: string[]) => (writeFileSync(join(a.tmp, `${name}.json`), JSON.stringify({ name, invariants })), join(a.tmp, `${name}.json`));
    writeFileSync(join(a.tmp, "fail.sql"), "SELECT 1 AS always_fails;");
    const drill = (s: string) => a.run(["drill", "latest", "--spec", s, "--identity", a.identity, "--json"]);
    expect([0, 3]).toContain((await drill(spec("plain", []))).code);
    const record = join(a.dir, "backups/tenants/acme/catalog/billing-agent.status");
    const passed = readFileSync(record);
    expect((await drill(spec("failing", ["fail.sql"]))).code).toBe(15);
    const status = async () => {
      const r = await a.run(["status", "--all", "--json"]);
      return { code: r.code, drill: json(r).agents[0].checks.find((c: any) => c.name === "drill") };
    };
    expect(await status()).toMatchObject({ code: 15, drill: { state: "fail" } });
    writeFileSync(record, passed);
    expect(await status()).toMatchObject({ code: 15, drill: { state: "fail", detail: expect.stringContaining("last drill failed: restore/invariant:fail") } });
    rmSync(record);
    expect(await status()).toMatchObject({ code: 15, drill: { state: "fail" } });
    writeFileSync(record, passed);
    expect(await status()).toMatchObject({ code: 15, drill: { state: "fail" } });
  }, 120_000);
});

describe("the sealed drill", () => {
  it("[E4] a worker that reaches a unix socket of the host's file system (a host service, outside any network namespace) is not reported sealed, the socket named; a spec with a seal allowance fails (15) (was: sealed, 0 attempts)", async () => {
    expect((await a.run(["backup", "--json"])).code).toBe(0);
    let reached = 0;
    const sock = join(a.tmp, "host-service.sock");
    const host = createServer((c) => {
      reached++;
      c.end("hello from the host\n");
    });
    await new Promise<void>((ok) => host.listen(sock, ok));
    const worker = join(a.tmp, "unix-worker.mjs");
    writeFileSync(
      worker,
      `import net from "node:net";
import { spawnSync } from "node:child_process";
await new Promise((ok) => { const s = net.connect(${JSON.stringify(sock)}); s.on("data", () => { s.destroy(); ok(); }); s.on("error", ok); });
const r = spawnSync(process.execPath, [${JSON.stringify(join(ROOT, "fixtures/agent/worker.js"))}], { stdio: "inherit" });
if (r.signal) process.kill(process.pid, r.signal);
process.exit(r.status ?? 1);
`,
    );
    const spec = writeSpec(a.tmp, "unix", join(ROOT, "drills", "reference-agent.json"), (s) => {
      s.worker.command = ["node", worker];
      s.crashPoints = ["after_send_before_receipt"];
      s.sinkKill = false;
      s.seal = { maxEgressBlocked: 0 };
    });
    try {
      const r = await a.run(["drill", "latest", "--spec", spec, "--identity", a.identity, "--no-report", "--json"], { OPENAI_API_KEY: "x" });
      expect(reached, r.stderr).toBeGreaterThan(0);
      const j = json(r);
      expect(r.code, JSON.stringify(j.checks.filter((c: any) => !c.ok))).toBe(15);
      expect(j.network).toMatchObject({ sealed: false, unix_connected: [sock] });
      expect(j.checks.find((c: any) => c.name === "sealed")).toMatchObject({ ok: false, severity: "error", detail: expect.stringContaining(`unix socket(s) of the host's file system: ${sock}`) });
    } finally {
      host.close();
    }
  }, 120_000);
});

describe("recall parity at backup", () => {
  it("[E5] a vec0 table crafted with all its rows in one 16 MiB chunk (shadow tables written without the extension) is read once per chunk: backup in seconds (was: 33 s, the chunk read again per row)", async () => {
    const p = join(a.dir, "state/agent.sqlite");
    const db = new Database(p);
    sqliteVec.load(db);
    db.exec("CREATE VIRTUAL TABLE bv USING vec0(embedding float[4])");
    db.prepare("INSERT INTO bv (rowid, embedding) VALUES (1, ?)").run(new Float32Array([1, 2, 3, 4]));
    db.close();
    const ROWS = 4000;
    const SLOTS = 1 << 20;
    const raw = new Database(p);
    raw.prepare("UPDATE bv_chunks SET size = ?, validity = zeroblob(?), rowids = zeroblob(?)").run(SLOTS, SLOTS / 8, SLOTS * 8);
    raw.prepare("UPDATE bv_vector_chunks00 SET vectors = zeroblob(?)").run(SLOTS * 16);
    const ins = raw.prepare("INSERT INTO bv_rowids (rowid, id, chunk_id, chunk_offset) VALUES (?, NULL, 1, ?)");
    raw.transaction(() => {
      for (let i = 2; i <= ROWS; i++) ins.run(i, i);
    })();
    raw.close();
    patchConfig(a, (c) => (c.recall = [{ store: "state", table: "bv", probes: 5 }]));
    const t = Date.now();
    const b = await a.run(["backup", "--json"], {}, { timeout: 300_000 });
    const seconds = (Date.now() - t) / 1000;
    patchConfig(a, (c) => delete c.recall);
    expect(b.code, b.stderr).toBe(0);
    expect(seconds).toBeLessThan(10);
    const { stdout } = await execa("tar", ["xOf", await a.file(json(b).path), "manifest.json"]);
    const r = JSON.parse(stdout).recall[0];
    expect(r).toMatchObject({ store: "state.bv", vectors: ROWS });
    expect(r.probes).toHaveLength(5);
  }, 400_000);
});
