/**
 * What `agentbak status`, the status page and /metrics show, gathered once:
 * per agent the newest snapshot against its RPO, the chain it heads, the drill
 * history from the signed drill report, pending restore requests, unresolved
 * operations of the last restore (from the signed audit log), the spool
 * backlog and the bytes held; each judged into named checks and one exit
 * code. Read-only: it writes nothing, not even a spool folder (with `all` and a
 * signing key, a listing that read many records itself writes the tenant's summary: Repository.listing).
 */
import { existsSync } from "node:fs";
import type { Config } from "../config/schema.js";
import { verifyChainText } from "../crypto/chainlog.js";
import { NS, type SigningKey } from "../crypto/sshsig.js";
import type { Trust } from "../crypto/trust.js";
import { parseDuration } from "../duration.js";
import { mapLimit } from "../limit.js";
import { AgentbakError, Exit } from "../errors.js";
import type { AgentRef } from "../facts.js";
import type { CatalogEntry, Repository } from "../repository/repository.js";
import { openSpool, spoolDir, spools } from "../repository/spool.js";
import { unreachableWarning } from "../repository/generation.js";
import { claimsFuture } from "../restore/policy.js";
import { listRequests } from "../restore/request.js";
import { verifyReportText } from "../drill/report.js";

/** An agent to report on, with what its config says (none for an agent only found in the repository). */
export interface StatusTarget extends AgentRef {
  objectives?: { rpoMinutes?: number; rtoSeconds?: number; drillEvery?: string };
  /** a full snapshot after this many incrementals; null when incrementals are off or not known */
  fullEvery: number | null;
}

/** The config's agent as a status target: its objectives and when a full snapshot is due. */
export const statusTarget = (c: Config): StatusTarget => ({
  tenant: c.agent.tenant,
  agent: c.agent.id,
  objectives: c.objectives,
  fullEvery: c.incremental.enabled ? c.incremental.fullEvery : null,
});

export type CheckState = "ok" | "warn" | "fail";
/** One judgement: `name` is stable (snapshot, chain, drill, drill-report, requests, operations, spool, audit). */
export interface StatusCheck {
  name: string;
  state: CheckState;
  detail: string;
}

export interface DrillPoint {
  at: string;
  result: "pass" | "fail";
  snapshot_id: string | null;
  rto_seconds: number | null;
  /** the failed checks, as `scenario/check: detail` */
  failed: string[];
}

export interface AgentStatus {
  tenant: string;
  agent_id: string;
  state: CheckState;
  checks: StatusCheck[];
  last_snapshot: { snapshot_id: string; created_at: string; age_seconds: number; kind: string | null; size: number } | null;
  rpo_objective_seconds: number | null;
  /** verified snapshots, oldest first: the page's chart */
  snapshots: { created_at: string; size: number }[];
  chain: { head: string; links: number; verified: number; next_full_in: number | null } | null;
  last_drill: (DrillPoint & { age_seconds: number; rto_objective_seconds: number | null }) | null;
  drill_every_seconds: number | null;
  /** every drill in the agent's report, oldest first */
  drills: DrillPoint[];
  pending_requests: { request_id: string; snapshot_id: string; reason: string; requested_at: string; requested_by: string }[];
  unresolved_operations: { target: string; generation: number; operations: number; unresolved: number } | null;
  spool: { bundles: number; bytes: number } | null;
  /** bytes of this agent's bundles in the repository */
  bytes: number;
}

/** The last fleet drill of a repository (its signed fleet report): the figure and the seed that replays it. */
export interface FleetStatus {
  repository: string;
  at: string;
  seed: string;
  drilled: number;
  passed: number;
  lower_bound: number;
  lower_bound_wilson: number;
}

export interface StatusReport {
  at: string;
  repository: { location: string; bytes: number };
  agents: AgentStatus[];
  /** each repository's last fleet drill (drill --fleet), when one ran and its report verifies */
  fleet: FleetStatus[];
  /** 0 healthy, 3 a warning, 15 a failing last drill */
  exit_status: 0 | 3 | 15;
}

