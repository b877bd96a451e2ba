/**
 * Cleanup on interruption (src/cleanup.ts), with real folders and real child
 * processes: registered removals run once and survive a failing one; the
 * interrupted line says what was done before it; children tracked (and their
 * process groups) are killed and waited for before any folder goes; once
 * stopping, a new child is killed at once and letInterruptsIn refuses to go
 * on (130). The module's state is per process and stopping never ends, so the
 * tests run in order and the stop comes last.
 */
import { afterAll, describe, expect, it, vi } from "vitest";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  doneBeforeInterrupt,
  interrupting,
  interruptedMessage,
  letInterruptsIn,
  liveChildren,
  onInterrupt,
  onTerminate,
  removeOnInterrupt,
  removeTree,
  runInterruptCleanups,
  stopChildren,
  stopOnInterrupt,
  terminateHandler,
} from "../../src/cleanup.js";
import { AgentbakError } from "../../src/errors.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-cleanup-"));
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
/** gone, or a zombie (this container's pid 1 may not reap) */
const ended = (pid: number) => !existsSync(`/proc/${pid}/stat`) || readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.startsWith("Z");
const exited = (c: ReturnType<typeof spawn>) => new Promise<string | null>((r) => (c.exitCode !== null || c.signalCode !== null ? r(c.signalCode) : c.once("exit", (_code, sig) => r(sig))));

describe("removals registered for an interrupt", () => {
  it("each runs once, in spite of one that throws; one unregistered does not run", () => {
    const ran: string[] = [];
    onInterrupt(() => ran.push("a"));
    onInterrupt(() => {
      throw new Error("fails");
    });
    const off = onInterrupt(() => ran.push("unregistered"));
    onInterrupt(() => ran.push("c"));
    off();
    runInterruptCleanups();
    expect(ran).toEqual(["a", "c"]);
    runInterruptCleanups();
    expect(ran).toEqual(["a", "c"]);
  });

  it("removeOnInterrupt removes the folder and all in it; removeTree says whether it is gone and never throws", () => {
    const d = join(tmp, "staging");
    mkdirSync(join(d, "db", "x"), { recursive: true });
    writeFileSync(join(d, "db", "x", "f"), "data");
    removeOnInterrupt(d);
    runInterruptCleanups();
    expect(existsSync(d)).toBe(false);
    expect(removeTree(join(tmp, "never-was"))).toBe(true);
    // a path rmSync refuses outright (a NUL byte in it): false, not a throw
    expect(removeTree(join(tmp, "bad\0name"))).toBe(false);
  });
});

describe("what an interrupted exit says", () => {
  it('"interrupted", then "interrupted after" the newest thing done', () => {
    expect(interruptedMessage()).toBe("interrupted");
    doneBeforeInterrupt("snapshot 20261206T000000000Z-00000001 (committed)");
    doneBeforeInterrupt("snapshot 20261206T000000000Z-00000002 (committed)");
    expect(interruptedMessage()).toBe("interrupted after snapshot 20261206T000000000Z-00000002 (committed)");
  });

  it("a graceful SIGTERM handler is set and cleared", () => {
    const fn = () => undefined;
    expect(terminateHandler()).toBeNull();
    onTerminate(fn);
    expect(terminateHandler()).toBe(fn);
    onTerminate(null);
    expect(terminateHandler()).toBeNull();
  });
});

describe("children stopped before folders are removed", () => {
  it("letInterruptsIn lets the step go on while nothing is being stopped", async () => {
    expect(interrupting()).toBe(false);
    await expect(letInterruptsIn()).resolves.toBeUndefined();
  });

  it("a tracked child leaves the count when it exits by itself", async () => {
    const c = stopOnInterrupt(spawn("true"));
    expect(liveChildren()).toBe(1);
    await exited(c);
    expect(liveChildren()).toBe(0);
  });

  it("stopChildren kills every tracked child (a group's grandchildren too) and waits for them; then a new child is killed at once and letInterruptsIn is 130", async () => {
    const plain = stopOnInterrupt(spawn("sleep", ["30"]));
    const pidFile = join(tmp, "grandchild.pid");
    const group = stopOnInterrupt(spawn("sh", ["-c", `sh -c 'echo $$ > ${pidFile}; exec sleep 30' & wait`], { detached: true, stdio: "ignore" }), { group: true });
    for (let i = 0; i < 500 && !(existsSync(pidFile) && readFileSync(pidFile, "utf8").trim()); i++) await new Promise((r) => setTimeout(r, 10));
    const grandchild = Number(readFileSync(pidFile, "utf8").trim());
    strays.push(grandchild, plain.pid!, group.pid!);
    expect(liveChildren()).toBe(2);
    const t0 = Date.now();
    await stopChildren();
    expect(Date.now() - t0).toBeLessThan(3000);
    expect(liveChildren()).toBe(0);
    expect(plain.signalCode).toBe("SIGKILL");
    expect(group.signalCode).toBe("SIGKILL");
    // SIGKILL sent to its group: its end may take a moment to show on a loaded machine
    for (let i = 0; i < 300 && !ended(grandchild); i++) await new Promise((r) => setTimeout(r, 10));
    expect(ended(grandchild)).toBe(true);
    expect(interrupting()).toBe(true);
    const late = stopOnInterrupt(spawn("sleep", ["30"]));
    strays.push(late.pid!);
    expect(await exited(late)).toBe("SIGKILL");
    const e = await letInterruptsIn().then(() => null, (x: unknown) => x);
    expect(e).toBeInstanceOf(AgentbakError);
    expect((e as AgentbakError).code).toBe(130);
  });
});

describe("asynchronous cleanups (a lease's release), in a module of their own", () => {
  it("are waited for, at most the bound; meanwhile the process is stopping: letInterruptsIn (before every commit point) is 130", async () => {
    vi.resetModules();
    const c = await import("../../src/cleanup.js");
    expect(c.runInterruptCleanups()).toBeNull(); // none registered: the caller exits at once
    let marked = false;
    c.onInterrupt(() => new Promise<void>((r) => setTimeout(() => ((marked = true), r()), 50)));
    c.onInterrupt(() => new Promise(() => undefined)); // one that never settles: the bound ends the wait
    const t0 = Date.now();
    const settling = c.runInterruptCleanups(400);
    expect(settling).not.toBeNull();
    expect(c.interrupting()).toBe(true);
    await expect(c.letInterruptsIn()).rejects.toMatchObject({ code: 130 });
    await settling;
    expect(marked).toBe(true);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(390);
    expect(Date.now() - t0).toBeLessThan(2000);
  });
});
