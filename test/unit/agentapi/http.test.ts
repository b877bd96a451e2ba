/**
 * The HTTP adapter (src/agentapi/http.ts) answering real requests through
 * the app (no socket): on a loopback server a Host other than its own is 421
 * and a page of another origin 403, both before any token is read; a missing
 * or unknown token 401 with WWW-Authenticate; a body over 64 KiB 413; an MCP
 * batch over 10 messages 400; an unknown route 404; errors as
 * {"error": {code, message}} with the status their exit code maps to; one log
 * line per request, the caller's path quoted so it can not forge a line.
 * Operations on a real repository are test/e2e/http.test.ts's.
 */
import { afterAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buildApp, httpStatus, isLoopback, MAX_BODY_BYTES, MAX_MCP_MESSAGES, parseListen } from "../../../src/agentapi/http.js";
import { AgentService } from "../../../src/agentapi/service.js";
import { createToken } from "../../../src/agentapi/tokens.js";
import { AgentbakError, ConflictError, Exit, UnreachableError } from "../../../src/errors.js";

const home = mkdtempSync(join(tmpdir(), "agentbak-http-"));
afterAll(() => rmSync(home, { recursive: true, force: true }));
const PORT = 8377;
const lines: string[] = [];
const app = (listenHost = "127.0.0.1") => buildApp(new AgentService([]), { home, listenHost, maxTier: "restore-request", log: (l) => lines.push(l) });
const { token } = createToken(home, { tenant: "acme", agent: "billing-agent", tier: "checkpoint" });
const send = async (path: string, o: { method?: string; host?: string; origin?: string; token?: string; body?: string; listen?: string } = {}) => {
  const headers: Record<string, string> = { host: o.host ?? `127.0.0.1:${PORT}` };
  if (o.origin) headers.origin = o.origin;
  if (o.token) headers.authorization = `Bearer ${o.token}`;
  if (o.body !== undefined) headers["content-type"] = "application/json";
  const r = await app(o.listen).request(`http://127.0.0.1:${PORT}${path}`, { method: o.method ?? "GET", headers, body: o.body }, { incoming: { socket: { localPort: PORT } } });
  const text = await r.text();
  let json: { error?: { code: number; message: string } } & Record<string, unknown> = {};
  try {
    json = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: r.status, headers: r.headers, json, text };
};

describe("requests not for this server", () => {
  it("a Host other than its address or localhost with its port is 421 (14), before any token is read", async () => {
    for (const host of [`evil.example:${PORT}`, "127.0.0.1:80", `127.0.0.2:${PORT}`, ""]) {
      const r = await send("/v1/snapshots", { host, token });
      expect(r.status, host).toBe(421);
      expect(r.json.error?.code).toBe(14);
      expect(r.json.error?.message).toMatch(/^refused: Host ".*" is not this server \(127\.0\.0\.1:8377 or localhost:8377\)/);
    }
    expect((await send("/v1/snapshots", { host: `localhost:${PORT}` })).status).toBe(401);
  });

  it("a browser's Origin other than the server's own is 403; its own origin goes on to the token check", async () => {
    for (const origin of ["http://evil.example", "null", `https://127.0.0.1:${PORT}`, "not a url"]) {
      const r = await send("/v1/snapshots", { origin, token });
      expect(r.status, origin).toBe(403);
      expect(r.json.error?.message).toMatch(/^refused: a request from origin /);
    }
    expect((await send("/v1/snapshots", { origin: `http://127.0.0.1:${PORT}` })).status).toBe(401);
  });

  it("a server on another address takes any Host, but still refuses another origin", async () => {
    expect((await send("/v1/snapshots", { listen: "0.0.0.0", host: "agents.internal:8377" })).status).toBe(401);
    expect((await send("/v1/snapshots", { listen: "0.0.0.0", host: "agents.internal:8377", origin: "http://evil.example" })).status).toBe(403);
  });
});

