/** `agentbak serve` (and `agentbak mcp --listen`): the agent interface over HTTP, for the agents whose configs it is given. */
import { buildApp, isLoopback, parseListen, startHttp, type StatusRender } from "../agentapi/http.js";
import { onTerminate } from "../cleanup.js";
import { AgentService, backupLine, type AgentHandle } from "../agentapi/service.js";
import { TIERS, type Tier } from "../config/schema.js";
import { usageError } from "../errors.js";
import { context } from "./context.js";
import { resolve as resolvePath } from "node:path";
import { unchangedBackup, type BackupReceipt } from "../capture/backup.js";
import { backupInChild } from "./capture-child.js";
import { lastBackup } from "../capture/unchanged.js";
import { agentIdentities, loadHostFile, type HostAgent } from "../fleet/hostfile.js";
import { Scheduler } from "../fleet/scheduler.js";
import { hostId } from "../repository/lease.js";
import type { Repository } from "../repository/repository.js";

/** Where `serve` listens unless told otherwise. */
export const DEFAULT_LISTEN = "127.0.0.1:8377";

/**
 * The warm state the service keeps for the agent of one config: config,
 * trust, keys and the repository (with its catalog) are read once.
 * @throws AgentbakError(2) without a config, (12) without a signing key.
 */
export function agentHandle(config?: string, repositories?: Map<string, Promise<Repository>>): AgentHandle {
  const ctx = context({ config }, { repositories });
  if (!ctx.lc) throw usageError("the agent interface needs a config: pass -c FILE or run in the agent's folder (agentbak.json)");
  const key = ctx.signingKey();
  return {
    lc: ctx.lc,
    home: ctx.home,
    location: ctx.repoLocation!,
    get trust() {
      return ctx.trust;
    },
    repositories: ctx.repositories,
    repository: () => ctx.repository(),
    signingKey: key,
    principal: key.comment || "agentbak",
  };
}

/** Checks a --tier value. @throws AgentbakError(2) naming the tiers. */
export function parseTier(t: string): Tier {
  if (!(TIERS as readonly string[]).includes(t)) throw usageError(`--tier: ${JSON.stringify(t)} is not one of ${TIERS.join(", ")}`);
  return t as Tier;
}

export interface ServeOptions {
  config?: string[];
  /** a host file: back up each of its agents on its schedule, and serve them all */
  host?: string;
  listen?: string;
  /** the highest tier any token gets here (default: each token's own) */
  tier?: string;
  /** the status page without a token (GET /), on a loopback address only */
  ui?: boolean;
  /** the status page and /metrics (ui/status.ts) */
  render?: StatusRender;
  log: (line: string) => void;
  /** `page`: how GET / is opened here (serve: "ui" without a token, "token" with a read-tier one); absent where there is no page (mcp) */
  onListening: (info: { url: string; agents: string[]; page?: "ui" | "token" }) => void;
}

/**
 * Serves until SIGTERM (then the requests in flight finish and it returns: exit 0) or Ctrl-C (130).
 * @throws AgentbakError(2) for a bad --listen, --tier or config, --ui on an address that is not loopback, or when the address is taken.
 */
export async function serve(opts: ServeOptions): Promise<void> {
  if (opts.host && opts.config?.length) throw usageError("serve: pass -c FILE... or --host FILE, not both");
  const hostFile = opts.host ? loadHostFile(resolvePath(opts.host)) : null;
  if (hostFile) {
    for (const w of hostFile.warnings) opts.log(w);
    agentIdentities(hostFile.agents); // one config per agent, each naming a valid agent, before anything starts
    // leases and audit records name this host
    if (hostFile.hostId && !process.env.AGENTBAK_HOST_ID) process.env.AGENTBAK_HOST_ID = hostFile.hostId;
  }
  const configs = hostFile ? hostFile.agents.map((a) => a.config) : opts.config?.length ? opts.config : [undefined];
  // the agents of a host file that back up to one repository share its handle (and its store client)
  const repositories = hostFile ? new Map<string, Promise<Repository>>() : undefined;
  const handles = configs.map((c) => agentHandle(c, repositories));
  const service = new AgentService(handles, opts.log);
  const first = handles[0]!.lc.config.agentInterface;
  const { host, port } = parseListen(opts.listen ?? hostFile?.listen ?? first?.listen ?? DEFAULT_LISTEN);
  // without a token, anyone who can reach the address reads the page: only this host's users, never the network
  if (opts.ui && !isLoopback(host)) throw usageError(`--ui shows the status page without a token, so only on a loopback address (127.0.0.1, ::1, localhost); ${host} is not one (drop --ui and use a read-tier token)`);
  const maxTier = opts.tier ? parseTier(opts.tier) : "restore-request";
  const app = buildApp(service, { home: handles[0]!.home, listenHost: host, maxTier: hostFile ? tierOf(hostFile.agents, handles, maxTier) : maxTier, log: opts.log, render: opts.render, ui: opts.ui });
  const { url, close } = await startHttp(app, host, port);
  const schedule = hostFile ? backupOnSchedule(hostFile.agents, handles, hostFile.maxConcurrent, opts.log) : null;
  opts.onListening({ url, agents: service.served, page: opts.ui ? "ui" : "token" });
  await new Promise<void>((resolve) =>
    onTerminate(() => {
      onTerminate(null);
      opts.log(`SIGTERM: no new requests${schedule ? " or backups" : ""}; finishing those in flight`);
      void Promise.all([schedule?.stop(), close()]).then(() => resolve());
    }),
  );
}

