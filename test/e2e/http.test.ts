// `agentbak serve` and `agentbak token`: the HTTP API over real sockets — every route, every token
// and tier refusal, idempotency (and 409), 423 while a real backup holds the lock, bounded bodies,
// tenant isolation in one shared repository, the audit log, and MCP over Streamable HTTP at /mcp.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { BIN, json, makeAgent, type TestAgent } from "../helpers.js";
import { api, makeToken, mcpHttp, otherTenant, startServer, tool, type Server } from "../agentapi-helpers.js";

let a: TestAgent;
let srv: Server;
let globex: { dir: string; config: string };
const tok: Record<string, { id: string; token: string }> = {};

beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
  globex = otherTenant(a, "globex");
  for (const tier of ["read", "checkpoint", "restore-request"]) tok[tier] = await makeToken(a, "acme", "billing-agent", tier);
  tok.globex = await makeToken(a, "globex", "billing-agent", "restore-request");
  tok.stranger = await makeToken(a, "acme", "support-agent", "checkpoint");
  srv = await startServer(a, ["-c", a.config, "-c", globex.config]);
}, 120_000);
afterAll(async () => {
  await srv?.stop();
  a.cleanup();
}, 60_000);

const bundles = async () => ((await (await a.store()).list("tenants/")) as string[]).filter((k) => k.endsWith(".agentbak"));

describe("tokens", () => {
  it("token create prints the token once and stores only its hash, private to the owner", async () => {
    const files = readdirSync(join(a.home, "tokens"));
    expect(files).toContain(`${tok.read!.id}.json`);
    const rec = readFileSync(join(a.home, "tokens", `${tok.read!.id}.json`), "utf8");
    expect(rec).not.toContain(tok.read!.token);
    expect(JSON.parse(rec)).toMatchObject({ tenant: "acme", agent: "billing-agent", tier: "read", revoked_at: null });
    expect(statSync(join(a.home, "tokens", `${tok.read!.id}.json`)).mode & 0o777).toBe(0o600);
    const human = await a.run(["token", "create", "--tenant", "acme", "--agent", "billing-agent", "--tier", "read"]);
    expect(human.stdout.trim()).toMatch(/^abk_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$/);
    const list = await a.run(["token", "list", "--json"]);
    expect(list.stdout).not.toMatch(/abk_|sha256/);
    expect(json(list).map((t: any) => t.id)).toContain(tok.read!.id);
  });

  it("token create refuses an unknown tier or a malformed tenant (exit 2), writing nothing", async () => {
    const before = readdirSync(join(a.home, "tokens")).length;
    const t = await a.run(["token", "create", "--tenant", "acme", "--agent", "billing-agent", "--tier", "admin"]);
    expect(t.code).toBe(2);
    expect(t.stderr).toMatch(/--tier: "admin" is not one of read, checkpoint, restore-request/);
    const n = await a.run(["token", "create", "--tenant", "../x", "--agent", "billing-agent", "--tier", "read"]);
    expect(n.code).toBe(2);
    expect(n.stderr).toMatch(/--tenant: not an id/);
    expect(readdirSync(join(a.home, "tokens")).length).toBe(before);
  });

  it("no token, a malformed, a wrong or a revoked token: 401 with WWW-Authenticate", async () => {
    const none = await api(srv.url, null, "GET", "/v1/snapshots");
    expect(none.status).toBe(401);
    expect(none.headers.get("www-authenticate")).toMatch(/^Bearer/);
    expect(none.body.error.message).toMatch(/missing bearer token/);
    expect((await api(srv.url, "not-a-token", "GET", "/v1/snapshots")).status).toBe(401);
    const wrong = tok.read!.token.slice(0, -1) + (tok.read!.token.endsWith("A") ? "B" : "A");
    expect((await api(srv.url, wrong, "GET", "/v1/snapshots")).status).toBe(401);
    const t = await makeToken(a, "acme", "billing-agent", "read");
    expect((await api(srv.url, t.token, "GET", "/v1/snapshots")).status).toBe(200);
    const r = await a.run(["token", "revoke", t.id, "--json"]);
    expect(json(r).revoked_at).toBeTruthy();
    const after = await api(srv.url, t.token, "GET", "/v1/snapshots");
    expect(after.status).toBe(401);
    expect(after.body.error.message).toMatch(/invalid or revoked token/);
  });

  it("a token for an agent this server does not serve: 403", async () => {
    const r = await api(srv.url, tok.stranger!.token, "GET", "/v1/snapshots");
    expect(r.status).toBe(403);
    expect(r.body.error).toMatchObject({ code: 14, message: "this server does not serve agent acme/support-agent" });
  });
});

