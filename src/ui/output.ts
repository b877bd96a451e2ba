/**
 * The only module that writes to the terminal. Human output and progress go
 * to stderr; `--json` results go to stdout. A progress line only on a TTY of
 * non-zero width whose foreground this process is; prompts likewise; colour
 * follows --no-color, then FORCE_COLOR, then NO_COLOR (https://no-color.org).
 */
import chalk from "chalk";
import { readFileSync } from "node:fs";
import { interrupting, onInterrupt } from "../cleanup.js";
import { AgentbakError, Exit, usageError } from "../errors.js";
import { noProgress, type Progress } from "../progress.js";
import { safe } from "./escape.js";

export const isTTY = () => Boolean(process.stderr.isTTY);
export const stdinTTY = () => Boolean(process.stdin.isTTY);

/**
 * Whether this process belongs to its terminal's foreground process group.
 * A background job (`agentbak backup &`) that changed terminal modes would be
 * stopped by SIGTTOU, so it neither spins nor prompts. Read from /proc on
 * Linux; elsewhere assumed.
 */
export function foreground(): boolean {
  try {
    const stat = readFileSync("/proc/self/stat", "utf8");
    // after "(comm) ": state ppid pgrp session tty_nr tpgid ...
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const pgrp = Number(f[2]);
    const tpgid = Number(f[5]);
    return tpgid < 0 || pgrp === tpgid;
  } catch {
    return true;
  }
}

/**
 * Sets colour once, at start: `--no-color` wins, then FORCE_COLOR (chalk reads
 * it), then NO_COLOR (chalk does not read it), then whether stdout is a TTY.
 */
export function configureColor(noColorFlag: boolean): void {
  const forced = process.env.FORCE_COLOR !== undefined;
  if (noColorFlag || (!forced && process.env.NO_COLOR)) chalk.level = 0;
}

/**
 * Writes a human line to stderr as given: a caller that styles a line (bold,
 * dim) has passed every piece of outside text in it through safe() first.
 */
export const say = (line = "") => void (interrupting() || process.stderr.write(line + "\n"));
// a message line (a warning, a check, an error a stage phrased) may quote an agent's data anywhere in it: escaped whole
export const warn = (line: string) => say(chalk.yellow("warning: ") + safe(line));
export const ok = (line: string) => say(chalk.green("✓ ") + safe(line));
export const bad = (line: string) => say(chalk.red("✗ ") + safe(line));
export const dim = (s: string) => chalk.dim(s);
export const bold = (s: string) => chalk.bold(s);

/** Writes plain text to stdout (for output meant to be piped, like a crontab); outside text in it was passed through safe(). */
export const out = (text: string) => void (interrupting() || process.stdout.write(text));

/** Writes one JSON document (or JSON Lines record) to stdout. */
export const emitJson = (v: unknown) => void (interrupting() || process.stdout.write(JSON.stringify(v) + "\n"));

const drawable = () => isTTY() && (process.stderr.columns ?? 0) > 0 && foreground();

/**
 * The progress sink of a long command (ui/progress.ts): a line on a foreground
 * TTY of non-zero width (a 0-column terminal has no line to rewrite; a
 * background job stays quiet), JSON lines on stderr with `--progress` off a
 * terminal, else nothing. The line is cleared on stop() and before an
 * interrupt's message. Stdin stays in cooked mode, so Ctrl-C is a signal.
 */
export async function progressReporter(json: boolean | undefined): Promise<{ progress: Progress; stop(finished: boolean): void }> {
  const mode = drawable() ? "tty" : json && !isTTY() ? "json" : null;
  if (!mode) return { progress: noProgress, stop: () => undefined };
  const { CLEAR, Reporter } = await import("./progress.js");
  // once an interrupt is being handled only the clearing gets out: the "interrupted" line follows on a clean line
  const write = (s: string) => void ((s === CLEAR || !interrupting()) && process.stderr.write(s));
  const r = new Reporter({ mode, write, columns: () => process.stderr.columns ?? 80 });
  const unregister = onInterrupt(() => r.stop(false));
  return {
    progress: r,
    stop: (finished) => {
      unregister();
      r.stop(finished);
    },
  };
}