export interface GatherInput {
  repo: Repository;
  location: string;
  trust: Trust;
  home: string;
  targets: StatusTarget[];
  /** every agent the repository holds too (those not in `targets` without objectives) */
  all?: boolean;
  /** with `all`: every agent's catalog record checked against its snapshots folder (Repository.entries) */
  fresh?: boolean;
  /** this host's signing key, with `all`: a listing that read records itself writes each tenant's summary */
  signer?: SigningKey | null;
  /** a caller of one tenant (a token's): the fleet figure only when every agent it drilled is of this tenant */
  tenant?: string;
  now?: Date;
}

const key = (a: { tenant: string | null; agent_id: string }) => `${a.tenant}/${a.agent_id}`;
const secondsSince = (iso: string, now: Date) => Math.max(0, Math.round((now.getTime() - Date.parse(iso)) / 1000));

/** One report of several (one per repository a server serves): every agent, the worst exit status. */
export function mergeReports(reports: StatusReport[], now = new Date()): StatusReport {
  const exit = Math.max(0, ...reports.map((r) => r.exit_status)) as StatusReport["exit_status"];
  return {
    at: now.toISOString(),
    repository: { location: reports.map((r) => r.repository.location).join(", "), bytes: reports.reduce((n, r) => n + r.repository.bytes, 0) },
    agents: reports.flatMap((r) => r.agents),
    fleet: reports.flatMap((r) => r.fleet),
    exit_status: exit,
  };
}

/** Gathers the status of `targets` (and, with `all`, every agent in the repository). @throws AgentbakError as listing the repository does (10, 13). */
export async function gatherStatus(i: GatherInput): Promise<StatusReport> {
  const now = i.now ?? new Date();
  // every agent's from the catalog records; named agents' alone from their own folders
  const { entries: listed, status: records } = i.all
    ? await i.repo.listing(i.trust, {}, now, { fresh: i.fresh, status: true, signer: i.signer })
    : { entries: (await mapLimit(i.targets, 8, (t) => i.repo.entries(i.trust, { tenant: t.tenant, agent: t.agent }, now))).flat(), status: new Map<string, Record<string, unknown>>() };
  const targets = [...i.targets];
  // one pass over the entries (20,000 at a fleet's size), each agent's entries grouped in order
  const byAgent = new Map<string, CatalogEntry[]>();
  for (const e of listed) {
    const k = key(e);
    const mine = byAgent.get(k);
    if (mine) mine.push(e);
    else byAgent.set(k, [e]);
  }
  if (i.all) {
    const named = new Set(targets.map((t) => key({ tenant: t.tenant, agent_id: t.agent })));
    for (const [k, [e]] of byAgent) if (e!.tenant && !named.has(k)) targets.push({ tenant: e!.tenant, agent: e!.agent_id, fullEvery: null });
  }
  targets.sort((x, y) => key({ tenant: x.tenant, agent_id: x.agent }).localeCompare(key({ tenant: y.tenant, agent_id: y.agent })));
  // each agent's records (drill report, requests, audit log) are a few reads of its own: 64 agents at once
  const spooled = await spoolOf(i);
  // an agent without a status record (none written yet, or by a build before them) has its facts read from its objects
  const agents = await mapLimit(targets, 64, async (t) => {
    const k = key({ tenant: t.tenant, agent_id: t.agent });
    const spool = spooled && (spooled.get(k) ?? { bundles: 0, bytes: 0 });
    return agentStatus(i, t, byAgent.get(k) ?? [], factsOf(records.get(k)) ?? (await agentFacts(i.repo, i.trust, t)), spool, now);
  });
  const states = agents.map((a) => a.state);
  return {
    at: now.toISOString(),
    repository: { location: i.location, bytes: agents.reduce((n, a) => n + a.bytes, 0) },
    agents,
    fleet: await lastFleetDrill(i),
    exit_status: states.includes("fail") ? Exit.drillFailed : states.includes("warn") ? Exit.warnings : Exit.ok,
  };
}

