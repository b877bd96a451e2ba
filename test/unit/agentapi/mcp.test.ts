/**
 * The MCP adapter (src/agentapi/mcp.ts) through the SDK's own client over an
 * in-memory transport: the tools listed are those the caller's tier allows,
 * each with the service's strict input schema and honest annotations (reads
 * read-only and idempotent, the two writes neither); a refused call is an
 * MCP tool error carrying agentbak's exit status, never a protocol failure.
 * MCP over HTTP is test/unit/agentapi/http.test.ts's (limits) and
 * test/e2e/mcp.test.ts's (calls on a real repository).
 */
import { describe, expect, it } from "vitest";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { mcpServer } from "../../../src/agentapi/mcp.js";
import { AgentService, type Caller, type Tier } from "../../../src/agentapi/service.js";

const caller = (tier: Tier): Caller => ({ tenant: "acme", agent: "billing-agent", tier, by: "mcp-stdio test@host", transport: "mcp-stdio" });
async function connect(tier: Tier) {
  const [a, b] = InMemoryTransport.createLinkedPair();
  const server = mcpServer(new AgentService([]), caller(tier));
  await server.connect(a);
  const client = new Client({ name: "test", version: "0" });
  await client.connect(b);
  return { client, close: async () => (await client.close(), await server.close()) };
}
const READS = ["get_backup", "get_restore_request", "list_snapshots", "plan_restore", "verify_snapshot"];

describe("tools by tier", () => {
  it.each<[Tier, string[]]>([
    ["read", READS],
    ["checkpoint", [...READS, "create_backup"].sort()],
    ["restore-request", [...READS, "create_backup", "request_restore"].sort()],
  ])("%s lists only what it may call", async (tier, names) => {
    const c = await connect(tier);
    try {
      const { tools } = await c.client.listTools();
      expect(tools.map((t) => t.name).sort()).toEqual(names);
    } finally {
      await c.close();
    }
  });

  it("reads are annotated read-only and idempotent; the writes only add (not destructive, not idempotent)", async () => {
    const c = await connect("restore-request");
    try {
      const { tools } = await c.client.listTools();
      for (const t of tools) {
        const write = t.name === "create_backup" || t.name === "request_restore";
        expect(t.annotations, t.name).toEqual({ readOnlyHint: !write, destructiveHint: false, idempotentHint: !write, openWorldHint: false });
        expect(t.description!.length, t.name).toBeGreaterThan(20);
      }
    } finally {
      await c.close();
    }
  });

  it("input schemas are the service's: strict, with their required fields", async () => {
    const c = await connect("restore-request");
    try {
      const byName = Object.fromEntries((await c.client.listTools()).tools.map((t) => [t.name, t.inputSchema as { required?: string[]; additionalProperties?: boolean; properties?: object }]));
      expect(byName.request_restore!.required).toEqual(["reason"]);
      expect(byName.get_backup!.required).toEqual(["snapshot_id"]);
      expect(byName.request_restore!.additionalProperties).toBe(false);
      expect(Object.keys(byName.create_backup!.properties!).sort()).toEqual(["idempotency_key", "incremental", "label"]);
    } finally {
      await c.close();
    }
  });
});

describe("calls", () => {
  it("a refused call is a tool error with agentbak's exit status, in text and structured content", async () => {
    const c = await connect("read");
    try {
      const r = (await c.client.callTool({ name: "list_snapshots", arguments: {} })) as { isError?: boolean; content: { text: string }[]; structuredContent?: unknown };
      expect(r.isError).toBe(true);
      expect(r.content[0]!.text).toBe("agentbak: this server does not serve agent acme/billing-agent (exit status 14)");
      expect(r.structuredContent).toEqual({ error: { code: 14, message: "this server does not serve agent acme/billing-agent" } });
    } finally {
      await c.close();
    }
  });

  it("a tool the tier does not list can not be called", async () => {
    const c = await connect("read");
    try {
      const r = await c.client.callTool({ name: "create_backup", arguments: {} }).then((x) => x as { isError?: boolean; content: { text: string }[] }, (e: Error) => ({ isError: true, content: [{ text: e.message }] }));
      expect(r.isError).toBe(true);
      expect(r.content[0]!.text).toMatch(/create_backup/);
      expect(r.content[0]!.text).toMatch(/not found/i);
    } finally {
      await c.close();
    }
  });
});
