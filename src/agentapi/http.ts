/**
 * The HTTP adapter (Hono): the REST routes under /v1 and MCP over Streamable
 * HTTP at /mcp, both over the one service. Bearer tokens name tenant, agent
 * and tier; request bodies are bounded and validated by the service's zod
 * schemas, from which the OpenAPI document at /v1/openapi.json is generated.
 * Errors answer with the status that fits and `{"error": {code, message}}`,
 * where code is the documented exit status.
 *
 * A server on a loopback address answers only requests addressed to it (Host:
 * its address or localhost, with its port) and, when a browser says where a
 * request comes from (Origin), only from there: a page of another site whose
 * name resolves to 127.0.0.1 (DNS rebinding) is refused before any token is
 * looked at. An MCP request is as many calls as the JSON-RPC messages it
 * carries, at most MAX_MCP_MESSAGES.
 */
import { serve as listen, type HttpBindings, type ServerType } from "@hono/node-server";
import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import type { Context } from "hono";
import { bodyLimit } from "hono/body-limit";
import { HTTPException } from "hono/http-exception";
import { isUtf8 } from "node:buffer";
import type { AddressInfo } from "node:net";
import { AgentbakError, ConflictError, Exit, formatIssues, hasCause, policyError, UnreachableError, usageError } from "../errors.js";
import { NOT_CAPTURED_REASONS } from "../bundle/manifest.js";
import { TOOL_VERSION } from "../version.js";
import { mcpOverHttp } from "./mcp.js";
import { INPUTS, lowerTier, MAX_MESSAGE_BYTES, type AgentService, type Caller, type Operation, type Results, type Tier } from "./service.js";
import { authenticate } from "./tokens.js";
import type { StatusReport } from "../status/gather.js";

/** The largest request body accepted (413 beyond it). */
export const MAX_BODY_BYTES = MAX_MESSAGE_BYTES;
/**
 * The most JSON-RPC messages one MCP request may carry (400 beyond it): each
 * tool call in a batch is an operation, and an audit entry, of its own; the
 * SDK alone would take 100, so one request of a read token could add 100
 * audit entries and run 100 verifications at once.
 */
export const MAX_MCP_MESSAGES = 10;

type Env = { Bindings: HttpBindings; Variables: { caller: Caller } };

/** Every status httpStatus gives: each route that calls the service may answer any of them (the document lists them all, so it can not drift from the mapping). */
const SERVICE_STATUSES = [400, 403, 404, 409, 422, 423, 500, 503] as const;

/** The HTTP status for an error of the service. */
export function httpStatus(e: unknown): (typeof SERVICE_STATUSES)[number] {
  if (hasCause(e, ConflictError)) return 409;
  if (hasCause(e, UnreachableError)) return 503;
  const code = e instanceof AgentbakError ? e.code : Exit.failure;
  return code === Exit.usage ? 400 : code === Exit.notFound ? 404 : code === Exit.locked ? 423 : code === Exit.verify ? 422 : code === Exit.policy ? 403 : 500;
}

const ErrorBody = z.strictObject({ error: z.strictObject({ code: z.number().int().describe("agentbak's exit status for this error"), message: z.string() }) }).openapi("Error");
/** The error answers of a route that writes: those it lists (413 from the body limit, 415 from its content type), every status of the service's error mapping, and those of the token and Host checks. */
const errors = (...statuses: number[]) =>
  Object.fromEntries([...new Set([...statuses, ...SERVICE_STATUSES, 401, 421])].sort().map((s) => [s, { description: STATUS_TEXT[s]!, content: { "application/json": { schema: ErrorBody } } }]));
/** `answers` less `codes`: a checkpoint and the listing are never 503 (an unreachable repository spools it / lists the spooled ones). */
const without = (answers: Record<string, unknown>, ...codes: number[]) => Object.fromEntries(Object.entries(answers).filter(([s]) => !codes.includes(Number(s))));
/**
 * The error answers of a route that only reads: the mapping's statuses less a conflict (409) and a lock (423), which
 * only writes meet, and less a bad request (400) when the route takes no input.
 */
