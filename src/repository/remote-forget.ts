/**
 * forget for a repository in object storage: the same rules as locally; a
 * bundle is deleted before its commit object, and when Object Lock retention
 * refuses the deletion the snapshot stays listed and is reported.
 */
import type { Trust } from "../bundle/reader.js";
import { usageError } from "../errors.js";
import type { ForgetResult } from "./forget.js";
import { bundleKey, commitKey, remoteCatalog, verifyRemoteHeader } from "./remote.js";
import { applyRetention, isEmptyPolicy, type RetentionPolicy } from "./retention.js";
import type { ObjectStore } from "./store.js";

export async function forgetRemote(store: ObjectStore, trust: Trust, agent: string, policy: RetentionPolicy, opts: { dryRun?: boolean; prune?: boolean }): Promise<ForgetResult> {
  if (isEmptyPolicy(policy)) throw usageError("no retention rule given: pass --keep-last, --keep-daily, ... or set retention in the config");
  const entries = await remoteCatalog(store, trust, agent);
  const valid = entries.filter((e) => e.status !== "invalid");
  const { keep } = applyRetention(valid.map((e) => ({ id: e.snapshot_id, time: new Date(e.created_at!) })), policy);
  const byId = new Map(valid.map((e) => [e.snapshot_id, e]));
  for (const id of [...keep.keys()]) {
    let cur = id;
    for (;;) {
      if (!byId.has(cur)) break;
      const parent = (await verifyRemoteHeader(store, agent, cur, trust)).manifest.parent?.snapshot_id;
      if (!parent) break;
      keep.set(parent, [...(keep.get(parent) ?? []), `needed by ${id}`]);
      cur = parent;
    }
  }
  const toRemove = valid.filter((e) => !keep.has(e.snapshot_id)).map((e) => e.snapshot_id).sort().reverse();
  const result: ForgetResult = {
    agent_id: agent,
    dry_run: Boolean(opts.dryRun),
    kept: valid.filter((e) => keep.has(e.snapshot_id)).map((e) => ({ snapshot_id: e.snapshot_id, reasons: keep.get(e.snapshot_id)! })),
    removed: [],
    not_removed: entries.filter((e) => e.status === "invalid").map((e) => ({ snapshot_id: e.snapshot_id, reason: `signature or manifest does not verify, left for an operator: ${e.problem}` })),
    pruned: [],
  };
  if (opts.dryRun) return { ...result, removed: toRemove };
  for (const id of toRemove) {
    // the bundle first: if retention refuses it, the snapshot stays listed (its commit object stays)
    if (!(await store.delete(bundleKey(agent, id)))) {
      result.not_removed.push({ snapshot_id: id, reason: "object lock retention refused the deletion" });
      continue;
    }
    for (const k of await store.list(`agents/${agent}/${id}.`)) if (k.endsWith(".pageindex")) await store.delete(k);
    await store.delete(commitKey(agent, id));
    result.removed.push(id);
  }
  if (opts.prune) {
    const n = await store.sweepIncomplete(3_600_000);
    if (n) result.pruned.push(`${n} incomplete multipart upload(s)`);
    // bundles without a commit object, left by interrupted uploads
    const committed = new Set((await store.list(`agents/${agent}/`)).filter((k) => k.endsWith(".commit")).map((k) => k.slice(0, -".commit".length)));
    for (const k of await store.list(`agents/${agent}/`)) {
      if (!k.endsWith(".agentbak") || committed.has(k.slice(0, -".agentbak".length))) continue;
      if (await store.delete(k)) result.pruned.push(k);
    }
  }
  await store.put(`audit/${new Date().toISOString()}-forget.json`, JSON.stringify({ event: "forget", agent_id: agent, removed: result.removed, not_removed: result.not_removed.map((n) => n.snapshot_id) }));
  return result;
}

