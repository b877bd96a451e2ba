/**
 * `npm run demo`: in a temp folder with throwaway keys, builds the reference
 * agent, backs it up, lists, verifies, restores and drills it, and prints where
 * everything is. Runs the real binary, as an operator would.
 */
import { execa } from "execa";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

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

async function main(): Promise<void> {
  const tmp = mkdtempSync(join(tmpdir(), "agentbak-demo-"));
  const home = join(tmp, "home");
  const env = { AGENTBAK_HOME: home, FORCE_COLOR: process.stderr.isTTY ? "1" : "0" };
  const agent = join(tmp, "agent");
  process.stderr.write(`agentbak demo in ${tmp} (throwaway keys in ${home})\n`);
  await step("throwaway keys", ["keygen", "--out", home], env, tmp);
  const recipient = readFileSync(join(home, "age-recipient.txt"), "utf8").trim();
  const gen = await import(join(root, "fixtures", "agent", "generate.js"));
  gen.generateAgent(agent, { recipient, sizeMb: 8 });
  process.stderr.write(`\nbuilt the reference agent in ${agent}: SQLite state (WAL), git workspace with uncommitted work, memory files\n`);
  await step("create the repository its agentbak.json names", ["init"], env, agent);
  const receipt = JSON.parse(await step("back it up", ["backup", "--json"], env, agent));
  await step("list snapshots", ["snapshots"], env, agent);
  await step("verify signature, payload and every component", ["verify", "latest", "--identity", join(home, "age-identity.txt")], env, agent);
  await step("restore it (dry run: the plan only)", ["restore", "latest", "--target", join(tmp, "restored"), "--dry-run"], env, agent);
  await step("restore it into a new folder; it starts suspended", ["restore", "latest", "--target", join(tmp, "restored"), "--yes", "--identity", join(home, "age-identity.txt")], env, agent);
  await step(
    "drill it: restore into a temp folder, integrity and invariants, crash the worker at every point against a local test sink",
    ["drill", "latest", "--spec", join(root, "drills", "reference-agent.json"), "--identity", join(home, "age-identity.txt")],
    env,
    agent,
  );
  await step("verify the drill report's hash chain and signatures", ["report", "verify"], env, agent);
  process.stderr.write(`\nbundle: ${receipt.path}\n`);
  process.stderr.write(`open it with stock tools: tar xf <bundle>; age -d -i ${join(home, "age-identity.txt")} payload.age | zstd -d | tar x\n`);
}

main().catch((e) => {
  process.stderr.write(`demo failed: ${(e as Error).message}\n`);
  process.exitCode = 1;
});