describe("routes", () => {
  let receipt: any;

  it("GET /v1/openapi.json describes every route, generated from the schemas", async () => {
    const r = await api(srv.url, null, "GET", "/v1/openapi.json");
    expect(r.status).toBe(200);
    expect(Object.keys(r.body.paths).sort()).toEqual(["/", "/healthz", "/metrics", "/v1/backups", "/v1/backups/{id}", "/v1/restores", "/v1/restores/{id}", "/v1/snapshots"]);
    // a checkpoint is never 503: an unreachable repository spools it (201, status spooled)
    expect(Object.keys(r.body.paths["/v1/backups"].post.responses)).toEqual(["201", "400", "401", "403", "404", "409", "413", "415", "421", "422", "423", "500"]);
    expect(r.body.paths["/v1/backups"].post.parameters.map((p: any) => p.name)).toContain("idempotency-key");
    expect(r.body.paths["/v1/restores"].post.requestBody.content["application/json"].schema.required).toEqual(["reason"]);
    expect(r.body.components.securitySchemes.bearer).toMatchObject({ type: "http", scheme: "bearer" });
  });

  it("a read token can not take a checkpoint (403) and nothing is written", async () => {
    const before = (await bundles()).length;
    const r = await api(srv.url, tok.read!.token, "POST", "/v1/backups", { body: {} });
    expect(r.status).toBe(403);
    expect(r.body.error.message).toBe("create_backup needs tier checkpoint or higher; this caller has tier read");
    expect((await bundles()).length).toBe(before);
  });

  it("POST /v1/backups: 201 with the receipt and a status URL; the same key returns the first receipt", async () => {
    const r = await api(srv.url, tok.checkpoint!.token, "POST", "/v1/backups", { body: { label: "api-1" }, headers: { "idempotency-key": "job-7" } });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    receipt = r.body;
    expect(receipt).toMatchObject({ status: "committed", repeated: false, tenant: "acme", agent_id: "billing-agent", kind: "full", parent: null, sequence: 1 });
    expect(r.headers.get("location")).toBe(`/v1/backups/${receipt.snapshot_id}`);
    expect(receipt.status_url).toBe(`/v1/backups/${receipt.snapshot_id}`);
    const n = (await bundles()).length;
    const again = await api(srv.url, tok.checkpoint!.token, "POST", "/v1/backups", { body: { label: "api-1" }, headers: { "idempotency-key": "job-7" } });
    expect(again.status).toBe(201);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body).toMatchObject({ snapshot_id: receipt.snapshot_id, manifest_sha256: receipt.manifest_sha256, repeated: true });
    expect((await bundles()).length).toBe(n);
  });

  it("the same key with other parameters: 409, nothing written", async () => {
    const n = (await bundles()).length;
    const r = await api(srv.url, tok.checkpoint!.token, "POST", "/v1/backups", { body: { label: "api-2" }, headers: { "idempotency-key": "job-7" } });
    expect(r.status).toBe(409);
    expect(r.body.error.message).toMatch(/idempotency key job-7 was first used with another label/);
    expect((await bundles()).length).toBe(n);
  });

  it("GET /v1/backups/{id} and GET /v1/snapshots", async () => {
    const g = await api(srv.url, tok.read!.token, "GET", receipt.status_url);
    expect(g.status).toBe(200);
    expect(g.body).toMatchObject({ snapshot_id: receipt.snapshot_id, status: "committed", verification: "ok", sequence: 1, label: "api-1" });
    const l = await api(srv.url, tok.read!.token, "GET", "/v1/snapshots");
    expect(l.body.snapshots.map((s: any) => s.snapshot_id)).toEqual([receipt.snapshot_id]);
    expect((await api(srv.url, tok.read!.token, "GET", "/v1/backups/20200101T000000000Z-00000000")).status).toBe(404);
    const bad = await api(srv.url, tok.read!.token, "GET", "/v1/backups/..%2F..%2Fetc");
    expect(bad.status).toBe(400);
  });

  it("423 while a real backup holds the agent's lock", async () => {
    const cfg = JSON.parse(readFileSync(a.config, "utf8"));
    const slow = join(a.dir, "slow.json");
    writeFileSync(slow, JSON.stringify({ ...cfg, hooks: { pre: ["touch .locked-now; sleep 4"] } }));
    const running = execa("node", [BIN, "backup", "-c", slow], { cwd: a.dir, env: { ...a.env, NO_COLOR: "1" }, reject: false });
    for (let i = 0; i < 200 && !readdirSync(a.dir).includes(".locked-now"); i++) await new Promise((r) => setTimeout(r, 50));
    const r = await api(srv.url, tok.checkpoint!.token, "POST", "/v1/backups", { body: {} });
    expect(r.status).toBe(423);
    expect(r.body.error).toMatchObject({ code: 11 });
    expect(r.body.error.message).toMatch(/repository locked \(agent lock of acme\/billing-agent/);
    expect((await running).exitCode).toBe(0);
    const ok = await api(srv.url, tok.checkpoint!.token, "POST", "/v1/backups", { body: { incremental: true } });
    expect(ok.status).toBe(201);
    expect(ok.body.sequence).toBe(3);
  });

  it("request bodies are bounded (413) and validated (400)", async () => {
    const big = await api(srv.url, tok.checkpoint!.token, "POST", "/v1/backups", { raw: JSON.stringify({ label: "x".repeat(100_000) }) });
    expect(big.status).toBe(413);
    const notJson = await api(srv.url, tok.checkpoint!.token, "POST", "/v1/backups", { raw: "{label:" });
    expect(notJson.status).toBe(400);
    const badType = await api(srv.url, tok.checkpoint!.token, "POST", "/v1/backups", { body: { incremental: "yes" } });
    expect(badType.status).toBe(400);
    expect(badType.body.error.message).toMatch(/incremental/);
  });

  it("POST /v1/restores: 202 pending approval with a status URL; idempotent; a checkpoint token can not ask (403)", async () => {
    expect((await api(srv.url, tok.checkpoint!.token, "POST", "/v1/restores", { body: { reason: "x" } })).status).toBe(403);
    const r = await api(srv.url, tok["restore-request"]!.token, "POST", "/v1/restores", { body: { reason: "bad memory", snapshot: receipt.snapshot_id }, headers: { "idempotency-key": "rq-1" } });
    expect(r.status, JSON.stringify(r.body)).toBe(202);
    expect(r.body).toMatchObject({ status: "pending", snapshot_id: receipt.snapshot_id, reason: "bad memory", requested_by: `token ${tok["restore-request"]!.id}` });
    expect(r.headers.get("location")).toBe(`/v1/restores/${r.body.request_id}`);
    const g = await api(srv.url, tok.read!.token, "GET", r.body.status_url);
    expect(g.status).toBe(200);
    expect(g.body).toMatchObject({ request_id: r.body.request_id, status: "pending" });
    const again = await api(srv.url, tok["restore-request"]!.token, "POST", "/v1/restores", { body: { reason: "bad memory", snapshot: receipt.snapshot_id }, headers: { "idempotency-key": "rq-1" } });
    expect(again.body.request_id).toBe(r.body.request_id);
    const conflict = await api(srv.url, tok["restore-request"]!.token, "POST", "/v1/restores", { body: { reason: "other", snapshot: receipt.snapshot_id }, headers: { "idempotency-key": "rq-1" } });
    expect(conflict.status).toBe(409);
    expect((await api(srv.url, tok["restore-request"]!.token, "POST", "/v1/restores", { body: { snapshot: "latest" } })).status).toBe(400);
    expect((await api(srv.url, tok.read!.token, "GET", "/v1/restores/req-20200101T000000000Z-00000000")).status).toBe(404);
  });
});

