/**
 * Where everything lives in a repository: every key is spelled here and
 * nowhere else. Layout v2 keeps each tenant's agents apart:
 *
 *   agentbak-repository.json
 *   tenants/<tenant>/agents/<agent>/snapshots/<id>.agentbak   the bundle
 *   tenants/<tenant>/agents/<agent>/snapshots/<id>.commit     written last: the snapshot exists
 *   tenants/<tenant>/agents/<agent>/snapshots/<id>.<db>.pageindex
 *   tenants/<tenant>/agents/<agent>/chunks/<id[0:2]>/<id>             one chunk of large state (docs/chunk-store.md)
 *   tenants/<tenant>/agents/<agent>/{sequence,generation}.json        generation.json also lists the replicas copy linked
 *   tenants/<tenant>/agents/<agent>/generations/<n, 16 digits>.json  the generation log: one entry per generation issued, never rewritten
 *   tenants/<tenant>/catalog/<agent>.json                             signed: what a listing prints of its snapshots (repository/catalog.ts);
 *                                                                     one LIST of tenants/<tenant>/catalog/ names every agent's with its ETag
 *   tenants/<tenant>/catalog/<agent>.status                           signed: what status shows of its drills, restore requests, restores and generation
 *   tenants/<tenant>/catalog/_summary                                 signed: the records a listing host checked, each with its ETag (no agent id starts with _)
 *   tenants/<tenant>/agents/<agent>/catalog.json                      where earlier builds kept the record: still read, deleted by the next write
 *   tenants/<tenant>/agents/<agent>/idempotency/<kind>-<sha256 of key>.json
 *   tenants/<tenant>/agents/<agent>/locks/<name>/<token>.lease        a lease's grants (agentbak < 0.2 wrote locks/<name>.lock)
 *   tenants/<tenant>/agents/<agent>/audit.jsonl, drills/report.jsonl
 *   tenants/<tenant>/agents/<agent>/audit.head.json, drills/report.head.json   each log's signed head: entries, last line's sha256
 *   tenants/<tenant>/agents/<agent>/requests/<id>.json                a restore request (agent interface)
 *   tenants/<tenant>/agents/<agent>/requests/<id>.decision.json       approved or denied, written once
 *   tenants/<tenant>/agents/<agent>/requests/<id>.outcome.json        the last attempt to carry it out
 *   tenants/<tenant>/agents/<agent>/quarantine/<id>.agentbak          (a spool) a bundle that did not verify, set aside
 *   tenants/<tenant>/agents/<agent>/quarantine/<id>.problem.json      why
 *   fleet/drills/report.jsonl, fleet/drills/report.head.json          fleet drills' figures (drill --fleet), signed and chained
 *   fleet/locks/log/<token>.lease                                     the lease of the fleet report
 *
 * Layout v1 (`agents/<agent>/<id>.agentbak`, records under `state/`) is still
 * read: its bundles are listed under the tenant their signed manifest names.
 */
import { createHash } from "node:crypto";
import { usageError } from "../errors.js";
import { ID_PATTERN, SNAPSHOT_ID_BODY, type AgentRef } from "../facts.js";

export const REPO_CONFIG = "agentbak-repository.json";
/** In a spool (a local repository standing in for an unreachable remote one): which repository it is for. */
export const SPOOL_RECORD = "spool.json";
export const LAYOUT_VERSION = 2;

const sha = (s: string) => createHash("sha256").update(s).digest("hex");
/** Whether a tenant and agent id can name folders at all (an id outside the pattern, a/b or ../x, never becomes a key). */
export const isAgentRef = (a: AgentRef) => ID_PATTERN.test(a.tenant) && ID_PATTERN.test(a.agent);

/** An agent's folder. @throws AgentbakError(2) for an id outside the pattern. */
function agentDir(a: AgentRef): string {
  for (const [what, v] of [["tenant", a.tenant], ["agent", a.agent]] as const)
    if (!ID_PATTERN.test(v)) throw usageError(`${what} ${JSON.stringify(v.slice(0, 80))}: lowercase letters, digits, . _ - (max 64), starting with a letter or digit`);
  return `tenants/${a.tenant}/agents/${a.agent}`;
}

/** The folder (key prefix, no trailing slash) holding an agent's snapshots. */
export const snapshotsDir = (a: AgentRef) => `${agentDir(a)}/snapshots`;

/** Every folder an agent's snapshots may sit in: its v2 folder, then the v1 folder of its agent id. @throws AgentbakError(2) as agentDir. */
export const snapshotFolders = (a: AgentRef): [v2: string, v1: string] => [snapshotsDir(a), legacy.dir(a.agent)];

