/**
 * Entry point: runs the command table and is the only place that exits.
 * User-facing errors print their message; unexpected ones print detail.
 */
import { CommanderError } from "commander";
import { buildProgram } from "./cli.js";
import { AgentbakError, Exit, type ExitCode } from "./errors.js";
import { runInterruptCleanups } from "./cleanup.js";

async function main(argv: string[]): Promise<ExitCode> {
  const result = { code: Exit.ok as ExitCode };
  try {
    await buildProgram(result).parseAsync(argv);
    return result.code;
  } catch (e) {
    if (e instanceof CommanderError) {
      if (e.code === "commander.helpDisplayed" || e.code === "commander.version" || e.code === "commander.help") return Exit.ok;
      return Exit.usage;
    }
    if (e instanceof AgentbakError) {
      process.stderr.write(`agentbak: ${e.message}\n`);
      return e.code;
    }
    const sys = e as NodeJS.ErrnoException;
    if (typeof sys?.code === "string" && /^E[A-Z]+$/.test(sys.code)) {
      // an operating-system error (ENOSPC, EIO, EROFS, EACCES, ...): name the path and errno, no stack
      process.stderr.write(`agentbak: ${sys.message}${sys.path && !sys.message.includes(sys.path) ? ` (${sys.path})` : ""}\n`);
      return Exit.failure;
    }
    const err = e as Error;
    process.stderr.write(`agentbak: internal error: ${err?.stack ?? String(e)}\nThis is a bug; please report it.\n`);
    return Exit.failure;
  }
}

function interrupted(): void {
  runInterruptCleanups();
  process.stderr.write("agentbak: interrupted\n");
  process.exit(Exit.interrupted);
}
// a closed pipe (agentbak ... | head) is not an error of ours
process.stdout.on("error", (e: NodeJS.ErrnoException) => {
  if (e.code === "EPIPE") process.exit(process.exitCode ?? 0);
});
process.on("SIGINT", interrupted);
process.on("SIGTERM", interrupted);

main(process.argv).then((code) => {
  process.exitCode = code;
});
