/**
 * The only module that writes to the terminal. Human output and progress go
 * to stderr; `--json` results go to stdout. Spinners only on a TTY; NO_COLOR
 * is honoured (chalk reads it).
 */
import chalk from "chalk";
import ora, { type Ora } from "ora";
import { usageError } from "../errors.js";

export const isTTY = () => Boolean(process.stderr.isTTY);
export const stdinTTY = () => Boolean(process.stdin.isTTY);

/** Writes a human line to stderr. */
export const say = (line = "") => void process.stderr.write(line + "\n");
export const warn = (line: string) => say(chalk.yellow("warning: ") + line);
export const ok = (line: string) => say(chalk.green("✓ ") + line);
export const bad = (line: string) => say(chalk.red("✗ ") + line);
export const dim = (s: string) => chalk.dim(s);
export const bold = (s: string) => chalk.bold(s);

/** Writes plain text to stdout (for output meant to be piped, like a crontab). */
export const out = (text: string) => void process.stdout.write(text);

/** Writes one JSON document (or JSON Lines record) to stdout. */
export const emitJson = (v: unknown) => void process.stdout.write(JSON.stringify(v) + "\n");

/** A spinner on a TTY; a no-op otherwise (quiet for cron). */
export function progress(text: string): { update(t: string): void; stop(): void } {
  if (!isTTY()) return { update: () => undefined, stop: () => undefined };
  const s: Ora = ora({ text, stream: process.stderr }).start();
  return { update: (t) => void (s.text = t), stop: () => void s.stop() };
}

/** Prints rows as an aligned table to stdout (a listing is a command's result). */
export function table(headers: string[], rows: string[][]): void {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const fmt = (r: string[]) => r.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd();
  out(bold(fmt(headers)) + "\n");
  for (const r of rows) out(fmt(r) + "\n");
}

/**
 * Asks a yes/no question on a TTY. Without a TTY it is a usage error naming
 * the flag that answers it.
 */
export async function confirm(message: string, flag: string): Promise<boolean> {
  if (!stdinTTY() || !isTTY()) throw usageError(`confirmation needed and no TTY: pass ${flag}`);
  const { confirm: ask } = await import("@inquirer/prompts");
  return ask({ message, default: false }, { output: process.stderr });
}

/** Asks for a text value on a TTY, or fails naming the flag. */
export async function askText(message: string, flag: string, def?: string): Promise<string> {
  if (!stdinTTY() || !isTTY()) throw usageError(`${message.replace(/[?:]\s*$/, "")} needed and no TTY: pass ${flag}`);
  const { input } = await import("@inquirer/prompts");
  return input({ message, default: def, required: true }, { output: process.stderr });
}
