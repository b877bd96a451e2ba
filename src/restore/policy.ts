/**
 * Restore policy: a pure function from what the bundle claims and what the
 * restoring side knows to a decision. No disk, no clock of its own.
 */
import type { Manifest } from "../bundle/manifest.js";
import { describeDifference, runtimeDifferences, type RuntimeDifference } from "../bundle/runtime.js";
import type { Config } from "../config/schema.js";

import type { TrustedState } from "../state/watermark.js";

export type { TrustedState };

export interface PolicyInput {
  manifest: Manifest;
  now: Date;
  /** the target's agent id and tenant (from its config or flags), if known */
  expectAgent?: string;
  expectTenant?: string;
  allowOtherAgent?: boolean;
  /** the target's runtime (its config): a difference from the snapshot's needs approval unless declared compatible */
  runtime?: Config["runtime"];
  allowRuntimeChange?: boolean;
  /** highest schema version this runtime supports */
  maxSchemaVersion?: number;
  seen?: TrustedState;
  allowRollback?: boolean;
  staleAfterHours?: number;
  /** how the bundle's embedding models differ from the config here (bundle/manifest.ts embeddingChanges) */
  embeddings?: { changes: string[]; unknown: string[] };
  allowEmbeddingChange?: boolean;
}

export interface PolicyDecision {
  refusals: string[];
  /** refusals that an approved override may lift (rollback) */
  needs_approval: string[];
  warnings: string[];
  /** how the snapshot's runtime differs from the target's */
  runtime: RuntimeDifference[];
}

/** The largest forward jump in checkpoint sequence accepted without question. */
export const MAX_SEQUENCE_JUMP = 1_000_000;

/** Decides whether a verified bundle may be restored here. */
export function evaluatePolicy(p: PolicyInput): PolicyDecision {
  const m = p.manifest;
  const d: PolicyDecision = { refusals: [], needs_approval: [], warnings: [], runtime: p.runtime ? runtimeDifferences(m.runtime, p.runtime) : [] };
  const expires = new Date(m.expires_at);
  if (expires <= p.now) d.refusals.push(`snapshot ${m.snapshot_id} expired at ${m.expires_at}`);
  if (!p.allowOtherAgent) {
    if (p.expectTenant !== undefined && m.tenant !== p.expectTenant) d.refusals.push(`snapshot belongs to tenant "${m.tenant}", target is tenant "${p.expectTenant}"`);
    if (p.expectAgent !== undefined && m.agent_id !== p.expectAgent) d.refusals.push(`snapshot is of agent "${m.agent_id}", target is agent "${p.expectAgent}"`);
  }
  const changed = d.runtime.filter((x) => !x.compatible);
  if (changed.length) {
    const msg = `runtime differs from the snapshot's: ${changed.map(describeDifference).join(", ")}`;
    if (p.allowRuntimeChange) d.needs_approval.push(msg);
    else d.refusals.push(`${msg}; declare it in runtime.compatible, or pass --allow-runtime-change and approve`);
  }
  if (p.maxSchemaVersion !== undefined && m.schema_version !== null && m.schema_version > p.maxSchemaVersion)
    d.refusals.push(`state schema version ${m.schema_version} is newer than this runtime supports (${p.maxSchemaVersion})`);
  if (p.seen) {
    if (m.sequence < p.seen.highest_sequence) {
      const msg = `rollback: snapshot sequence ${m.sequence} is older than the highest seen here (${p.seen.highest_sequence})`;
      if (p.allowRollback) d.needs_approval.push(msg);
      else d.refusals.push(`${msg}; pass --allow-rollback and approve to restore it anyway`);
    }
    if (m.sequence > p.seen.highest_sequence + MAX_SEQUENCE_JUMP)
      d.refusals.push(`fast-forward: snapshot sequence ${m.sequence} jumps far beyond the highest seen here (${p.seen.highest_sequence})`);
  }
  if (p.embeddings) embeddingPolicy(p.embeddings, Boolean(p.allowEmbeddingChange), d);
  const ageHours = (p.now.getTime() - new Date(m.created_at).getTime()) / 3_600_000;
  if (claimsFuture(m.created_at, p.now)) d.refusals.push(`snapshot claims a creation time in the future (${m.created_at})`);
  if (p.staleAfterHours !== undefined && ageHours > p.staleAfterHours)
    d.warnings.push(`stale: snapshot is ${ageHours.toFixed(1)} hours old (threshold ${p.staleAfterHours}h)`);
  return d;
}

/** The clock skew allowed between the host that took a snapshot and this one (6 minutes). */
const MAX_CLOCK_SKEW_MS = 360_000;

/** Whether a snapshot's creation time lies beyond the allowed clock skew in the future: restore refuses it, status never takes it for the newest. */
export const claimsFuture = (createdAt: string, now: Date): boolean => Date.parse(createdAt) - now.getTime() > MAX_CLOCK_SKEW_MS;

/**
 * Embedding compatibility: vectors written by another embedding model (or of
 * another dimension) than the one configured here are refused, unless the
 * operator allows the change and approves it; an unrecorded model is a warning.
 */
export function embeddingPolicy(e: { changes: string[]; unknown: string[] }, allow: boolean, d: PolicyDecision): void {
  for (const c of e.changes) {
    if (allow) d.needs_approval.push(c);
    else d.refusals.push(`${c}; pass --allow-embedding-change and approve to restore it anyway`);
  }
  d.warnings.push(...e.unknown);
}