/**
 * What status shows of an agent beyond its snapshots, as its drill report, restore requests, audit log and
 * generation say now: what its status record (Repository.writeStatusRecord) keeps, so that status --all reads
 * one small record per agent, and only those changed since this host read them.
 */
export interface AgentFacts {
  /** the newest drills of its report (at most FACT_DRILLS), oldest first */
  drills: DrillPoint[];
  /** the warnings reading them gave: drill-report, audit, generation */
  checks: StatusCheck[];
  pending_requests: AgentStatus["pending_requests"];
  unresolved_operations: AgentStatus["unresolved_operations"];
}

/** how many drills a status record keeps (status of one agent shows its whole report) */
const FACT_DRILLS = 100;

/** What status shows of a pending restore request (docs/monitoring.md), not its whole record. */
const shownRequest = (r: AgentStatus["pending_requests"][number]): AgentStatus["pending_requests"][number] => ({ request_id: r.request_id, snapshot_id: r.snapshot_id, reason: r.reason, requested_at: r.requested_at, requested_by: r.requested_by });

/** An agent's facts read from its objects (each verified). @throws AgentbakError as its reads do (10, 13 for a request record). */
export async function agentFacts(repo: Repository, trust: Trust, a: AgentRef): Promise<AgentFacts> {
  const checks: StatusCheck[] = [];
  const check = (name: string, state: CheckState, detail: string) => checks.push({ name, state, detail });
  const drills = await drillHistory(repo, trust, a, check);
  const pending = (await listRequests(repo, trust, a))
    .filter((r) => r.status === "pending")
    .map(shownRequest);
  const unresolved = await lastRestore(repo, trust, a, check);
  await generationCheck(repo, trust, a, check);
  return {
    drills,
    checks,
    pending_requests: pending,
    unresolved_operations: unresolved,
  };
}

/** Reads `a`'s facts from its objects and writes its status record signed with `key` (the Repository's statusWriter). */
export async function writeStatusRecord(repo: Repository, trust: Trust, a: AgentRef, key: SigningKey): Promise<void> {
  const f = await agentFacts(repo, trust, a);
  await repo.writeStatusRecord(a, { ...f, drills: f.drills.slice(-FACT_DRILLS) }, key);
}

const isStr = (v: unknown): v is string => typeof v === "string";
const isNum = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);
const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
/** Whether every item of `v` is an object whose fields pass `ok`. */
const allOf = (v: unknown, ok: (o: Record<string, unknown>) => boolean) => Array.isArray(v) && v.every((o) => isObj(o) && ok(o));

/**
 * The facts a verified status record holds, each field of the type agentFacts gives it (a signed record is still the
 * repository's text: its strings are escaped where printed, and a result, state or count of another type would be
 * shown or judged as it is); null when it is not of this shape (the agent's are read from its objects).
 */
function factsOf(r: Record<string, unknown> | undefined): AgentFacts | null {
  if (!r) return null;
  const drills = allOf(r.drills, (d) => isStr(d.at) && (d.result === "pass" || d.result === "fail") && (d.snapshot_id === null || isStr(d.snapshot_id)) && (d.rto_seconds === null || isNum(d.rto_seconds)) && Array.isArray(d.failed) && d.failed.every(isStr));
  const checks = allOf(r.checks, (c) => isStr(c.name) && (c.state === "ok" || c.state === "warn" || c.state === "fail") && isStr(c.detail));
  const pending = allOf(r.pending_requests, (p) => ["request_id", "snapshot_id", "reason", "requested_at", "requested_by"].every((f) => isStr(p[f])));
  const u = r.unresolved_operations;
  const unresolved = u === null || (isObj(u) && isStr(u.target) && isNum(u.generation) && isNum(u.operations) && isNum(u.unresolved));
  if (!drills || !checks || !pending || !unresolved) return null;
  const p = r.pending_requests as AgentFacts["pending_requests"];
  return {
    drills: r.drills as DrillPoint[],
    checks: r.checks as StatusCheck[],
    pending_requests: p.map(shownRequest), // whatever else a record holds
    unresolved_operations: u as AgentFacts["unresolved_operations"],
  };
}

