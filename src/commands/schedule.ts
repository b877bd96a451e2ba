/**
 * `agentbak schedule`: prints crontab lines (`--format cron`, the default:
 * pipeable to `crontab -`) or systemd service + timer units named after the
 * agent (`--format systemd`) for backup, retention (forget) and drills;
 * installs nothing. Paths are
 * quoted for sh and systemd (spaces, %, $), the environment a job needs is
 * carried by name (never a credential value: those go in an env file).
 */
import { userInfo } from "node:os";
import { join, resolve } from "node:path";
import { usageError } from "../errors.js";
import { configPath, loadConfig } from "../config/load.js";
import { ROOT } from "../version.js";
import { specPath } from "../drill/spec.js";
import { parseDuration } from "./duration.js";
import { agentbakHome, homePaths } from "../home.js";

export type ScheduleFormat = "cron" | "systemd";

export interface ScheduleOptions {
  every: string;
  /** what to print: crontab lines (default) or systemd units */
  format?: string;
  drillEvery?: string;
  forgetEvery?: string;
  config?: string;
  spec?: string;
  user?: string;
  credentialsFile?: string;
}

export interface ScheduleResult {
  format: ScheduleFormat;
  /** `--format cron`: crontab lines and comments, nothing else */
  crontab?: string[];
  /** `--format systemd`: unit file name (agentbak-JOB-AGENT.service/.timer) to its text */
  systemd?: Record<string, string>;
  /** where credentials for the jobs (S3 keys, ...) go: read by both, printed by neither */
  credentials_file: string;
  warnings: string[];
}

/** When a job runs: minute, hour ("*" or a step) and day of week, from an interval and a fixed minute offset. */
interface When {
  minute: string;
  hour: string;
  dow: string | null;
}

function when(ms: number, offset: number): When {
  const min = ms / 60_000;
  if (min < 1 || !Number.isInteger(min)) throw usageError("schedule intervals must be whole minutes");
  if (min < 60 && 60 % min === 0) return { minute: `${offset % min}/${min}`, hour: "*", dow: null };
  const h = min / 60;
  if (Number.isInteger(h) && h < 24 && 24 % h === 0) return { minute: `${offset}`, hour: h === 1 ? "*" : `0/${h}`, dow: null };
  if (h === 24) return { minute: `${offset}`, hour: "3", dow: null };
  if (h === 24 * 7) return { minute: `${offset}`, hour: "3", dow: "Sun" };
  throw usageError("use an interval that divides an hour or a day, or 7d (e.g. 15m, 1h, 6h, 1d, 7d)");
}

/** crontab's five fields. */
const cronTime = (w: When) => `${w.minute.replace(/^(\d+)\/(\d+)$/, "$1-59/$2")} ${w.hour.replace(/^0\/(\d+)$/, "*/$1")} * * ${w.dow === "Sun" ? "0" : "*"}`;
/** systemd's OnCalendar= (systemd.time(7)). */
const calendar = (w: When) => {
  const two = (s: string) => s.replace(/^\d+/, (d) => d.padStart(2, "0"));
  return `${w.dow ? `${w.dow} ` : ""}*-*-* ${w.hour === "*" ? "*" : two(w.hour)}:${two(w.minute)}:00`;
};

