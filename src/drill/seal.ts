/**
 * The sealed drill (docs/drills.md, "Sealed drill"): the agent's worker runs
 * in a network namespace of its own (`unshare -n`; `-rn`, a user namespace
 * too, when not root) that has only `lo`. Inside it a small relay listens on
 * 127.0.0.1 at the test sink's port and hands each connection to a unix
 * socket (the file system is shared) that the drill bridges to the sink, so
 * the sink URL is the same and the sink is the only thing reachable. Every
 * `connect()` of the worker and its children is traced (`strace -f -e
 * trace=connect`): each one to anything but the sink is an egress attempt,
 * blocked (nothing else exists in the namespace) and counted.
 */
import { execa } from "execa";
import { readdirSync, readFileSync } from "node:fs";
import { createConnection, createServer, type Server } from "node:net";
import { join } from "node:path";
import type { CheckLog } from "./checklog.js";

/**
 * Runs inside the namespace (`node -e`): lo up, listen at the sink's port on 127.0.0.1 relaying to the bridge's
 * unix socket, then the worker under strace; exits as the worker did (a signal re-raised), and the worker dies
 * with it (pdeathsig on strace and on the worker: killing this process kills them).
 */
const RELAY = `
const net = require("node:net"), cp = require("node:child_process");
const [sock, port, trace, ...cmd] = process.argv.slice(1);
cp.execFileSync("ip", ["link", "set", "lo", "up"]);
const srv = net.createServer((c) => { const u = net.connect(sock); c.pipe(u); u.pipe(c); c.on("error", () => u.destroy()); u.on("error", () => c.destroy()); });
srv.listen(Number(port), "127.0.0.1", () => {
  const ch = cp.spawn("setpriv", ["--pdeathsig", "KILL", "--", "strace", "-f", "-qq", "--seccomp-bpf", "-e", "trace=connect", "-o", trace, "--", "setpriv", "--pdeathsig", "KILL", "--", ...cmd], { stdio: "inherit" });
  for (const s of ["SIGTERM", "SIGINT"]) process.on(s, () => ch.kill(s));
  ch.on("exit", (code, sig) => { srv.close(); if (sig) process.kill(process.pid, sig); else process.exit(code ?? 1); });
});`;

/** The namespace command for this user: root makes a network namespace, anyone else a user namespace with it. */
const unshareArgs = () => (process.getuid?.() === 0 ? ["-n"] : ["-rn"]);
/** How the namespace was made, for the report: as root, or inside a user namespace of its own. */
const HOW = () => (process.getuid?.() === 0 ? "" : " inside a user namespace (unshare -rn: not root)");

/** What the report says of the network: sealed or not (and why), and the connection attempts blocked. */
export interface NetworkReport {
  sealed: boolean;
  detail: string;
  egress_blocked: number;
  /** each destination tried, how often, and what the worker got (ENETUNREACH, ECONNREFUSED, ...) */
  attempts: { to: string; count: number; result: string }[];
  /** unix sockets of the file system the worker connected to: the namespace seals the network, not those (then not sealed) */
  unix_connected: string[];
}

