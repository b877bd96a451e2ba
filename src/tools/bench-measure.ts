/**
 * How `npm run bench` times a command: wall seconds, CPU seconds and peak RSS
 * of the child (getrusage, through a small python3 wrapper), with the page
 * cache's dirty pages flushed first so no command pays for another's writeback.
 */
import { execa } from "execa";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const root = resolve(fileURLToPath(import.meta.url), "../../..");
export const bin = join(root, "bin", "agentbak.js");

/** One timed command. */
export interface Measured {
  seconds: number;
  /** peak RSS of the largest process it ran, MiB */
  rssMiB: number;
  /** CPU seconds (user + system) of it and its children */
  cpuSeconds: number;
  exitCode: number;
  stdout: string;
}

/** Runs a command, returning its wall and CPU seconds and peak RSS. @throws Error when it exits with a code not in okCodes. */
export async function measure(cmd: string[], opts: { cwd?: string; env?: Record<string, string>; okCodes?: number[] } = {}): Promise<Measured> {
  const wrapper = `import os, resource, subprocess, sys, time
os.sync()
t = time.monotonic()
r = subprocess.run(sys.argv[1:])
dt = time.monotonic() - t
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{dt} {u.ru_maxrss} {u.ru_utime + u.ru_stime}", file=sys.stderr)
sys.exit(r.returncode)`;
  const r = await execa("python3", ["-c", wrapper, ...cmd], { cwd: opts.cwd, env: opts.env, reject: false });
  const last = String(r.stderr).trim().split("\n").at(-1)!.split(" ");
  if (!(opts.okCodes ?? [0]).includes(r.exitCode ?? -1)) throw new Error(`${cmd.join(" ").slice(0, 300)} exited ${r.exitCode}: ${String(r.stderr).slice(-2000)}`);
  return { seconds: Number(last[0]), rssMiB: Number(last[1]) / 1024, cpuSeconds: Number(last[2]), exitCode: r.exitCode ?? -1, stdout: String(r.stdout) };
}

export const fmt = (n: number, d = 2) => n.toFixed(d);
export const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[xs.length >> 1]!;