describe("tenant isolation", () => {
  it("a token of one tenant never sees another tenant's snapshots or requests, in one repository", async () => {
    const gb = await api(srv.url, tok.globex!.token, "POST", "/v1/backups", { body: { label: "globex-1" } });
    expect(gb.status, JSON.stringify(gb.body)).toBe(201);
    expect(gb.body).toMatchObject({ tenant: "globex", agent_id: "billing-agent", sequence: 1 });
    const acme = (await api(srv.url, tok.read!.token, "GET", "/v1/snapshots")).body.snapshots.map((s: any) => s.snapshot_id);
    const glob = (await api(srv.url, tok.globex!.token, "GET", "/v1/snapshots")).body.snapshots.map((s: any) => s.snapshot_id);
    expect(glob).toEqual([gb.body.snapshot_id]);
    expect(acme).not.toContain(gb.body.snapshot_id);
    expect(acme.length).toBeGreaterThan(0);
    // by id, by latest, and through a restore request: another tenant's snapshot does not exist for this token
    expect((await api(srv.url, tok.globex!.token, "GET", `/v1/backups/${acme[0]}`)).status).toBe(404);
    const req = await api(srv.url, tok.globex!.token, "POST", "/v1/restores", { body: { reason: "take acme's", snapshot: acme[0] } });
    expect(req.status).toBe(404);
    const acmeReq = await api(srv.url, tok["restore-request"]!.token, "POST", "/v1/restores", { body: { reason: "mine" } });
    expect((await api(srv.url, tok.globex!.token, "GET", `/v1/restores/${acmeReq.body.request_id}`)).status).toBe(404);
    // the repository really holds both, under the same agent id
    expect((await bundles()).some((k) => k.startsWith("tenants/globex/agents/billing-agent/"))).toBe(true);
  });
});

