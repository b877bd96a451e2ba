/**
 * Eleventh attack on issue 32's surfaces (docs/security-edges.md "Eleventh
 * attack"): `mcp` on stdio fed raw frames by a real child process, through
 * the real binary on a real agent (SQLite file, git workspace, repository).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { BIN, makeAgent, type TestAgent } from "../helpers.js";

let a: TestAgent;
beforeAll(async () => {
  a = await makeAgent({ sizeMb: 0.3 });
}, 120_000);
afterAll(() => a?.cleanup());

/** `agentbak mcp` as a child process spoken to in raw lines: what it answers, what it says on stderr, whether it still runs. */
class RawMcp {
  readonly p: ChildProcessWithoutNullStreams;
  out = "";
  err = "";
  exit: number | null | undefined = undefined;
  constructor(t: TestAgent) {
    this.p = spawn("node", [BIN, "mcp"], { cwd: t.dir, env: { ...process.env, ...t.env, NO_COLOR: "1" } });
    this.p.stdout.on("data", (d) => (this.out += d));
    this.p.stderr.on("data", (d) => (this.err += d));
    this.p.stdin.on("error", () => undefined); // a server gone: the test's checks say so
    this.p.on("exit", (c) => (this.exit = c));
  }
  /** Writes `text` (in 1 MiB pieces, minding back-pressure). */
  async write(text: string): Promise<void> {
    for (let i = 0; i < text.length && this.exit === undefined; i += 1 << 20)
      if (!this.p.stdin.write(text.slice(i, i + (1 << 20)))) await new Promise((r) => (this.p.stdin.once("drain", r), this.p.once("exit", r)));
  }
  /** The answers so far, one parsed JSON value per stdout line. */
  answers = (): any[] => this.out.split("\n").filter(Boolean).map((l) => JSON.parse(l));
  /** Waits until `n` answers have come (or 60 s), then returns them all. */
  async until(n: number): Promise<any[]> {
    for (let i = 0; i < 600 && this.answers().length < n && this.exit === undefined; i++) await new Promise((r) => setTimeout(r, 100));
    return this.answers();
  }
}
const line = (m: unknown) => JSON.stringify(m) + "\n";
const auditOf = (t: TestAgent) => join(t.repo, "tenants/acme/agents/billing-agent/audit.jsonl");
const ping = (id: number) => line({ jsonrpc: "2.0", id, method: "ping" });

describe("[E11] mcp on stdio: a frame that is not one JSON-RPC message is answered and refused, and the server goes on", () => {
  it("[E11] a 12 MiB line and a 1 MiB one: each refused with -32600 naming the limit, nothing buffered past it; the server still answers (it exited 0 in silence past the SDK's 10 MiB)", async () => {
    const m = new RawMcp(a);
    try {
      await m.write(line({ jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "a11", version: "1" } } }));
      await m.write(line({ jsonrpc: "2.0", method: "notifications/initialized" }));
      expect((await m.until(1))[0]).toMatchObject({ id: 0, result: { serverInfo: { name: "agentbak" } } });
      // a tool call whose label alone is 12 MiB, then one of 1 MiB, then a ping
      await m.write(line({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "list_snapshots", arguments: { label: "x".repeat(12 << 20) } } }));
      await m.write(line({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "list_snapshots", arguments: { label: "y".repeat(1 << 20) } } }));
      await m.write(ping(3));
      const got = await m.until(4);
      expect(m.exit, m.err).toBeUndefined();
      expect(got.slice(1)).toEqual([
        { jsonrpc: "2.0", id: null, error: { code: -32600, message: "a message larger than 64 KiB: not read (one JSON-RPC message per line, at most 64 KiB)" } },
        { jsonrpc: "2.0", id: null, error: { code: -32600, message: "a message larger than 64 KiB: not read (one JSON-RPC message per line, at most 64 KiB)" } },
        { jsonrpc: "2.0", id: 3, result: {} },
      ]);
      // one line each on stderr, naming what was wrong, none quoting the agent's bytes
      expect(m.err.trim().split("\n")).toHaveLength(2);
      expect(m.err).toMatch(/mcp: refused a message on stdin: a message larger than 64 KiB/);
      expect(m.err).not.toMatch(/xxxx|yyyy/);
    } finally {
      m.p.kill("SIGTERM");
    }
  });

  it("[E11] not JSON, a batch, ids of an object, a fraction, 1e300 and true: each answered (-32700 / -32600, its id when it has a usable one), none run, stderr escaped; unknown methods stay -32601", async () => {
    const m = new RawMcp(a);
    try {
      await m.write(line({ jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "a11", version: "1" } } }));
      await m.write(line({ jsonrpc: "2.0", method: "notifications/initialized" }));
      await m.until(1);
      await m.write("{not json \x1b[2J\u202e\n");
      const call = { method: "tools/call", params: { name: "list_snapshots", arguments: {} } };
      await m.write(line([{ jsonrpc: "2.0", id: 11, ...call }, { jsonrpc: "2.0", id: 12, ...call }]));
      for (const id of [{}, 1.5, 1e300, true]) await m.write(line({ jsonrpc: "2.0", id, ...call }));
      await m.write(line({ jsonrpc: "1.0", id: 13, method: "tools/list" }));
      await m.write(line({ jsonrpc: "2.0", id: 14, method: "evil/\x1b[2J" }));
      const audit = auditOf(a);
      await m.write(ping(15));
      await m.write(line({ jsonrpc: "2.0", id: 16, ...call }));
      const got = (await m.until(11)).slice(1);
      expect(m.exit, m.err).toBeUndefined();
      expect(got.map((g) => [g.id, g.error?.code ?? "ok"])).toEqual([
        [null, -32700],
        [null, -32600],
        [null, -32600],
        [null, -32600],
        [null, -32600],
        [null, -32600],
        [13, -32600],
        [14, -32601],
        [15, "ok"],
        [16, "ok"],
      ]);
      expect(got[1].error.message).toMatch(/batch/);
      // none of the refused calls ran: the audit log records every tool call, and holds the one answered (id 16) alone
      expect(readFileSync(audit, "utf8").match(/"operation":"list_snapshots"/g)).toHaveLength(1);
      // nothing of the agent's bytes on stderr raw: no ESC, no U+202E
      expect(m.err).not.toMatch(/[\x1b\u202e]/);
      expect(m.err.trim().split("\n")).toHaveLength(7);
    } finally {
      m.p.kill("SIGTERM");
    }
  });
});
