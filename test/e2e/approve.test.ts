// Restore requests end to end: an agent asks through MCP, an operator approves (the restore really
// runs, with restore's policy) or denies (the agent sees the reason) with the real binary, on a
// TTY (the plan shown, a question asked) or with --yes; the agent follows the state change.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { existsSync } from "node:fs";
import { join } from "node:path";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import * as pty from "node-pty";
import { BIN, json, makeAgent, type TestAgent } from "../helpers.js";
import { mcpStdio, tool } from "../agentapi-helpers.js";

let a: TestAgent;
let agent: Client;
let s1: any;
let s2: any;

beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
  s1 = json(await a.run(["backup", "--json", "--label", "one"]));
  s2 = json(await a.run(["backup", "--json", "--label", "two"]));
  agent = await mcpStdio(a, ["--tier", "restore-request"]);
}, 120_000);
afterAll(async () => {
  await agent?.close();
  a.cleanup();
}, 60_000);

const ask = async (snapshot: string, reason: string, target?: string) => {
  const r = await tool(agent, "request_restore", { snapshot, reason, ...(target ? { target } : {}) });
  if (r.isError) throw new Error(r.text);
  return r.data;
};
const status = async (id: string) => (await tool(agent, "get_restore_request", { request_id: id })).data;

describe("approve", () => {
  let req: any;
  const target = () => join(a.tmp, "restored-1");

  it("an agent's request waits: agentbak requests lists it, and nothing is restored", async () => {
    req = await ask(s2.snapshot_id, "memory table corrupted by a bad tool call", target());
    expect(req.status).toBe("pending");
    const list = json(await a.run(["requests", "--json"]));
    expect(list.map((r: any) => [r.request_id, r.status, r.reason])).toEqual([[req.request_id, "pending", "memory table corrupted by a bad tool call"]]);
    expect(existsSync(target())).toBe(false);
  });

  it("without a TTY approve needs --yes (exit 2) and changes nothing", async () => {
    const r = await a.run(["approve", req.request_id]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/no TTY: pass --yes/);
    expect(existsSync(target())).toBe(false);
    expect((await status(req.request_id)).status).toBe("pending");
  });

  it("on a TTY approve shows the request and the plan and asks; no leaves it pending", async () => {
    const p = pty.spawn("node", [BIN, "approve", req.request_id], { cwd: a.dir, env: { ...process.env, ...a.env, NO_COLOR: "1" } as Record<string, string>, cols: 200, rows: 50 });
    let out = "";
    const exit = new Promise<number>((resolve) => p.onExit((e) => resolve(e.exitCode)));
    p.onData((d) => {
      out += d;
      if (/Approve restore request/.test(out) && !out.includes("\u0000sent")) {
        out += "\u0000sent";
        p.write("n\r");
      }
    });
    expect(await exit).toBe(14);
    expect(out).toMatch(/memory table corrupted by a bad tool call/);
    expect(out).toMatch(/Restore plan for billing-agent \(tenant acme\)/);
    expect(out).toMatch(new RegExp(`snapshot\\s+${s2.snapshot_id}`));
    expect(out).toMatch(/not approved/);
    expect(existsSync(target())).toBe(false);
    expect((await status(req.request_id)).status).toBe("pending");
  });

  it("approve --yes runs the restore into the proposed folder; the agent sees it restored", async () => {
    const r = await a.run(["approve", req.request_id, "--yes", "--json"]);
    expect([0, 3], r.stderr).toContain(r.code); // 3: a credential reference is absent on this host
    const out = json(r);
    expect(out.restore).toMatchObject({ restored: true, repeated: false, generation: 1 });
    const db = new Database(join(target(), "state", "agent.sqlite"), { readonly: true });
    expect(db.pragma("integrity_check", { simple: true })).toBe("ok");
    db.close();
    expect(existsSync(join(target(), ".agentbak", "SUSPENDED"))).toBe(true);
    const st = await status(req.request_id);
    expect(st).toMatchObject({ status: "restored", decision: { decision: "approved" }, outcome: { status: "restored", generation: 1, target: target() } });
    expect(st.decision.by).toMatch(/@/);
  });

  it("approving again returns the first result and restores nothing twice", async () => {
    const r = await a.run(["approve", req.request_id, "--yes", "--json"]);
    expect([0, 3]).toContain(r.code);
    expect(json(r).restore).toMatchObject({ repeated: true, generation: 1 });
  });

  it("a request that restore's policy refuses is recorded as failed, with the reason; approving it with the override works", async () => {
    // s1 is older than the sequence this host has now restored: rollback
    const old = await ask(s1.snapshot_id, "go back further", join(a.tmp, "restored-2"));
    const r = await a.run(["approve", old.request_id, "--yes"]);
    expect(r.code).toBe(14);
    expect(r.stderr).toMatch(/rollback: snapshot sequence 1 is older than the highest seen here \(2\)/);
    expect(existsSync(join(a.tmp, "restored-2"))).toBe(false);
    const st = await status(old.request_id);
    expect(st.status).toBe("failed");
    expect(st.outcome.error).toMatchObject({ code: 14 });
    expect(st.outcome.error.message).toMatch(/rollback/);
    const ok = await a.run(["approve", old.request_id, "--yes", "--allow-rollback", "--json"]);
    expect([0, 3], ok.stderr).toContain(ok.code);
    expect((await status(old.request_id)).status).toBe("restored");
  });

  it("a request without a target needs --target", async () => {
    const r0 = await ask("latest", "no target given");
    const r = await a.run(["approve", r0.request_id, "--yes"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/names no target folder: pass --target DIR/);
  });
});

describe("deny", () => {
  it("deny needs --reason and, without a TTY, --yes; the agent then sees the denial and its reason", async () => {
    const req = await ask("latest", "please roll back");
    expect((await a.run(["deny", req.request_id, "--yes"])).code).toBe(2);
    const noYes = await a.run(["deny", req.request_id, "--reason", "use last night's snapshot"]);
    expect(noYes.code).toBe(2);
    expect(noYes.stderr).toMatch(/no TTY: pass --yes/);
    expect((await status(req.request_id)).status).toBe("pending");
    const r = await a.run(["deny", req.request_id, "--reason", "use last night's snapshot", "--yes", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const st = await status(req.request_id);
    expect(st).toMatchObject({ status: "denied", decision: { decision: "denied", reason: "use last night's snapshot" } });
    const ap = await a.run(["approve", req.request_id, "--yes", "--target", join(a.tmp, "never")]);
    expect(ap.code).toBe(14);
    expect(ap.stderr).toMatch(/was denied by .*: use last night's snapshot/);
    expect(existsSync(join(a.tmp, "never"))).toBe(false);
  });

  it("an approved request can not be denied", async () => {
    const req = json(await a.run(["requests", "--all", "--json"])).find((r: any) => r.status === "restored");
    const r = await a.run(["deny", req.request_id, "--reason", "too late", "--yes"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/already approved/);
  });

  it("decisions are in the agent's audit log", async () => {
    const text = String(await (await a.store()).get("tenants/acme/agents/billing-agent/audit.jsonl"));
    const events = text.trim().split("\n").map((l) => JSON.parse(l).event);
    for (const e of ["restore-request", "restore-approved", "restore", "restore-request-restored", "restore-request-failed", "restore-denied"]) expect(events, e).toContain(e);
  });

  it("an unknown or malformed request id", async () => {
    expect((await a.run(["approve", "req-20200101T000000000Z-00000000", "--yes"])).code).toBe(10);
    const bad = await a.run(["deny", "../../x", "--reason", "r", "--yes"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/not a restore request id/);
  });
});
