/**
 * `node dist/tools/host-rss.js [--agents 1000] [--every 20s] [--keep DIR]`:
 * the memory of one `agentbak serve --host` process over three rounds of a
 * fleet of small agents (each a copy of one small SQLite template, made
 * distinct by one row, and one `files` entry of its own), all backing up into
 * one folder repository, `maxConcurrent` at its default:
 *   round 1  every agent captured (its first snapshot)
 *   round 2  10% of the agents changed (one row inserted), the rest unchanged
 *   round 3  all idle
 * then SIGTERM (the exit status is printed). VmRSS and VmHWM of the server
 * are read from /proc every 0.5 s; every node process of the tree (the server
 * and any capture child it starts) loads a probe (NODE_OPTIONS --import) that
 * records its peak RSS (getrusage) when it exits, and the server's
 * process.memoryUsage() (heap, external, array buffers) every 2 s.
 * Set MALLOC_ARENA_MAX in the environment to see glibc's arenas' share.
 * Prints a Markdown table (the one in docs/fleet.md) and a JSON line.
 */
import { spawn } from "node:child_process";
import { appendFileSync, copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1]! : def;
};
const root = fileURLToPath(new URL("../../", import.meta.url));
const MiB = (kib: number) => (kib / 1024).toFixed(0);

/** The probe every node process of the server's tree loads: its peak RSS at exit; the server's heap every 2 s. */
const probe = (log: string) => `
import { appendFileSync } from "node:fs";
const log = ${JSON.stringify(log)};
const cmd = process.argv.slice(2, 3).join(" ");
const line = (o) => appendFileSync(log, JSON.stringify({ pid: process.pid, cmd, at: Date.now(), ...o }) + "\\n");
process.on("exit", () => line({ exit: true, maxRssKiB: process.resourceUsage().maxRSS }));
if (cmd === "serve") setInterval(() => { const m = process.memoryUsage(); line({ rss: m.rss, heapUsed: m.heapUsed, heapTotal: m.heapTotal, external: m.external, arrayBuffers: m.arrayBuffers }); }, 2000).unref();
`;

function status(pid: number): { rssKiB: number; hwmKiB: number } | null {
  try {
    const s = readFileSync(`/proc/${pid}/status`, "utf8");
    return { rssKiB: Number(/VmRSS:\s+(\d+)/.exec(s)![1]), hwmKiB: Number(/VmHWM:\s+(\d+)/.exec(s)![1]) };
  } catch {
    return null;
  }
}