async function agentStatus(i: GatherInput, t: StatusTarget, mine: CatalogEntry[], facts: AgentFacts, spool: AgentStatus["spool"], now: Date): Promise<AgentStatus> {
  const checks: StatusCheck[] = [];
  const check = (name: string, state: CheckState, detail: string) => checks.push({ name, state, detail });
  // a snapshot dated beyond the allowed clock skew (a host's clock far ahead) is never the newest: restore refuses it
  const future = mine.filter((e) => e.status === "ok" && e.created_at && claimsFuture(e.created_at, now));
  for (const e of future) check("snapshot", "warn", `claims a creation time in the future: ${e.snapshot_id} (${e.created_at}); restore refuses it, and the objective is measured without it`);
  const ok = mine.filter((e) => e.status === "ok" && e.created_at && !future.includes(e));
  const newest = ok.at(-1) ?? null;
  const rpo = t.objectives?.rpoMinutes !== undefined ? t.objectives.rpoMinutes * 60 : null;
  const age = newest ? secondsSince(newest.created_at!, now) : null;
  // the highest that verifies, a future-dated one included (it is there): below what this host committed here, the newer ones went
  const top = Math.max(0, ...mine.filter((e) => e.status === "ok").map((e) => e.sequence ?? 0));
  const gone = i.repo.newestMissing({ tenant: t.tenant, agent: t.agent }, top);
  if (gone) check("snapshot", "warn", `the newest verified snapshot is sequence ${top || "none"}, ${gone}`);
  if (!newest) check("snapshot", "warn", "no verified snapshot");
  else if (rpo !== null && age! > rpo) check("snapshot", "warn", `stale: newest verified snapshot is ${human(age!)} old, objective ${human(rpo)}`);
  else check("snapshot", "ok", `newest verified snapshot is ${human(age!)} old${rpo !== null ? `, objective ${human(rpo)}` : ""}`);

  const chain = chainOf(mine, t.fullEvery);
  const head = mine.at(-1);
  if (head && head.status === "invalid") check("chain", "warn", `newest snapshot ${head.snapshot_id} does not verify: ${head.problem}`);
  else if (chain) check("chain", "ok", `${chain.verified} of ${chain.links} links verified`);

  for (const c of facts.checks.filter((c) => c.name === "drill-report")) checks.push(c);
  const drills = facts.drills;
  const last = drills.at(-1) ?? null;
  const every = t.objectives?.drillEvery ? parseDuration(t.objectives.drillEvery) / 1000 : null;
  const rtoObjective = t.objectives?.rtoSeconds ?? null;
  if (last?.result === "fail") check("drill", "fail", `last drill failed: ${last.failed.join("; ") || "see the drill report"}`);
  else if (!last) check("drill", every !== null ? "warn" : "ok", every !== null ? "no drill recorded" : "no drill recorded (no drillEvery objective)");
  else if (every !== null && secondsSince(last.at, now) > every) check("drill", "warn", `overdue: last drill ${human(secondsSince(last.at, now))} ago, objective every ${human(every)}`);
  else check("drill", "ok", `last drill passed ${human(secondsSince(last.at, now))} ago${last.rto_seconds !== null ? `, RTO ${last.rto_seconds} s` : ""}`);

  const pending = facts.pending_requests;
  if (pending.length) check("requests", "warn", `${pending.length} restore request(s) wait for a decision`);
  for (const c of facts.checks.filter((c) => c.name === "audit")) checks.push(c);
  const unresolved = facts.unresolved_operations;
  if (unresolved?.unresolved) check("operations", "warn", `${unresolved.unresolved} of ${unresolved.operations} open operation(s) unresolved in ${unresolved.target}`);
  for (const c of facts.checks.filter((c) => c.name !== "drill-report" && c.name !== "audit")) checks.push(c);
  if (spool?.bundles) check("spool", "warn", `${spool.bundles} bundle(s) wait in the spool for the repository`);

  const states = checks.map((c) => c.state);
  return {
    tenant: t.tenant,
    agent_id: t.agent,
    state: states.includes("fail") ? "fail" : states.includes("warn") ? "warn" : "ok",
    checks,
    last_snapshot: newest && { snapshot_id: newest.snapshot_id, created_at: newest.created_at!, age_seconds: age!, kind: newest.kind, size: newest.size },
    rpo_objective_seconds: rpo,
    snapshots: ok.map((e) => ({ created_at: e.created_at!, size: e.size })),
    chain,
    last_drill: last && { ...last, age_seconds: secondsSince(last.at, now), rto_objective_seconds: rtoObjective },
    drill_every_seconds: every,
    drills,
    pending_requests: pending,
    unresolved_operations: unresolved,
    spool,
    bytes: mine.reduce((n, e) => n + e.size, 0),
  };
}

