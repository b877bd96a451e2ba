/**
 * forget: apply retention to an agent's snapshots. Never removes a snapshot a
 * kept snapshot's chain needs, never the newest snapshot that passed a drill,
 * never a bundle whose signature does not verify (it says so instead), and
 * reports what the store's retention (Object Lock) refused.
 */
import type { Trust } from "../crypto/trust.js";
import type { SigningKey } from "../crypto/sshsig.js";
import { crashStep } from "../crashpoint.js";
import { usageError } from "../errors.js";
import type { SweepResult } from "../chunks/store.js";
import type { Repository, Snapshot } from "./repository.js";
import { applyRetention, isEmptyPolicy, type RetentionPolicy } from "./retention.js";
import { type AgentRef } from "../facts.js";

export interface ForgetResult {
  tenant: string;
  agent_id: string;
  dry_run: boolean;
  kept: { snapshot_id: string; reasons: string[] }[];
  removed: string[];
  not_removed: { snapshot_id: string; reason: string }[];
  pruned: string[];
  /** --prune: the mark and sweep of the agent's chunk store (null without --prune, or on a dry run) */
  chunks: SweepResult | { skipped: string } | null;
}

/** The newest snapshot of `a` with a passing drill in a report's text, if any. */
export function newestDrilled(reportText: string, a: AgentRef): string | null {
  let best: { seq: number; id: string } | null = null;
  for (const line of reportText.split("\n")) {
    if (!line) continue;
    try {
      const e = JSON.parse(line) as { result?: string; sequence?: number; snapshot_id?: string; agent_id?: string; tenant?: string };
      if (e.agent_id !== a.agent || (e.tenant ?? a.tenant) !== a.tenant) continue;
      if (e.result === "pass" && typeof e.sequence === "number" && (!best || e.sequence > best.seq)) best = { seq: e.sequence, id: String(e.snapshot_id) };
    } catch {
      /* report verify is the place that judges the report */
    }
  }
  return best?.id ?? null;
}

/**
 * The plan: retention rules, the newest drill-passed snapshot, and every
 * parent a kept incremental needs are kept; bundles that do not verify are
 * reported, never removed. `remove` is newest first, so an incremental goes
 * before its parent.
 * @throws AgentbakError(2) for an empty policy.
 */
export function planForget(entries: Snapshot[], policy: RetentionPolicy, drilled: string | null): { kept: ForgetResult["kept"]; remove: Snapshot[]; not_removed: ForgetResult["not_removed"] } {
  if (isEmptyPolicy(policy)) throw usageError("no retention rule given: pass --keep-last, --keep-daily, ... or set retention in the config");
  // a bundle whose own signature and manifest verify is subject to retention, even when a link below it is broken
  // (it can not be restored, and is kept only if a rule keeps it); one that does not verify itself is left alone
  const valid = entries.filter((e) => e.header !== null);
  const { keep } = applyRetention(valid.map((e) => ({ id: e.snapshot_id, time: new Date(e.created_at!) })), policy);
  const byId = new Map(valid.map((e) => [e.snapshot_id, e]));
  if (drilled && byId.has(drilled)) keep.set(drilled, [...(keep.get(drilled) ?? []), "newest snapshot that passed a drill"]);
  for (const id of [...keep.keys()])
    for (let parent = byId.get(id)?.parent ?? null; parent && byId.has(parent); parent = byId.get(parent)!.parent) keep.set(parent, [...(keep.get(parent) ?? []), `needed by ${id}`]);
  return {
    kept: valid.filter((e) => keep.has(e.snapshot_id)).map((e) => ({ snapshot_id: e.snapshot_id, reasons: keep.get(e.snapshot_id)! })),
    remove: valid.filter((e) => !keep.has(e.snapshot_id)).sort((x, y) => (x.snapshot_id < y.snapshot_id ? 1 : -1)),
    not_removed: entries
      .filter((e) => e.header === null)
      .map((e) => ({ snapshot_id: e.snapshot_id, reason: `signature or manifest does not verify, left for an operator: ${e.problem}` })),
  };
}

/** Applies `policy` to `a`'s snapshots (the caller holds the agent lock). */
export async function forget(repo: Repository, trust: Trust, a: AgentRef, policy: RetentionPolicy, opts: { dryRun?: boolean; prune?: boolean; graceMs?: number; signingKey: SigningKey | null }): Promise<ForgetResult> {
  const entries = await repo.list(trust, a);
  const plan = planForget(entries, policy, newestDrilled(await repo.drillHistory(a), a));
  const result: ForgetResult = { tenant: a.tenant, agent_id: a.agent, dry_run: Boolean(opts.dryRun), kept: plan.kept, removed: [], not_removed: plan.not_removed, pruned: [], chunks: null };
  if (opts.dryRun) return { ...result, removed: plan.remove.map((e) => e.snapshot_id) };
  crashStep("forget-planned");
  // newest first: an incremental goes before its parent, so an interrupted forget never orphans a link
  for (const e of plan.remove) {
    if (await repo.remove(e)) result.removed.push(e.snapshot_id);
    else result.not_removed.push({ snapshot_id: e.snapshot_id, reason: "object lock retention refused the deletion" });
  }
  if (opts.prune) {
    result.pruned.push(...(await repo.sweep(a)));
    // after the snapshots went: their chunks that no kept snapshot lists go too
    result.chunks = await repo.sweepChunks(a, trust, { graceMs: opts.graceMs });
  }
  await repo.writeCatalog(a, trust, opts.signingKey);
  await repo.audit(a, { event: "forget", removed: result.removed, kept: result.kept.map((k) => k.snapshot_id), not_removed: result.not_removed.map((n) => n.snapshot_id) }, opts.signingKey);
  return result;
}
