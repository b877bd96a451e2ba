// `agentbak schedule` for an agent whose folder holds a space and a %: each
// crontab line run as cron runs it (its % rule, then sh -c, in cron's bare
// environment), the systemd units checked by systemd-analyze verify and their
// ExecStart= run as systemd would split it; calendars, network, user,
// environment by name, never a credential value, retention scheduled; one
// format at a time (cron lines alone on stdout), unit names per agent.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import { cpSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { userInfo } from "node:os";
import { join } from "node:path";
import { json, makeAgent, run, type TestAgent } from "../helpers.js";

let a: TestAgent;
let dir: string;
let cfg: string;
let agentId: string;
beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
  dir = join(a.tmp, "agents 100% real", "billing agent");
  mkdirSync(join(dir, ".."), { recursive: true });
  cpSync(a.dir, dir, { recursive: true });
  cfg = join(dir, "agentbak.json");
  const c = JSON.parse(readFileSync(cfg, "utf8"));
  c.retention = { keepLast: 3 };
  agentId = c.agent.id;
  writeFileSync(cfg, JSON.stringify(c, null, 2));
}, 180_000);
afterAll(() => a?.cleanup(), 60_000);

/** The environment schedule runs in: the agent's, without the credentials CI may export (schedule would warn about them). */
const scheduleEnv = () => ({ ...a.env, AWS_ACCESS_KEY_ID: undefined, AWS_SECRET_ACCESS_KEY: undefined, AWS_SESSION_TOKEN: undefined, AGENTBAK_IDENTITY: undefined });

/** cron's environment: nothing of the operator's shell (no AGENTBAK_HOME, no agent credentials). */
const CRON_ENV = { PATH: "/usr/bin:/bin", SHELL: "/bin/sh", HOME: "/nonexistent", LOGNAME: userInfo().username };

/** Runs a crontab line's command as cron does: an unescaped % ends it (the rest is stdin), \% is a %, then sh -c. */
function cronRun(line: string) {
  const raw = line.replace(/^(\S+\s+){5}/, "");
  let cmd = "";
  let escaped = false;
  for (const ch of raw) {
    if (escaped) {
      cmd += ch === "%" ? "%" : `\\${ch}`;
      escaped = false;
    } else if (ch === "\\") escaped = true;
    else if (ch === "%") break;
    else cmd += ch;
  }
  return execa("/bin/sh", ["-c", cmd], { env: CRON_ENV, extendEnv: false, reject: false, cwd: "/" });
}

/** Splits a unit file value into words as systemd does (systemd.syntax(7)): %% specifiers, quotes, C escapes; `$$` in ExecStart. */
function unitWords(value: string, exec: boolean): string[] {
  if (/%[^%]/.test(value.replace(/%%/g, ""))) throw new Error(`unescaped specifier in ${value}`);
  const v = value.replace(/%%/g, "%");
  const words: string[] = [];
  let i = 0;
  while (i < v.length) {
    while (v[i] === " ") i++;
    if (i >= v.length) break;
    let w = "";
    const q = v[i] === '"' || v[i] === "'" ? v[i++] : null;
    for (; i < v.length && (q ? v[i] !== q : v[i] !== " "); i++) w += v[i] === "\\" ? { n: "\n", t: "\t" }[v[++i]!] ?? v[i] : v[i];
    if (q) i++;
    words.push(exec ? w.replace(/\$\$/g, "$") : w);
  }
  return words;
}

/** Runs a service's ExecStart= with its Environment= as systemd would (the EnvironmentFile is optional and absent here). */
function unitRun(unit: string) {
  const values = (k: string) => [...unit.matchAll(new RegExp(`^${k}=(.*)$`, "gm"))].map((m) => m[1]!);
  const env = Object.fromEntries(values("Environment").flatMap((v) => unitWords(v, false)).map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]));
  const [file, ...args] = unitWords(values("ExecStart")[0]!, true);
  return execa(file!, args, { env: { PATH: "/usr/bin:/bin", ...env }, extendEnv: false, reject: false, cwd: "/" });
}

const snapshotCount = async () => json(await run(["snapshots", "-c", cfg, "--json"], { env: scheduleEnv() })).length;

