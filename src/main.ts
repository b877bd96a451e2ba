/**
 * Entry point: runs the command table and is the only place that exits.
 * User-facing errors print their message; unexpected ones print detail.
 */
import { CommanderError } from "commander";
import { buildProgram } from "./cli.js";
import { AgentbakError, Exit, isSystemError, type ExitCode } from "./errors.js";
import { runInterruptCleanups } from "./cleanup.js";

/** Prints an error the way its kind deserves. @returns the exit code for it. */
function report(e: unknown): ExitCode {
  if (e instanceof CommanderError) {
    if (e.code === "commander.helpDisplayed" || e.code === "commander.version" || e.code === "commander.help") return Exit.ok;
    return Exit.usage;
  }
  if (e instanceof AgentbakError) {
    process.stderr.write(`agentbak: ${e.message}\n`);
    return e.code;
  }
  if (isSystemError(e)) {
    // an operating-system error (ENOSPC, EIO, EROFS, EACCES, ...): name the path and errno, no stack
    process.stderr.write(`agentbak: ${e.message}${e.path && !e.message.includes(e.path) ? ` (${e.path})` : ""}\n`);
    return Exit.failure;
  }
  const err = e as Error;
  process.stderr.write(`agentbak: internal error: ${err?.stack ?? String(e)}\nThis is a bug; please report it.\n`);
  return Exit.failure;
}

async function main(argv: string[]): Promise<ExitCode> {
  const result = { code: Exit.ok as ExitCode };
  try {
    await buildProgram(result).parseAsync(argv);
    return result.code;
  } catch (e) {
    return report(e);
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
// a failure nothing awaited: clean up as for an interrupt (staging, locks) and say what it was, never a raw dump
process.on("unhandledRejection", (e) => {
  runInterruptCleanups();
  process.exit(report(e));
});
process.on("SIGINT", interrupted);
process.on("SIGTERM", interrupted);

main(process.argv).then((code) => {
  process.exitCode = code;
});
