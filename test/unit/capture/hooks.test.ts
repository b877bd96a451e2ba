// Pre and post hooks: run in order in the agent's folder, stop at the first failure naming it and its stderr (exit 1), and a timeout kills the hook's whole process group.
import { afterAll, describe, expect, it } from "vitest";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runHooks } from "../../../src/capture/instant.js";
import { AgentbakError } from "../../../src/errors.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-hooks-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const failure = async (p: Promise<void>) => p.then(() => "ran", (e: AgentbakError) => [e.code, e.message]);
/** running (a zombie nobody reaped yet, as under a container's init, is dead) */
const alive = (pid: number) => {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
};

describe("runHooks", () => {
  it("runs each command in order, in the given folder, with AGENTBAK_HOOK set to the phase", async () => {
    await runHooks(["echo one >> log", 'echo "$AGENTBAK_HOOK $(pwd)" >> log'], tmp, 10, "pre");
    expect(readFileSync(join(tmp, "log"), "utf8")).toBe(`one\npre ${tmp}\n`);
  });

  it("stops at the first failing hook: exit 1 naming it, its exit code and the first line of its stderr; later hooks do not run", async () => {
    const r = await failure(runHooks(["true", "echo 'db busy' >&2; echo more >&2; exit 3", "touch after"], tmp, 10, "post"));
    expect(r).toEqual([1, `post hook "echo 'db busy' >&2; echo more >&2; exit 3" exited 3: db busy`]);
    expect(existsSync(join(tmp, "after"))).toBe(false);
  });

  it("a hook killed by a signal says so", async () => {
    expect(await failure(runHooks(["kill -TERM $$"], tmp, 10, "pre"))).toEqual([1, 'pre hook "kill -TERM $$" exited SIGTERM']);
  });

  it("a hook over its timeout is killed with everything it started, and named as timed out", async () => {
    const pidFile = join(tmp, "grandchild.pid");
    const t0 = Date.now();
    const r = await failure(runHooks([`sleep 30 & echo $! > ${pidFile}; wait`], tmp, 0.5, "pre"));
    expect(r).toEqual([1, `pre hook "sleep 30 & echo $! > ${pidFile}; wait" timed out after 0.5s`]);
    expect(Date.now() - t0).toBeLessThan(5000);
    const pid = Number(readFileSync(pidFile, "utf8"));
    for (let i = 0; i < 50 && alive(pid); i++) await new Promise((r) => setTimeout(r, 20));
    expect(alive(pid)).toBe(false);
  });

  it("no hooks: nothing runs", async () => {
    await expect(runHooks([], join(tmp, "missing-dir"), 1, "pre")).resolves.toBeUndefined();
  });
});