describe("audit and logs", () => {
  it("every request is audited with the token's identity, never the token", async () => {
    const text = String(await (await a.store()).get("tenants/acme/agents/billing-agent/audit.jsonl"));
    const entries = text.trim().split("\n").map((l) => JSON.parse(l)).filter((e) => e.event === "agent-interface");
    for (const t of Object.values(tok)) expect(text).not.toContain(t.token);
    expect(srv.log()).not.toMatch(/abk_/);
    const by = (id: string) => entries.filter((e) => e.by === `token ${id}`);
    expect(by(tok.read!.id).map((e) => e.operation)).toEqual(expect.arrayContaining(["create_backup", "get_backup", "list_snapshots", "get_restore_request"]));
    expect(by(tok.read!.id).find((e) => e.operation === "create_backup")).toMatchObject({ outcome: "refused", code: 14, transport: "http", tier: "read" });
    expect(by(tok.checkpoint!.id).filter((e) => e.operation === "create_backup" && e.outcome === "ok").length).toBeGreaterThanOrEqual(3);
    expect(by(tok.checkpoint!.id).find((e) => e.code === 11)).toBeTruthy();
    // the other tenant's calls are in its own log, not this one
    expect(entries.some((e) => e.by === `token ${tok.globex!.id}`)).toBe(false);
    const g = String(await (await a.store()).get("tenants/globex/agents/billing-agent/audit.jsonl"));
    expect(g).toContain(`token ${tok.globex!.id}`);
    // still one unbroken, signed hash chain
    const { verifyChainText } = await import("../../dist/crypto/chainlog.js");
    const { loadTrust } = await import("../../dist/crypto/trust.js");
    const v = verifyChainText(text, loadTrust(a.home), "agentbak-receipt", "audit entry", false);
    expect(v.entries).toBe(text.trim().split("\n").length);
  });
});

describe("MCP over Streamable HTTP", () => {
  it("/mcp needs a token, lists the token's tier's tools and takes a checkpoint", async () => {
    expect((await api(srv.url, null, "POST", "/mcp", { body: { jsonrpc: "2.0", id: 1, method: "tools/list" } })).status).toBe(401);
    const c = await mcpHttp(srv.url, tok.checkpoint!.token);
    try {
      const names = (await c.listTools()).tools.map((t) => t.name);
      expect(names).toContain("create_backup");
      expect(names).not.toContain("request_restore");
      const r = await tool(c, "create_backup", { label: "over mcp-http" });
      expect(r.isError, r.text).toBe(false);
      expect(r.data).toMatchObject({ status: "committed", repeated: false });
      const g = await api(srv.url, tok.read!.token, "GET", `/v1/backups/${r.data.snapshot_id}`);
      expect(g.body).toMatchObject({ status: "committed", label: "over mcp-http" });
    } finally {
      await c.close();
    }
  });
});

describe("the server's tier", () => {
  it("serve --tier caps every token's tier: a checkpoint token on a read server is refused (403)", async () => {
    const capped = await startServer(a, ["--tier", "read"]);
    try {
      const r = await api(capped.url, tok.checkpoint!.token, "POST", "/v1/backups", { body: {} });
      expect(r.status).toBe(403);
      expect(r.body.error.message).toBe("create_backup needs tier checkpoint or higher; this caller has tier read");
      expect((await api(capped.url, tok.checkpoint!.token, "GET", "/v1/snapshots")).status).toBe(200);
    } finally {
      await capped.stop();
    }
  });
});

describe("listening", () => {
  it("listens on 127.0.0.1 by default", async () => {
    const p = execa("node", [BIN, "serve"], { cwd: a.dir, env: { ...a.env, NO_COLOR: "1" }, reject: false });
    let err = "";
    await new Promise<void>((resolve) => {
      p.stderr!.on("data", (d: Buffer) => ((err += d), /agent interface on|agentbak:/.test(err) && resolve()));
      void p.then(() => resolve());
    });
    p.kill("SIGTERM");
    await p;
    expect(err).toMatch(/agent interface on http:\/\/127\.0\.0\.1:8377 /);
  });

  it("a malformed --listen is a usage error", async () => {
    const r = await a.run(["serve", "--listen", "everywhere"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--listen: expected HOST:PORT/);
  });
});