const readErrors = (input: "input" | "no input") =>
  Object.fromEntries(Object.entries(errors()).filter(([s]) => s !== "409" && s !== "423" && (input === "input" || s !== "400")));
const STATUS_TEXT: Record<number, string> = {
  400: "bad request (code 2)",
  401: "no valid bearer token",
  403: "the token's tier or scope does not allow it, policy refused it (code 14), or the request came from another origin",
  404: "not found for this agent, or the repository itself is not found: moved, deleted, unmounted or replaced (code 10)",
  409: "idempotency key reused with other parameters (code 2)",
  413: "request body too large (code 2)",
  415: "the body is not application/json (code 2)",
  421: "the Host is not this server's address (a loopback server answers only to its address and localhost, with its port)",
  422: "the snapshot, or a repository record it needs (the repository's own record too), does not verify or is damaged (code 13)",
  423: "the agent (or its audit log) is locked by another process (code 11)",
  500: "internal error, or a failure such as a pre hook that failed (code 1); the server's log has the detail",
  503: "the repository can not be reached (code 1)",
};
const idemHeader = z.object({ "idempotency-key": INPUTS.create_backup.shape.idempotency_key });
const json = <T extends z.ZodType>(schema: T, description: string) => ({ description, content: { "application/json": { schema } } });

// every field the server answers with, and no other (test/e2e/edges-server.test.ts compares real answers with these)
const Receipt = z
  .strictObject({
    snapshot_id: z.string(),
    tenant: z.string(),
    agent_id: z.string(),
    sequence: z.number().int(),
    created_at: z.string(),
    manifest_sha256: z.string(),
    payload_sha256: z.string(),
    size: z.number().int().describe("bytes of the bundle"),
    kind: z.enum(["full", "incremental"]),
    parent: z.string().nullable(),
    databases_read: z.enum(["copy", "in-place"]).nullable(),
    full_reason: z.string().nullable().describe("why an incremental request made a full snapshot"),
    repeated: z.boolean().describe("the receipt of an earlier request with the same Idempotency-Key"),
    status: z.enum(["committed", "spooled"]).describe("spooled: the repository could not be reached; the signed bundle waits on the server's host"),
    params_sha256: z.string(),
    not_captured: z.array(z.strictObject({ path: z.string(), reason: z.enum(NOT_CAPTURED_REASONS), detail: z.string() })),
    warnings: z.array(z.string()),
    status_url: z.string(),
  })
  .openapi("BackupReceipt");
const Backup = z
  .strictObject({
    snapshot_id: z.string(),
    status: z.enum(["committed", "spooled"]),
    sequence: z.number().int().nullable(),
    created_at: z.string().nullable(),
    kind: z.enum(["full", "incremental"]).nullable(),
    parent: z.string().nullable(),
    label: z.string().nullable(),
    size: z.number().int(),
    verification: z.enum(["ok", "expired", "invalid"]).describe("signature, manifest and chain links as the listing reads them; verify_snapshot (MCP) reads payloads too"),
    problem: z.string().nullable(),
  })
  .openapi("Backup");
const Request = z
  .strictObject({
    request_id: z.string(),
    tenant: z.string(),
    agent_id: z.string(),
    snapshot_id: z.string(),
    sequence: z.number().int(),
    reason: z.string(),
    target: z.string().nullable(),
    requested_at: z.string(),
    requested_by: z.string(),
    idempotency_key: z.string().nullable(),
    params_sha256: z.string(),
    status: z.enum(["pending", "approved", "denied", "restored", "failed"]),
    decision: z.strictObject({ decision: z.enum(["approved", "denied"]), by: z.string(), at: z.string(), reason: z.string().nullable(), target: z.string().nullable().describe("the folder the first approval named (null for a denial)") }).nullable(),
    outcome: z
      .strictObject({ status: z.enum(["restored", "failed"]), at: z.string(), target: z.string(), generation: z.number().int().nullable(), error: z.strictObject({ code: z.number().int(), message: z.string() }).nullable(), by: z.string().describe("who approved and ran this attempt") })
      .nullable(),
    repeated: z.boolean().optional().describe("in the answer to POST: the request of an earlier POST with the same Idempotency-Key"),
    status_url: z.string(),
  })
  .openapi("RestoreRequest");

