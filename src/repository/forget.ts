/**
 * forget: apply retention to an agent's snapshots. Never removes a snapshot a
 * kept snapshot's chain needs, never the newest snapshot that passed a drill,
 * never a bundle whose signature does not verify (it says so instead).
 */
import { existsSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { verifyHeader, type Trust } from "../bundle/reader.js";
import { usageError } from "../errors.js";
import { fsyncDir } from "../fsutil.js";
import { catalog, type CatalogEntry } from "./catalog.js";
import type { LocalRepository } from "./local.js";
import { applyRetention, isEmptyPolicy, type RetentionPolicy } from "./retention.js";

export interface ForgetResult {
  agent_id: string;
  dry_run: boolean;
  kept: { snapshot_id: string; reasons: string[] }[];
  removed: string[];
  not_removed: { snapshot_id: string; reason: string }[];
  pruned: string[];
}

/** The newest snapshot of `agent` with a passing drill in the repository's report, if any. */
function newestDrilled(repo: LocalRepository, agent: string): string | null {
  const p = join(repo.root, "drills", "report.jsonl");
  if (!existsSync(p)) return null;
  let best: { seq: number; id: string } | null = null;
  for (const line of readFileSync(p, "utf8").split("\n")) {
    if (!line) continue;
    try {
      const e = JSON.parse(line) as { agent_id?: string; result?: string; sequence?: number; snapshot_id?: string };
      if (e.agent_id === agent && e.result === "pass" && typeof e.sequence === "number" && (!best || e.sequence > best.seq)) best = { seq: e.sequence, id: String(e.snapshot_id) };
    } catch {
      /* report verify is the place that judges the report */
    }
  }
  return best?.id ?? null;
}

/**
 * The plan, the same for every backend: retention rules, the newest
 * drill-passed snapshot, and every parent a kept incremental needs are kept;
 * bundles that do not verify are reported, never removed. `remove` is newest
 * first, so an incremental goes before its parent.
 * @throws AgentbakError(2) for an empty policy.
 */
export async function planForget(
  entries: CatalogEntry[],
  policy: RetentionPolicy,
  parentOf: (id: string) => string | null | Promise<string | null>,
  drilled: string | null,
): Promise<{ kept: ForgetResult["kept"]; remove: string[]; not_removed: ForgetResult["not_removed"] }> {
  if (isEmptyPolicy(policy)) throw usageError("no retention rule given: pass --keep-last, --keep-daily, ... or set retention in the config");
  const valid = entries.filter((e) => e.status !== "invalid");
  const { keep } = applyRetention(valid.map((e) => ({ id: e.snapshot_id, time: new Date(e.created_at!) })), policy);
  const ids = new Set(valid.map((e) => e.snapshot_id));
  if (drilled && ids.has(drilled)) keep.set(drilled, [...(keep.get(drilled) ?? []), "newest snapshot that passed a drill"]);
  for (const id of [...keep.keys()])
    for (let cur: string | null = id; cur && ids.has(cur); ) {
      const parent: string | null = await parentOf(cur);
      if (parent) keep.set(parent, [...(keep.get(parent) ?? []), `needed by ${id}`]);
      cur = parent;
    }
  return {
    kept: valid.filter((e) => keep.has(e.snapshot_id)).map((e) => ({ snapshot_id: e.snapshot_id, reasons: keep.get(e.snapshot_id)! })),
    remove: valid.map((e) => e.snapshot_id).filter((id) => !keep.has(id)).sort().reverse(),
    not_removed: entries
      .filter((e) => e.status === "invalid")
      .map((e) => ({ snapshot_id: e.snapshot_id, reason: `signature or manifest does not verify, left for an operator: ${e.problem}` })),
  };
}

/** Applies `policy` to `agent`'s snapshots in a local repository (the caller holds the agent lock). */
export async function forget(repo: LocalRepository, trust: Trust, agent: string, policy: RetentionPolicy, opts: { dryRun?: boolean; prune?: boolean }): Promise<ForgetResult> {
  const entries = catalog(repo, trust, agent);
  const byId = new Map(entries.map((e) => [e.snapshot_id, e]));
  const plan = await planForget(entries, policy, (id) => verifyHeader(byId.get(id)!.path, trust).manifest.parent?.snapshot_id ?? null, newestDrilled(repo, agent));
  const removed = plan.remove;
  const result: ForgetResult = { agent_id: agent, dry_run: Boolean(opts.dryRun), kept: plan.kept, removed, not_removed: plan.not_removed, pruned: [] };
  if (opts.dryRun) return result;
  const dir = repo.agentDir(agent);
  // newest first: an incremental goes before its parent, so an interrupted forget never orphans a link
  for (const id of removed) {
    rmSync(byId.get(id)!.path);
    for (const f of readdirSync(dir)) if (f.startsWith(`${id}.`) && f.endsWith(".pageindex")) rmSync(join(dir, f));
  }
  if (opts.prune) {
    const live = new Set(repo.list(agent).map((b) => b.snapshotId));
    for (const f of readdirSync(dir)) {
      const id = f.split(".")[0]!;
      if (f.endsWith(".pageindex") && !live.has(id)) {
        rmSync(join(dir, f));
        result.pruned.push(f);
      }
      if (f.startsWith(".tmp-")) {
        rmSync(join(dir, f), { force: true });
        result.pruned.push(f);
      }
    }
    const swept = repo.sweepTemp();
    if (swept) result.pruned.push(`${swept} temp folder(s)`);
  }
  if (existsSync(dir)) fsyncDir(dir);
  repo.audit({ event: "forget", agent_id: agent, removed, kept: result.kept.map((k) => k.snapshot_id) });
  return result;
}