describe("schedule", () => {
  it("crontab lines run through cron's % rule and sh -c, in cron's bare environment, and are quiet on success", async () => {
    const r = await run(["schedule", "--every", "1h", "--drill-every", "1d", "-c", cfg, "--json"], { env: scheduleEnv() });
    expect(r.code, r.stderr).toBe(0);
    const s = json(r);
    const lines = s.crontab.filter((l: string) => !l.startsWith("#"));
    expect(lines).toHaveLength(3);
    const [backup, forget, drill] = lines;
    expect(backup).toMatch(/^7 \* \* \* \* /);
    expect(forget).toMatch(/^47 3 \* \* \* .* forget --prune /);
    expect(drill).toMatch(/^37 3 \* \* \* .* drill random .*--no-credential-warnings/);

    for (let i = 0; i < 4; i++) {
      const b = await cronRun(backup);
      expect(b.exitCode, b.stderr).toBe(0);
      expect(b.stdout + b.stderr).toBe("");
    }
    expect(await snapshotCount()).toBe(4);
    // the drill: OPENAI_API_KEY and the credential file are not in cron's world, and that is not a warning here
    const d = await cronRun(drill);
    expect(d.exitCode, d.stderr).toBe(0);
    expect(d.stdout + d.stderr).toBe("");
    // keepLast 3, plus the drilled snapshot when "drill random" picked the oldest
    const before = json(await run(["snapshots", "-c", cfg, "--json"], { env: scheduleEnv() })).map((e: any) => e.snapshot_id);
    const plan = json(await run(["forget", "--dry-run", "-c", cfg, "--json"], { env: scheduleEnv() }));
    const drilled = plan.kept.filter((k: any) => k.reasons.includes("newest snapshot that passed a drill"));
    expect(drilled).toHaveLength(1);
    const f = await cronRun(forget);
    expect(f.exitCode, f.stderr).toBe(0);
    expect(f.stdout + f.stderr).toBe("");
    const after = json(await run(["snapshots", "-c", cfg, "--json"], { env: scheduleEnv() })).map((e: any) => e.snapshot_id);
    expect(new Set(after)).toEqual(new Set([...before.slice(-3), drilled[0].snapshot_id]));
  });

  it("systemd units pass systemd-analyze verify, and their ExecStart= runs as systemd splits it", async () => {
    const r = await run(["schedule", "--every", "15m", "--drill-every", "7d", "--format", "systemd", "-c", cfg, "--json"], { env: scheduleEnv() });
    expect(r.code, r.stderr).toBe(0);
    expect(json(r).crontab).toBeUndefined();
    const units: Record<string, string> = json(r).systemd;
    const names = ["backup", "drill", "forget"].flatMap((j) => [`agentbak-${j}-${agentId}.service`, `agentbak-${j}-${agentId}.timer`]);
    expect(Object.keys(units).sort()).toEqual(names);
    const service = units[`agentbak-backup-${agentId}.service`]!;
    expect(service).toMatch(/^Wants=network-online\.target$/m);
    expect(service).toMatch(/^After=network-online\.target$/m);
    expect(service).toMatch(new RegExp(`^User=${userInfo().username}$`, "m"));
    expect(service).toMatch(new RegExp(`^Environment="?AGENTBAK_HOME=${a.home}"?$`, "m"));
    expect(service).toContain(`EnvironmentFile=-${a.home}/agentbak.env`);
    expect(service).toContain("100%% real");
    const timer = units[`agentbak-backup-${agentId}.timer`]!;
    expect(timer).toMatch(/^OnCalendar=\*-\*-\* \*:07\/15:00$/m);
    expect(timer).toMatch(/^Persistent=true$/m);
    expect(timer).toMatch(/^RandomizedDelaySec=\d+$/m);
    expect(timer).not.toMatch(/OnUnitActiveSec|OnBootSec/);
    expect(units[`agentbak-drill-${agentId}.timer`]).toMatch(/^OnCalendar=Sun \*-\*-\* 03:37:00$/m);

    const before = await snapshotCount();
    const b = await unitRun(service);
    expect(b.exitCode, b.stderr).toBe(0);
    expect(await snapshotCount()).toBe(before + 1);
    const d = await unitRun(units[`agentbak-drill-${agentId}.service`]!);
    expect(d.exitCode, d.stderr).toBe(0);

    const has = await execa("systemd-analyze", ["--version"], { reject: false }).catch(() => null);
    if (!has || has.exitCode !== 0) {
      console.warn("systemd-analyze verify skipped: systemd-analyze is not installed");
      return;
    }
    const unitDir = join(a.tmp, "units");
    mkdirSync(unitDir);
    for (const [name, body] of Object.entries(units)) writeFileSync(join(unitDir, name), body);
    const v = await execa("systemd-analyze", ["verify", "--man=no", ...Object.keys(units).map((n) => join(unitDir, n))], { reject: false, all: true });
    expect(v.exitCode, String(v.all)).toBe(0);
    expect(String(v.all)).not.toMatch(/agentbak-/);
  });

  it.each([
    ["15m", "7-59/15 * * * *", "*-*-* *:07/15:00"],
    ["1h", "7 * * * *", "*-*-* *:07:00"],
    ["6h", "7 */6 * * *", "*-*-* 00/6:07:00"],
    ["1d", "7 3 * * *", "*-*-* 03:07:00"],
    ["7d", "7 3 * * 0", "Sun *-*-* 03:07:00"],
  ])("--every %s: cron %s, OnCalendar %s", async (every, cron, calendar) => {
    const s = json(await run(["schedule", "--every", every, "-c", cfg, "--json"], { env: scheduleEnv() }));
    expect(s.crontab.find((l: string) => l.includes(" backup "))).toMatch(new RegExp(`^${cron.replace(/[*/]/g, "\\$&")} `));
    const u = json(await run(["schedule", "--every", every, "--format", "systemd", "-c", cfg, "--json"], { env: scheduleEnv() }));
    expect(u.systemd[`agentbak-backup-${agentId}.timer`]).toContain(`OnCalendar=${calendar}\n`);
    const c = await execa("systemd-analyze", ["calendar", calendar], { reject: false }).catch(() => null);
    if (c) expect(c.exitCode, c.stderr).toBe(0);
  });

  it("carries the S3 endpoint by name, never a credential value: those go in the env file (exit 3 saying so)", async () => {
    const secret = "s3cr3t-value-never-printed";
    const env = { ...scheduleEnv(), AGENTBAK_S3_ENDPOINT: "http://127.0.0.1:7480", AWS_ACCESS_KEY_ID: "AKIAEXAMPLEKEY", AWS_SECRET_ACCESS_KEY: secret };
    const envFile = join(a.tmp, "agent env", "billing.env");
    const units = await run(["schedule", "--every", "1h", "--format", "systemd", "-c", cfg, "--credentials-file", envFile], { env });
    const cron = await run(["schedule", "--every", "1h", "-c", cfg, "--credentials-file", envFile], { env });
    for (const r of [units, cron]) {
      expect(r.code).toBe(3);
      expect(r.stdout + r.stderr).not.toContain(secret);
      expect(r.stdout + r.stderr).not.toContain("AKIAEXAMPLEKEY");
      expect(r.stderr).toMatch(/AWS_SECRET_ACCESS_KEY is set here but not printed: put it in .*billing\.env/);
    }
    expect(units.stdout).toContain("Environment=AGENTBAK_S3_ENDPOINT=http://127.0.0.1:7480\n");
    expect(units.stdout).toContain(`EnvironmentFile=-${envFile}`);
    expect(cron.stdout).toMatch(/AGENTBAK_S3_ENDPOINT=http:\/\/127\.0\.0\.1:7480 .*backup/);
    expect(cron.stdout).not.toContain("Environment=");
  });

  it("--format cron (the default) prints only crontab lines and comments: each line five time fields and a command, fit for crontab -", async () => {
    const r = await run(["schedule", "--every", "15m", "--drill-every", "1d", "-c", cfg], { env: scheduleEnv() });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe("");
    const lines = r.stdout.trimEnd().split("\n");
    const jobs = lines.filter((l) => !l.startsWith("#"));
    expect(jobs).toHaveLength(3);
    const FIELD = /^(\*|\d+(-\d+)?)(\/\d+)?(,(\*|\d+(-\d+)?)(\/\d+)?)*$/;
    for (const l of jobs) {
      const f = l.split(/\s+/);
      expect(f.slice(0, 5).every((x) => FIELD.test(x)), l).toBe(true);
      expect(f[5], l).toBe("set"); // the command: source the env file, then agentbak
      expect(l).toContain("/bin/agentbak.js ");
    }
    expect(r.stdout).not.toMatch(/\[Unit\]|ExecStart=|--- /);
  });

  it("two agents on one host get systemd units of their own: the agent id is in every unit name", async () => {
    const other = join(a.tmp, "other.json");
    const c = JSON.parse(readFileSync(cfg, "utf8"));
    c.agent.id = "support-agent";
    writeFileSync(other, JSON.stringify(c, null, 2));
    const mine = json(await run(["schedule", "--every", "1h", "--format", "systemd", "-c", cfg, "--json"], { env: scheduleEnv() })).systemd;
    const theirs = json(await run(["schedule", "--every", "1h", "--format", "systemd", "-c", other, "--json"], { env: scheduleEnv() })).systemd;
    expect(Object.keys(mine)).toHaveLength(4);
    expect(Object.keys(theirs)).toEqual(Object.keys(mine).map((n) => n.replace(agentId, "support-agent")));
    expect(Object.keys(theirs).filter((n) => n in mine)).toEqual([]);
    expect(theirs["agentbak-backup-support-agent.service"]).toContain(`-c ${other}`);
    expect(theirs["agentbak-backup-support-agent.timer"]).toMatch(/^Description=agentbak backup of support-agent /m);
  });

  it("refuses a format it does not know (exit 2, one line)", async () => {
    const r = await run(["schedule", "--every", "1h", "--format", "launchd", "-c", cfg], { env: scheduleEnv() });
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(/--format.*launchd.*cron, systemd/);
  });

  it("without retention rules it says forget is not scheduled (exit 3)", async () => {
    const r = await run(["schedule", "--every", "1h", "-c", a.config], { env: scheduleEnv() });
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/no retention rules.*forget is not scheduled/);
    expect(r.stdout).not.toMatch(/forget/);
  });
});
