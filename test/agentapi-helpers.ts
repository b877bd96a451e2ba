// Helpers for the agent interface's tests: the real `agentbak serve` / `agentbak mcp` processes,
// an MCP client from the SDK, tokens made with the real binary, and HTTP over real sockets.
import { execa, type ResultPromise } from "execa";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { BIN, json, type TestAgent } from "./helpers.js";
// @ts-expect-error plain JS fixture
import { generateAgent } from "../fixtures/agent/generate.js";

export interface Server {
  url: string;
  proc: ResultPromise;
  /** what the server wrote to stderr so far (its request log) */
  log(): string;
  stop(): Promise<void>;
}

/** Starts `agentbak serve` on a free port of 127.0.0.1 and waits until it listens. */
export async function startServer(a: TestAgent, args: string[] = [], env: Record<string, string> = {}): Promise<Server> {
  const proc = execa("node", [BIN, "serve", "--listen", "127.0.0.1:0", ...args], { cwd: a.dir, env: { ...a.env, NO_COLOR: "1", ...env }, reject: false, stdin: "ignore" });
  let err = "";
  const url = await new Promise<string>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`server did not start: ${err}`)), 30_000);
    proc.stderr!.on("data", (d: Buffer) => {
      err += d;
      const m = err.match(/agent interface on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) {
        clearTimeout(t);
        resolve(m[1]!);
      }
    });
    void proc.then((r) => reject(new Error(`server exited ${r.exitCode}: ${err}`)));
  });
  return {
    url,
    proc,
    log: () => err,
    async stop() {
      proc.kill("SIGTERM");
      await proc;
    },
  };
}

/** A token made with `agentbak token create`. */
export async function makeToken(a: TestAgent, tenant: string, agent: string, tier: string): Promise<{ id: string; token: string }> {
  const r = await a.run(["token", "create", "--tenant", tenant, "--agent", agent, "--tier", tier, "--json"]);
  if (r.code !== 0) throw new Error(`token create: ${r.stderr}`);
  return json(r);
}

export interface Answer {
  status: number;
  headers: Headers;
  body: any;
}

/** One HTTP request to the server with a bearer token (or none). */
export async function api(url: string, token: string | null, method: string, path: string, o: { body?: unknown; raw?: string; headers?: Record<string, string> } = {}): Promise<Answer> {
  const headers: Record<string, string> = { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(o.body !== undefined || o.raw !== undefined ? { "content-type": "application/json" } : {}), ...o.headers };
  const r = await fetch(url + path, { method, headers, body: o.raw ?? (o.body === undefined ? undefined : JSON.stringify(o.body)) });
  const text = await r.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: r.status, headers: r.headers, body };
}

/** An MCP client of `agentbak mcp` running as a real child process on stdio. */
export async function mcpStdio(a: TestAgent, args: string[], env: Record<string, string> = {}): Promise<Client> {
  const transport = new StdioClientTransport({ command: "node", args: [BIN, "mcp", ...args], cwd: a.dir, env: { ...(process.env as Record<string, string>), ...a.env, NO_COLOR: "1", ...env }, stderr: "pipe" });
  const client = new Client({ name: "agentbak-test", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

/** An MCP client of the server's /mcp endpoint over Streamable HTTP. */
export async function mcpHttp(url: string, token: string): Promise<Client> {
  const client = new Client({ name: "agentbak-test", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url + "/mcp"), { requestInit: { headers: { authorization: `Bearer ${token}` } } }));
  return client;
}

/** The result of one MCP tool call: structured content, or the error text. */
export async function tool(c: Client, name: string, args: Record<string, unknown> = {}): Promise<{ isError: boolean; data: any; text: string }> {
  const r = (await c.callTool({ name, arguments: args })) as { isError?: boolean; structuredContent?: unknown; content: { type: string; text: string }[] };
  return { isError: Boolean(r.isError), data: r.structuredContent, text: r.content.map((x) => x.text).join("\n") };
}

/**
 * A second agent of another tenant (same agent id, same keys) whose config
 * points at `a`'s repository: two tenants in one repository, for isolation tests.
 */
export function otherTenant(a: TestAgent, tenant: string): { dir: string; config: string } {
  const dir = join(a.tmp, `agent-${tenant}`);
  const g = generateAgent(dir, { recipient: a.recipient, sizeMb: 1, seed: 7, tenant });
  const cfg = JSON.parse(readFileSync(g.config, "utf8"));
  writeFileSync(g.config, JSON.stringify({ ...cfg, repository: a.repo }, null, 2));
  return { dir, config: g.config };
}
