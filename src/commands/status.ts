/** `agentbak status`: is this agent (or, with --all, every agent of the repository) fine? One gather, shared with the page and /metrics. */
import { gatherStatus, statusTarget, type StatusReport } from "../status/gather.js";
import { usageError } from "../errors.js";
import { context, type GlobalOpts } from "./context.js";

export interface StatusOptions extends GlobalOpts {
  all?: boolean;
  fresh?: boolean;
  agent?: string;
  tenant?: string;
}

/**
 * The status of the config's agent (or --agent/--tenant), or of every agent with --all.
 * @throws AgentbakError(2) when no agent can be told, (10) without a repository.
 */
export async function status(opts: StatusOptions): Promise<StatusReport> {
  const ctx = context(opts);
  const repo = await ctx.repository();
  const cfg = ctx.lc?.config;
  const f = ctx.agentFilter(opts);
  const mine = cfg && f.agent === cfg.agent.id && f.tenant === cfg.agent.tenant ? [statusTarget(cfg)] : [];
  if (!opts.all && !mine.length) {
    if (!f.agent || !f.tenant) throw usageError("which agent? pass --all, --agent and --tenant, or a config");
    mine.push({ tenant: f.tenant, agent: f.agent, fullEvery: null });
  }
  return gatherStatus({ repo, location: ctx.repoLocation!, trust: ctx.trust, home: ctx.home, targets: mine, all: opts.all, fresh: opts.fresh, signer: opts.all ? ctx.maybeSigningKey() : null });
}
