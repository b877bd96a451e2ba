/**
 * One backup in a short-lived child process: `agentbak backup -c CONFIG
 * --skip-if-unchanged --json`, the very command (and runBackup) a user runs,
 * its receipt read back as JSON. `serve --host` runs its scheduled captures
 * this way so that SQLite, zstd, age, the bundle writer and their buffers
 * live in the child and go back to the operating system when it exits: the
 * server's own memory stays what its agents' entries cost (docs/fleet.md has
 * the measurement).
 *
 * Stopping: the child is in the server's process group, so Ctrl-C or a
 * SIGTERM sent to the group stops it as it stops `agentbak backup` (staging
 * removed, lease released, exit 130: its error here). A SIGTERM to the server
 * alone lets it finish.
 */
import { spawn } from "node:child_process";
import type { BackupReceipt } from "../capture/backup.js";
import { AgentbakError, EXIT_NAMES, Exit, type ExitCode } from "../errors.js";
import { childCli } from "../version.js";

/**
 * Runs `agentbak backup` for one config in a child process.
 * @returns its receipt (warnings included: exit 3 is a success with warnings)
 * @throws AgentbakError with the child's exit status and its one-line message
 */
export function backupInChild(config: string): Promise<BackupReceipt> {
  // the child is the same binary (fault injection and --import probes travel with it)
  const child = spawn(process.execPath, [...childCli(), "backup", "-c", config, "--skip-if-unchanged", "--json"], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NO_COLOR: "1" } });
  let out = "";
  let err = "";
  child.stdout.on("data", (d: Buffer) => (out += d));
  child.stderr.on("data", (d: Buffer) => (err += d));
  return new Promise((resolve, reject) => {
    child.on("error", (e) => reject(new AgentbakError(Exit.failure, `could not start the backup process: ${e.message}`)));
    child.on("close", (code, signal) => {
      const last = out.trim().split("\n").at(-1) ?? "";
      let doc: (BackupReceipt & { message_type?: undefined }) | { message_type: "exit_error"; exit_status: ExitCode; message: string } | null = null;
      try {
        doc = JSON.parse(last);
      } catch {
        /* no JSON: killed, or it crashed before printing */
      }
      if ((code === Exit.ok || code === Exit.warnings) && doc && doc.message_type === undefined) return resolve(doc);
      if (doc?.message_type === "exit_error") return reject(new AgentbakError(doc.exit_status, doc.message));
      // a signal's default action ends it only before main.ts's handlers are set, so before the backup began
      if (signal === "SIGTERM" || signal === "SIGINT") return reject(new AgentbakError(Exit.interrupted, `interrupted by ${signal} while the backup process started (nothing written)`));
      const why = signal ? `killed by ${signal}` : `exit ${code} (${EXIT_NAMES[code as ExitCode] ?? "unknown"})`;
      const said = err.trim().split("\n").at(-1);
      reject(new AgentbakError(Exit.failure, `the backup process ended without a receipt: ${why}${said ? `: ${said}` : ""}`));
    });
  });
}
