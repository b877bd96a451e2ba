// `agentbak mcp`: the MCP server driven by the SDK's client over a real stdio child process —
// tools per tier with honest annotations, every tool, idempotency, refusals, the audit log,
// and the reference agent's worker taking a checkpoint through MCP at a sub-task boundary.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import Database from "better-sqlite3";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { json, makeAgent, ROOT, SNAPS, type TestAgent } from "../helpers.js";
import { mcpStdio, tool } from "../agentapi-helpers.js";

let a: TestAgent;
const clients: Record<string, Client> = {};
const READ_TOOLS = ["get_backup", "get_restore_request", "list_snapshots", "plan_restore", "verify_snapshot"];

beforeAll(async () => {
  a = await makeAgent({ sizeMb: 2 });
  for (const tier of ["read", "checkpoint", "restore-request"]) clients[tier] = await mcpStdio(a, ["--tier", tier]);
}, 120_000);
afterAll(async () => {
  for (const c of Object.values(clients)) await c.close();
  a.cleanup();
}, 60_000);

const snapshots = async () => json<any[]>(await a.run(["snapshots", "--json"]));
/** Where a checkpoint's bundle is: the agent is told the snapshot id, not a path on the server. */
const bundleFile = (id: string) => `${a.repo}/${SNAPS}/${id}.agentbak`;
const manifestSha = async (bundle: string) => createHash("sha256").update((await execa("tar", ["xOf", await a.file(bundle), "manifest.json"], { encoding: "buffer" })).stdout).digest("hex");

