/** `agentbak serve` (and `agentbak mcp --listen`): the agent interface over HTTP, for the agents whose configs it is given. */
import { buildApp, isLoopback, parseListen, startHttp, type StatusRender } from "../agentapi/http.js";
import { onTerminate } from "../cleanup.js";
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
  const configs = opts.config?.length ? opts.config : [undefined];
  const handles = configs.map((c) => agentHandle(c));
  const service = new AgentService(handles, opts.log);
  const first = handles[0]!.lc.config.agentInterface;
  const { host, port } = parseListen(opts.listen ?? first?.listen ?? DEFAULT_LISTEN);
  // without a token, anyone who can reach the address reads the page: only this host's users, never the network
  if (opts.ui && !isLoopback(host)) throw usageError(`--ui shows the status page without a token, so only on a loopback address (127.0.0.1, ::1, localhost); ${host} is not one (drop --ui and use a read-tier token)`);
  const maxTier = opts.tier ? parseTier(opts.tier) : "restore-request";
  const app = buildApp(service, { home: handles[0]!.home, listenHost: host, maxTier, log: opts.log, render: opts.render, ui: opts.ui });
  const { url, close } = await startHttp(app, host, port);
  opts.onListening({ url, agents: service.served, page: opts.ui ? "ui" : "token" });
  await new Promise<void>((resolve) =>
    onTerminate(() => {
      onTerminate(null);
      opts.log("SIGTERM: no new requests; finishing those in flight");
      void close().then(resolve);
    }),
  );
}