/** One word for sh: single-quoted unless plainly safe. */
const shWord = (s: string) => (/^[A-Za-z0-9_/.,:=@+-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`);
/** A crontab command: cron turns an unescaped % into a newline, so each is escaped. */
const cronCommand = (words: string[]) => words.map(shWord).join(" ").replace(/%/g, "\\%");
/** One value for a systemd unit (systemd.syntax(7)): double-quoted unless plainly safe, C escapes, % specifiers doubled; `$` doubled in ExecStart= only. */
const unitWord = (s: string, exec: boolean) => {
  if (/^[A-Za-z0-9_/.,:=@+-]+$/.test(s)) return s;
  const v = s.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/%/g, "%%");
  return `"${exec ? v.replace(/\$/g, "$$$$") : v}"`;
};

/** Environment the jobs need that is not a secret, carried by name from the environment `schedule` runs in. */
const CARRIED = ["AGENTBAK_REPOSITORY", "AGENTBAK_IDENTITY_FILE", "AGENTBAK_SIGNING_KEY_FILE", "AGENTBAK_S3_ENDPOINT", "AGENTBAK_S3_PATH_STYLE", "AWS_REGION", "AWS_PROFILE"];
/** Secrets that must reach the jobs through the env file, never through schedule's output. */
const SECRETS = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AGENTBAK_IDENTITY"];

/**
 * Builds the schedule for the config at `-c` (or ./agentbak.json).
 * @throws AgentbakError(2) without a config, for a --format other than cron or systemd, or for an interval cron and OnCalendar cannot express.
 */
export function schedule(opts: ScheduleOptions): ScheduleResult {
  const format = opts.format ?? "cron";
  if (format !== "cron" && format !== "systemd") throw usageError(`--format ${format}: use cron or systemd`);
  const cfg = configPath(opts.config);
  if (!cfg) throw usageError("schedule needs a config: pass -c FILE");
  const lc = loadConfig(cfg);
  const agent = lc.config.agent.id;
  const bin = [process.execPath, join(ROOT, "bin", "agentbak.js")];
  const home = agentbakHome();
  const envFile = resolve(opts.credentialsFile ?? homePaths(home).credentialsEnv);
  const user = opts.user ?? userInfo().username;
  const env: [string, string][] = [["AGENTBAK_HOME", home], ...CARRIED.filter((k) => process.env[k]).map((k): [string, string] => [k, process.env[k]!])];
  const warnings = SECRETS.filter((k) => process.env[k]).map((k) => `${k} is set here but not printed: put it in ${envFile} (mode 0600) for the scheduled jobs`);

  const r = lc.config.retention;
  const hasRetention = [r.keepLast, r.keepHourly, r.keepDaily, r.keepWeekly, r.keepMonthly, r.keepYearly].some((v) => v !== undefined);
  // without a spec of the agent's own, scheduled drills run the built-in restore checks alone: drills/checks-only.json's
  // invariants query the reference agent's tables, and every other agent's drill would fail on them
  const spec = opts.spec ? ["--spec", specPath(opts.spec)] : [];
  // `listing`: the job prints a listing on stdout (forget's kept/removed), which cron would mail
  const jobs: { name: string; what: string; every: string; offset: number; args: string[]; nice: boolean; listing?: boolean }[] = [
    { name: "backup", what: "back up", every: opts.every, offset: 7, args: ["backup", "-c", cfg, "--wait", "10m"], nice: true },
  ];
  if (hasRetention) jobs.push({ name: "forget", what: "apply the config's retention to", every: opts.forgetEvery ?? "1d", offset: 47, args: ["forget", "--prune", "-c", cfg, "--wait", "10m"], nice: true, listing: true });
  else warnings.push(`${cfg} has no retention rules (retention.keepLast, keepDaily, ...): forget is not scheduled and snapshots accumulate`);
  // a drill from cron or a timer: quiet on success, and a credential absent from the job's environment is not a warning
  if (opts.drillEvery) jobs.push({ name: "drill", what: "drill a random recent snapshot of", every: opts.drillEvery, offset: 37, args: ["drill", "random", "--within", "7d", "-c", cfg, ...spec, "--no-credential-warnings"], nice: false });

  const sourceEnv = `set -a; [ ! -r ${shWord(envFile)} ] || . ${shWord(envFile)}; set +a;`;
  const crontab: string[] = [`# agentbak for ${agent}: quiet on success, stderr and a non-zero exit on failure; credentials (S3 keys) in ${envFile}`];
  const systemd: Record<string, string> = {};
  for (const j of jobs) {
    const w = when(parseDuration(j.every), j.offset);
    const words = [...bin, ...j.args];
    const assignments = env.map(([k, v]) => `${k}=${shWord(v)}`).join(" ");
    if (j.name === "drill" && !opts.spec) crontab.push("# the drill runs the restore checks alone (integrity, row counts, chain): pass --spec with the agent's invariants to run them too");
    crontab.push(`# ${j.what} ${agent} every ${j.every}`, `${cronTime(w)} ${`${sourceEnv} ${assignments}`.replace(/%/g, "\\%")} ${cronCommand(words)}${j.listing ? " >/dev/null" : ""}`);
    const everyMs = parseDuration(j.every);
    // the agent id in the name: two agents on one host get units of their own (ids are [a-z0-9._-], valid in a unit name)
    const unit = `agentbak-${j.name}-${agent}`;
    systemd[`${unit}.service`] = [
      "[Unit]",
      `Description=agentbak ${j.name} of ${agent} (${cfg.replace(/%/g, "%%")})`,
      "Wants=network-online.target",
      "After=network-online.target",
      "",
      "[Service]",
      "Type=oneshot",
      `User=${user}`,
      ...env.map(([k, v]) => `Environment=${unitWord(`${k}=${v}`, false)}`),
      `EnvironmentFile=-${envFile.replace(/%/g, "%%")}`,
      `ExecStart=${words.map((x) => unitWord(x, true)).join(" ")}`,
      ...(j.nice ? ["Nice=10", "IOSchedulingClass=best-effort", "IOSchedulingPriority=7"] : []),
      "",
    ].join("\n");
    systemd[`${unit}.timer`] = [
      "[Unit]",
      `Description=agentbak ${j.name} of ${agent} every ${j.every}`,
      "",
      "[Timer]",
      `OnCalendar=${calendar(w)}`,
      // a run missed while the machine was off happens at boot; hosts sharing a repository do not all start at once
      "Persistent=true",
      `RandomizedDelaySec=${Math.max(30, Math.min(900, Math.round(everyMs / 10_000)))}`,
      "",
      "[Install]",
      "WantedBy=timers.target",
      "",
    ].join("\n");
  }
  return { format, ...(format === "cron" ? { crontab } : { systemd }), credentials_file: envFile, warnings };
}
