/** `agentbak schedule`: prints a crontab line and a systemd service + timer pair; installs nothing. */
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { usageError } from "../errors.js";
import { configPath } from "../config/load.js";
import { parseDuration } from "./duration.js";

export interface ScheduleResult {
  crontab: string[];
  systemd: Record<string, string>;
}

function cronFor(ms: number, minuteOffset: number): string {
  const min = ms / 60_000;
  if (min < 1 || !Number.isInteger(min)) throw usageError("schedule intervals must be whole minutes");
  if (min < 60 && 60 % min === 0) return `${minuteOffset % min}-59/${min} * * * *`;
  const h = min / 60;
  if (Number.isInteger(h) && h < 24 && 24 % h === 0) return `${minuteOffset} */${h} * * *`;
  const d = h / 24;
  if (Number.isInteger(d) && d === 1) return `${minuteOffset} 3 * * *`;
  if (Number.isInteger(d) && d === 7) return `${minuteOffset} 3 * * 0`;
  throw usageError("use an interval that divides an hour or a day (e.g. 15m, 1h, 6h, 1d, 7d)");
}

const systemdSpan = (ms: number) => `${Math.round(ms / 60_000)}min`;

export function schedule(opts: { every: string; drillEvery?: string; config?: string; spec?: string }): ScheduleResult {
  const cfg = configPath(opts.config);
  if (!cfg) throw usageError("schedule needs a config: pass -c FILE");
  const bin = resolve(fileURLToPath(import.meta.url), "../../../bin/agentbak.js");
  const node = process.execPath;
  const every = parseDuration(opts.every);
  const backupCmd = `${node} ${bin} backup -c ${cfg} --wait 10m`;
  const spec = opts.spec ? resolve(opts.spec) : resolve(fileURLToPath(import.meta.url), "../../../drills/checks-only.json");
  const drillCmd = `${node} ${bin} drill random --within 7d -c ${cfg} --spec ${spec}`;
  const crontab = [`# agentbak: backup every ${opts.every}; quiet on success, non-zero exit and stderr on failure`, `${cronFor(every, 7)} ${backupCmd}`];
  const systemd: Record<string, string> = {
    "agentbak-backup.service": `[Unit]\nDescription=agentbak backup (${cfg})\nAfter=network-online.target\n\n[Service]\nType=oneshot\nExecStart=${backupCmd}\nNice=10\nIOSchedulingClass=best-effort\nIOSchedulingPriority=7\n`,
    "agentbak-backup.timer": `[Unit]\nDescription=agentbak backup every ${opts.every}\n\n[Timer]\nOnBootSec=5min\nOnUnitActiveSec=${systemdSpan(every)}\nPersistent=true\nRandomizedDelaySec=60\n\n[Install]\nWantedBy=timers.target\n`,
  };
  if (opts.drillEvery) {
    const d = parseDuration(opts.drillEvery);
    crontab.push(`# agentbak: drill a random recent snapshot every ${opts.drillEvery}`, `${cronFor(d, 37)} ${drillCmd}`);
    systemd["agentbak-drill.service"] = `[Unit]\nDescription=agentbak drill (${cfg})\n\n[Service]\nType=oneshot\nExecStart=${drillCmd}\n`;
    systemd["agentbak-drill.timer"] = `[Unit]\nDescription=agentbak drill every ${opts.drillEvery}\n\n[Timer]\nOnBootSec=30min\nOnUnitActiveSec=${systemdSpan(d)}\nPersistent=true\n\n[Install]\nWantedBy=timers.target\n`;
  }
  return { crontab, systemd };
}
