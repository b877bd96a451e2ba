// `agentbak drill` and `report verify` through the real binary: the correct
// worker passes, every planted bug is caught, corrupted and hostile state is
// caught without running anything, the live agent is never touched.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa, execaSync } from "execa";
import Database from "better-sqlite3";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync, openSync, writeSync, closeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { compress } from "zstd-napi";
import { json, makeAgent, ROOT, STORE, writeSpec, type TestAgent } from "../helpers.js";
import { ageEncrypt, craft, makeTar, manifestOf } from "../craft.js";

let a: TestAgent;
let bundle: string;
const SPEC = join(ROOT, "drills", "reference-agent.json");

const spec = (name: string, patch: (s: any) => void) => writeSpec(a.tmp, name, SPEC, patch);

function hashTree(dir: string): string {
  const h = createHash("sha256");
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true }).sort((x, y) => x.name.localeCompare(y.name))) {
      const p = join(d, e.name);
      if (e.isDirectory()) {
        if (p === join(a.dir, "backups")) continue; // the repository gains the report; the agent's own files must not change
        h.update(`d ${p}\n`);
        walk(p);
      } else h.update(`f ${p} ${createHash("sha256").update(readFileSync(p)).digest("hex")}\n`);
    }
  };
  walk(dir);
  return h.digest("hex");
}

const drillTemps = () => readdirSync(join(a.tmp, "tmp")).filter((e) => e.startsWith("agentbak-drill-"));
async function until(cond: () => boolean, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error("timed out waiting");
    await new Promise((r) => setTimeout(r, 25));
  }
}

beforeAll(async () => {
  a = await makeAgent({ sizeMb: 2 });
  bundle = await a.file(json(await a.run(["backup", "--json"])).path);
});
afterAll(() => a.cleanup());

