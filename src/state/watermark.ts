/**
 * State this host keeps for itself about each agent, in AGENTBAK_HOME (never
 * in a repository, which an attacker may rewrite): the highest checkpoint
 * sequence and generation it has restored (rollback protection) and the
 * highest sequence it has backed up (the next backup's floor), and how far
 * it verified each audit log (entries cut off the end are found by it).
 * Shared by capture, restore and audit verification. At the root of state/,
 * not in a wing: it is this host's own record, not a reader of agent state.
 */
import { existsSync } from "node:fs";
import { AgentbakError, Exit } from "../errors.js";
import { writeFileAtomic, readFileRegular } from "../fsutil.js";
import { homePaths } from "../home.js";
import { type AgentRef } from "../facts.js";

/** What the restoring side trusts. */
export interface TrustedState {
  highest_sequence: number;
  generation: number;
}

const homeStatePath = (home: string, a: AgentRef) => homePaths(home).trustedState(a.tenant, a.agent);
/** agentbak 0.1 kept one file per agent id, whatever the tenant: read as a floor */
const v1StatePath = (home: string, agent: string) => homePaths(home).trustedStateV1(agent);

/** The state file as written, so a writer keeps the fields it does not own. */
function readRaw(p: string): Record<string, unknown> {
  if (!existsSync(p)) return {};
  let v: unknown;
  try {
    v = JSON.parse(readFileRegular(p, "utf8"));
  } catch {
    throw damaged(p, "is not JSON");
  }
  if (!v || typeof v !== "object" || Array.isArray(v)) throw damaged(p, "is not a JSON object");
  return v as Record<string, unknown>;
}

const damaged = (p: string, what: string) =>
  new AgentbakError(Exit.failure, `trusted state ${p} ${what}; it records the highest sequence and generation seen here and must not be guessed: restore it from a copy, or remove it knowingly`);

/** A recorded count: absent is 0; anything but a non-negative safe integer is damage. */
function count(p: string, s: Record<string, unknown>, k: string): number {
  const v = s[k];
  if (v === undefined) return 0;
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) throw damaged(p, `holds ${k} = ${JSON.stringify(v).slice(0, 40)}, not a count`);
  return v;
}

function readState(p: string): TrustedState {
  const s = readRaw(p);
  return { highest_sequence: count(p, s, "highest_sequence"), generation: count(p, s, "generation") };
}

/** The trusted state for `a`, or zeros when none was recorded. */
export function readTrustedState(home: string, a: AgentRef): TrustedState {
  const cur = readState(homeStatePath(home, a));
  const v1 = readState(v1StatePath(home, a.agent));
  return { highest_sequence: Math.max(cur.highest_sequence, v1.highest_sequence), generation: Math.max(cur.generation, v1.generation) };
}

/** Raises the trusted state (never lowers it). */
export function raiseTrustedState(home: string, a: AgentRef, seen: TrustedState): void {
  const cur = readTrustedState(home, a);
  const raw = readRaw(homeStatePath(home, a));
  writeFileAtomic(homeStatePath(home, a), JSON.stringify({ ...raw, highest_sequence: Math.max(cur.highest_sequence, seen.highest_sequence), generation: Math.max(cur.generation, seen.generation) }, null, 2) + "\n");
}

/**
 * This host's watermark for `a`: the highest sequence it has restored or
 * backed up. The next backup takes a sequence above it, so a new repository
 * does not restart at 1 (every restore from it would be a rollback).
 */
export function hostWatermark(home: string, a: AgentRef): number {
  const p = homeStatePath(home, a);
  return Math.max(readTrustedState(home, a).highest_sequence, count(p, readRaw(p), "highest_backup_sequence"));
}

/**
 * Records that this host backed up `a` at `sequence` (never lowers it). Kept
 * apart from highest_sequence: restoring an older snapshot of one's own is an
 * operator's choice, not a rollback attack.
 */
