/**
 * Is the original runtime still running? Activation asks before letting a
 * restored agent act (runtime.liveness: a pid file, an HTTP URL, a command).
 * Only a definite "stopped" lets it through; an answer that cannot be read
 * counts as "unknown", which refuses like "alive" unless the operator
 * confirms the original is isolated. A command runs contained (own process
 * group, basic environment, killed whole at the timeout).
 */
import { basicEnv, runContained } from "../contained.js";
import type { Config } from "../config/schema.js";
import { readFileRegular } from "../fsutil.js";

export interface LivenessAnswer {
  how: "pidFile" | "http" | "command";
  state: "alive" | "stopped" | "unknown";
  detail: string;
}

type LivenessConfig = NonNullable<Config["runtime"]["liveness"]>;

/** Asks every configured check; `resolve` makes a config-relative path absolute. */
export async function checkLiveness(l: LivenessConfig, resolve: (p: string) => string): Promise<LivenessAnswer[]> {
  const out: LivenessAnswer[] = [];
  const ms = l.timeoutSeconds * 1000;
  if (l.pidFile) out.push(pidFileAnswer(resolve(l.pidFile)));
  if (l.http) {
    try {
      const r = await fetch(l.http, { redirect: "manual", signal: AbortSignal.timeout(ms) });
      await r.body?.cancel();
      out.push({ how: "http", state: "alive", detail: `${l.http} answered ${r.status}` });
    } catch (e) {
      const err = e as Error & { cause?: { code?: string } };
      const code = err.cause?.code;
      const stopped = code === "ECONNREFUSED" || code === "ENOTFOUND";
      out.push({ how: "http", state: stopped ? "stopped" : "unknown", detail: `${l.http}: ${stopped ? `${code} (nothing listens)` : err.name === "TimeoutError" ? `no answer within ${l.timeoutSeconds}s` : code ?? err.message}` });
    }
  }
  if (l.command) {
    // contained like a reconcile probe: its own process group, killed whole at the timeout; PATH, HOME and the like only
    const r = await runContained(l.command, { env: basicEnv(), timeoutMs: ms });
    const what = l.command.join(" ");
    const unknown = r.timedOut ? `no answer within ${l.timeoutSeconds}s` : r.startError ? `could not run (${r.startError})` : r.tooLarge ? "printed more than 64 KiB" : r.exitCode === null ? `killed by ${r.signal}` : null;
    out.push(unknown ? { how: "command", state: "unknown", detail: `${what}: ${unknown}` } : { how: "command", state: r.exitCode === 0 ? "alive" : "stopped", detail: `${what} exited ${r.exitCode}` });
  }
  return out;
}

function pidFileAnswer(file: string): LivenessAnswer {
  let text: string;
  try {
    text = readFileRegular(file, "utf8");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return { how: "pidFile", state: code === "ENOENT" ? "stopped" : "unknown", detail: `${file}: ${code === "ENOENT" ? "no pid file" : code}` };
  }
  const pid = Number(text.trim());
  if (!Number.isSafeInteger(pid) || pid <= 0) return { how: "pidFile", state: "unknown", detail: `${file} does not hold a pid` };
  try {
    process.kill(pid, 0);
    return { how: "pidFile", state: "alive", detail: `pid ${pid} (${file}) is running` };
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return code === "EPERM" ? { how: "pidFile", state: "alive", detail: `pid ${pid} (${file}) is running (another user's)` } : { how: "pidFile", state: "stopped", detail: `pid ${pid} (${file}) is not running` };
  }
}
