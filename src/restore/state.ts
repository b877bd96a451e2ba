/**
 * State the restoring side keeps for itself (AGENTBAK_HOME/state/<agent>.json:
 * highest checkpoint sequence and generation seen), the fencing generation in
 * the repository, and the markers written into a restored target.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { agentbakHome } from "../crypto/keys.js";
import { notFound } from "../errors.js";
import { writeFileAtomic } from "../fsutil.js";
import type { Records } from "../repository/records.js";
import type { TrustedState } from "./policy.js";

const homeStatePath = (agent: string) => join(agentbakHome(), "state", `${agent}.json`);

/** The trusted state for `agent`, or zeros when none was recorded. */
export function readTrustedState(agent: string): TrustedState {
  const p = homeStatePath(agent);
  if (!existsSync(p)) return { highest_sequence: 0, generation: 0 };
  return JSON.parse(readFileSync(p, "utf8")) as TrustedState;
}

/** Raises the trusted state (never lowers it). */
export function raiseTrustedState(agent: string, seen: TrustedState): void {
  const cur = readTrustedState(agent);
  writeFileAtomic(homeStatePath(agent), JSON.stringify({ highest_sequence: Math.max(cur.highest_sequence, seen.highest_sequence), generation: Math.max(cur.generation, seen.generation) }, null, 2) + "\n");
}

const genRel = (agent: string) => `state/generation-${agent}.json`;

/** The current fencing generation of `agent` in the repository (0 when never restored). */
export const currentGeneration = async (repo: Records, agent: string) => (await repo.read<{ generation: number }>(genRel(agent)))?.generation ?? 0;

/** Reserves the next generation in the repository (a crash after this only burns a number). */
export async function reserveGeneration(repo: Records, agent: string, atLeast: number, info: Record<string, unknown>): Promise<number> {
  const next = Math.max(await currentGeneration(repo, agent), atLeast) + 1;
  await repo.write(genRel(agent), { generation: next, ...info });
  return next;
}

/** Files inside a restored target. */
export const MARKER_DIR = ".agentbak";
export const SUSPENDED = "SUSPENDED";

/** What a restore records inside the target. */
export interface TargetRecord {
  agent_id: string;
  tenant: string;
  snapshot_id: string;
  sequence: number;
  generation: number;
  repository: string;
  restored_at: string;
  open_operations: { id: string | number | null; idempotency_key: string }[];
}

/** Reads the restore record of a target. @throws AgentbakError(10) when the folder was not restored by agentbak. */
export function readTargetRecord(target: string): TargetRecord {
  const p = join(target, MARKER_DIR, "restore.json");
  if (!existsSync(p)) throw notFound(`${target} holds no agentbak restore record (${MARKER_DIR}/restore.json)`);
  return JSON.parse(readFileSync(p, "utf8")) as TargetRecord;
}

export const isSuspended = (target: string) => existsSync(join(target, MARKER_DIR, SUSPENDED));
