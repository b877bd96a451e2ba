/**
 * A fleet drill's pure parts: which agents and recovery points a seeded
 * sample picks from a repository's catalog, and the signed report entry of the
 * round (its sample, seed and figure: fleet/stats.ts). The drills themselves
 * run through the one drill runner (runner.ts), an agent at a time.
 */
import type { CatalogEntry } from "../repository/repository.js";
import { fleetFigure, sampleFleet, type FleetFigure } from "../fleet/stats.js";

/** One sampled agent: the instant drawn and the snapshot that was its recovery point then (null: it had none). */
export interface FleetTarget {
  tenant: string;
  agent: string;
  at: string;
  snapshot: CatalogEntry | null;
}

/** What became of one sampled agent's drill. */
export interface FleetOutcome {
  tenant: string;
  agent: string;
  at: string;
  snapshot_id: string | null;
  result: "pass" | "fail";
  /** the exit status of the agent's drill: 0 passed (3 with warnings), 15 a check failed, or why it could not run (10, 13, ...) */
  exit_status: number;
  /** why it failed, one line (agent text: escape it to show it) */
  detail: string | null;
  seconds: number;
}

/** A fleet drill's result: the sample, the figure, each agent's drill and where the signed fleet entry went. */
export interface FleetDrillResult extends FleetFigure {
  seed: string;
  window: { from: string; to: string };
  /** how many agents the sample was drawn from */
  population: number;
  spec: string;
  drills: FleetOutcome[];
  report_file: string | null;
  report_index: number | null;
}

const ref = (t: { tenant: string; agent: string }) => `${t.tenant}/${t.agent}`;

/**
 * Draws `k` agents of the catalog's (those with at least one committed
 * snapshot) and, for each, the newest snapshot created at or before an
 * instant drawn in the window — from the agent's oldest snapshot when that is
 * later than the window's start. A snapshot that does not verify is a
 * recovery point all the same: drilling it fails, as restoring it would.
 * @throws AgentbakError(2) for k below 1 (fleet/stats.ts).
 */
export function pickTargets(entries: readonly CatalogEntry[], o: { k: number; seed?: string; from: Date; to: Date; agents?: readonly { tenant: string; agent: string }[] }): { seed: string; population: number; targets: FleetTarget[] } {
  const byAgent = new Map<string, CatalogEntry[]>();
  for (const e of entries) if (e.tenant && e.created_at) byAgent.set(ref({ tenant: e.tenant, agent: e.agent_id }), [...(byAgent.get(ref({ tenant: e.tenant, agent: e.agent_id })) ?? []), e]);
  // the host file's agents are the fleet even when one has no snapshot yet (then its drill fails: nothing to recover)
  const population = o.agents ? o.agents.map(ref) : [...byAgent.keys()];
  const since = new Map<string, Date>();
  for (const [a, list] of byAgent) since.set(a, new Date(Math.min(...list.map((e) => Date.parse(e.created_at!)))));
  const s = sampleFleet(population, { k: o.k, seed: o.seed, from: o.from, to: o.to, since });
  const targets = s.picks.map(({ agent, at }) => {
    const [tenant, id] = agent.split("/") as [string, string];
    const before = (byAgent.get(agent) ?? []).filter((e) => Date.parse(e.created_at!) <= Date.parse(at));
    const newest = before.sort((x, y) => Date.parse(x.created_at!) - Date.parse(y.created_at!) || (x.sequence ?? 0) - (y.sequence ?? 0)).at(-1) ?? null;
    return { tenant, agent: id, at, snapshot: newest };
  });
  return { seed: s.seed, population: s.population, targets };
}

/** The round's figure and result from its drills. */
export function fleetResult(o: { seed: string; from: Date; to: Date; population: number; spec: string }, drills: FleetOutcome[]): Omit<FleetDrillResult, "report_file" | "report_index"> {
  const figure = fleetFigure(drills.length, drills.filter((d) => d.result === "pass").length);
  return { ...figure, seed: o.seed, window: { from: o.from.toISOString(), to: o.to.toISOString() }, population: o.population, spec: o.spec, drills };
}

/** The signed fleet report entry: the figure, the seed that replays the sample, and each pick with its result. */
export function fleetReportBody(r: Omit<FleetDrillResult, "report_file" | "report_index">): Record<string, unknown> {
  return {
    at: new Date().toISOString(),
    kind: "fleet",
    spec: r.spec,
    result: r.passed === r.drilled ? "pass" : "fail",
    seed: r.seed,
    window: r.window,
    population: r.population,
    drilled: r.drilled,
    passed: r.passed,
    confidence: r.confidence,
    lower_bound: r.lower_bound,
    lower_bound_wilson: r.lower_bound_wilson,
    drills: r.drills.map((d) => ({ tenant: d.tenant, agent_id: d.agent, at: d.at, snapshot_id: d.snapshot_id, result: d.result, exit_status: d.exit_status, detail: d.detail })),
  };
}