const routes = {
  createBackup: createRoute({
    method: "post",
    path: "/v1/backups",
    summary: "Take a checkpoint (201 with the receipt; the same Idempotency-Key returns the first receipt)",
    security: [{ bearer: [] }],
    request: { headers: idemHeader, body: { content: { "application/json": { schema: INPUTS.create_backup.omit({ idempotency_key: true }) } }, required: false } },
    responses: { 201: json(Receipt, "committed, or spooled when the repository is unreachable"), ...without(errors(413, 415), 503) },
  }),
  getBackup: createRoute({
    method: "get",
    path: "/v1/backups/{id}",
    summary: "Status of one snapshot",
    security: [{ bearer: [] }],
    request: { params: z.object({ id: INPUTS.get_backup.shape.snapshot_id }) },
    responses: { 200: json(Backup, "the snapshot"), ...readErrors("input") },
  }),
  listSnapshots: createRoute({
    method: "get",
    path: "/v1/snapshots",
    summary: "This agent's snapshots",
    security: [{ bearer: [] }],
    responses: { 200: json(z.strictObject({ snapshots: z.array(Backup), warnings: z.array(z.string()) }), "oldest first; while the repository is down, the spooled ones and a warning"), ...without(readErrors("no input"), 503) },
  }),
  createRestore: createRoute({
    method: "post",
    path: "/v1/restores",
    summary: "Ask for a restore (202: pending an operator's approval; nothing is restored until then)",
    security: [{ bearer: [] }],
    request: { headers: idemHeader, body: { content: { "application/json": { schema: INPUTS.request_restore.omit({ idempotency_key: true }) } }, required: true } },
    responses: { 202: json(Request, "recorded, pending approval"), ...errors(413, 415) },
  }),
  getRestore: createRoute({
    method: "get",
    path: "/v1/restores/{id}",
    summary: "Status of a restore request",
    security: [{ bearer: [] }],
    request: { params: z.object({ id: INPUTS.get_restore_request.shape.request_id }) },
    responses: { 200: json(Request, "the request"), ...readErrors("input") },
  }),
};

const errorBody = (e: AgentbakError) => ({ error: { code: e.code, message: e.message } });

/** Whether a --listen host is a loopback address (or localhost). */
export const isLoopback = (host: string) => host === "localhost" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);

/**
 * Why a request is not for this server, or null: on a loopback server a Host
 * other than its address or localhost with its port; on any server an Origin
 * (sent by browsers) other than the Host's own.
 */
function misdirected(listenHost: string, port: number, host: string | undefined, origin: string | undefined): { status: 403 | 421; message: string } | null {
  const h = (host ?? "").toLowerCase();
  const literal = listenHost.includes(":") ? `[${listenHost}]` : listenHost;
  const mine = new Set([`${literal}:${port}`, `localhost:${port}`, ...(listenHost === "localhost" ? [`127.0.0.1:${port}`, `[::1]:${port}`] : [])]);
  const shown = (v: string) => JSON.stringify(v.slice(0, 100));
  if (isLoopback(listenHost) && !mine.has(h))
    return { status: 421, message: `refused: Host ${shown(host ?? "")} is not this server (${[...mine].join(" or ")}); a page of another site can not reach it through its own name` };
  if (origin === undefined) return null;
  let from: string | null = null;
  try {
    const u = new URL(origin);
    from = u.protocol === "http:" ? u.host.toLowerCase() : null;
  } catch {
    /* "null" or malformed: from nowhere this server serves */
  }
  if (from !== h) return { status: 403, message: `refused: a request from origin ${shown(origin)}, not from this server (http://${h})` };
  return null;
}