/**
 * Prints rows as an aligned table to stdout (a listing is a command's result).
 * With `fit`, the `shrink` columns give up width (first the first) until a line fits in `width`, their cells cut with "…".
 */
export function table(headers: string[], rows: string[][], fit?: { width: number; shrink: number[] }): void {
  // a cell (a label from a bundle, an id) never carries a line break, escape sequence or bidi control onto the terminal
  rows = rows.map((r) => r.map(safe));
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  if (fit) shrinkToFit(widths, headers, fit.width, fit.shrink);
  const cut = (c: string, w: number) => (c.length > w ? `${c.slice(0, w - 1)}…` : c);
  const fmt = (r: string[]) => r.map((c, i) => cut(c, widths[i]!).padEnd(widths[i]!)).join("  ").trimEnd();
  out(bold(fmt(headers)) + "\n");
  for (const r of rows) out(fmt(r) + "\n");
}

/** Narrows the `shrink` columns, in that order and never below their header, until a line of `widths` fits in `width`. */
function shrinkToFit(widths: number[], headers: string[], width: number, shrink: number[]): void {
  let over = widths.reduce((a, b) => a + b, 0) + 2 * (widths.length - 1) - width;
  for (const i of shrink) {
    const give = Math.min(over, widths[i]! - Math.max(headers[i]!.length, 4));
    if (give <= 0) continue;
    widths[i] = widths[i]! - give;
    over -= give;
  }
}

/**
 * Runs a prompt when one may be shown (stdin and stderr are TTYs and this is
 * the foreground job); Ctrl-C at it is an interruption (130), not a bug.
 * @throws AgentbakError(2) naming `flag` when no prompt may be shown, (130) on Ctrl-C.
 */
async function prompt<T>(what: string, flag: string, ask: (p: typeof import("@inquirer/prompts")) => Promise<T>): Promise<T> {
  if (!stdinTTY() || !isTTY()) throw usageError(`${what} needed and no TTY: pass ${flag}`);
  if (!foreground()) throw usageError(`${what} needed and this is a background job: pass ${flag}`);
  try {
    return await ask(await import("@inquirer/prompts"));
  } catch (e) {
    if ((e as Error)?.name === "ExitPromptError") throw new AgentbakError(Exit.interrupted, "interrupted");
    throw e;
  }
}

const context = { output: process.stderr };
// a prompt's question and choices may quote an agent's data (a request id, an agent id, a file name): escaped; the answer is the value itself
const choice = (value: string) => ({ value, name: safe(value) });

/** Asks a yes/no question, or fails naming the flag that answers it. */
export async function confirm(message: string, flag: string): Promise<boolean> {
  return prompt("confirmation", flag, (p) => p.confirm({ message: safe(message), default: false }, context));
}

/** Asks for a text value, or fails naming the flag. */
export async function askText(message: string, flag: string, def?: string): Promise<string> {
  return prompt(message.replace(/[?:]\s*$/, ""), flag, (p) => p.input({ message: safe(message), default: def, required: true }, context));
}

/** Offers `choices` to tick (none ticked is an answer), or fails naming the flag. */
export async function askChoices(message: string, flag: string, choices: string[]): Promise<string[]> {
  if (!choices.length) return [];
  return prompt(message.replace(/[?:]\s*$/, ""), flag, (p) => p.checkbox({ message: safe(message), choices: choices.map((value) => ({ ...choice(value), checked: true })) }, context));
}

/** Offers `choices` and "none", or fails naming the flag. @returns the choice, or undefined for none. */
export async function askOne(message: string, flag: string, choices: string[]): Promise<string | undefined> {
  if (!choices.length) return undefined;
  const none = "(none)";
  const r = await prompt(message.replace(/[?:]\s*$/, ""), flag, (p) => p.select({ message: safe(message), choices: [...choices, none].map(choice) }, context));
  return r === none ? undefined : r;
}