/** The chain the newest snapshot heads: its links back to the full one, how many verify, and how many incrementals until a full one is due. */
export function chainOf(mine: CatalogEntry[], fullEvery: number | null): AgentStatus["chain"] {
  const head = mine.at(-1);
  if (!head) return null;
  const byId = new Map(mine.map((e) => [e.snapshot_id, e]));
  const links: CatalogEntry[] = [];
  for (let e: CatalogEntry | undefined = head; e && !links.includes(e); e = e.parent ? byId.get(e.parent) : undefined) links.push(e);
  return {
    head: head.snapshot_id,
    links: links.length,
    verified: links.filter((e) => e.status === "ok").length,
    next_full_in: fullEvery === null ? null : Math.max(0, fullEvery - (links.length - 1)),
  };
}

/** The agent's drills from its signed report in the repository; a report that does not verify is a warning and shows no drill. */
async function drillHistory(repo: Repository, trust: Trust, t: AgentRef, check: (n: string, s: CheckState, d: string) => void): Promise<DrillPoint[]> {
  const text = await repo.drillReport(t);
  if (!text) return [];
  try {
    verifyReportText(text, trust);
  } catch (e) {
    if (!(e instanceof AgentbakError)) throw e;
    check("drill-report", "warn", `the drill report does not verify: ${e.message}`);
    return [];
  }
  return text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((e) => e.agent_id === t.agent && e.tenant === t.tenant)
    .map((e) => ({
      at: String(e.at),
      result: e.result === "pass" ? "pass" : "fail",
      snapshot_id: typeof e.snapshot_id === "string" ? e.snapshot_id : null,
      rto_seconds: typeof e.rto_seconds === "number" ? e.rto_seconds : null,
      // the errors that failed it first, then the warnings
      failed: ((e.failed_checks as { scenario?: string; check?: string; detail?: string; severity?: string }[] | undefined) ?? [])
        .sort((x, y) => Number(y.severity === "error") - Number(x.severity === "error"))
        .map((c) => `${c.scenario ? `${c.scenario}/` : ""}${c.check}: ${c.detail ?? ""}`),
    }));
}