describe("tokens, limits and errors", () => {
  it("no token or an unknown one: 401 with WWW-Authenticate; a valid token for an agent not served: 403 (14)", async () => {
    const none = await send("/v1/snapshots");
    expect([none.status, none.headers.get("www-authenticate"), none.json.error]).toEqual([401, 'Bearer realm="agentbak"', { code: 2, message: "missing bearer token (Authorization: Bearer <token>)" }]);
    const bad = await send("/v1/snapshots", { token: "abk_0000000000000000_" + "x".repeat(43) });
    expect([bad.status, bad.json.error?.message]).toEqual([401, "invalid or revoked token"]);
    const ok = await send("/v1/snapshots", { token });
    expect([ok.status, ok.json]).toEqual([403, { error: { code: 14, message: "this server does not serve agent acme/billing-agent" } }]);
  });

  it("a body over 64 KiB is 413 (2) and closes the connection", async () => {
    const r = await send("/v1/backups", { method: "POST", token, body: JSON.stringify({ label: "x".repeat(MAX_BODY_BYTES) }) });
    expect([r.status, r.json.error?.code, r.headers.get("connection")]).toEqual([413, 2, "close"]);
  });

  it("a body the schema refuses is 400 (2) naming the field", async () => {
    const r = await send("/v1/restores", { method: "POST", token, body: JSON.stringify({ snapshot_id: "x", reason: "r" }) });
    expect(r.status).toBe(400);
    expect(r.json.error?.code).toBe(2);
    expect(r.json.error?.message).toContain("snapshot_id");
  });

  it("an MCP request of more than 10 messages, or not JSON, is 400 before any call", async () => {
    const batch = Array.from({ length: MAX_MCP_MESSAGES + 1 }, (_, i) => ({ jsonrpc: "2.0", id: i, method: "tools/list" }));
    const r = await send("/mcp", { method: "POST", token, body: JSON.stringify(batch) });
    expect([r.status, r.json.error?.message]).toEqual([400, `an MCP request carries at most 10 JSON-RPC messages (each call is an operation of its own); this batch has 11`]);
    const nj = await send("/mcp", { method: "POST", token, body: "{not json" });
    expect([nj.status, nj.json.error?.message]).toEqual([400, "MCP request body is not JSON"]);
  });

  it("an unknown route is 404 (10); the OpenAPI document needs no token and lists every route", async () => {
    const r = await send("/v1/nothing", { token });
    expect([r.status, r.json.error?.code]).toEqual([404, 10]);
    const doc = await send("/v1/openapi.json");
    expect(doc.status).toBe(200);
    expect(Object.keys(doc.json.paths as object).sort()).toEqual(["/v1/backups", "/v1/backups/{id}", "/v1/restores", "/v1/restores/{id}", "/v1/snapshots"]);
  });

  it("logs one line per request: method, the path JSON-quoted (a %0A can not forge a line), status, token", async () => {
    lines.length = 0;
    await send("/v1/x%0Aforged 200", { token });
    await send("/v1/snapshots", { token });
    expect(lines).toHaveLength(2);
    // the newline the path decodes to is written as the two characters \n
    expect(lines[0]).toMatch(/^GET "\/v1\/x\\nforged 200" 404 \d+ms -$/);
    expect(lines[1]).toMatch(/^GET "\/v1\/snapshots" 403 \d+ms token tok_[0-9a-f]{16}$/);
    expect(lines.every((l) => !l.includes("\n"))).toBe(true);
  });
});

describe("pure helpers", () => {
  it("httpStatus maps exit codes (and conflict, unreachable) to statuses", () => {
    const e = (c: number) => new AgentbakError(c as never, "x");
    expect([e(Exit.usage), e(Exit.notFound), e(Exit.locked), e(Exit.verify), e(Exit.policy), e(Exit.failure), new Error("x")].map(httpStatus)).toEqual([400, 404, 423, 422, 403, 500, 500]);
    expect(httpStatus(new ConflictError("key reused"))).toBe(409);
    expect(httpStatus(new UnreachableError("down"))).toBe(503);
  });

  it("isLoopback and parseListen", () => {
    expect(["localhost", "::1", "127.0.0.1", "127.1.2.3"].every(isLoopback)).toBe(true);
    expect(["0.0.0.0", "10.0.0.1", "localhost.evil", "127.0.0.1.nip.io"].some(isLoopback)).toBe(false);
    expect(parseListen("127.0.0.1:8377")).toEqual({ host: "127.0.0.1", port: 8377 });
    expect(parseListen("[::1]:0")).toEqual({ host: "::1", port: 0 });
    for (const bad of ["8377", "host:", "host:65536", "a b:1", ":80"]) expect(() => parseListen(bad), bad).toThrow(/^--listen: expected HOST:PORT/);
  });
});
