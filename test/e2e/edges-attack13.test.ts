/**
 * Thirteenth attack on issue 32's surfaces (docs/security-edges.md "Thirteenth
 * attack"): `mcp` on stdio's own line framing fed raw bytes by a real child
 * process, and the HTTP server's bodies, through the real binary on a real
 * agent (SQLite file, git workspace, folder repository).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { copyFileSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { BIN, backedUpAgent, secondHome, type TestAgent } from "../helpers.js";
import { makeToken, startServer, type Server } from "../agentapi-helpers.js";

const AGENT = "tenants/acme/agents/billing-agent";

/** `agentbak mcp` as a child process spoken to in raw bytes: its answers, its stderr, its exit. */
class RawMcp {
  readonly p: ChildProcessWithoutNullStreams;
  out = "";
  err = "";
  exit: number | null | undefined = undefined;
  readonly exited: Promise<number | null>;
  constructor(t: TestAgent, args: string[] = []) {
    this.p = spawn("node", [BIN, "mcp", ...args], { cwd: t.dir, env: { ...process.env, ...t.env, NO_COLOR: "1" } });
    this.p.stdout.on("data", (d) => (this.out += d));
    this.p.stderr.on("data", (d) => (this.err += d));
    this.p.stdin.on("error", () => undefined);
    this.exited = new Promise((r) => this.p.on("exit", (c) => r((this.exit = c))));
  }
  write = (b: string | Buffer) => new Promise<void>((r) => this.p.stdin.write(b, () => r()));
  answers = (): any[] => this.out.split("\n").filter(Boolean).map((l) => JSON.parse(l));
  async until(n: number): Promise<any[]> {
    for (let i = 0; i < 600 && this.answers().length < n && this.exit === undefined; i++) await new Promise((r) => setTimeout(r, 100));
    return this.answers();
  }
}
const line = (m: unknown) => JSON.stringify(m) + "\n";
const INIT =
  line({ jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "a13", version: "1" } } }) +
  line({ jsonrpc: "2.0", method: "notifications/initialized" });
const ping = (id: number) => line({ jsonrpc: "2.0", id, method: "ping" });
/** A ping whose line (without its line ending) is exactly `bytes` bytes long, padded with 3-byte characters (€). */
function pingOf(id: number, bytes: number): string {
  const head = `{"jsonrpc":"2.0","id":${id},"method":"ping","params":{"_meta":{"pad":"`;
  const tail = `"}}}`;
  const room = bytes - Buffer.byteLength(head + tail);
  const s = head + "€".repeat(Math.floor(room / 3)) + "x".repeat(room % 3) + tail;
  expect(Buffer.byteLength(s)).toBe(bytes);
  return s;
}
const snapshotsOf = (t: TestAgent) => readdirSync(join(t.repo, AGENT, "snapshots")).filter((f) => f.endsWith(".commit"));
const auditLines = (t: TestAgent) => readFileSync(join(t.repo, AGENT, "audit.jsonl"), "utf8").trim().split("\n").length;

let a: TestAgent;
beforeAll(async () => {
  a = await backedUpAgent();
}, 120_000);
afterAll(() => a?.cleanup());

describe("[E11] mcp on stdio: what the client wrote before closing stdin is answered", () => {
  it("[E11] a create_backup line followed at once by the end of stdin is answered with its snapshot before mcp exits (it committed and the answer was dropped)", async () => {
    const before = snapshotsOf(a).length;
    const m = new RawMcp(a, ["--tier", "checkpoint"]);
    await m.write(INIT + line({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "create_backup", arguments: { idempotency_key: "a13-eof" } } }));
    m.p.stdin.end();
    expect(await m.exited, m.err).toBe(0);
    const got = m.answers();
    const answer = got.find((g) => g.id === 1);
    expect(answer, m.out).toBeDefined();
    expect(answer.result.isError).toBeFalsy();
    const id = answer.result.structuredContent.snapshot_id as string;
    expect(snapshotsOf(a)).toHaveLength(before + 1);
    expect(snapshotsOf(a)).toContain(`${id}.commit`);
  });

  it("[E11] stdin closed in the middle of a line: nothing runs, and one line on stderr says how many bytes were not read", async () => {
    const m = new RawMcp(a, ["--tier", "checkpoint"]);
    await m.write(INIT);
    await m.until(1);
    const audit = auditLines(a);
    const before = snapshotsOf(a).length;
    const part = `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"create_backup","arguments":{}}}`;
    await m.write(part);
    m.p.stdin.end();
    expect(await m.exited, m.err).toBe(0);
    expect(m.err).toContain(`mcp: stdin closed in the middle of a message (${Buffer.byteLength(part)} bytes after the last newline): not read`);
    expect(m.answers().map((g) => g.id)).toEqual([0]);
    expect(snapshotsOf(a)).toHaveLength(before);
    expect(auditLines(a)).toBe(audit);
  });
});

