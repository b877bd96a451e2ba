/**
 * forget for a repository in object storage: the same rules as locally; a
 * bundle is deleted before its commit object, and when Object Lock retention
 * refuses the deletion the snapshot stays listed and is reported.
 */
import type { Trust } from "../bundle/reader.js";
import { planForget, type ForgetResult } from "./forget.js";
import { bundleKey, commitKey, remoteCatalog, verifyRemoteHeader } from "./remote.js";
import type { RetentionPolicy } from "./retention.js";
import type { ObjectStore } from "./store.js";

export async function forgetRemote(store: ObjectStore, trust: Trust, agent: string, policy: RetentionPolicy, opts: { dryRun?: boolean; prune?: boolean }): Promise<ForgetResult> {
  const entries = await remoteCatalog(store, trust, agent);
  // drill reports of s3:// repositories live where the drill ran, so there is no newest-drilled rule here
  const plan = await planForget(entries, policy, async (id) => (await verifyRemoteHeader(store, agent, id, trust)).manifest.parent?.snapshot_id ?? null, null);
  const toRemove = plan.remove;
  const result: ForgetResult = { agent_id: agent, dry_run: Boolean(opts.dryRun), kept: plan.kept, removed: [], not_removed: plan.not_removed, pruned: [] };
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

