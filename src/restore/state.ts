/**
 * State the restoring side keeps for itself (AGENTBAK_HOME/state/<tenant>/<agent>.json:
 * highest checkpoint sequence and generation seen) and the markers written
 * into a restored target.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { agentbakHome } from "../crypto/keys.js";
import { AgentbakError, Exit, notFound } from "../errors.js";
import { writeFileAtomic } from "../fsutil.js";
import type { AgentRef } from "../repository/repository.js";
import type { TrustedState } from "./policy.js";

const homeStatePath = (a: AgentRef) => join(agentbakHome(), "state", a.tenant, `${a.agent}.json`);
/** agentbak 0.1 kept one file per agent id, whatever the tenant: read as a floor */
const v1StatePath = (agent: string) => join(agentbakHome(), "state", `${agent}.json`);

function readState(p: string): TrustedState {
  if (!existsSync(p)) return { highest_sequence: 0, generation: 0 };
  try {
    const s = JSON.parse(readFileSync(p, "utf8")) as Partial<TrustedState>;
    return { highest_sequence: Number(s.highest_sequence) || 0, generation: Number(s.generation) || 0 };
  } catch {
    throw new AgentbakError(Exit.failure, `trusted state ${p} is not JSON; it records the highest sequence restored here and must not be guessed`);
  }
}

/** The trusted state for `a`, or zeros when none was recorded. */
export function readTrustedState(a: AgentRef): TrustedState {
  const cur = readState(homeStatePath(a));
  const v1 = readState(v1StatePath(a.agent));
  return { highest_sequence: Math.max(cur.highest_sequence, v1.highest_sequence), generation: Math.max(cur.generation, v1.generation) };
}

/** Raises the trusted state (never lowers it). */
export function raiseTrustedState(a: AgentRef, seen: TrustedState): void {
  const cur = readTrustedState(a);
  writeFileAtomic(homeStatePath(a), JSON.stringify({ highest_sequence: Math.max(cur.highest_sequence, seen.highest_sequence), generation: Math.max(cur.generation, seen.generation) }, null, 2) + "\n");
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