/** The repository's last fleet drill from its signed fleet report; none when it does not verify, or (for one tenant's caller) drilled another tenant's agents. */
async function lastFleetDrill(i: GatherInput): Promise<FleetStatus[]> {
  const text = await i.repo.fleetReport();
  if (!text) return [];
  try {
    verifyReportText(text, i.trust);
  } catch (e) {
    if (!(e instanceof AgentbakError)) throw e;
    return [];
  }
  const last = text.split("\n").filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>).filter((e) => e.kind === "fleet").at(-1);
  if (!last) return [];
  const drills = (last.drills as { tenant?: unknown }[] | undefined) ?? [];
  if (i.tenant !== undefined && drills.some((d) => d.tenant !== i.tenant)) return [];
  const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : 0);
  return [{ repository: i.location, at: String(last.at), seed: String(last.seed), drilled: num(last.drilled), passed: num(last.passed), lower_bound: num(last.lower_bound), lower_bound_wilson: num(last.lower_bound_wilson) }];
}

/**
 * The last restore of the agent (from its signed audit log) and how many of
 * its open operations are still unresolved: all of them until a reconcile
 * records otherwise, none once the target is activated.
 */
async function lastRestore(repo: Repository, trust: Trust, t: AgentRef, check: (n: string, s: CheckState, d: string) => void): Promise<AgentStatus["unresolved_operations"]> {
  const text = await repo.auditLog(t);
  if (!text) return null;
  try {
    verifyChainText(text, trust, NS.receipt, "audit log entry", { expect: { tenant: t.tenant, agent_id: t.agent } });
  } catch (e) {
    if (!(e instanceof AgentbakError)) throw e;
    check("audit", "warn", `the audit log does not verify: ${e.message}`);
    return null;
  }
  let found: NonNullable<AgentStatus["unresolved_operations"]> | null = null;
  for (const line of text.split("\n").filter(Boolean)) {
    const e = JSON.parse(line) as { event?: string; receipt?: Record<string, unknown> };
    const r = e.receipt ?? {};
    if (e.event === "restore") found = { target: String(r.target), generation: Number(r.generation), operations: (r.open_operations as unknown[] | undefined)?.length ?? 0, unresolved: (r.open_operations as unknown[] | undefined)?.length ?? 0 };
    else if (found && r.target === found.target && r.generation === found.generation) {
      if (e.event === "reconcile") found.unresolved = Number((r.summary as { unresolved?: number } | undefined)?.unresolved ?? found.unresolved);
      if (e.event === "activate") found.unresolved = 0;
    }
  }
  return found;
}

/**
 * The agent's fencing generation as restore and fence check read it (repository/generation.ts): a damaged
 * generation log or record, an entry it rests on that no trusted key signed or a delete marker hides, and a
 * linked replica not reached are each a warning.
 */
async function generationCheck(repo: Repository, trust: Trust, t: AgentRef, check: (n: string, s: CheckState, d: string) => void): Promise<void> {
  try {
    const v = await repo.generations(t, trust);
    const problems = [...v.unreachable.map(unreachableWarning), ...v.warnings];
    if (problems.length) check("generation", "warn", problems.join("; "));
  } catch (e) {
    if (!(e instanceof AgentbakError) || e.code !== Exit.verify) throw e;
    check("generation", "warn", e.message);
  }
}

/**
 * The bundles waiting in this host's spool, by agent (`tenant/agent`), read once for every agent (null: the
 * repository is a folder, which never spools).
 */
async function spoolOf(i: GatherInput): Promise<Map<string, { bundles: number; bytes: number }> | null> {
  if (!spools(i.location)) return null;
  const out = new Map<string, { bundles: number; bytes: number }>();
  if (!existsSync(spoolDir(i.home, i.location))) return out;
  for (const e of await (await openSpool(i.home, i.location)).list(i.trust)) {
    const n = out.get(key(e)) ?? { bundles: 0, bytes: 0 };
    out.set(key(e), { bundles: n.bundles + 1, bytes: n.bytes + e.size });
  }
  return out;
}

/** A duration for people: 45 s, 12 min, 3.5 h, 2.0 d. */
export function human(seconds: number): string {
  if (seconds < 120) return `${Math.round(seconds)} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  if (seconds < 172_800) return `${(seconds / 3600).toFixed(1)} h`;
  return `${(seconds / 86_400).toFixed(1)} d`;
}