/** The tier a token of an agent gets at most: the host file's tokens.maxTier for it, never above --tier. */
function tierOf(agents: readonly HostAgent[], handles: readonly AgentHandle[], cap: Tier): (a: { tenant: string; agent: string }) => Tier {
  const byAgent = new Map(handles.map((h, i) => [`${h.lc.config.agent.tenant}/${h.lc.config.agent.id}`, agents[i]!.maxTier]));
  return (a) => {
    const t = byAgent.get(`${a.tenant}/${a.agent}`) ?? "read";
    return TIERS.indexOf(t) < TIERS.indexOf(cap) ? t : cap;
  };
}

/** The receipt of an agent's last snapshot when nothing changed since (no lease, no capture module loaded), else null (capture it). */
async function idle(h: AgentHandle): Promise<BackupReceipt | null> {
  try {
    return await unchangedBackup(h.lc, { repo: await h.repository(), trust: h.trust, home: h.home, signingKey: h.signingKey, principal: h.principal });
  } catch {
    return null; // the repository unreachable, a file unreadable: the backup process says what (or spools)
  }
}

/**
 * Backs up each agent of a host file on its schedule (fleet/scheduler.ts): at
 * most maxConcurrent at once, an unchanged agent answered by the unchanged
 * check here (no lease, no bundle), a changed one captured by `agentbak
 * backup` in a child process (capture-child.ts), so the capture's memory is
 * returned when it exits. One line per run that wrote or failed.
 * @returns stop(): no new runs; resolves when those running have finished.
 */
function backupOnSchedule(agents: readonly HostAgent[], handles: readonly AgentHandle[], maxConcurrent: number, log: (line: string) => void): { stop(): Promise<void> } {
  const byKey = new Map(handles.map((h, i) => [agents[i]!.config, h]));
  const last = (h: AgentHandle) => lastBackup<{ created_at?: string }>(h.home, h.location, { tenant: h.lc.config.agent.tenant, agent: h.lc.config.agent.id })?.receipt.created_at;
  const scheduler = new Scheduler(
    agents.map((a) => ({ key: a.config, everyMs: a.everyMs, jitterMs: a.jitterMs, lastRunAt: ((t) => (t ? Date.parse(t) : null))(last(byKey.get(a.config)!)) })),
    { maxConcurrent, seed: hostId(), now: Date.now() },
  );
  const running = new Set<Promise<void>>();
  let stopped = false;
  let timer: NodeJS.Timeout | null = null;
  const runOne = async (key: string) => {
    const h = byKey.get(key)!;
    const who = `${h.lc.config.agent.tenant}/${h.lc.config.agent.id}`;
    let ok = false;
    try {
      // an idle agent is answered here (a stat-level read); a changed one is captured in a child process
      const quiet = await idle(h);
      // a SIGTERM that came during the unchanged check starts no capture: stop() waits for those already running only
      if (!quiet && stopped) return log(`backup ${who}: not started: the server is stopping`);
      const r = quiet ?? (await backupInChild(h.lc.path));
      ok = true;
      const line = backupLine(who, r);
      if (line) log(line);
    } catch (e) {
      log(`backup ${who}: failed: ${(e as Error).message}`);
    } finally {
      scheduler.finish(key, Date.now(), ok);
    }
  };
  const tick = () => {
    timer = null;
    if (stopped) return;
    for (const key of scheduler.take(Date.now())) {
      const p = runOne(key).finally(() => {
        running.delete(p);
        arm();
      });
      running.add(p);
    }
    arm();
  };
  const arm = () => {
    if (stopped || timer) return;
    const next = scheduler.nextWake();
    if (next === null) return; // every slot busy: a run's end arms it again
    timer = setTimeout(tick, Math.max(0, Math.min(next - Date.now(), 60_000)));
  };
  arm();
  return {
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await Promise.allSettled([...running]);
    },
  };
}