describe("tools and tiers", () => {
  it("each tier lists only its tools; none deletes or restores; annotations are honest", async () => {
    const names = async (t: string) => (await clients[t]!.listTools()).tools.map((x) => x.name).sort();
    expect(await names("read")).toEqual(READ_TOOLS);
    expect(await names("checkpoint")).toEqual([...READ_TOOLS, "create_backup"].sort());
    expect(await names("restore-request")).toEqual([...READ_TOOLS, "create_backup", "request_restore"].sort());
    const tools = (await clients["restore-request"]!.listTools()).tools;
    for (const t of tools) {
      const ro = READ_TOOLS.includes(t.name);
      expect(t.annotations, t.name).toEqual({ readOnlyHint: ro, destructiveHint: false, idempotentHint: ro, openWorldHint: false });
    }
    const create = tools.find((t) => t.name === "create_backup")!;
    expect(Object.keys(create.inputSchema.properties ?? {}).sort()).toEqual(["idempotency_key", "incremental", "label"]);
    expect((tools.find((t) => t.name === "request_restore")!.inputSchema as any).required).toEqual(["reason"]);
  });

  it("a read-tier server refuses create_backup and writes nothing", async () => {
    const before = (await snapshots()).length;
    const r = await clients.read!.callTool({ name: "create_backup", arguments: {} }).then(
      (x: any) => ({ isError: Boolean(x.isError), text: JSON.stringify(x.content) }),
      (e: Error) => ({ isError: true, text: e.message }),
    );
    expect(r.isError).toBe(true);
    expect(r.text).toMatch(/create_backup/);
    expect((await snapshots()).length).toBe(before);
  });

  it("--tier with an unknown tier is a usage error", async () => {
    const r = await a.run(["mcp", "--tier", "admin"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--tier: "admin" is not one of read, checkpoint, restore-request/);
  });
});

describe("checkpoints through MCP", () => {
  let first: any;

  it("create_backup returns the receipt of a committed, signed snapshot", async () => {
    const r = await tool(clients.checkpoint!, "create_backup", { label: "after step 1", idempotency_key: "step-1" });
    expect(r.isError, r.text).toBe(false);
    first = r.data;
    expect(first).toMatchObject({ status: "committed", repeated: false, tenant: "acme", agent_id: "billing-agent", kind: "full", parent: null, sequence: 1 });
    expect(first.created_at).toMatch(/^\d{4}-\d\d-\d\dT/);
    expect(first).not.toHaveProperty("path");
    expect(first.manifest_sha256).toBe(await manifestSha(bundleFile(first.snapshot_id)));
    const listed = (await snapshots()).find((s) => s.snapshot_id === first.snapshot_id);
    expect(listed).toMatchObject({ status: "ok", label: "after step 1", sequence: 1 });
  });

  it("the same idempotency key returns the first receipt; with another label it is refused", async () => {
    const n = (await snapshots()).length;
    const again = await tool(clients.checkpoint!, "create_backup", { label: "after step 1", idempotency_key: "step-1" });
    expect(again.data).toMatchObject({ snapshot_id: first.snapshot_id, repeated: true });
    const other = await tool(clients.checkpoint!, "create_backup", { label: "something else", idempotency_key: "step-1" });
    expect(other.isError).toBe(true);
    expect(other.text).toMatch(/idempotency key step-1 was first used with another label.*exit status 2/);
    expect((await snapshots()).length).toBe(n);
  });

  it("an incremental checkpoint names its parent; get_backup, list_snapshots and verify_snapshot see it", async () => {
    const inc = (await tool(clients.checkpoint!, "create_backup", { incremental: true, label: "after step 2" })).data;
    expect(inc).toMatchObject({ kind: "incremental", parent: first.snapshot_id, sequence: 2, status: "committed" });
    const got = await tool(clients.read!, "get_backup", { snapshot_id: inc.snapshot_id });
    expect(got.data).toMatchObject({ snapshot_id: inc.snapshot_id, status: "committed", verification: "ok", kind: "incremental", parent: first.snapshot_id, label: "after step 2" });
    const list = (await tool(clients.read!, "list_snapshots")).data.snapshots;
    expect(list.map((s: any) => s.snapshot_id)).toEqual([first.snapshot_id, inc.snapshot_id]);
    const v = (await tool(clients.read!, "verify_snapshot", { snapshot: "latest" })).data;
    expect(v).toMatchObject({ snapshot_id: inc.snapshot_id, ok: true, chain_length: 1, problem: null });
  });

  it("verify_snapshot reports a damaged bundle as not ok", async () => {
    const c = await tool(clients.checkpoint!, "create_backup", { label: "to damage" });
    const file = bundleFile(c.data.snapshot_id);
    const b = readFileSync(file);
    b[b.length - 3000]! ^= 1; // inside the payload: the header still verifies, the payload digest does not
    (await import("node:fs")).writeFileSync(file, b);
    const v = await tool(clients.read!, "verify_snapshot", { snapshot: c.data.snapshot_id });
    expect(v.data).toMatchObject({ snapshot_id: c.data.snapshot_id, ok: false });
    expect(v.data.problem).toMatch(/payload/);
    (await import("node:fs")).rmSync(file); // leave no damaged snapshot behind for the tests below
    (await import("node:fs")).rmSync(file.replace(/\.agentbak$/, ".commit"));
  });

  it("get_backup of an unknown or malformed id is an error naming it", async () => {
    const r = await tool(clients.read!, "get_backup", { snapshot_id: "20200101T000000000Z-00000000" });
    expect(r.isError).toBe(true);
    expect(r.text).toMatch(/snapshot 20200101T000000000Z-00000000 not found for acme\/billing-agent.*exit status 10/);
    const bad = await clients.read!.callTool({ name: "get_backup", arguments: { snapshot_id: "../../etc/passwd" } }).then(
      (x: any) => JSON.stringify(x),
      (e: Error) => e.message,
    );
    expect(bad).toMatch(/snapshot id/);
  });

  it("plan_restore shows what would be written and writes nothing", async () => {
    const target = join(a.tmp, "plan-target");
    // the newest snapshot this host committed was removed above: "latest" would be a rollback (14), so name one
    const latest = await tool(clients.read!, "plan_restore", { target });
    expect(latest.isError).toBe(true);
    expect(latest.text).toMatch(/rollback: latest of acme\/billing-agent .* is sequence 2, but this host committed sequence 3 there.*exit status 14/);
    const r = await tool(clients.read!, "plan_restore", { snapshot: first.snapshot_id, target });
    expect(r.isError, r.text).toBe(false);
    expect(r.data.plan).toMatchObject({ agent_id: "billing-agent", tenant: "acme", target });
    expect(r.data.plan.writes.map((w: any) => w.path)).toContain("state/agent.sqlite");
    expect(existsSync(target)).toBe(false);
  });

  it("request_restore records a pending request (restore-request tier only) that get_restore_request reads", async () => {
    const r = await tool(clients["restore-request"]!, "request_restore", { reason: "memory corrupted after step 2", snapshot: first.snapshot_id });
    expect(r.isError, r.text).toBe(false);
    expect(r.data).toMatchObject({ status: "pending", snapshot_id: first.snapshot_id, reason: "memory corrupted after step 2", decision: null, outcome: null });
    expect(r.data.requested_by).toMatch(/^mcp-stdio /);
    const g = await tool(clients.read!, "get_restore_request", { request_id: r.data.request_id });
    expect(g.data).toMatchObject({ request_id: r.data.request_id, status: "pending" });
    expect((await clients.checkpoint!.listTools()).tools.map((t) => t.name)).not.toContain("request_restore");
  });

  it("every call is in the agent's audit log with its tool, transport and outcome", async () => {
    const text = String(await (await a.store()).get("tenants/acme/agents/billing-agent/audit.jsonl"));
    const entries = text.trim().split("\n").map((l) => JSON.parse(l)).filter((e) => e.event === "agent-interface");
    const ops = new Set(entries.map((e) => e.operation));
    for (const op of ["create_backup", "get_backup", "list_snapshots", "verify_snapshot", "plan_restore", "request_restore", "get_restore_request"]) expect(ops, op).toContain(op);
    expect(entries.every((e) => e.transport === "mcp-stdio" && /^mcp-stdio /.test(e.by))).toBe(true);
    const refused = entries.find((e) => e.operation === "create_backup" && e.outcome === "refused");
    expect(refused).toMatchObject({ code: 2 });
    expect(entries.find((e) => e.operation === "create_backup" && e.outcome === "ok")).toMatchObject({ tier: "checkpoint", snapshot_id: first.snapshot_id });
  });
});

describe("checkpoints of a long-running server", () => {
  const manifest = async (path: string) => JSON.parse(String((await execa("tar", ["xOf", await a.file(path), "manifest.json"])).stdout));
  const live = async () => (await import("../../dist/state/workspace/workspace.js")).treeDigest(join(a.dir, "workspace"));
  const checkpoint = async (label: string) => {
    const r = await tool(clients.checkpoint!, "create_backup", { label });
    expect(r.isError, r.text).toBe(false);
    return { receipt: r.data, m: await manifest(bundleFile(r.data.snapshot_id)) };
  };

  it("reuse the workspace capture only while the workspace is unchanged: every manifest matches the live tree", async () => {
    const ws = join(a.dir, "workspace");
    const one = await checkpoint("ws-1");
    const two = await checkpoint("ws-2");
    const bundleOf = (x: any) => x.m.components.find((c: any) => c.path === "workspace/repo.bundle").sha256;
    expect(two.m.workspace).toEqual(one.m.workspace);
    expect(bundleOf(two)).toBe(bundleOf(one));
    expect(two.m.workspace.tree_sha256).toBe((await live()).sha256);
    // an untracked file changes: a new capture, and it holds the change
    writeFileSync(join(ws, "src", "draft-reply.txt"), "Dear customer, your refund is on its way.\n");
    const three = await checkpoint("ws-3");
    expect(three.m.workspace.tree_sha256).toBe((await live()).sha256);
    expect(three.m.workspace.tree_sha256).not.toBe(two.m.workspace.tree_sha256);
    // a commit moves HEAD; a file only staged changes git's status, not the tree
    await execa("git", ["add", "src/draft-reply.txt"], { cwd: ws });
    const four = await checkpoint("ws-4");
    expect(four.m.components.find((c: any) => c.path === "workspace/changes.patch").sha256).not.toBe(three.m.components.find((c: any) => c.path === "workspace/changes.patch").sha256);
    await execa("git", ["-c", "user.name=a", "-c", "user.email=a@example.invalid", "commit", "-qm", "reply"], { cwd: ws });
    const five = await checkpoint("ws-5");
    expect(five.m.workspace.commit).toBe((await execa("git", ["rev-parse", "HEAD"], { cwd: ws })).stdout);
    expect(five.m.workspace.tree_sha256).toBe((await live()).sha256);
    // each of them rebuilds to the tree its manifest names
    for (const x of [two, three, four, five]) {
      const v = await a.run(["verify", x.receipt.snapshot_id, "--identity", a.identity, "--json"]);
      expect(v.code, v.stderr).toBe(0);
      expect(json(v).checks.find((c: any) => c.name === "workspace").ok).toBe(true);
    }
  });
});

describe("the reference agent", () => {
  it("its worker takes a checkpoint through MCP after each finished task, and the checkpoint holds that task", async () => {
    const { TestSink } = await import("../../dist/drill/sink.js");
    const sink = new TestSink();
    await sink.start();
    try {
      const db = join(a.dir, "state", "agent.sqlite");
      const w = await execa("node", [join(ROOT, "fixtures/agent/worker.js")], {
        cwd: a.dir,
        reject: false,
        env: {
          ...a.env,
          AGENTBAK_DB_STATE: db,
          AGENTBAK_SINK_URL: sink.url,
          WORKER_CHECKPOINT_MCP: JSON.stringify(["node", join(ROOT, "bin/agentbak.js"), "mcp", "--tier", "checkpoint", "-c", a.config]),
        },
      });
      expect(w.exitCode, w.stderr).toBe(0);
      const cp = (await snapshots()).find((s) => s.label === "after task task-pending-1");
      expect(cp, JSON.stringify(await snapshots())).toBeDefined();
      // the checkpoint was taken after the task was committed complete: its signed cursor is that completion's event
      const live = new Database(db, { readonly: true });
      const done = live.prepare("SELECT max(id) AS id FROM events WHERE type = 'task.completed' AND task_id = 'task-pending-1'").get() as { id: number };
      live.close();
      const v = json(await a.run(["verify", cp.snapshot_id, "--json"]));
      expect(v.ok).toBe(true);
      const m = JSON.parse(String((await execa("tar", ["xOf", await a.file(cp.path), "manifest.json"])).stdout));
      expect(m.idempotency_key).toBe("after-task-pending-1");
      expect(Number(m.cursors.last_event_id)).toBeGreaterThanOrEqual(done.id);
    } finally {
      await sink.stop();
    }
  });
});