/** The file-system unix sockets a trace's connect() calls reached (abstract ones, `@…`, belong to the namespace). */
export function unixConnects(trace: string): string[] {
  const out: string[] = [];
  for (const m of trace.matchAll(/connect\(\d+, \{sa_family=AF_UNIX, sun_path="((?:[^"\\]|\\.)*)"\}, \d+\) = 0/g)) out.push(m[1]!);
  return out;
}

/**
 * Whether the worker can be sealed here: `unshare` can make the namespace and bring `lo` up in it, and strace runs.
 * @returns null when it can, else why not (one line)
 */
export async function sealUnavailable(): Promise<string | null> {
  const tries: [string, string[]][] = [
    ["unshare", [...unshareArgs(), "--", "ip", "link", "set", "lo", "up"]],
    ["strace", ["-V"]],
    ["setpriv", ["--version"]],
  ];
  for (const [cmd, args] of tries) {
    const r = await execa(cmd, args, { reject: false, stdin: "ignore", timeout: 10_000 });
    if (r.exitCode !== 0) {
      const why = (r as { code?: string }).code === "ENOENT" ? "not found" : String(r.stderr).trim().split("\n")[0] || `exit ${r.exitCode ?? r.signal}`;
      return `${cmd} ${args.join(" ")}: ${why}`;
    }
  }
  return null;
}

/** Parses strace's `connect(...) = ...` lines: destination (address:port) and result; unix sockets are left out. */
export function connectAttempts(trace: string): { to: string; host: string; port: number; result: string }[] {
  const out: { to: string; host: string; port: number; result: string }[] = [];
  for (const line of trace.split("\n")) {
    const m = /connect\(\d+, \{sa_family=AF_INET6?, sin6?_port=htons\((\d+)\), (?:sin_addr=inet_addr\("([^"]+)"\)|sin6_flowinfo=[^,]*, inet_pton\(AF_INET6, "([^"]+)")/.exec(line);
    if (!m) continue;
    const host = m[2] ?? m[3]!;
    const port = Number(m[1]);
    const ret = /\) = (-1 (\w+)|\d+)/.exec(line.slice(m.index + m[0].length));
    const result = ret ? (ret[2] ?? "connected") : "unfinished";
    out.push({ to: host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`, host, port, result });
  }
  return out;
}

/** A drill's seal: bridges to the sinks its workers use, and the trace of every worker run. */
export class Seal {
  private readonly bridges = new Map<number, { sock: string; server: Server }>();
  private runs = 0;

  /** @param dir an empty folder of the drill's for the bridges' sockets and the traces */
  constructor(private readonly dir: string) {}

  /**
   * The command that runs `command` sealed, with the sink at `sinkUrl` (http://127.0.0.1:PORT) reachable.
   * @throws Error when the sink is not on 127.0.0.1 (the only address the namespace relays)
   */
  wrap(command: string[], sinkUrl: string): string[] {
    const u = new URL(sinkUrl);
    if (u.hostname !== "127.0.0.1") throw new Error(`sealed drill: the sink must be on 127.0.0.1, not ${u.hostname}`);
    const port = Number(u.port);
    let b = this.bridges.get(port);
    if (!b) {
      const sock = join(this.dir, `sink-${port}.sock`);
      const server = createServer((c) => {
        const s = createConnection(port, "127.0.0.1");
        c.pipe(s).pipe(c);
        c.on("error", () => s.destroy());
        s.on("error", () => c.destroy());
      }).listen(sock);
      b = { sock, server };
      this.bridges.set(port, b);
    }
    const trace = join(this.dir, `connect-${++this.runs}.trace`);
    return ["unshare", ...unshareArgs(), "--", process.execPath, "-e", RELAY, b.sock, String(port), trace, ...command];
  }

  /** Every connection attempt of every run, the sinks' own relayed connections left out. */
  report(): NetworkReport {
    const sinks = new Set([...this.bridges.keys()].map((p) => `127.0.0.1:${p}`));
    const counts = new Map<string, { to: string; count: number; result: string }>();
    const unix = new Set<string>();
    for (const f of readdirSync(this.dir).filter((x) => x.endsWith(".trace"))) {
      const trace = readFileSync(join(this.dir, f), "utf8");
      for (const u of unixConnects(trace)) unix.add(u);
      for (const a of connectAttempts(trace)) {
        if (sinks.has(a.to)) continue;
        const key = `${a.to} ${a.result}`;
        const c = counts.get(key) ?? { to: a.to, count: 0, result: a.result };
        c.count++;
        counts.set(key, c);
      }
    }
    const attempts = [...counts.values()].sort((x, y) => y.count - x.count || x.to.localeCompare(y.to));
    const n = attempts.reduce((s, a) => s + a.count, 0);
    const unix_connected = [...unix].sort();
    if (unix_connected.length) {
      const named = unix_connected.slice(0, 5).join(", ") + (unix_connected.length > 5 ? ", …" : "");
      return { sealed: false, detail: `the worker ran in its own network namespace${HOW()} (${this.runs} run(s)) but connected to ${unix_connected.length} unix socket(s) of the host's file system: ${named}`, egress_blocked: n, attempts, unix_connected };
    }
    return { sealed: true, detail: `the worker ran in its own network namespace${HOW()} (${this.runs} run(s)); only the test sink was reachable`, egress_blocked: n, attempts, unix_connected };
  }

  close(): void {
    for (const b of this.bridges.values()) b.server.close();
  }
}

/**
 * The network checks of a drill that ran a worker: `sealed` (info: unsealed is said, not a failure, unless
 * --require-sealed refused earlier), and `egress_blocked` (an error over the spec's `seal.maxEgressBlocked`, else info).
 * @param report the seal's report, null when the worker ran unsealed (`unsealed` says why)
 */
export function networkChecks(report: NetworkReport | null, unsealed: string | null, max: number | undefined, log: CheckLog): NetworkReport {
  if (!report) {
    const r = { sealed: false, detail: `unsealed: ${unsealed}`, egress_blocked: 0, attempts: [], unix_connected: [] };
    log.add({ scenario: "network", name: "sealed", ok: false, severity: max === undefined ? "info" : "error", detail: `the worker ran unsealed, its connections neither blocked nor counted (${unsealed})` });
    return r;
  }
  log.add({ scenario: "network", name: "sealed", ok: report.sealed, severity: report.sealed || max === undefined ? "info" : "error", detail: report.detail });
  const tried = report.attempts.map((a) => `${a.to} ×${a.count} (${a.result})`).slice(0, 10).join(", ");
  const ok = max === undefined ? report.egress_blocked === 0 : report.egress_blocked <= max;
  log.add({ scenario: "network", name: "egress_blocked", ok, severity: max === undefined ? "info" : "error", detail: `${report.egress_blocked} connection attempt(s) blocked${tried ? `: ${tried}` : ""}${max === undefined ? "" : `; the spec allows ${max}`}` });
  return report;
}