export const keys = {
  bundle: (dir: string, id: string) => `${dir}/${id}.agentbak`,
  commit: (dir: string, id: string) => `${dir}/${id}.commit`,
  pageIndex: (dir: string, id: string, db: string) => `${dir}/${id}.${db}.pageindex`,
  /** the agent's chunk store (chunks/store.ts), no trailing slash */
  chunks: (a: AgentRef) => `${agentDir(a)}/chunks`,
  sequence: (a: AgentRef) => `${agentDir(a)}/sequence.json`,
  generation: (a: AgentRef) => `${agentDir(a)}/generation.json`,
  /** the agent's generation log: one create-only object per issued generation (repository/genlog.ts), as a listing prefix */
  generationLog: (a: AgentRef) => `${agentDir(a)}/generations/`,
  generationEntry: (a: AgentRef, n: number) => `${agentDir(a)}/generations/${String(n).padStart(16, "0")}.json`,
  catalog: (a: AgentRef) => {
    agentDir(a); // the ids checked
    return `${keys.catalogs(a.tenant)}${a.agent}.json`;
  },
  /** the agent's status record: its drill, request, restore and generation facts, signed (status/gather.ts); ".status", so no agent's ".json" record is ever this key */
  statusRecord: (a: AgentRef) => {
    agentDir(a); // the ids checked
    return `${keys.catalogs(a.tenant)}${a.agent}.status`;
  },
  /** a tenant's catalog summary: the records a listing host checked, with their ETags, signed (repository.ts listing) */
  catalogSummary: (tenant: string) => `${keys.catalogs(tenant)}_summary`,
  /** the folder of a tenant's catalog records, as a listing prefix */
  catalogs: (tenant: string) => `tenants/${tenant}/catalog/`,
  /** where earlier builds kept an agent's catalog record (still read; the next write deletes it) */
  oldCatalog: (a: AgentRef) => `${agentDir(a)}/catalog.json`,
  idempotency: (a: AgentRef, kind: "backup" | "restore" | "request", key: string) => `${agentDir(a)}/idempotency/${kind}-${sha(key)}.json`,
  /** the folder of an agent's idempotency records of one kind, as a listing prefix */
  idempotencyRecords: (a: AgentRef, kind: "backup" | "restore" | "request") => `${agentDir(a)}/idempotency/${kind}-`,
  /** a lease's folder of grants, `<token>.lease` (repository/lease.ts), as a listing prefix */
  lease: (a: AgentRef, name: "agent" | "restore" | "log" | "generation") => `${agentDir(a)}/locks/${name}/`,
  audit: (a: AgentRef) => `${agentDir(a)}/audit.jsonl`,
  auditHead: (a: AgentRef) => `${agentDir(a)}/audit.head.json`,
  drillReport: (a: AgentRef) => `${agentDir(a)}/drills/report.jsonl`,
  drillReportHead: (a: AgentRef) => `${agentDir(a)}/drills/report.head.json`,
  requests: (a: AgentRef) => `${agentDir(a)}/requests/`,
  request: (a: AgentRef, id: string) => `${agentDir(a)}/requests/${id}.json`,
  requestDecision: (a: AgentRef, id: string) => `${agentDir(a)}/requests/${id}.decision.json`,
  requestOutcome: (a: AgentRef, id: string) => `${agentDir(a)}/requests/${id}.outcome.json`,
  quarantine: (a: AgentRef, id: string) => `${agentDir(a)}/quarantine/${id}.agentbak`,
  quarantineNote: (a: AgentRef, id: string) => `${agentDir(a)}/quarantine/${id}.problem.json`,
  /** the fleet report: one signed entry per fleet drill (its sample, seed and figure), and its head and lease */
  fleetReport: "fleet/drills/report.jsonl",
  fleetReportHead: "fleet/drills/report.head.json",
  fleetLease: "fleet/locks/log/",
};

/** Layout v1: read, never written. */
export const legacy = {
  dir: (agent: string) => `agents/${agent}`,
  sequence: (agent: string) => `state/sequence-${agent}.json`,
  generation: (agent: string) => `state/generation-${agent}.json`,
  drillReport: "drills/report.jsonl",
};

/** A key of a snapshot's file in a snapshots folder: [folder, id, extension]. */
const SNAPSHOT_KEY = new RegExp(String.raw`^(tenants\/[^/]+\/agents\/[^/]+\/snapshots|agents\/[^/]+)\/(${SNAPSHOT_ID_BODY})\.(.+)$`);

/** A snapshot's files in a snapshots folder, from any key in it: bundle, commit or page index. */
export function parseSnapshotKey(key: string): { dir: string; id: string; ext: string } | null {
  const m = key.match(SNAPSHOT_KEY);
  return m ? { dir: m[1]!, id: m[2]!, ext: m[3]! } : null;
}

/** The agent (and, in layout v2, the tenant) a snapshots folder belongs to. */
export function ownerOf(dir: string): { tenant: string | null; agent: string } {
  const v2 = dir.match(/^tenants\/([^/]+)\/agents\/([^/]+)\/snapshots$/);
  if (v2) return { tenant: v2[1]!, agent: v2[2]! };
  return { tenant: null, agent: dir.slice("agents/".length) };
}