describe("[E11] mcp on stdio: bytes that are not UTF-8, and the 64 KiB limit with CRLF", () => {
  it("[E11] a line holding bytes that are not UTF-8 is refused (-32700) and runs nothing, where it ran with U+FFFD in their place; the valid line after it in the same write is answered", async () => {
    const m = new RawMcp(a, ["--tier", "checkpoint"]);
    await m.write(INIT);
    await m.until(1);
    const audit = auditLines(a);
    const before = snapshotsOf(a).length;
    const call = (label: Buffer) =>
      Buffer.concat([Buffer.from(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"create_backup","arguments":{"label":"l`), label, Buffer.from(`"}}}\n`)]);
    // an overlong encoding of "/", a lone continuation byte, 0xff 0xfe, an encoded surrogate (ED A0 80)
    await m.write(Buffer.concat([call(Buffer.from([0xc0, 0xaf])), call(Buffer.from([0x80])), call(Buffer.from([0xff, 0xfe])), call(Buffer.from([0xed, 0xa0, 0x80])), Buffer.from(ping(6))]));
    const got = (await m.until(6)).slice(1);
    expect(got.map((g) => [g.id, g.error?.code ?? "ok"])).toEqual([
      [null, -32700],
      [null, -32700],
      [null, -32700],
      [null, -32700],
      [6, "ok"],
    ]);
    expect(got[0].error.message).toBe("not UTF-8 (one JSON-RPC message per line, in UTF-8)");
    expect(snapshotsOf(a)).toHaveLength(before);
    expect(auditLines(a)).toBe(audit);
    expect(m.err.match(/mcp: refused a message on stdin: not UTF-8/g)).toHaveLength(4);
    m.p.kill("SIGTERM");
  });

  it("[E11] a line of exactly 64 KiB (bytes, of 3-byte characters) ending in CRLF is read as one ending in LF; one byte more is refused either way", async () => {
    const m = new RawMcp(a);
    await m.write(INIT);
    await m.until(1);
    await m.write(pingOf(1, 65536) + "\r\n");
    await m.write(pingOf(2, 65536) + "\n");
    await m.write(pingOf(3, 65537) + "\r\n");
    await m.write(pingOf(4, 65537) + "\n");
    await m.write(pingOf(5, 65535) + "\r\n");
    const got = (await m.until(6)).slice(1);
    expect(got.map((g) => [g.id, g.error?.code ?? "ok"])).toEqual([
      [1, "ok"],
      [2, "ok"],
      [null, -32600],
      [null, -32600],
      [5, "ok"],
    ]);
    m.p.kill("SIGTERM");
  });
});

describe("[E11] HTTP: a body that is not UTF-8 is refused, never stored with U+FFFD in its place", () => {
  let s: Server;
  let token: string;
  beforeAll(async () => {
    token = (await makeToken(a, "acme", "billing-agent", "restore-request")).token;
    s = await startServer(a);
  }, 60_000);
  afterAll(() => s?.stop());

  const post = (path: string, body: Buffer, key?: string) =>
    fetch(s.url + path, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json", ...(key ? { "idempotency-key": key } : {}) }, body });

  it("[E11] POST /v1/restores with a reason holding 0xff, POST /v1/backups with such a label, POST /mcp with such an argument: 400 code 2, nothing recorded", async () => {
    const snap = snapshotsOf(a)[0]!.replace(/\.commit$/, "");
    const requests = () => {
      try {
        return readdirSync(join(a.repo, AGENT, "requests")).length;
      } catch {
        return 0;
      }
    };
    const [reqs, snaps, audit] = [requests(), snapshotsOf(a).length, auditLines(a)];
    const bad = Buffer.from([0xff, 0xfe]);
    const answers = [
      await post("/v1/restores", Buffer.concat([Buffer.from(`{"snapshot":"${snap}","reason":"r`), bad, Buffer.from(`"}`)]), "a13-utf8-r"),
      await post("/v1/backups", Buffer.concat([Buffer.from(`{"label":"l`), bad, Buffer.from(`"}`)]), "a13-utf8-b"),
      await fetch(s.url + "/mcp", {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json", accept: "application/json, text/event-stream" },
        body: Buffer.concat([Buffer.from(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"request_restore","arguments":{"snapshot":"${snap}","reason":"r`), bad, Buffer.from(`"}}}`)]),
      }),
    ];
    for (const r of answers) {
      expect(r.status).toBe(400);
      expect(await r.json()).toEqual({ error: { code: 2, message: "request body is not UTF-8 (JSON is UTF-8)" } });
    }
    expect([requests(), snapshotsOf(a).length, auditLines(a)]).toEqual([reqs, snaps, audit]);
    // the same bodies in UTF-8 are taken
    const good = await post("/v1/restores", Buffer.from(`{"snapshot":"${snap}","reason":"r\u00ff"}`), "a13-utf8-ok");
    expect(good.status).toBe(202);
    expect((await good.json()).reason).toBe("r\u00ff");
  });
});

