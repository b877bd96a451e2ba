/**
 * The MCP adapter: one tool per service operation, listed only when the
 * caller's tier allows it, with input schemas from the service's zod schemas
 * and honest annotations. Served over stdio (`agentbak mcp`) or, stateless,
 * over Streamable HTTP at /mcp of the HTTP server.
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js";
import { JSONRPCMessageSchema, type JSONRPCMessage, type ToolAnnotations } from "@modelcontextprotocol/sdk/types.js";
import { isUtf8 } from "node:buffer";
import { PassThrough } from "node:stream";
import { AgentbakError, Exit } from "../errors.js";
import { TOOL_VERSION } from "../version.js";
import { allows, INPUTS, MAX_MESSAGE_BYTES, NEEDS, type AgentService, type Caller, type Operation } from "./service.js";

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

/** Why a refused line was refused: too large, not JSON, or not one JSON-RPC 2.0 message. */
const TOO_LARGE = `a message larger than ${MAX_MESSAGE_BYTES / 1024} KiB: not read (one JSON-RPC message per line, at most ${MAX_MESSAGE_BYTES / 1024} KiB)`;

/**
 * Serves MCP on stdin/stdout until the client closes stdin. Lines are framed
 * here, not by the SDK (which buffers a line up to 10 MiB, then closes: the
 * server exited 0 in silence), and each one that is not a JSON-RPC 2.0
 * message the SDK would take is answered with the JSON-RPC error (-32700 not
 * JSON, -32600 too large, a batch, an id that is not a string or an integer;
 * with its id when it has one of those) and one line to `log`, never quoting
 * the agent's bytes. A line over MAX_MESSAGE_BYTES (HTTP's body limit) is not
 * kept past that size.
 */
export async function serveStdio(service: AgentService, caller: Caller, log: (line: string) => void): Promise<void> {
  const server = mcpServer(service, caller);
  const lines = new PassThrough();
  const transport = new StdioServerTransport(lines, process.stdout);
  const closed = new Promise<void>((resolve) => {
    transport.onclose = resolve;
  });
  // the requests handed to the SDK and not yet answered: once stdin ends, each is answered before the transport closes
  const open = new Map<string | number, number>();
  let drained: () => void = () => undefined;
  const settle = (id: string | number) => {
    const n = (open.get(id) ?? 1) - 1;
    if (n > 0) open.set(id, n);
    else open.delete(id);
    if (!open.size) drained();
  };
  const send = transport.send.bind(transport);
  transport.send = async (m: JSONRPCMessage) => {
    await send(m);
    if (!("method" in m) && "id" in m && m.id !== undefined && m.id !== null) settle(m.id);
  };
  const refuse = (code: number, why: string, id: string | number | null = null) => {
    log(`mcp: refused a message on stdin: ${why}`);
    process.stdout.write(JSON.stringify({ jsonrpc: "2.0", id, error: { code, message: why } }) + "\n");
  };
  const message = (bytes: Buffer) => {
    // JSON is UTF-8: bytes that are not are refused, never read with U+FFFD in their place
    if (!isUtf8(bytes)) return refuse(-32700, "not UTF-8 (one JSON-RPC message per line, in UTF-8)");
    const text = bytes.toString("utf8").replace(/\r$/, "");
    if (!text.trim()) return;
    let m: unknown;
    try {
      m = JSON.parse(text);
    } catch {
      return refuse(-32700, "not JSON (one JSON-RPC message per line)");
    }
    const parsed = JSONRPCMessageSchema.safeParse(m);
    if (parsed.success) {
      const p = parsed.data;
      if ("method" in p && "id" in p) open.set(p.id, (open.get(p.id) ?? 0) + 1);
      // a cancelled request is never answered (the SDK drops its result): not waited for
      if ("method" in p && p.method === "notifications/cancelled" && !("id" in p)) {
        const id = (p.params as { requestId?: unknown } | undefined)?.requestId;
        if ((typeof id === "string" || typeof id === "number") && open.has(id)) settle(id);
      }
      return void lines.write(text + "\n");
    }
    const id = (m as { id?: unknown } | null)?.id;
    const usable = typeof id === "string" || Number.isSafeInteger(id) ? (id as string | number) : null;
    refuse(-32600, Array.isArray(m) ? "a batch: send one JSON-RPC message per line" : "not a JSON-RPC 2.0 message (an id is a string or an integer)", usable);
  };
  // the line being read: its pieces, its size, and whether it is already too large (then its bytes are dropped); a
  // line's CR before its LF is not counted, so a 64 KiB message is read whichever line ending the client uses
  let pieces: Buffer[] = [];
  let size = 0;
  process.stdin.on("data", (chunk: Buffer) => {
    for (let at = 0; ; ) {
      const nl = chunk.indexOf(10, at);
      const end = nl === -1 ? chunk.length : nl;
      size += end - at;
      if (size > MAX_MESSAGE_BYTES + 1) pieces = [];
      else pieces.push(chunk.subarray(at, end));
      if (nl === -1) break;
      const whole = size <= MAX_MESSAGE_BYTES + 1 ? Buffer.concat(pieces) : null;
      if (!whole || whole.length - (whole.at(-1) === 13 ? 1 : 0) > MAX_MESSAGE_BYTES) refuse(-32600, TOO_LARGE);
      else message(whole);
      [pieces, size, at] = [[], 0, nl + 1];
    }
  });
  process.stdin.once("end", () => {
    if (size) log(`mcp: stdin closed in the middle of a message (${size} bytes after the last newline): not read`);
    lines.end();
    const close = () => void server.close();
    if (!open.size) return close();
    drained = close;
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
