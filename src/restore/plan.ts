/**
 * The restore plan: a pure description of what a restore would do, shown
 * before approval and printed by --dry-run.
 */
import { isDatabase, type Manifest } from "../bundle/manifest.js";
import type { OpenOperation } from "../reconcile/operations.js";
import type { CredentialStatus } from "../state/secrets/credentials.js";
import type { PolicyDecision } from "./policy.js";
import type { TimerMove } from "./timers.js";

export interface RestorePlan {
  snapshot_id: string;
  agent_id: string;
  tenant: string;
  sequence: number;
  created_at: string;
  age_hours: number;
  bundle: string;
  target: string;
  writes: { path: string; kind: string; size: number }[];
  workspace: { path: string; commit: string; branch: string | null; dirty: boolean } | null;
  cursors: Manifest["cursors"];
  /** sent without a receipt: reconciled after the restore, each by its strategy */
  open_operations: OpenOperation[];
  /** lease and deadline columns the restore rebases */
  timers: TimerMove[];
  credentials: CredentialStatus[];
  /** what the backup deliberately left out (credential files, excluded names): to be provided where the agent runs */
  not_captured: NonNullable<Manifest["not_captured"]>;
  schema_version: number | null;
  next_generation: number;
  policy: PolicyDecision;
  /** state sources and where each goes: a credential reference, `--source NAME`, or a folder in the target; never a URL */
  sources: PlannedSource[];
}

/** A state source in a restore plan. */
export interface PlannedSource {
  name: string;
  kind: string;
  /** where it goes, as shown to people: the reference or flag it comes from, or a folder in the target */
  into: string;
  /** false when the reference does not resolve here (the restore would stop before writing) */
  resolved: boolean;
  records: number;
  snapshot_at: string;
}

/** Builds the plan for restoring `m` into `target`. */
export function buildPlan(
  m: Manifest,
  bundle: string,
  target: string,
  credentials: CredentialStatus[],
  policy: PolicyDecision,
  nextGeneration: number,
  now: Date,
  more: { operations: OpenOperation[]; timers: TimerMove[]; sources?: PlannedSource[] },
): RestorePlan {
  return {
    snapshot_id: m.snapshot_id,
    agent_id: m.agent_id,
    tenant: m.tenant,
    sequence: m.sequence,
    created_at: m.created_at,
    age_hours: Math.round(((now.getTime() - new Date(m.created_at).getTime()) / 3_600_000) * 10) / 10,
    bundle,
    target,
    writes: m.components.filter((c) => isDatabase(c) || c.kind === "file").map((c) => ({ path: c.target ?? c.path, kind: c.kind, size: c.full_size ?? c.size })),
    workspace: m.workspace ? { path: m.workspace.path, commit: m.workspace.commit, branch: m.workspace.branch, dirty: m.workspace.dirty } : null,
    cursors: m.cursors,
    open_operations: more.operations,
    timers: more.timers,
    credentials,
    not_captured: m.not_captured ?? [],
    schema_version: m.schema_version,
    next_generation: nextGeneration,
    policy,
    sources: more.sources ?? [],
  };
}
