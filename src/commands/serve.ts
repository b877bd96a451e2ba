/** `agentbak serve` (and `agentbak mcp --listen`): the agent interface over HTTP, for the agents whose configs it is given. */
import { buildApp, parseListen, startHttp } from "../agentapi/http.js";
import { AgentService, type AgentHandle } from "../agentapi/service.js";
import { TIERS, type Tier } from "../config/schema.js";
import { usageError } from "../errors.js";
import { context } from "./context.js";

/** Where `serve` listens unless told otherwise. */
export const DEFAULT_LISTEN = "127.0.0.1:8377";

/**
 * The warm state the service keeps for the agent of one config: config,
 * trust, keys and the repository (with its catalog) are read once.
 * @throws AgentbakError(2) without a config, (12) without a signing key.
 */
export function agentHandle(config?: string): AgentHandle {
  const ctx = context({ config });
  if (!ctx.lc) throw usageError("the agent interface needs a config: pass -c FILE or run in the agent's folder (agentbak.json)");
  const key = ctx.signingKey();
  return {
    lc: ctx.lc,
    home: ctx.home,
    location: ctx.repoLocation!,
    get trust() {
      return ctx.trust;
    },
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
  listen?: string;
  /** the highest tier any token gets here (default: each token's own) */
  tier?: string;
  log: (line: string) => void;
  onListening: (info: { url: string; agents: string[] }) => void;
}

/**
 * Serves until the process is stopped (SIGINT/SIGTERM).
 * @throws AgentbakError(2) for a bad --listen, --tier or config, or when the address is taken.
 */
export async function serve(opts: ServeOptions): Promise<never> {
  const configs = opts.config?.length ? opts.config : [undefined];
  const handles = configs.map((c) => agentHandle(c));
  const service = new AgentService(handles, opts.log);
  const first = handles[0]!.lc.config.agentInterface;
  const { host, port } = parseListen(opts.listen ?? first?.listen ?? DEFAULT_LISTEN);
  const maxTier = opts.tier ? parseTier(opts.tier) : "restore-request";
  const app = buildApp(service, { home: handles[0]!.home, listenHost: host, maxTier, log: opts.log });
  const { url } = await startHttp(app, host, port);
  opts.onListening({ url, agents: service.served });
  return new Promise<never>(() => undefined);
}