async function main(): Promise<void> {
  const n = Number(arg("agents", "1000"));
  const every = arg("every", "20s");
  const everyMs = Number(every.replace(/s$/, "")) * 1000;
  const dir = process.argv.includes("--keep") ? arg("keep", "") : mkdtempSync(join(tmpdir(), "agentbak-host-rss-"));
  mkdirSync(dir, { recursive: true });
  const home = join(dir, "home");
  const repo = join(dir, "repo");
  const { keygen } = await import("../crypto/keys.js");
  const { Repository } = await import("../repository/repository.js");
  keygen(home, "host-rss");
  await Repository.init(repo, { home });
  const recipient = readFileSync(join(home, "age-recipient.txt"), "utf8").trim();
  const { generateDatabase } = (await import(join(root, "fixtures/agent/generate.js"))) as { generateDatabase: (p: string, o: object) => unknown };
  const template = join(dir, "template.sqlite");
  generateDatabase(template, { sizeMb: 0.1, seed: 1 });
  const db = (i: number) => join(dir, "agents", `a${i}`, "state", "agent.sqlite");
  const touch = (i: number, what: string) => {
    const d = new Database(db(i));
    d.prepare("INSERT INTO agent_state VALUES (?, ?) ON CONFLICT DO UPDATE SET value = excluded.value").run(`touched-${what}`, String(Date.now()));
    d.close();
  };
  for (let i = 0; i < n; i++) {
    const a = join(dir, "agents", `a${i}`);
    mkdirSync(join(a, "state"), { recursive: true });
    copyFileSync(template, db(i));
    touch(i, "made");
    writeFileSync(join(a, "memory.json"), JSON.stringify({ agent: i }) + "\n");
    writeFileSync(join(a, "agentbak.json"), JSON.stringify({ agent: { id: `a${i}`, tenant: "acme" }, repository: repo, recipients: [recipient], databases: [{ name: "state", path: "state/agent.sqlite" }], files: ["memory.json"] }));
  }
  const hostFile = join(dir, "agentbak-host.json");
  writeFileSync(hostFile, JSON.stringify({ hostId: "host-rss", defaults: { schedule: { every } }, agents: [{ config: "agents/*/agentbak.json" }] }));
  const log = join(dir, "probe.jsonl");
  writeFileSync(join(dir, "probe.mjs"), probe(log));
  writeFileSync(log, "");

  const t0 = Date.now();
  const server = spawn(process.execPath, [join(root, "bin/agentbak.js"), "serve", "--host", hostFile, "--listen", "127.0.0.1:0"], {
    env: { ...process.env, AGENTBAK_HOME: home, NODE_OPTIONS: `--import ${join(dir, "probe.mjs")}`, NO_COLOR: "1" },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let err = "";
  server.stderr.on("data", (d: Buffer) => (err += d));
  const exited = new Promise<number | null>((r) => server.on("exit", (c) => r(c)));
  const samples: { at: number; rssKiB: number; hwmKiB: number }[] = [];
  const sampler = setInterval(() => {
    const s = status(server.pid!);
    if (s) samples.push({ at: Date.now(), ...s });
  }, 500);
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  const commits = () => (err.match(/: committed /g) ?? []).length;
  const failures = () => err.split("\n").filter((l) => /: failed: /.test(l));
  async function until(what: string, ok: () => boolean, ms: number) {
    const end = Date.now() + ms;
    while (!ok()) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}; server log:\n${err.slice(-2000)}`);
      await sleep(250);
    }
  }
  const phases: { name: string; from: number; to: number; note: string }[] = [];
  await until("the server", () => /agent interface on http/.test(err), 120_000);
  const listening = Date.now();
  await sleep(300);
  const before = status(server.pid!)!;
  await until("round 1", () => commits() + failures().length >= n, 3_600_000);
  phases.push({ name: "round 1 (all captured)", from: listening, to: Date.now(), note: `${commits()} commits, ${failures().length} failed` });
  await sleep(2000);
  const after1 = status(server.pid!)!;
  const changed = Array.from({ length: n }, (_, i) => i).filter((i) => i % 10 === 0);
  for (const i of changed) touch(i, "round2");
  const c1 = commits();
  const r2 = Date.now();
  await until("round 2", () => commits() >= c1 + changed.length, 600_000);
  await sleep(Math.max(0, r2 + everyMs + 2000 - Date.now())); // and the rest of the round: the unchanged ones
  phases.push({ name: `round 2 (${changed.length} changed)`, from: r2, to: Date.now(), note: `${commits() - c1} commits, the rest unchanged` });
  const after2 = status(server.pid!)!;
  const r3 = Date.now();
  const c2 = commits();
  await sleep(everyMs + 2000);
  phases.push({ name: "round 3 (all idle)", from: r3, to: Date.now(), note: `${commits() - c2} commits` });
  const after3 = status(server.pid!)!;
  server.kill("SIGTERM");
  const code = await exited;
  clearInterval(sampler);

  const probes = readFileSync(log, "utf8").trim().split("\n").filter(Boolean).map((l) => JSON.parse(l) as Record<string, any>);
  const kids = probes.filter((p) => p.exit && p.cmd !== "serve");
  const kidPeaks = kids.map((p) => p.maxRssKiB as number).sort((x, y) => x - y);
  const serverPeak = probes.find((p) => p.exit && p.cmd === "serve")?.maxRssKiB as number | undefined;
  const heap = probes.filter((p) => p.cmd === "serve" && p.rss);
  const peakOf = (from: number, to: number) => Math.max(...samples.filter((s) => s.at >= from && s.at <= to).map((s) => s.rssKiB));
  console.log(`${n} agents (a 0.1 MiB SQLite copy and one file each), every ${every}, maxConcurrent default, folder repository; MALLOC_ARENA_MAX=${process.env.MALLOC_ARENA_MAX ?? "unset"}\n`);
  console.log(`| phase | server RSS peak | server RSS after | what happened | took |`);
  console.log(`|---|---|---|---|---|`);
  console.log(`| before round 1 (listening) | | ${MiB(before.rssKiB)} MiB | | ${((listening - t0) / 1000).toFixed(1)} s to listen |`);
  const afters = [after1, after2, after3];
  phases.forEach((p, i) => console.log(`| ${p.name} | ${MiB(peakOf(p.from, p.to))} MiB | ${MiB(afters[i]!.rssKiB)} MiB | ${p.note} | ${((p.to - p.from) / 1000).toFixed(0)} s |`));
  console.log(`\nserver VmHWM (peak RSS over the run): ${MiB(serverPeak ?? samples.at(-1)!.hwmKiB)} MiB; exit status after SIGTERM: ${code}`);
  if (kidPeaks.length) console.log(`capture children: ${kidPeaks.length}, peak RSS each: median ${MiB(kidPeaks[kidPeaks.length >> 1]!)} MiB, max ${MiB(kidPeaks.at(-1)!)} MiB`);
  const h = heap.at(-1);
  if (h) console.log(`server process.memoryUsage() at the end: rss ${(h.rss / 2 ** 20).toFixed(0)} MiB, heap used ${(h.heapUsed / 2 ** 20).toFixed(1)} of ${(h.heapTotal / 2 ** 20).toFixed(1)} MiB, external ${(h.external / 2 ** 20).toFixed(1)} MiB, array buffers ${(h.arrayBuffers / 2 ** 20).toFixed(1)} MiB`);
  const hmax = heap.reduce((m, x) => (x.rss > (m?.rss ?? 0) ? x : m), undefined as Record<string, any> | undefined);
  if (hmax) console.log(`server process.memoryUsage() at its highest RSS sample: rss ${(hmax.rss / 2 ** 20).toFixed(0)} MiB, heap used ${(hmax.heapUsed / 2 ** 20).toFixed(1)} of ${(hmax.heapTotal / 2 ** 20).toFixed(1)} MiB, external ${(hmax.external / 2 ** 20).toFixed(1)} MiB, array buffers ${(hmax.arrayBuffers / 2 ** 20).toFixed(1)} MiB`);
  for (const f of failures().slice(0, 3)) console.log(`failure: ${f}`);
  appendFileSync(join(dir, "result.json"), JSON.stringify({ n, every, before, afters, phases: phases.map((p) => ({ ...p, peakKiB: peakOf(p.from, p.to) })), serverPeak, kidPeaks: kidPeaks.length ? { count: kidPeaks.length, median: kidPeaks[kidPeaks.length >> 1], max: kidPeaks.at(-1) } : null, code }) + "\n");
  if (!process.argv.includes("--keep")) rmSync(dir, { recursive: true, force: true });
}

await main();
