/**
 * `node dist/tools/fleet-memory.js [--agents 1000] [--s3 s3://BUCKET/PREFIX]`:
 * what one agent of a host file costs a long-running process to keep warm,
 * measured in a fresh process per level (RSS and V8 heap after a GC, minus
 * the same process before loading):
 *   entries  the host file resolved (globs) and each config's tenant and agent id read
 *   configs  and each config loaded and validated (loadConfig), kept
 *   handles  and per agent what `serve -c` keeps today: trust, signing key, an open Repository
 *            (a folder; with --s3, a bucket: one S3 client per agent)
 * Prints a Markdown table (the one in docs/fleet.md).
 */
import { execa } from "execa";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1]! : def;
};
const LEVELS = ["entries", "configs", "handles"] as const;
type Level = (typeof LEVELS)[number];

/** In a child: load `n` agents to `level` and report RSS and heap growth. */
async function child(level: Level, dir: string, n: number): Promise<void> {
  const gc = (globalThis as { gc?: () => void }).gc!;
  const { loadHostFile, agentIdentities } = await import("../fleet/hostfile.js");
  const { loadConfig } = await import("../config/load.js");
  const { loadTrust } = await import("../crypto/trust.js");
  const { loadSigningKey } = await import("../crypto/keys.js");
  const { Repository } = await import("../repository/repository.js");
  if (process.env.AGENTBAK_S3_ENDPOINT) await import("@aws-sdk/client-s3");
  gc();
  const before = { rss: process.memoryUsage().rss, heap: process.memoryUsage().heapUsed };
  const kept: unknown[] = [];
  const host = loadHostFile(join(dir, "agentbak-host.json"));
  kept.push(host, agentIdentities(host.agents));
  for (const a of host.agents) {
    if (level === "entries") break;
    const lc = loadConfig(a.config);
    if (level === "configs") {
      kept.push(lc);
      continue;
    }
    const loc = lc.config.repository.startsWith("s3://") ? lc.config.repository : lc.resolve(lc.config.repository);
    kept.push({ lc, trust: loadTrust(join(dir, "home")), key: loadSigningKey(join(dir, "home", "signing-key")), repo: await Repository.open(loc) });
  }
  gc();
  const after = { rss: process.memoryUsage().rss, heap: process.memoryUsage().heapUsed };
  process.stdout.write(JSON.stringify({ level, agents: host.agents.length, rssMiB: after.rss / 2 ** 20, rssKiB: (after.rss - before.rss) / 1024 / n, heapKiB: (after.heap - before.heap) / 1024 / n, kept: kept.length }));
}

async function main(): Promise<void> {
  if (process.argv[2] === "--child") return child(process.argv[3] as Level, process.argv[4]!, Number(process.argv[5]));
  const n = Number(arg("agents", "1000"));
  const s3 = process.argv.includes("--s3") ? arg("s3", "") : null;
  const dir = mkdtempSync(join(tmpdir(), "agentbak-fleet-memory-"));
  try {
    const { keygen } = await import("../crypto/keys.js");
    keygen(join(dir, "home"), "fleet");
    const recipient = readFileSync(join(dir, "home", "age-recipient.txt"), "utf8").trim();
    const { generateAgent } = (await import(join(fileURLToPath(new URL("../../fixtures/agent/generate.js", import.meta.url))))) as { generateAgent: (d: string, o: object) => { config: string } };
    const template = JSON.parse(readFileSync(generateAgent(join(dir, "template"), { recipient, sizeMb: 0.05 }).config, "utf8"));
    const { Repository } = await import("../repository/repository.js");
    const repo = s3 ?? join(dir, "repo");
    await Repository.init(repo);
    for (let i = 0; i < n; i++) {
      const d = join(dir, "agents", `a${i}`);
      mkdirSync(d, { recursive: true });
      writeFileSync(join(d, "agentbak.json"), JSON.stringify({ ...template, agent: { id: `agent-${i}`, tenant: "fleet" }, repository: repo }));
    }
    writeFileSync(join(dir, "agentbak-host.json"), JSON.stringify({ defaults: { schedule: { every: "15m", jitter: "1m" } }, agents: [{ config: "agents/*/agentbak.json" }] }));
    console.log(`${n} agents, repository ${s3 ? "in a bucket (one S3 client per agent)" : "in a folder"}\n`);
    console.log("| kept warm per agent | RSS per agent | V8 heap per agent | process RSS |");
    console.log("|---|---|---|---|");
    for (const level of LEVELS) {
      const r = await execa("node", ["--expose-gc", fileURLToPath(import.meta.url), "--child", level, dir, String(n)], { env: { AGENTBAK_HOME: join(dir, "home") } });
      const m = JSON.parse(r.stdout) as { rssKiB: number; heapKiB: number; rssMiB: number };
      console.log(`| ${level} | ${m.rssKiB.toFixed(1)} KiB | ${m.heapKiB.toFixed(1)} KiB | ${m.rssMiB.toFixed(0)} MiB |`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