describe("drill with the reference worker", () => {
  it("passes every crash point with 0 duplicate and 0 lost deliveries, and never touches the live agent", async () => {
    const before = hashTree(a.dir);
    const tempsBefore = drillTemps();
    const junit = join(a.tmp, "drill.xml");
    const summary = join(a.tmp, "summary.md");
    const r = await a.run(["drill", "latest", "--spec", SPEC, "--identity", a.identity, "--junit", junit, "--json"], { OPENAI_API_KEY: "x", GITHUB_STEP_SUMMARY: summary });
    expect([0, 3], r.stderr).toContain(r.code);
    const d = json(r);
    expect(d.ok).toBe(true);
    expect(d.scenarios.map((s: any) => s.scenario)).toEqual(["after_commit_before_delivery", "after_send_before_receipt", "after_receipt_before_complete", "during_migration", "old_backup_new_worker", "sink_kill"]);
    for (const s of d.scenarios) {
      expect(s.died_at_point, s.scenario).toBe(true);
      expect(s.effects, s.scenario).toBe(1);
      expect(s.ok, s.scenario).toBe(true);
      expect(s.receipt).toMatch(/^rcpt-/);
    }
    expect(d.test_task_id).toBe("drill-task-1");
    expect(d.cursors.every((c: any) => c.ok)).toBe(true);
    expect(d.recovery_seconds).toBeGreaterThan(0);
    expect(hashTree(a.dir)).toBe(before);
    expect(drillTemps()).toEqual(tempsBefore);
    const xml = readFileSync(junit, "utf8");
    expect((xml.match(/<testcase /g) ?? []).length).toBe(d.checks.length);
    expect(xml).toContain('failures="0"');
    expect(readFileSync(summary, "utf8")).toMatch(/### agentbak drill reference\\-agent: passed/);
    const entry = JSON.parse(readFileSync(await a.file(d.report_file), "utf8").trim().split("\n").at(-1)!);
    expect(entry).toMatchObject({ result: "pass", snapshot_id: d.snapshot_id, test_task_id: "drill-task-1", recovery_seconds: d.recovery_seconds });
    expect(entry.runtime.agent_version).toBe("1.4.2");
    expect(entry.schema.migrations).toEqual(expect.arrayContaining([expect.objectContaining({ scenario: "during_migration", ok: true })]));
    expect(entry.credentials.find((c: any) => c.name === "llm").status).toBe("present");
    expect(JSON.stringify(entry)).not.toContain('"x"');
    // integrity_check ran once, in staging, and the report says so
    expect(entry.integrity).toEqual({ state: "ok" });
    expect(d.checks.find((c: any) => c.name === "integrity:state")).toMatchObject({ ok: true, detail: expect.stringMatching(/^integrity_check ok/) });
  });

  const modes: [string, string, string][] = [
    ["blind_retry", "after_send_before_receipt", "exactly one effect"],
    ["sent_before_receipt", "after_commit_before_delivery", "invariant:delivery_sent_without_receipt"],
    ["no_lease", "after_commit_before_delivery", "invariant:running_without_owner_or_lease"],
    ["double_complete", "after_receipt_before_complete", "invariant:task_completed_twice"],
    ["non_resumable_migration", "during_migration", "worker recovers"],
  ];
  it.each(modes)("faulty mode %s fails the drill (15); the report names %s / %s", async (mode, point, check) => {
    const p = spec(`fault-${mode}`, (s) => (s.worker.env = { WORKER_FAULT: mode }));
    const report = join(a.tmp, `report-${mode}.jsonl`);
    const r = await a.run(["drill", "latest", "--spec", p, "--identity", a.identity, "--report", report, "--json"]);
    expect(r.code, r.stderr).toBe(15);
    const entry = JSON.parse(readFileSync(report, "utf8").trim());
    expect(entry.result).toBe("fail");
    expect(entry.failed_checks).toEqual(expect.arrayContaining([expect.objectContaining({ scenario: point, check })]));
    expect(entry.unresolved.join("\n")).toContain(`${point}: ${check}`);
  });

  it("a worker that dies before the crash point it was asked for is reported, not passed", async () => {
    const p = spec("no-crash", (s) => {
      s.worker.command = ["node", "-e", "process.exit(0)"];
      s.crashPoints = ["after_commit_before_delivery"];
      s.sinkKill = false;
    });
    const r = await a.run(["drill", "latest", "--spec", p, "--identity", a.identity, "--no-report", "--json"]);
    expect(r.code).toBe(15);
    expect(json(r).checks.find((c: any) => c.name === "died at crash point").detail).toMatch(/exited 0 without reaching after_commit_before_delivery/);
  });
});

// the checks' subject is the database in a crafted bundle file drilled from a local path, not the repository's store:
// the same work in both test projects, so it runs in the local one only
describe.skipIf(STORE === "s3")("drill on damaged and hostile state", () => {
  /** Re-packs the bundle after `mutate` changed the extracted database; manifest digests follow the change. */
  async function rebundle(name: string, mutate: (dbPath: string, dir: string) => void): Promise<string> {
    const x = join(a.tmp, `rb-${name}`);
    mkdirSync(x);
    await execa("sh", ["-c", `tar xOf '${bundle}' payload.age | age -d -i '${a.identity}' | zstd -d | tar x`], { cwd: x });
    const m0 = manifestOf(bundle);
    mutate(join(x, "db/state.sqlite"), x);
    const comps = m0.components.map((c: any) => {
      const d = readFileSync(join(x, c.path));
      const out = { ...c, sha256: createHash("sha256").update(d).digest("hex"), size: d.length };
      if (c.kind === "sqlite") {
        try {
          const db = new Database(join(x, c.path), { readonly: true });
          out.records = Object.fromEntries(Object.keys(c.records).map((t) => [t, db.prepare(`SELECT count(*) FROM "${t}"`).pluck().get()]));
          db.close();
        } catch {
          /* unreadable: keep the recorded counts */
        }
      }
      return out;
    });
    const t = await makeTar(m0.components.map((c: any) => ({ name: c.path, data: readFileSync(join(x, c.path)) })));
    const out = join(a.tmp, `${name}.agentbak`);
    await craft({ baseManifest: m0, payloadAge: await ageEncrypt(compress(t), [a.recipient]), tarSize: t.length, keyFile: join(a.home, "signing-key"), out, patch: (m) => (m.components = comps) });
    return out;
  }

  const checksOnly = join(ROOT, "drills", "checks-only.json");
  const drillFile = async (file: string, specPath = checksOnly) => a.run(["drill", file, "--spec", specPath, "--identity", a.identity, "--no-report", "--json"]);

  it("a foreign-key violation is caught by foreign_key_check", async () => {
    const f = await rebundle("fk", (p) => {
      const db = new Database(p);
      db.pragma("foreign_keys = OFF");
      db.prepare("INSERT INTO task_attempts (task_id, worker_id, started_at) VALUES ('no-such-task', 'w', 'now')").run();
      db.close();
    });
    const r = await drillFile(f);
    expect(r.code).toBe(15);
    const c = json(r).checks.find((c: any) => c.name === "foreign_key_check:state");
    expect(c.ok).toBe(false);
    expect(c.detail).toMatch(/task_attempts rowid \d+ references missing tasks/);
  });

  function pageOf(p: string, sql: string): { page: number; size: number } {
    const db = new Database(p, { readonly: true });
    const page = db.prepare(sql).pluck().get() as number;
    const size = db.pragma("page_size", { simple: true }) as number;
    db.close();
    return { page, size };
  }
  function scribble(p: string, page: number, size: number, at: number, bytes: Buffer) {
    const fd = openSync(p, "r+");
    writeSync(fd, bytes, 0, bytes.length, (page - 1) * size + at);
    closeSync(fd);
  }

  it("a broken index is caught by the full integrity_check", async () => {
    // the index b-tree keeps its entries while the schema says it indexes another column
    const f = await rebundle("index", (p) => {
      execaSync("sqlite3", [p, "PRAGMA writable_schema=ON; UPDATE sqlite_schema SET sql='CREATE INDEX tasks_status ON tasks(kind)' WHERE name='tasks_status';"]);
    });
    const r = await drillFile(f);
    expect(r.code).toBe(15);
    const failed = json(r).checks.filter((c: any) => !c.ok && c.severity === "error");
    expect(failed[0].detail).toMatch(/integrity_check: row \d+ missing from index tasks_status/);
  });

  it("a damaged b-tree page is caught by the full integrity_check", async () => {
    const f = await rebundle("page", (p) => {
      const { page, size } = pageOf(p, "SELECT rootpage FROM sqlite_schema WHERE name = 'messages'");
      scribble(p, page, size, 0, Buffer.from([0x0d, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]));
    });
    const r = await drillFile(f);
    expect(r.code).toBe(15);
    expect(json(r).checks.find((c: any) => !c.ok).detail).toMatch(/integrity_check/);
  });

  it("a hostile schema (trigger and view calling load_extension) runs nothing during the drill", async () => {
    const so = join(a.tmp, "evil.so");
    const marker = join(a.tmp, "EXTENSION-RAN");
    writeFileSync(join(a.tmp, "evil.c"), `#include <stdio.h>\n__attribute__((constructor)) static void pwn(void){ FILE*f=fopen("${marker}","w"); if(f) fclose(f); }\nint sqlite3_extension_init(void*a,void*b,void*c){ return 0; }\n`);
    await execa("gcc", ["-shared", "-fPIC", "-o", so, join(a.tmp, "evil.c")]);
    const f = await rebundle("hostile", (p) => {
      const db = new Database(p);
      db.exec(`CREATE TRIGGER evil_t AFTER INSERT ON tasks BEGIN SELECT load_extension('${so}'); END;
               CREATE VIEW evil_v AS SELECT load_extension('${so}') AS x;`);
      db.close();
    });
    const inv = join(a.tmp, "hostile-inv");
    mkdirSync(inv);
    writeFileSync(join(inv, "reads_view.sql"), "-- severity: error\nSELECT x FROM evil_v WHERE x IS NOT NULL;\n");
    const p = spec("hostile", (s) => {
      s.invariants = [join(inv, "*.sql")];
      s.crashPoints = ["after_commit_before_delivery"];
      s.sinkKill = false;
    });
    const r = await drillFile(f, p);
    expect(r.code).toBe(15);
    const d = json(r);
    expect(d.checks.find((c: any) => c.name === "invariant:reads_view").detail).toMatch(/error: .*(unsafe use of load_extension|not authorized)/);
    expect(d.checks.find((c: any) => c.name === "inject").detail).toMatch(/unsafe use of load_extension|not authorized/);
    expect(existsSync(marker)).toBe(false);
  });
});

describe("drill lifecycle and report", () => {
  it("an interrupted drill removes its temp folder; a kill -9 leftover is swept by the next run", async () => {
    const before = drillTemps();
    const child = execa("node", [join(ROOT, "bin/agentbak.js"), "drill", "latest", "--spec", SPEC, "--identity", a.identity, "--no-report"], { cwd: a.dir, env: a.env, reject: false });
    await until(() => drillTemps().length > before.length);
    await new Promise((r) => setTimeout(r, 300)); // into the restore
    child.kill("SIGINT");
    const r = await child;
    expect(r.exitCode).toBe(130);
    expect(drillTemps()).toEqual(before);
    const k = execa("node", [join(ROOT, "bin/agentbak.js"), "drill", "latest", "--spec", SPEC, "--identity", a.identity, "--no-report"], { cwd: a.dir, env: a.env, reject: false });
    await until(() => drillTemps().length > before.length);
    await new Promise((r) => setTimeout(r, 300));
    k.kill("SIGKILL");
    await k;
    const left = drillTemps().filter((e) => !before.includes(e));
    expect(left.length).toBe(1);
    await a.run(["drill", "latest", "--spec", join(ROOT, "drills", "checks-only.json"), "--identity", a.identity, "--no-report"]);
    expect(drillTemps()).toEqual(before);
  });

  it("an interrupt kills git and the helpers it started before the temp folder is removed, so nothing re-creates it", async () => {
    // a git that, on clone, leaves a helper behind which writes into the clone a second later (as index-pack does)
    const bin = join(a.tmp, "slow-git");
    mkdirSync(bin, { recursive: true });
    const mark = join(a.tmp, "clone-started");
    const real = execaSync("sh", ["-c", "command -v git"]).stdout.trim();
    writeFileSync(
      join(bin, "git"),
      `#!/bin/sh\nfor x; do last="$x"; done\ncase " $* " in *" clone "*) (sleep 1; mkdir -p "$last/late") & touch "${mark}"; wait ;; esac\nexec ${real} "$@"\n`,
      { mode: 0o755 },
    );
    const before = drillTemps();
    const child = execa("node", [join(ROOT, "bin/agentbak.js"), "drill", "latest", "--spec", SPEC, "--identity", a.identity, "--no-report"], {
      cwd: a.dir,
      env: { ...a.env, PATH: `${bin}:${process.env.PATH}` },
      reject: false,
    });
    await until(() => existsSync(mark));
    child.kill("SIGINT");
    const r = await child;
    expect(r.exitCode, r.stderr).toBe(130);
    expect(r.stderr.trim()).toBe("agentbak: interrupted");
    await new Promise((res) => setTimeout(res, 1500)); // past the helper's write, had it lived
    expect(drillTemps()).toEqual(before);
  });

  it("report verify accepts a clean chain and names the entry that was edited, deleted or reordered", async () => {
    const report = join(a.tmp, "chain.jsonl");
    for (let i = 0; i < 4; i++) {
      const r = await a.run(["drill", "random", "--within", "1d", "--spec", join(ROOT, "drills", "checks-only.json"), "--identity", a.identity, "--report", report]);
      expect([0, 3]).toContain(r.code);
    }
    const ok = await a.run(["report", "verify", report, "--json"]);
    expect(ok.code).toBe(0);
    expect(json(ok).entries).toBe(4);
    const lines = readFileSync(report, "utf8").trim().split("\n");
    const tryVariant = async (name: string, ls: string[]) => {
      const p = join(a.tmp, `chain-${name}.jsonl`);
      writeFileSync(p, ls.join("\n") + "\n");
      return a.run(["report", "verify", p]);
    };
    const edited = [...lines];
    edited[2] = edited[2]!.replace('"result":"pass"', '"result":"fail"');
    expect(edited[2]).not.toBe(lines[2]);
    const e = await tryVariant("edited", edited);
    expect(e.code).toBe(13);
    expect(e.stderr).toMatch(/report entry 2 .*signature/);
    const d = await tryVariant("deleted", [lines[0]!, lines[2]!, lines[3]!]);
    expect(d.code).toBe(13);
    expect(d.stderr).toMatch(/report entry 1 /);
    const o = await tryVariant("reordered", [lines[0]!, lines[2]!, lines[1]!, lines[3]!]);
    expect(o.code).toBe(13);
    expect(o.stderr).toMatch(/report entry 1 /);
  });
});