describe("[E7] audit verify on a host that never verified the log", () => {
  it("[E7] a log emptied with its head record removed warns (3) as one cut with its head removed does, where it answered '0 entries verified' (0) in silence", async () => {
    const t = await backedUpAgent();
    try {
      // one audited operation: a restore request through mcp on stdio
      const m = new RawMcp(t, ["--tier", "restore-request"]);
      const snap = snapshotsOf(t)[0]!.replace(/\.commit$/, "");
      await m.write(INIT + line({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "request_restore", arguments: { snapshot: snap, reason: "a13" } } }));
      m.p.stdin.end();
      expect(await m.exited, m.err).toBe(0);
      const dir = join(t.repo, AGENT);
      expect(auditLines(t)).toBeGreaterThan(0);
      rmSync(join(dir, "audit.head.json"));
      const fresh = secondHome(t, "fresh-host");
      // cut to nothing: the file is there, empty
      writeFileSync(join(dir, "audit.jsonl"), "");
      const r = await t.run(["audit", "verify"], fresh);
      expect(r.code, r.stderr).toBe(3);
      expect(r.stderr).toContain("audit.head.json is missing");
      expect(r.stderr).toContain("entries cut off the end of the log can not be detected from the repository alone");
      // the same in --json: the warning, no entries
      const j = await t.run(["audit", "verify", "--json"], fresh);
      expect(j.code).toBe(3);
      expect(JSON.parse(j.stdout)).toMatchObject({ entries: 0, warnings: [expect.stringContaining("audit.head.json is missing")] });
    } finally {
      t.cleanup();
    }
  });
});

describe("[E4] verify of a chain link replaced by another agent's genuine bundle", () => {
  it("[E4] verify <that link> is 13 naming it as another agent's bundle in its place, never the other agent's chain", async () => {
    const t = await backedUpAgent();
    try {
      expect((await t.run(["backup", "--incremental"])).code).toBe(0);
      expect((await t.run(["backup", "--incremental"])).code).toBe(0);
      const mine = readdirSync(join(t.repo, AGENT, "snapshots")).filter((f) => f.endsWith(".agentbak")).sort();
      expect(mine).toHaveLength(3);
      const other = join(t.dir, "other-agent.json");
      const c = JSON.parse(readFileSync(t.config, "utf8"));
      c.agent.id = "other-agent";
      writeFileSync(other, JSON.stringify(c, null, 2));
      expect((await t.run(["backup", "-c", other])).code).toBe(0);
      expect((await t.run(["backup", "-c", other, "--incremental"])).code).toBe(0);
      const theirs = readdirSync(join(t.repo, "tenants/acme/agents/other-agent/snapshots")).filter((f) => f.endsWith(".agentbak")).sort();
      copyFileSync(join(t.repo, "tenants/acme/agents/other-agent/snapshots", theirs[1]!), join(t.repo, AGENT, "snapshots", mine[1]!));
      const link = mine[1]!.replace(/\.agentbak$/, "");
      const r = await t.run(["verify", link]);
      expect(r.code, r.stderr).toBe(13);
      expect(r.stderr).toContain(`snapshot ${link}: manifest names another snapshot, agent or tenant than where it is stored`);
      for (const f of theirs) expect(r.stderr).not.toContain(f.replace(/\.agentbak$/, ""));
      // its child names it the same way, through the chain
      const leaf = await t.run(["verify", mine[2]!.replace(/\.agentbak$/, "")]);
      expect(leaf.code).toBe(13);
      expect(leaf.stderr).toContain(`parent snapshot ${link} of`);
    } finally {
      t.cleanup();
    }
  });
});
