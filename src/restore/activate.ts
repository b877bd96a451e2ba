/**
 * Lifting the suspension of a restored agent, and fencing checks.
 */
import { rmSync } from "node:fs";
import { join } from "node:path";
import { AgentbakError, Exit, policyError } from "../errors.js";
import { writeFileAtomic } from "../fsutil.js";
import { Repository } from "../repository/repository.js";
import type { SigningKey } from "../crypto/sshsig.js";
import { isSuspended, MARKER_DIR, readTargetRecord, SUSPENDED, type TargetRecord } from "./state.js";

export interface ActivateResult {
  target: string;
  agent_id: string;
  generation: number;
  open_operations: TargetRecord["open_operations"];
  activated: boolean;
  already_active: boolean;
}

/**
 * Lifts the suspended marker after `confirm` says the original runtime is
 * stopped and open operations were reconciled or accepted. Refuses when the
 * target's generation has been superseded by a later restore.
 */
export async function activate(target: string, repoOverride: string | undefined, signingKey: SigningKey | null, confirm: (r: TargetRecord) => Promise<boolean>): Promise<ActivateResult> {
  const rec = readTargetRecord(target);
  const base = { target, agent_id: rec.agent_id, generation: rec.generation, open_operations: rec.open_operations };
  if (!isSuspended(target)) return { ...base, activated: false, already_active: true };
  const repoPath = repoOverride ?? rec.repository;
  const repo = repoPath ? await Repository.open(repoPath) : null;
  const a = { tenant: rec.tenant, agent: rec.agent_id };
  if (repo) {
    const cur = await repo.generation(a);
    if (cur !== rec.generation) throw policyError(`generation ${rec.generation} of ${rec.agent_id} is superseded by generation ${cur}; this restore must not be activated`);
  }
  if (!(await confirm(rec))) throw policyError("activation not confirmed");
  writeFileAtomic(join(target, MARKER_DIR, "activation.json"), JSON.stringify({ activated_at: new Date().toISOString(), generation: rec.generation, open_operations_accepted: rec.open_operations.length }, null, 2) + "\n");
  rmSync(join(target, MARKER_DIR, SUSPENDED));
  await repo?.audit(a, { event: "activate", generation: rec.generation, target }, signingKey);
  return { ...base, activated: true, already_active: false };
}

export interface FenceResult {
  agent_id: string;
  generation: number;
  current: number;
  ok: boolean;
}

/**
 * Checks a generation number against the repository's current one.
 * @throws AgentbakError(14) naming both numbers when `generation` is superseded.
 */
export async function fenceCheck(target: string, generation: number, repoOverride?: string): Promise<FenceResult> {
  const rec = readTargetRecord(target);
  const repoPath = repoOverride ?? rec.repository;
  if (!repoPath) throw new AgentbakError(Exit.usage, "no repository recorded for this target: pass --repo");
  const current = await (await Repository.open(repoPath)).generation({ tenant: rec.tenant, agent: rec.agent_id });
  if (generation !== current) throw policyError(`fenced: generation ${generation} of ${rec.agent_id} is superseded (current generation is ${current})`);
  return { agent_id: rec.agent_id, generation, current, ok: true };
}
