/** `agentbak mcp`: the agent interface as an MCP server on stdio, for the agent of one config, at the tier the operator chose. */
import { serveStdio } from "../agentapi/mcp.js";
import { AgentService } from "../agentapi/service.js";
import { localActor } from "../restore/request.js";
import { agentHandle, parseTier, serve, type ServeOptions } from "./serve.js";

export interface McpOptions {
  config?: string;
  /** read (default), checkpoint or restore-request; beats the config's agentInterface.tier */
  tier?: string;
  /** serve MCP over Streamable HTTP at http://HOST:PORT/mcp instead (the HTTP server, with bearer tokens) */
  listen?: string;
  log: ServeOptions["log"];
  onListening: ServeOptions["onListening"];
}

/**
 * Serves MCP until the client closes stdin (or, with --listen, until stopped).
 * @throws AgentbakError(2) for a bad tier or config, (12) without a signing key.
 */
export async function mcp(opts: McpOptions): Promise<void> {
  if (opts.listen) return serve({ ...opts, config: opts.config ? [opts.config] : undefined });
  const h = agentHandle(opts.config);
  const tier = parseTier(opts.tier ?? h.lc.config.agentInterface?.tier ?? "read");
  const service = new AgentService([h], opts.log);
  await serveStdio(service, { tenant: h.lc.config.agent.tenant, agent: h.lc.config.agent.id, tier, by: `mcp-stdio ${localActor()}`, transport: "mcp-stdio" }, opts.log);
}