/**
 * Builds the app.
 * @param listenHost the host it listens on (a loopback one answers only to its address and localhost)
 * @param maxTier the highest tier any token gets here, or a token of each agent (a host file's tokens.maxTier); a token's own tier may be lower
 * @param log one line per request (method, path, status, time, token id) and per internal error
 * @param render the status page and the /metrics text (ui/status.ts, passed in by the command table)
 * @param ui the status page (GET /) without a token: only on a loopback server (the command checks)
 */
export function buildApp(service: AgentService, o: { home: string; listenHost: string; maxTier: Tier | ((a: { tenant: string; agent: string }) => Tier); log: (line: string) => void; render?: StatusRender; ui?: boolean }): OpenAPIHono<Env> {
  const app = new OpenAPIHono<Env>({
    defaultHook: (r, c) => {
      if (!r.success) return c.json(errorBody(usageError(formatIssues(r.error.issues))), 400);
    },
  });
  app.openAPIRegistry.registerComponent("securitySchemes", "bearer", { type: "http", scheme: "bearer", description: "agentbak token create --tenant T --agent A --tier TIER" });

  app.use("*", async (c, next) => {
    const t0 = performance.now();
    await next();
    // the path is the caller's: JSON-quoted, so a %0A in it can not forge a log line
    o.log(`${c.req.method} ${JSON.stringify(c.req.path)} ${c.res.status} ${(performance.now() - t0).toFixed(0)}ms ${c.get("caller")?.by ?? "-"}`);
  });
  // before tokens, limits and the audit log: a request for another host, or from another site's page, is not ours to answer
  app.use("*", async (c, next) => {
    const bad = misdirected(o.listenHost, c.env.incoming.socket.localPort ?? 0, c.req.header("host"), c.req.header("origin"));
    if (bad) return c.json(errorBody(policyError(bad.message)), bad.status);
    await next();
  });
  app.use(
    "*",
    bodyLimit({
      maxSize: MAX_BODY_BYTES,
      // the rest of the body is not read: the connection can not carry another request
      onError: (c) => c.json(errorBody(usageError(`request body larger than ${MAX_BODY_BYTES} bytes`)), 413, { connection: "close" }),
    }),
  );
  app.notFound((c) => c.json(errorBody(new AgentbakError(Exit.notFound, `no endpoint ${c.req.method} ${c.req.path.slice(0, 200)}; see /v1/openapi.json`)), 404));
  app.onError((e, c) => {
    // hono's own refusals (a body that is not JSON, ...) are the client's error
    if (e instanceof HTTPException) return c.json(errorBody(new AgentbakError(Exit.usage, e.message)), e.status);
    if (!(e instanceof AgentbakError)) o.log(`internal error: ${e.stack ?? e.message}`);
    const err = e instanceof AgentbakError ? e : new AgentbakError(Exit.failure, "internal error (see the server's log)");
    return c.json(errorBody(err), httpStatus(err));
  });
  const auth = async (c: Context<Env>, next: () => Promise<void>) => {
    const m = (c.req.header("authorization") ?? "").match(/^Bearer\s+(\S+)$/i);
    const t = m ? authenticate(o.home, m[1]!) : null;
    if (!t) {
      c.header("WWW-Authenticate", 'Bearer realm="agentbak"');
      return c.json(errorBody(new AgentbakError(Exit.usage, m ? "invalid or revoked token" : "missing bearer token (Authorization: Bearer <token>)")), 401);
    }
    c.set("caller", { tenant: t.tenant, agent: t.agent, tier: lowerTier(t.tier, typeof o.maxTier === "function" ? o.maxTier(t) : o.maxTier), by: `token ${t.id}`, transport: c.req.path === "/mcp" ? "mcp-http" : "http" });
    await next();
  };
  app.use("/v1/backups", auth);
  app.use("/v1/backups/*", auth);
  app.use("/v1/snapshots", auth);
  app.use("/v1/restores", auth);
  app.use("/v1/restores/*", auth);
  app.use("/mcp", auth);
  app.use("/metrics", auth);
  if (!o.ui) app.use("/", auth);
  // after the token is checked: JSON is UTF-8, a body that is not is refused, never read with U+FFFD in its bytes' place (into a signed record)
  app.use("*", async (c, next) => {
    if (c.req.method === "POST" && c.req.raw.body && !isUtf8(new Uint8Array(await c.req.arrayBuffer())))
      return c.json(errorBody(usageError("request body is not UTF-8 (JSON is UTF-8)")), 400);
    await next();
  });
  if (o.render) statusRoutes(app, service, o.render, o.log);

  const call = <K extends Operation>(c: Context<Env>, op: K, input: unknown): Promise<Results[K]> => service.call(c.get("caller"), op, input);
  app.openapi(routes.createBackup, async (c) => {
    const body = c.req.valid("json") ?? {};
    const r = await call(c, "create_backup", { ...body, idempotency_key: c.req.valid("header")["idempotency-key"] });
    const url = `/v1/backups/${r.snapshot_id}`;
    c.header("Location", url);
    if (r.repeated) c.header("Idempotent-Replayed", "true");
    return c.json({ ...r, status_url: url }, 201);
  });
  app.openapi(routes.getBackup, async (c) => c.json(await call(c, "get_backup", { snapshot_id: c.req.valid("param").id }), 200));
  app.openapi(routes.listSnapshots, async (c) => c.json(await call(c, "list_snapshots", {}), 200));
  app.openapi(routes.createRestore, async (c) => {
    const r = await call(c, "request_restore", { ...c.req.valid("json"), idempotency_key: c.req.valid("header")["idempotency-key"] });
    const url = `/v1/restores/${r.request_id}`;
    c.header("Location", url);
    if (r.repeated) c.header("Idempotent-Replayed", "true");
    return c.json({ ...r, status_url: url }, 202);
  });
  app.openapi(routes.getRestore, async (c) => {
    const r = await call(c, "get_restore_request", { request_id: c.req.valid("param").id });
    return c.json({ ...r, status_url: `/v1/restores/${r.request_id}` }, 200);
  });
  app.doc31("/v1/openapi.json", { openapi: "3.1.0", info: { title: "agentbak agent interface", version: TOOL_VERSION, description: "Checkpoints and restore requests for one agent per token. No route deletes or restores." } });
  app.all("/mcp", async (c) => {
    let body: unknown;
    if (c.req.method === "POST") {
      try {
        body = await c.req.json();
      } catch {
        return c.json(errorBody(usageError("MCP request body is not JSON")), 400);
      }
      if (Array.isArray(body) && body.length > MAX_MCP_MESSAGES)
        return c.json(errorBody(usageError(`an MCP request carries at most ${MAX_MCP_MESSAGES} JSON-RPC messages (each call is an operation of its own); this batch has ${body.length}`)), 400);
    }
    return mcpOverHttp(service, c.get("caller"), c.req.raw, body);
  });
  return app;
}

