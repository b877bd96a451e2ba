/**
 * Entry point: runs the command table and is the only place that exits.
 * User-facing errors print their message; unexpected ones print detail. With
 * `--json`, a failure also prints one JSON error object on stdout. Every
 * message is escaped here, once (ui/escape.ts): it may quote a label, a key,
 * a table name or a provider's answer; the JSON object keeps the exact text.
 * Both have any URL's password redacted (facts.ts).
 */
import { AgentbakError, Exit, EXIT_NAMES, isSystemError, type ExitCode } from "./errors.js";
import { interruptedMessage, liveChildren, runInterruptCleanups, stopChildren, terminateHandler } from "./cleanup.js";
import { redactUrls } from "./facts.js";
import { safe } from "./ui/escape.js";
import { TOOL_VERSION } from "./version.js";

/** Whether --json was given (before a `--`): known even when the flags did not parse. */
const args = process.argv.slice(2);
// verify's digest worker boots on the other core while this one loads the command, the config and the bundle's head
if (args[0] === "verify") void import("./bundle/chunks.js").then((m) => m.warmDigestWorker()).catch(() => undefined); // only sooner: verify starts it anyway
const json = (args.includes("--") ? args.slice(0, args.indexOf("--")) : args).includes("--json");

/** Lines of our own (a stack's frames) each escaped: what they quote can not add a line or steer the terminal. */
const safeLines = (text: string) => text.split("\n").map(safe).join("\n");
/** The frames of an error's stack, without its message (which may span lines). */
const frames = (e: unknown) => {
  const stack = (e as Error)?.stack ?? "";
  const at = stack.indexOf("\n    at ");
  return at < 0 ? "" : stack.slice(at + 1);
};

/**
 * Reports a failure: its message, escaped, on stderr (then `trace`, our own
 * lines) and, with --json, `{message_type, code, exit_status, message}` on stdout.
 */
function fail(code: ExitCode, text: string, trace = ""): ExitCode {
  // whatever a stage or a library put in it, no connection password leaves in an error
  const message = redactUrls(text);
  process.stderr.write(`agentbak: ${safe(message)}\n${trace && `${safeLines(trace)}\n`}`);
  // AGENTBAK_DEBUG=1: where it came from, for a bug report
  if (process.env.AGENTBAK_DEBUG && lastError instanceof Error && !trace) process.stderr.write(`${safeLines(frames(lastError))}\n`);
  if (json) process.stdout.write(JSON.stringify({ message_type: "exit_error", code: EXIT_NAMES[code], exit_status: code, message }) + "\n");
  return code;
}

/** commander's own errors (cli.ts loads commander): a code "commander.*", where ours are numbers and the system's E*. */
const isCommanderError = (e: unknown): e is Error & { code: string } => e instanceof Error && String((e as { code?: unknown }).code).startsWith("commander.");

/** Prints an error the way its kind deserves. @returns the exit code for it. */
let lastError: unknown;
function report(e: unknown): ExitCode {
  lastError = (e as { cause?: unknown })?.cause ?? e;
  if (isCommanderError(e)) {
    if (e.code === "commander.helpDisplayed" || e.code === "commander.version" || e.code === "commander.help") return Exit.ok;
    // commander printed the message already
    if (json) process.stdout.write(JSON.stringify({ message_type: "exit_error", code: EXIT_NAMES[Exit.usage], exit_status: Exit.usage, message: e.message.replace(/^error: /, "") }) + "\n");
    return Exit.usage;
  }
  if (e instanceof AgentbakError) return fail(e.code, e.message);
  // a folder, FIFO, device or socket named where a file belongs is the caller's mistake
  if (isSystemError(e) && (e.code === "ENOTREG" || e.code === "EISDIR")) return fail(Exit.usage, `${e.message}${e.path && !e.message.includes(e.path) ? ` (${e.path})` : ""}`);
  // an operating-system error (ENOSPC, EIO, EROFS, EACCES, ...): name the path and errno, no stack
  if (isSystemError(e)) return fail(Exit.failure, `${e.message}${e.path && !e.message.includes(e.path) ? ` (${e.path})` : ""}`);
  const err = e as Error;
  return fail(Exit.failure, `internal error: ${err?.message ?? String(e)}`, `${frames(err)}\nThis is a bug; please report it.`.trimStart());
}

async function main(argv: string[]): Promise<ExitCode> {
  const result = { code: Exit.ok as ExitCode };
  try {
    // `agentbak --version` alone: printed here, as commander would, without loading the command table and commander
    if (args.length === 1 && (args[0] === "--version" || args[0] === "-V")) {
      process.stdout.write(`${TOOL_VERSION}\n`);
      return Exit.ok;
    }
    const { buildProgram } = await import("./cli.js");
    await buildProgram(result).parseAsync(argv);
    return result.code;
  } catch (e) {
    // a child killed by an interrupt fails what waited on it: the interrupt is the message
    return ending ? Exit.interrupted : report(e);
  }
}

/**
 * Ends the process on an interrupt or a failure nothing awaited: stops the
 * child processes (they may be writing into a folder about to be removed),
 * then runs the registered cleanups (staging, temp folders, locks) and waits
 * for those that write (a lease's release; at most CLEANUP_WAIT_MS), then exits.
 */
let ending = false;
function end(say: () => ExitCode): void {
  if (ending) return;
  ending = true;
  const exit = () => {
    // a lease's release is a write: waited for (a bounded while), so its grant is marked released, not left to be taken over
    const settling = runInterruptCleanups();
    if (settling) void settling.then(() => process.exit(say()));
    else process.exit(say());
  };
  // with no child running, nothing else runs before the exit (as a signal handler's exit)
  if (liveChildren() === 0) exit();
  else void stopChildren().finally(exit);
}
const interrupted = () => end(() => fail(Exit.interrupted, interruptedMessage()));
// a closed pipe (agentbak ... | head) is not an error of ours
process.stdout.on("error", (e: NodeJS.ErrnoException) => {
  if (e.code === "EPIPE") process.exit(process.exitCode ?? 0);
});
// a failure nothing awaited: clean up as for an interrupt (staging, locks) and say what it was, never a raw dump
process.on("unhandledRejection", (e) => end(() => report(e)));
process.on("SIGINT", interrupted);
// a server asked to stop (systemd, a container runtime) finishes what it serves and exits 0; anything else is interrupted
process.on("SIGTERM", () => (terminateHandler() ?? interrupted)());

main(process.argv).then((code) => {
  process.exitCode = code;
});
