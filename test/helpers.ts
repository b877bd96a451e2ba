// Shared test helpers: temp agents with throwaway keys, and the real binary.
import { execa } from "execa";
import { mkdtempSync, rmSync, readFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
// @ts-expect-error plain JS fixture
import { generateAgent } from "../fixtures/agent/generate.js";

export const ROOT = resolve(import.meta.dirname, "..");
export const BIN = join(ROOT, "bin", "agentbak.js");

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the real agentbak binary. */
export async function run(args: string[], opts: { cwd?: string; env?: Record<string, string | undefined>; timeout?: number } = {}): Promise<RunResult> {
  const r = await execa("node", [BIN, ...args], {
    cwd: opts.cwd,
    env: { NO_COLOR: "1", ...opts.env },
    reject: false,
    stdin: "ignore",
    timeout: opts.timeout ?? 120_000,
  });
  return { code: r.exitCode ?? -1, stdout: String(r.stdout), stderr: String(r.stderr) };
}

export interface TestAgent {
  tmp: string;
  home: string;
  dir: string;
  repo: string;
  config: string;
  recipient: string;
  identity: string;
  env: Record<string, string>;
  commit: string;
  run(args: string[], extraEnv?: Record<string, string | undefined>): Promise<RunResult>;
  cleanup(): void;
}

/** A fresh agent folder with its own AGENTBAK_HOME (throwaway keys) and an initialised repository. */
export async function makeAgent(opts: { sizeMb?: number; seed?: number; agentId?: string; tenant?: string } = {}): Promise<TestAgent> {
  const tmp = mkdtempSync(join(tmpdir(), "agentbak-test-"));
  const home = join(tmp, "home");
  // a temp root of its own: drill and verify temp folders of parallel tests never mix
  mkdirSync(join(tmp, "tmp"));
  const env = { AGENTBAK_HOME: home, TMPDIR: join(tmp, "tmp") };
  const kg = await run(["keygen", "--out", home, "--json"], { env });
  if (kg.code !== 0) throw new Error(`keygen failed: ${kg.stderr}`);
  const recipient = readFileSync(join(home, "age-recipient.txt"), "utf8").trim();
  const dir = join(tmp, "agent");
  mkdirSync(dir);
  const g = generateAgent(dir, { recipient, sizeMb: opts.sizeMb ?? 2, seed: opts.seed ?? 1, agentId: opts.agentId, tenant: opts.tenant });
  const repo = join(dir, "backups");
  const init = await run(["init"], { cwd: dir, env });
  if (init.code !== 0) throw new Error(`init failed: ${init.stderr}`);
  return {
    tmp,
    home,
    dir,
    repo,
    config: g.config,
    recipient,
    identity: join(home, "age-identity.txt"),
    env,
    commit: g.commit,
    run: (args, extraEnv = {}) => run(args, { cwd: dir, env: { ...env, ...extraEnv } }),
    cleanup: () => rmSync(tmp, { recursive: true, force: true }),
  };
}

/** Parses the single JSON document a --json command printed. */
export function json<T = any>(r: RunResult): T {
  try {
    return JSON.parse(r.stdout) as T;
  } catch {
    throw new Error(`not JSON (exit ${r.code}): ${r.stdout}\nstderr: ${r.stderr}`);
  }
}