/** How a status report is shown over HTTP: the page and the OpenMetrics text (ui/status.ts). */
export interface StatusRender {
  page(r: StatusReport): string;
  metrics(r: StatusReport): string;
}

/** The OpenMetrics text format's content type. */
export const OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/** The page loads nothing and runs nothing: no script, no other origin, no frame around it. */
const PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'; form-action 'none'; base-uri 'none'";

/**
 * GET /healthz (no token: 200 when every repository served is reachable and
 * the same, else 503), GET /metrics and GET / (the status page): the status
 * gather (status/gather.ts) the CLI uses, for a token's own agent, or every
 * agent served when the page is open without a token (--ui).
 */
function statusRoutes(app: OpenAPIHono<Env>, service: AgentService, render: StatusRender, log: (line: string) => void): void {
  app.openAPIRegistry.registerPath({
    method: "get",
    path: "/healthz",
    summary: "Liveness: the process is up and every repository it serves is reachable and the same one (no token)",
    responses: {
      200: json(z.strictObject({ status: z.literal("ok") }), "up"),
      503: json(z.strictObject({ status: z.literal("unavailable") }), "a repository can not be reached, or was replaced (the server's log says which)"),
      // the Host and Origin checks come before every route, this one too
      ...Object.fromEntries([403, 421].map((st) => [st, json(ErrorBody, STATUS_TEXT[st]!)])),
    },
  });
  app.openAPIRegistry.registerPath({
    method: "get",
    path: "/metrics",
    summary: "OpenMetrics text for the token's agent: last snapshot, last drill, unresolved operations, spool, bytes",
    security: [{ bearer: [] }],
    responses: { 200: { description: "OpenMetrics text, ending with # EOF", content: { [OPENMETRICS]: { schema: z.string() } } }, ...readErrors("no input") },
  });
  app.openAPIRegistry.registerPath({
    method: "get",
    path: "/",
    summary: "The status page (HTML, no script): the token's agent, or every agent served with `serve --ui` on a loopback address",
    security: [{ bearer: [] }],
    responses: { 200: { description: "the page", content: { "text/html": { schema: z.string() } } }, ...readErrors("no input") },
  });
  app.get("/healthz", async (c) => {
    const why = await service.unhealthy();
    if (why) log(`healthz: ${why}`);
    return c.json({ status: why ? "unavailable" : "ok" }, why ? 503 : 200);
  });
  const report = (c: Context<Env>) => {
    const caller = c.get("caller");
    return service.status(caller ? { tenant: caller.tenant, agent: caller.agent } : undefined);
  };
  app.get("/metrics", async (c) => c.body(render.metrics(await report(c)), 200, { "content-type": OPENMETRICS }));
  app.get("/", async (c) => c.body(render.page(await report(c)), 200, { "content-type": "text/html; charset=utf-8", "content-security-policy": PAGE_CSP, "cache-control": "no-store", "x-content-type-options": "nosniff" }));
}

