/**
 * The MCP adapter: one tool per service operation, listed only when the
 * caller's tier allows it, with input schemas from the service's zod schemas
 * and honest annotations. Served over stdio (`agentbak mcp`) or, stateless,
 * over Streamable HTTP at /mcp of the HTTP server.
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js";
import type { ToolAnnotations } from "@modelcontextprotocol/sdk/types.js";
import { AgentbakError, Exit } from "../errors.js";
import { TOOL_VERSION } from "../version.js";
import { allows, INPUTS, NEEDS, type AgentService, type Caller, type Operation } from "./service.js";

// reading never changes anything; the two writes only add (a snapshot, a request) and without a key repeat
const READ: ToolAnnotations = { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false };
const ADD: ToolAnnotations = { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false };

const TOOLS: Record<Operation, { title: string; description: string; annotations: ToolAnnotations }> = {
  create_backup: {
    title: "Take a checkpoint",
    description:
      "Snapshot this agent's state (databases, workspace, credential references) into a signed, encrypted bundle. " +
      "A checkpoint barrier: it returns once the state is committed (or spooled locally when the repository is unreachable) " +
      "or cleanly refused. Pass idempotency_key to make a retry safe.",
    annotations: ADD,
  },
  get_backup: { title: "Status of one snapshot", description: "Whether a snapshot is committed or spooled, and whether it verifies.", annotations: READ },
  list_snapshots: { title: "List snapshots", description: "This agent's snapshots, oldest first, with their verification status.", annotations: READ },
  verify_snapshot: {
    title: "Verify a snapshot",
    description: "Check a snapshot's signature, manifest, payload digest and incremental chain (the contents stay encrypted).",
    annotations: READ,
  },
  plan_restore: { title: "Plan a restore", description: "What restoring a snapshot would write and what policy says; nothing is written.", annotations: READ },
  request_restore: {
    title: "Ask for a restore",
    description:
      "Record a pending restore request for an operator to approve or deny (agentbak approve / deny). It never restores by itself; " +
      "follow it with get_restore_request.",
    annotations: ADD,
  },
  get_restore_request: {
    title: "Status of a restore request",
    description: "pending, approved, denied (with the operator's reason), restored or failed.",
    annotations: READ,
  },
};

/** An MCP server for one caller, with the tools its tier allows. */
export function mcpServer(service: AgentService, caller: Caller): McpServer {
  const server = new McpServer({ name: "agentbak", version: TOOL_VERSION });
  for (const op of Object.keys(TOOLS) as Operation[]) {
    if (!allows(caller.tier, NEEDS[op])) continue;
    server.registerTool(op, { ...TOOLS[op], inputSchema: INPUTS[op] }, async (args: unknown) => {
      try {
        const r = (await service.call(caller, op, args)) as unknown as Record<string, unknown>;
        return { content: [{ type: "text" as const, text: JSON.stringify(r, null, 2) }], structuredContent: r };
      } catch (e) {
        const err = e instanceof AgentbakError ? e : new AgentbakError(Exit.failure, (e as Error).message);
        return { isError: true, content: [{ type: "text" as const, text: `agentbak: ${err.message} (exit status ${err.code})` }], structuredContent: { error: { code: err.code, message: err.message } } };
      }
    });
  }
  return server;
}

/** Serves MCP on stdin/stdout until the client closes stdin. */
export async function serveStdio(service: AgentService, caller: Caller): Promise<void> {
  const server = mcpServer(service, caller);
  const transport = new StdioServerTransport();
  const closed = new Promise<void>((resolve) => {
    transport.onclose = resolve;
    process.stdin.once("end", () => void server.close());
  });
  await server.connect(transport);
  await closed;
}

/** Answers one Streamable HTTP request (stateless: a server and transport per request, for the caller the token names). */
export async function mcpOverHttp(service: AgentService, caller: Caller, req: Request, parsedBody: unknown): Promise<Response> {
  const server = mcpServer(service, caller);
  const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  await server.connect(transport);
  try {
    return await transport.handleRequest(req, { parsedBody });
  } finally {
    void server.close();
  }
}
