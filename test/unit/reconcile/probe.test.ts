// Probes against a real HTTP server and real commands: 200/404/other, the receipt fields kept, answers over 64 KiB unread, timeouts,
// credentials filled only into headers or env and never quoted, the drill's sink mode, and bounded retries.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { reconcile } from "../../../src/config/recovery.js";
import { makeProbe, probeWithRetries, type Probe, type ProbeAnswer } from "../../../src/reconcile/probe.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-probe-"));
const seen: { url: string; headers: IncomingHttpHeaders }[] = [];
let server: Server;
let base = "";
// what the provider answers, by the key's last path segment
const routes: Record<string, (res: import("node:http").ServerResponse) => void> = {
  done: (res) => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ receipt: "rc-1", data: { id: 7, ok: true }, internal: "not kept" })),
  nofield: (res) => res.writeHead(200).end(JSON.stringify({ other: 1 })),
  notjson: (res) => res.writeHead(200).end("<html>"),
  gone: (res) => res.writeHead(404).end("{}"),
  busy: (res) => res.writeHead(503).end("{}"),
  moved: (res) => res.writeHead(302, { location: `${base}/done` }).end(),
  big: (res) => res.writeHead(200).end(JSON.stringify({ receipt: "x".repeat(70 * 1024) })),
  bigchunked: (res) => {
    res.writeHead(200);
    for (let i = 0; i < 70; i++) res.write("x".repeat(1024));
    res.end();
  },
  silent: () => undefined,
};
beforeAll(async () => {
  server = createServer((req, res) => {
    seen.push({ url: req.url!, headers: req.headers });
    const last = decodeURIComponent(req.url!.split("/").at(-1)!);
    (routes[last] ?? routes.gone!)(res);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
  rmSync(tmp, { recursive: true, force: true });
});

const completed = { database: "state", sql: "UPDATE x SET y = 1" };
const q = (key: string) => ({ id: 1, idempotency_key: key, kind: "payment" });
const httpProbe = (o: { url?: string; headers?: Record<string, string>; fields?: string[]; timeout?: number; credential?: (n: string) => string; sinkUrl?: string } = {}) =>
  makeProbe(
    reconcile.parse({ probe: { http: { url: o.url ?? `${base}/v1/ops/{idempotency_key}`, headers: o.headers ?? {} } }, onCompleted: completed, receiptFields: o.fields, timeoutSeconds: o.timeout }),
    { generation: 4, credential: o.credential ?? (() => "s3cr3t-value"), sinkUrl: o.sinkUrl },
  );

describe("http probe", () => {
  it("200 with the receipt field is completed, keeping only that field; the key is URL-encoded into the template; the generation is sent", async () => {
    seen.length = 0;
    expect(await httpProbe()(q("done"))).toEqual({ state: "completed", receipt: "rc-1", detail: "provider answered 200 with a receipt" });
    expect(seen[0]!.url).toBe("/v1/ops/done");
    expect(seen[0]!.headers["agentbak-generation"]).toBe("4");
    await httpProbe()(q("a/b?c=d"));
    expect(seen[1]!.url).toBe("/v1/ops/a%2Fb%3Fc%3Dd");
  });

  it("several or dotted fields: a JSON object of them, a non-string single field as JSON; a missing one is unknown", async () => {
    expect((await httpProbe({ fields: ["data.id"] })(q("done"))).receipt).toBe("7");
    expect((await httpProbe({ fields: ["receipt", "data.ok"] })(q("done"))).receipt).toBe(JSON.stringify({ receipt: "rc-1", "data.ok": true }));
    expect(await httpProbe()(q("nofield"))).toEqual({ state: "unknown", receipt: null, detail: "provider answered 200 without receipt in a JSON body" });
    expect((await httpProbe()(q("notjson"))).state).toBe("unknown");
    // only own keys: a path through Object's prototype is missing, not a receipt
    expect((await httpProbe({ fields: ["constructor"] })(q("done"))).state).toBe("unknown");
  });

  it("404 is not found; any other status, a redirect included (not followed), is unknown", async () => {
    expect(await httpProbe()(q("gone"))).toEqual({ state: "not_found", receipt: null, detail: "provider answered 404: no record of this key" });
    expect(await httpProbe()(q("busy"))).toEqual({ state: "unknown", receipt: null, detail: "provider answered 503" });
    expect(await httpProbe()(q("moved"))).toEqual({ state: "unknown", receipt: null, detail: "provider answered 302" });
  });

  it("an answer over 64 KiB is not read (with or without a content-length)", async () => {
    expect(await httpProbe()(q("big"))).toEqual({ state: "unknown", receipt: null, detail: "provider's answer is larger than 64 KiB: not read" });
    expect((await httpProbe()(q("bigchunked"))).detail).toBe("provider's answer is larger than 64 KiB: not read");
  });

  it("no answer within the timeout, or nobody listening, is unknown saying so", async () => {
    const t0 = Date.now();
    expect(await httpProbe({ timeout: 0.3 })(q("silent"))).toEqual({ state: "unknown", receipt: null, detail: "no answer within 0.3s" });
    expect(Date.now() - t0).toBeLessThan(3000);
    // a port just freed: nobody listens there
    const spare = createServer();
    await new Promise<void>((r) => spare.listen(0, "127.0.0.1", r));
    const port = (spare.address() as AddressInfo).port;
    await new Promise((r) => spare.close(r));
    expect((await httpProbe({ url: `http://127.0.0.1:${port}/{idempotency_key}` })(q("x"))).detail).toBe("request failed (ECONNREFUSED)");
  });

  it("fills {credential:NAME} into headers when the request is built; a value with a line break is not sent and not quoted", async () => {
    seen.length = 0;
    const asked: string[] = [];
    const p = httpProbe({ headers: { authorization: "Bearer {credential:api}" }, credential: (n) => (asked.push(n), "tok-123") });
    expect(asked).toEqual([]);
    await p(q("done"));
    expect(asked).toEqual(["api"]);
    expect(seen[0]!.headers.authorization).toBe("Bearer tok-123");
    const bad = await httpProbe({ headers: { authorization: "{credential:api}" }, credential: () => "tok\r\nX-Evil: 1" })(q("done"));
    expect(bad).toEqual({ state: "unknown", receipt: null, detail: "credential api holds a line break or NUL: not sent in header authorization" });
    expect(seen).toHaveLength(1);
  });

  it("in a drill it asks the sink at <sink>/<key> and sends no credential", async () => {
    seen.length = 0;
    const p = httpProbe({ url: "https://pay.example/{idempotency_key}", headers: { authorization: "{credential:api}" }, credential: () => { throw new Error("no credential in a drill"); }, sinkUrl: `${base}/deliveries` });
    expect((await p(q("done"))).state).toBe("completed");
    expect(seen[0]!.url).toBe("/deliveries/done");
    expect(seen[0]!.headers.authorization).toBe("drill");
  });
});

describe("command probe", () => {
  const script = (name: string, body: string) => {
    const f = join(tmp, name);
    writeFileSync(f, `#!/bin/sh\n${body}\n`);
    chmodSync(f, 0o755);
    return f;
  };
  const cmdProbe = (command: string[], env: Record<string, string> = {}, o: { timeout?: number; sinkUrl?: string } = {}): Probe =>
    makeProbe(reconcile.parse({ probe: { command, env }, onCompleted: completed, timeoutSeconds: o.timeout }), { generation: 9, credential: (n) => `value-of-${n}`, sinkUrl: o.sinkUrl });

  it("gets the question as JSON on stdin and a scrubbed environment with the generation and its credentials", async () => {
    process.env.AGENTBAK_TEST_LEAK = "leaked";
    const out = join(tmp, "seen.txt");
    const p = cmdProbe([script("echo.sh", `cat > ${out}.in; env > ${out}.env; echo '{"state":"completed","receipt":"r-9"}'`)], { TOKEN: "{credential:api}" });
    expect(await p(q("k/1"))).toEqual({ state: "completed", receipt: "r-9", detail: "probe command: completed" });
    delete process.env.AGENTBAK_TEST_LEAK;
    expect(JSON.parse(readFileSync(`${out}.in`, "utf8"))).toEqual({ id: 1, idempotency_key: "k/1", kind: "payment" });
    const env = readFileSync(`${out}.env`, "utf8");
    expect(env).toContain("TOKEN=value-of-api\n");
    expect(env).toContain("AGENTBAK_GENERATION=9\n");
    expect(env).not.toContain("AGENTBAK_TEST_LEAK");
    expect(env).not.toContain("AGENTBAK_SINK_URL");
  });

  it("reads its states: not_found, unknown, a completed one without the receipt field, and anything else", async () => {
    expect(await cmdProbe([script("nf.sh", `echo '{"state":"not_found"}'`)])(q("k"))).toEqual({ state: "not_found", receipt: null, detail: "probe command: not found" });
    expect((await cmdProbe([script("un.sh", `echo '{"state":"unknown"}'`)])(q("k"))).detail).toBe("probe command: unknown");
    expect((await cmdProbe([script("nr.sh", `echo '{"state":"completed"}'`)])(q("k"))).detail).toMatch(/^probe command printed no \{"state": .* \(a completed one needs receipt\)$/);
    expect((await cmdProbe([script("junk.sh", "echo hello")])(q("k"))).state).toBe("unknown");
  });

  it("a failing, missing, silent or too talkative command is unknown saying which", async () => {
    expect((await cmdProbe([script("fail.sh", "exit 4")])(q("k"))).detail).toBe("probe command exited 4");
    expect((await cmdProbe([join(tmp, "no-such-probe")])(q("k"))).detail).toMatch(/^probe command could not start \(ENOENT\)$/);
    expect((await cmdProbe([script("slow.sh", "sleep 20")], {}, { timeout: 0.3 })(q("k"))).detail).toBe("probe command gave no answer within 0.3s (its process group was killed)");
    expect((await cmdProbe([script("talk.sh", "head -c 100000 /dev/zero | tr '\\\\0' x")])(q("k"))).detail).toBe("probe command's answer is larger than 64 KiB: not read");
  });

  it("a credential with a NUL or line break is not put in the environment; in a drill the sink URL is, and credentials are \"drill\"", async () => {
    const bad = makeProbe(reconcile.parse({ probe: { command: ["true"], env: { T: "{credential:api}" } }, onCompleted: completed }), { generation: 1, credential: () => "a\nb" });
    expect((await bad(q("k"))).detail).toBe("credential api holds a line break or NUL: not sent in env T");
    const out = join(tmp, "drill.env");
    const p = cmdProbe([script("drill.sh", `env > ${out}; echo '{"state":"not_found"}'`)], { T: "{credential:api}" }, { sinkUrl: "http://127.0.0.1:9/deliveries" });
    expect((await p(q("k"))).state).toBe("not_found");
    const env = readFileSync(out, "utf8");
    expect(env).toContain("AGENTBAK_SINK_URL=http://127.0.0.1:9/deliveries\n");
    expect(env).toContain("T=drill\n");
  });
});

describe("probeWithRetries", () => {
  const scripted = (answers: ProbeAnswer["state"][]) => {
    let n = 0;
    const p: Probe = async () => {
      const state = answers[Math.min(n++, answers.length - 1)]!;
      return { state, receipt: state === "completed" ? "r" : null, detail: `answer ${n}` };
    };
    return { p, calls: () => n };
  };

  it("stops at the first known answer, counting attempts", async () => {
    const s = scripted(["unknown", "completed"]);
    const t0 = Date.now();
    expect(await probeWithRetries(s.p, q("k"), 3)).toEqual({ state: "completed", receipt: "r", detail: "answer 2", attempts: 2 });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(240); // waited 250 ms before the second attempt
    expect(s.calls()).toBe(2);
    const n = scripted(["not_found"]);
    expect((await probeWithRetries(n.p, q("k"), 3)).attempts).toBe(1);
  });

  it("unknown after every attempt says how many", async () => {
    const s = scripted(["unknown"]);
    expect(await probeWithRetries(s.p, q("k"), 2)).toEqual({ state: "unknown", receipt: null, detail: "answer 2 (after 2 attempts)", attempts: 2 });
    expect((await probeWithRetries(scripted(["unknown"]).p, q("k"), 1)).detail).toBe("answer 1 (after 1 attempt)");
  });
});
