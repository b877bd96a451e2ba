/**
 * Running a configured command contained (src/contained.ts), with real
 * processes: its exit status, stdin and stdout; an environment of only what
 * the caller passes; a deadline and an output cap that kill its whole process
 * group, a grandchild that ignores SIGTERM included; a grandchild that left the
 * group holding stdout open does not hold the deadline; a command that can
 * not start is a result, not a throw.
 */
import { afterAll, describe, expect, it } from "vitest";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { basicEnv, BASIC_ENV, runContained } from "../../src/contained.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-contained-"));
const strays: number[] = [];
afterAll(() => {
  for (const p of strays) {
    try {
      process.kill(p, "SIGKILL");
    } catch {
      /* gone */
    }
  }
  rmSync(tmp, { recursive: true, force: true });
});

/** Whether a process has ended (gone, or a zombie nobody reaped yet: this container's pid 1 may not reap). */
const ended = (pid: number) => {
  const f = `/proc/${pid}/stat`;
  if (!existsSync(f)) return true;
  try {
    return readFileSync(f, "utf8").split(") ")[1]!.startsWith("Z");
  } catch {
    return true;
  }
};
const waitPidFile = async (f: string) => {
  for (let i = 0; i < 500 && !(existsSync(f) && readFileSync(f, "utf8").trim()); i++) await new Promise((r) => setTimeout(r, 10));
  const pid = Number(readFileSync(f, "utf8").trim());
  strays.push(pid);
  return pid;
};
const env = basicEnv();
/** shell: wait until the grandchild has written its pid (a loaded machine may start it late) */
const started = (f: string) => `while [ ! -s ${f} ]; do sleep 0.01; done`;

describe("runContained", () => {
  it("gives the command its input and reports its exit status and stdout (stderr is not captured)", async () => {
    const r = await runContained(["sh", "-c", "tr a-z A-Z; echo oops >&2; exit 3"], { input: "probe says hi", env, timeoutMs: 10_000 });
    expect(r).toEqual({ exitCode: 3, signal: null, stdout: "PROBE SAYS HI", notUtf8: false, timedOut: false, tooLarge: false, startError: null });
  });

  it("sees only the environment passed: never this process's AGENTBAK_IDENTITY", async () => {
    process.env.AGENTBAK_IDENTITY = "AGE-SECRET-KEY-1NOTREAL";
    try {
      expect(basicEnv()).not.toHaveProperty("AGENTBAK_IDENTITY");
      expect(Object.keys(basicEnv()).every((k) => (BASIC_ENV as readonly string[]).includes(k))).toBe(true);
      const r = await runContained(["env"], { env: { ...basicEnv(), PROBE: "1" }, timeoutMs: 10_000 });
      const names = r.stdout.trim().split("\n").map((l) => l.split("=")[0]);
      expect(names).toContain("PROBE");
      expect(names).toContain("PATH");
      expect(names).not.toContain("AGENTBAK_IDENTITY");
    } finally {
      delete process.env.AGENTBAK_IDENTITY;
    }
  });

  it("the deadline kills the whole group: a grandchild that ignores SIGTERM ends too", async () => {
    const f = join(tmp, "grandchild.pid");
    const t0 = Date.now();
    const r = await runContained(["sh", "-c", `sh -c 'trap "" TERM; echo $$ > ${f}; exec sleep 30' & ${started(f)}; wait`], { env, timeoutMs: 700 });
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(r.timedOut).toBe(true);
    expect(r.signal).toBe("SIGKILL");
    const pid = await waitPidFile(f);
    for (let i = 0; i < 300 && !ended(pid); i++) await new Promise((res) => setTimeout(res, 10));
    expect(ended(pid)).toBe(true);
  });

  it("a grandchild that left the group (setsid) and holds stdout open does not hold the deadline", async () => {
    const f = join(tmp, "escaped.pid");
    const t0 = Date.now();
    const r = await runContained(["sh", "-c", `setsid sh -c 'echo $$ > ${f}; exec sleep 30' & ${started(f)}; sleep 30`], { env, timeoutMs: 700 });
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(r.timedOut).toBe(true);
    await waitPidFile(f);
  });

  it("once the command exits, what it left running in its group is killed", async () => {
    const f = join(tmp, "left.pid");
    const t0 = Date.now();
    const r = await runContained(["sh", "-c", `sh -c 'echo $$ > ${f}; exec sleep 30' & ${started(f)}; echo started`], { env, timeoutMs: 20_000 });
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(r).toMatchObject({ exitCode: 0, stdout: "started", timedOut: false });
    const pid = await waitPidFile(f);
    for (let i = 0; i < 300 && !ended(pid); i++) await new Promise((res) => setTimeout(res, 10));
    expect(ended(pid)).toBe(true);
  });

  it("printing more than maxBytes stops it and says tooLarge", async () => {
    const t0 = Date.now();
    const r = await runContained(["yes", "x"], { env, timeoutMs: 20_000, maxBytes: 1000 });
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(r.tooLarge).toBe(true);
    expect(r.timedOut).toBe(false);
    expect(r.startError).toBeNull();
  });

  it("a command that can not be started is reported (ENOENT), not thrown", async () => {
    const r = await runContained([join(tmp, "no-such-probe")], { env, timeoutMs: 5000 });
    expect(r.startError).toBe("ENOENT");
    expect(r.exitCode).toBeNull();
    expect(r.timedOut).toBe(false);
  });
});
