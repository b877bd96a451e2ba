/** The agent's pre and post hooks: shell commands run around the capture, each in its own process group. */
import { execa } from "execa";
import { AgentbakError, Exit } from "../errors.js";

/**
 * Runs `cmds` one after the other in `cwd`.
 * @throws AgentbakError(1) naming the hook that failed or timed out, with the first line of its stderr.
 */
export async function runHooks(cmds: string[], cwd: string, timeoutSeconds: number, phase: "pre" | "post"): Promise<void> {
  for (const cmd of cmds) {
    // own process group, so a timeout kills the hook and everything it started
    const child = execa(cmd, { shell: true, cwd, detached: true, reject: false, env: { AGENTBAK_HOOK: phase }, stdio: ["ignore", "ignore", "pipe"] });
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch {
        /* already gone */
      }
    }, timeoutSeconds * 1000);
    const r = await child;
    clearTimeout(timer);
    if (timedOut || r.exitCode !== 0) {
      const first = String(r.stderr ?? "").trim().split("\n")[0];
      const why = timedOut ? `timed out after ${timeoutSeconds}s` : `exited ${r.exitCode ?? r.signal ?? "?"}${first ? ": " + first : ""}`;
      throw new AgentbakError(Exit.failure, `${phase} hook "${cmd}" ${why}`);
    }
  }
}