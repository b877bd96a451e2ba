// A terminal test harness on node-pty: runs the real binary (or an interactive
// shell) in a real pseudo-terminal, types into it and waits for what it prints.
import pty from "node-pty";
import { BIN } from "./helpers.js";

export interface TermOptions {
  cwd?: string;
  env?: Record<string, string | undefined>;
  /** columns the terminal reports (0 as `ssh -tt` and `script` wrappers sometimes do) */
  cols?: number;
  rows?: number;
}

/** One process on a pty: its output so far, typing, waiting, and its exit. */
export class Term {
  output = "";
  readonly exited: Promise<{ code: number; signal: number | undefined }>;
  readonly pid: number;
  private readonly p: pty.IPty;

  constructor(file: string, args: string[], o: TermOptions = {}) {
    // a clean environment: no inherited NO_COLOR/FORCE_COLOR/CI unless a test sets them
    const base: Record<string, string> = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/tmp", TERM: "xterm-256color", LANG: "C.UTF-8" };
    const env = Object.fromEntries(Object.entries({ ...base, ...o.env }).filter((e): e is [string, string] => e[1] !== undefined));
    this.p = pty.spawn(file, args, { name: "xterm-256color", cols: o.cols ?? 100, rows: o.rows ?? 30, cwd: o.cwd, env });
    this.pid = this.p.pid;
    this.p.onData((d) => (this.output += d));
    this.exited = new Promise((res) => this.p.onExit((e) => res({ code: e.exitCode, signal: e.signal })));
  }

  /** The binary itself on a pty. */
  static agentbak(args: string[], o: TermOptions = {}): Term {
    return new Term(process.execPath, [BIN, ...args], o);
  }

  write(s: string): void {
    this.p.write(s);
  }

  /** Resolves once the output matches `re`; rejects after `ms` with what was printed. */
  async waitFor(re: RegExp, ms = 60_000): Promise<void> {
    const end = Date.now() + ms;
    while (!re.test(this.output)) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${re} in terminal output:\n${JSON.stringify(this.output.slice(-2000))}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  /** The exit, or a rejection after `ms` (the process is then killed). */
  async exit(ms = 60_000): Promise<{ code: number; signal: number | undefined }> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, rej) => {
      timer = setTimeout(() => {
        this.kill();
        rej(new Error(`no exit within ${ms} ms; output:\n${JSON.stringify(this.output.slice(-2000))}`));
      }, ms);
    });
    try {
      return await Promise.race([this.exited, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  kill(signal = "SIGKILL"): void {
    try {
      this.p.kill(signal);
    } catch {
      /* already gone */
    }
  }
}

/** Output without terminal escape sequences, for matching words. */
export const plain = (s: string) => s.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, "").replace(/\r/g, "");
/** SGR color sequences (ESC [ ... m with a color parameter). */
export const COLOR = /\x1b\[(?:[0-9;]*;)?(?:3[0-9]|9[0-7]|38;[0-9;]+|1|2)m/;
