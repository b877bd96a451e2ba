/**
 * Is the original runtime still running (restore/liveness.ts)? Only a definite
 * "stopped" may let a restored agent act: a live pid, an HTTP answer or a
 * command exiting 0 is alive; a missing pid file, a refused connection or a
 * non-zero exit is stopped; anything that can not be read is unknown. Real
 * processes, a real listening socket, real commands (the two that wait out a
 * timeout run concurrently).
 */
import { spawn, spawnSync } from "node:child_process";
import { createServer } from "node:http";
import { createServer as netServer, type AddressInfo } from "node:net";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { checkLiveness } from "../../../src/restore/liveness.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-live-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const at = (p: string) => join(dir, p);
/** a port nothing listens on: one the kernel handed out and that was closed again */
async function freePort(): Promise<number> {
  const s = netServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}
const cfg = (o: object) => ({ timeoutSeconds: 2, ...o }) as Parameters<typeof checkLiveness>[0];

describe("pidFile", () => {
  it("a running pid is alive, an exited one stopped, no file stopped; junk or a folder is unknown", async () => {
    const child = spawn(process.execPath, ["-e", "setTimeout(() => {}, 10000)"]);
    try {
      writeFileSync(at("run.pid"), `${child.pid}\n`);
      writeFileSync(at("dead.pid"), String(spawnSync(process.execPath, ["-e", "0"]).pid));
      writeFileSync(at("junk.pid"), "not-a-pid");
      writeFileSync(at("neg.pid"), "-1");
      mkdirSync(at("dir.pid"));
      const states = [];
      for (const f of ["run.pid", "dead.pid", "none.pid", "junk.pid", "neg.pid", "dir.pid"]) states.push((await checkLiveness(cfg({ pidFile: f }), at))[0]);
      expect(states.map((s) => s!.state)).toEqual(["alive", "stopped", "stopped", "unknown", "unknown", "unknown"]);
      expect(states[0]!.detail).toBe(`pid ${child.pid} (${at("run.pid")}) is running`);
      expect(states[2]!.detail).toBe(`${at("none.pid")}: no pid file`);
      expect(states[3]!.detail).toBe(`${at("junk.pid")} does not hold a pid`);
      expect(states[5]!.detail).toBe(`${at("dir.pid")}: EISDIR`);
    } finally {
      child.kill("SIGKILL");
    }
  });
});

describe("http", () => {
  it("any answer (even 500, even a redirect) is alive; a refused connection is stopped", async () => {
    const srv = createServer((req, res) => { res.writeHead(req.url === "/r" ? 302 : 500, { location: "http://elsewhere/" }); res.end("x"); });
    await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
    const port = (srv.address() as AddressInfo).port;
    try {
      const [a] = await checkLiveness(cfg({ http: `http://127.0.0.1:${port}/health` }), at);
      expect(a).toEqual({ how: "http", state: "alive", detail: `http://127.0.0.1:${port}/health answered 500` });
      const [r] = await checkLiveness(cfg({ http: `http://127.0.0.1:${port}/r` }), at);
      expect(r!.detail).toMatch(/answered 302$/);
    } finally {
      await new Promise((r) => srv.close(r));
    }
    // another port: this process's connection pool may still hold a socket to the first one
    const closed = await freePort();
    const [s] = await checkLiveness(cfg({ http: `http://127.0.0.1:${closed}/health` }), at);
    expect(s).toEqual({ how: "http", state: "stopped", detail: `http://127.0.0.1:${closed}/health: ECONNREFUSED (nothing listens)` });
  });

  it.concurrent("a socket that accepts and never answers is unknown at the timeout, not stopped", async () => {
    const held: import("node:net").Socket[] = [];
    const srv = netServer((s) => held.push(s));
    await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
    const port = (srv.address() as AddressInfo).port;
    try {
      const [u] = await checkLiveness(cfg({ http: `http://127.0.0.1:${port}/`, timeoutSeconds: 1 }), at);
      expect(u).toEqual({ how: "http", state: "unknown", detail: `http://127.0.0.1:${port}/: no answer within 1s` });
    } finally {
      held.forEach((s) => s.destroy());
      await new Promise((r) => srv.close(r));
    }
  });
});

describe("command", () => {
  it.concurrent("exit 0 is alive, another exit stopped; a command that can not start, or is killed, is unknown", async () => {
    const ask = async (command: string[], t = 2) => (await checkLiveness(cfg({ command, timeoutSeconds: t }), at))[0]!;
    expect(await ask(["true"])).toEqual({ how: "command", state: "alive", detail: "true exited 0" });
    expect(await ask(["sh", "-c", "exit 3"])).toEqual({ how: "command", state: "stopped", detail: "sh -c exit 3 exited 3" });
    expect((await ask([at("no-such-command")])).state).toBe("unknown");
    expect(await ask(["sh", "-c", "kill -9 $$"])).toMatchObject({ state: "unknown", detail: "sh -c kill -9 $$: killed by SIGKILL" });
    expect(await ask(["sleep", "30"], 1)).toEqual({ how: "command", state: "unknown", detail: "sleep 30: no answer within 1s" });
  });

  it("every configured check answers, in the order pid file, http, command", async () => {
    const port = await freePort();
    const r = await checkLiveness(cfg({ pidFile: "none.pid", http: `http://127.0.0.1:${port}/`, command: ["false"] }), at);
    expect(r.map((x) => [x.how, x.state])).toEqual([["pidFile", "stopped"], ["http", "stopped"], ["command", "stopped"]]);
  });
});