/**
 * Parses `HOST:PORT` (port 0: any free port).
 * @throws AgentbakError(2) when malformed.
 */
export function parseListen(s: string): { host: string; port: number } {
  const m = s.match(/^(\[[0-9a-f:]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/);
  const port = m ? Number(m[2]) : NaN;
  if (!m || port > 65535) throw usageError(`--listen: expected HOST:PORT (e.g. 127.0.0.1:8377), got ${JSON.stringify(s.slice(0, 80))}`);
  return { host: m[1]!.replace(/^\[|\]$/g, ""), port };
}

/**
 * Starts listening. @returns the address it listens on and a close function:
 * it stops accepting, lets the requests in flight finish (idle keep-alive
 * connections are closed), and cuts what is still open after `graceMs`.
 */
export async function startHttp(app: OpenAPIHono<Env>, host: string, port: number): Promise<{ url: string; server: ServerType; close(graceMs?: number): Promise<void> }> {
  return new Promise((resolve, reject) => {
    const server = listen({ fetch: app.fetch, hostname: host, port }, (info: AddressInfo) => {
      const h = info.family === "IPv6" ? `[${info.address}]` : info.address;
      const http = server as import("node:http").Server;
      const close = (graceMs = 30_000) =>
        new Promise<void>((r) => {
          const cut = setTimeout(() => http.closeAllConnections(), graceMs);
          // a keep-alive connection goes idle once its request in flight is answered: closed then, not at the client's leisure
          const idle = setInterval(() => http.closeIdleConnections(), 50);
          http.close(() => {
            clearTimeout(cut);
            clearInterval(idle);
            r();
          });
          http.closeIdleConnections();
        });
      resolve({ url: `http://${h}:${info.port}`, server, close });
    });
    server.once("error", (e: NodeJS.ErrnoException) => reject(usageError(`--listen ${host}:${port}: ${e.code ?? e.message}`)));
  });
}