export function raiseBackupWatermark(home: string, a: AgentRef, sequence: number): void {
  const raw = readRaw(homeStatePath(home, a));
  if ((Number(raw.highest_backup_sequence) || 0) >= sequence) return;
  writeFileAtomic(homeStatePath(home, a), JSON.stringify({ highest_sequence: 0, generation: 0, ...raw, highest_backup_sequence: sequence }, null, 2) + "\n");
}

/** How far this host verified an agent's audit log (or drill report) in one repository: entries, and the sha256 of the last one's line. */
export interface AuditSeen {
  entries: number;
  head_sha256: string;
}

/** The hash-chained logs whose reach this host records: the field of the state file each is kept in. */
const SEEN_FIELD = { audit: "audit_seen", report: "report_seen" } as const;
export type ChainedLog = keyof typeof SEEN_FIELD;

/** The checkpoints recorded for `a`'s `log`, by repository location. */
function auditSeenAll(p: string, raw: Record<string, unknown>, log: ChainedLog): Record<string, AuditSeen> {
  const field = SEEN_FIELD[log];
  const v = raw[field];
  if (v === undefined) return {};
  const ok =
    v &&
    typeof v === "object" &&
    !Array.isArray(v) &&
    Object.values(v).every((c) => c && typeof c === "object" && Number.isSafeInteger(c.entries) && c.entries >= 0 && typeof c.head_sha256 === "string" && /^[0-9a-f]{64}$/.test(c.head_sha256));
  if (!ok) throw damaged(p, `holds ${field} that is not a map of repositories to {entries, head_sha256}`);
  return v as Record<string, AuditSeen>;
}

/** How far this host verified `a`'s audit log (or drill report) in the repository at `location`, or null when it never did. */
export function readAuditSeen(home: string, a: AgentRef, location: string, log: ChainedLog = "audit"): AuditSeen | null {
  const p = homeStatePath(home, a);
  return auditSeenAll(p, readRaw(p), log)[location] ?? null;
}

/** Records how far this host verified `a`'s audit log (or drill report) at `location` (never lowers it). */
export function raiseAuditSeen(home: string, a: AgentRef, location: string, seen: AuditSeen, log: ChainedLog = "audit"): void {
  const p = homeStatePath(home, a);
  const raw = readRaw(p);
  const all = auditSeenAll(p, raw, log);
  if ((all[location]?.entries ?? -1) >= seen.entries) return;
  writeFileAtomic(p, JSON.stringify({ highest_sequence: 0, generation: 0, ...raw, [SEEN_FIELD[log]]: { ...all, [location]: seen } }, null, 2) + "\n");
}

/** The highest sequence this host committed of `a` in each repository, by the repository's id (its marker's). */
function committedAll(p: string, raw: Record<string, unknown>): Record<string, number> {
  const v = raw.committed_in;
  if (v === undefined) return {};
  const ok = v && typeof v === "object" && !Array.isArray(v) && Object.values(v).every((n) => Number.isSafeInteger(n) && (n as number) > 0);
  if (!ok) throw damaged(p, "holds committed_in that is not a map of repository ids to sequences");
  return v as Record<string, number>;
}

/** The highest sequence this host committed of `a` in the repository whose id is `repoId` (0: none). */
export function readCommittedIn(home: string, a: AgentRef, repoId: string): number {
  const p = homeStatePath(home, a);
  return committedAll(p, readRaw(p))[repoId] ?? 0;
}

/** Records that this host committed `a` at `sequence` in the repository whose id is `repoId` (never lowers it). */
export function raiseCommittedIn(home: string, a: AgentRef, repoId: string, sequence: number): void {
  const p = homeStatePath(home, a);
  const raw = readRaw(p);
  const all = committedAll(p, raw);
  if ((all[repoId] ?? 0) >= sequence) return;
  writeFileAtomic(p, JSON.stringify({ highest_sequence: 0, generation: 0, ...raw, committed_in: { ...all, [repoId]: sequence } }, null, 2) + "\n");
}
