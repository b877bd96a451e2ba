/**
 * `npm run demo`: in a temp folder with throwaway keys, builds the reference
 * agent, backs it up, lets its worker finish a task and take a checkpoint
 * through MCP (`agentbak mcp --tier checkpoint`) at that sub-task boundary,
 * lists, verifies, restores and drills it, and prints where everything is.
 * Runs the real binary, as an operator (and an agent) would.
 */
import { execa } from "execa";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { homePaths } from "../home.js";

const root = resolve(fileURLToPath(import.meta.url), "../../..");
const bin = join(root, "bin", "agentbak.js");

/** Runs one command; exit 3 (completed with warnings, e.g. credentials absent on this machine) counts as done. */
async function step(title: string, args: string[], env: Record<string, string>, cwd: string): Promise<string> {
  process.stderr.write(`\n$ agentbak ${args.join(" ")}    # ${title}\n`);
  const r = await execa("node", [bin, ...args], { env, cwd, stderr: "inherit", reject: false });
  if (r.stdout) process.stderr.write(String(r.stdout) + "\n");
  if (r.exitCode !== 0 && r.exitCode !== 3) throw new Error(`demo step "${title}" exited ${r.exitCode}`);
  return String(r.stdout);
}

/**
 * The agent's own side: its worker finishes its pending task (delivering to a
 * local test sink) and, at that sub-task boundary, calls create_backup on
 * agentbak's MCP server, which it starts over stdio like any MCP client.
 */
async function workerCheckpoints(agent: string, env: Record<string, string>): Promise<void> {
  const mcp = ["node", bin, "mcp", "--tier", "checkpoint", "-c", join(agent, "agentbak.json")];
  process.stderr.write(`\n$ node fixtures/agent/worker.js    # the agent works; after each task: create_backup through MCP (${mcp.slice(2).join(" ")})\n`);
  const { TestSink } = await import(join(root, "dist", "drill", "sink.js"));
  const sink = new TestSink();
  await sink.start();
  try {
    const r = await execa("node", [join(root, "fixtures", "agent", "worker.js")], {
      cwd: agent,
      env: { ...env, AGENTBAK_DB_STATE: join(agent, "state", "agent.sqlite"), AGENTBAK_SINK_URL: sink.url, WORKER_CHECKPOINT_MCP: JSON.stringify(mcp) },
      stderr: "inherit",
      reject: false,
    });
    if (r.exitCode !== 0) throw new Error(`demo step "worker with MCP checkpoints" exited ${r.exitCode}`);
  } finally {
    await sink.stop();
  }
}

async function main(): Promise<void> {
  const tmp = mkdtempSync(join(tmpdir(), "agentbak-demo-"));
  const home = join(tmp, "home");
  const env = { AGENTBAK_HOME: home, FORCE_COLOR: process.stderr.isTTY ? "1" : "0" };
  const agent = join(tmp, "agent");
  process.stderr.write(`agentbak demo in ${tmp} (throwaway keys in ${home})\n`);
  await step("throwaway keys", ["keygen", "--out", home], env, tmp);
  const recipient = readFileSync(homePaths(home).recipient, "utf8").trim();
  const gen = await import(join(root, "fixtures", "agent", "generate.js"));
  gen.generateAgent(agent, { recipient, sizeMb: 8 });
  process.stderr.write(`\nbuilt the reference agent in ${agent}: SQLite state (WAL), git workspace with uncommitted work, memory files\n`);
  await step("create the repository its agentbak.json names", ["init"], env, agent);
  const receipt = JSON.parse(await step("back it up", ["backup", "--json"], env, agent));
  await workerCheckpoints(agent, env);
  await step("list snapshots (the last one is the worker's checkpoint)", ["snapshots"], env, agent);
  await step("verify signature, payload and every component", ["verify", "latest", "--identity", homePaths(home).identity], env, agent);
  await step("restore it (dry run: the plan only)", ["restore", "latest", "--target", join(tmp, "restored"), "--dry-run"], env, agent);
  await step("restore it into a new folder; it starts suspended", ["restore", "latest", "--target", join(tmp, "restored"), "--yes", "--identity", homePaths(home).identity], env, agent);
  await step(
    "drill it: restore into a temp folder, integrity and invariants, crash the worker at every point against a local test sink",
    ["drill", "latest", "--spec", join(root, "drills", "reference-agent.json"), "--identity", homePaths(home).identity],
    env,
    agent,
  );
  await step("verify the drill report's hash chain and signatures", ["report", "verify"], env, agent);
  // the newest snapshot (the worker's last checkpoint): the one verified, restored and drilled above
  const listed = await execa("node", [bin, "snapshots", "--json"], { env, cwd: agent });
  const latest = (JSON.parse(String(listed.stdout)) as { path: string }[]).at(-1)!;
  process.stderr.write(`\nbundle: ${latest.path} (the first backup's: ${receipt.path})\n`);
  process.stderr.write(`open it with stock tools: tar xf <bundle>; age -d -i ${homePaths(home).identity} payload.age | zstd -d | tar x\n`);
}

main().catch((e) => {
  process.stderr.write(`demo failed: ${(e as Error).message}\n`);
  process.exitCode = 1;
});
