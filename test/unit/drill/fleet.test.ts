// The fleet drill's pure parts (src/drill/fleet.ts): which snapshot a sampled agent is drilled at, who is in the
// fleet, and the figure and signed-entry body of a round.
import { describe, expect, it } from "vitest";
import { fleetReportBody, fleetResult, pickTargets, type FleetOutcome } from "../../../src/drill/fleet.js";
import { clopperPearsonLower, sampleFleet, wilsonLower } from "../../../src/fleet/stats.js";
import type { CatalogEntry } from "../../../src/repository/repository.js";

const entry = (agent: string, id: string, created_at: string | null, status: CatalogEntry["status"] = "ok"): CatalogEntry => ({
  tenant: "acme",
  agent_id: agent,
  snapshot_id: id,
  kind: "full",
  parent: null,
  sequence: Number(id.replace(/\D/g, "")) || 1,
  created_at,
  expires_at: null,
  label: null,
  size: 1,
  status,
  problem: status === "ok" ? null : "damaged",
  problem_code: status === "ok" ? null : 13,
  signer: null,
  schema_version: null,
  path: `/r/${id}`,
});
const day = (d: number) => new Date(Date.UTC(2026, 10, d)).toISOString();
const window = { from: new Date(day(1)), to: new Date(day(8)) };

describe("pickTargets", () => {
  const entries = [
    entry("a", "s1", day(1)),
    entry("a", "s2", day(3)),
    entry("a", "s3", day(5), "invalid"),
    entry("b", "s4", day(6)),
    entry("c", "s5", null, "invalid"), // no readable header: no place in time, no member
  ];

  it("drills each sampled agent at the newest snapshot created at or before its instant, one that does not verify included", () => {
    for (const seed of ["1", "2", "3", "4", "5", "6"]) {
      const { targets, population } = pickTargets(entries, { k: 5, seed, ...window });
      expect(population).toBe(2);
      for (const t of targets) {
        const mine = entries.filter((e) => e.agent_id === t.agent && e.created_at && e.created_at <= t.at);
        expect(t.snapshot?.snapshot_id, `${seed} ${t.agent} ${t.at}`).toBe(mine.at(-1)!.snapshot_id);
      }
    }
    // an instant after day 5 lands on s3, which does not verify: its drill will fail, as its restore would
    const late = ["x", "y", "z", "w", "v", "u", "t", "s"].map((seed) => pickTargets(entries, { k: 2, seed, ...window }).targets.find((t) => t.agent === "a")!).find((t) => t.at >= day(5));
    expect(late?.snapshot?.snapshot_id).toBe("s3");
  });

  it("draws b's point after its first snapshot (b is younger than the window) and agrees with sampleFleet on who is drawn", () => {
    for (const seed of ["p", "q", "r"]) {
      const { targets } = pickTargets(entries, { k: 1, seed, ...window });
      expect(targets.map((t) => `${t.tenant}/${t.agent}`)).toEqual(sampleFleet(["acme/a", "acme/b"], { k: 1, seed, ...window }).picks.map((p) => p.agent));
      const b = pickTargets(entries, { k: 2, seed, ...window }).targets.find((t) => t.agent === "b")!;
      expect(b.at >= day(6)).toBe(true);
      expect(b.snapshot?.snapshot_id).toBe("s4");
    }
  });

  it("a host file's agent without a snapshot is in the fleet, with nothing to drill", () => {
    const { targets, population } = pickTargets(entries, { k: 3, seed: "h", ...window, agents: [{ tenant: "acme", agent: "a" }, { tenant: "acme", agent: "new" }, { tenant: "acme", agent: "b" }] });
    expect(population).toBe(3);
    expect(targets.find((t) => t.agent === "new")).toMatchObject({ snapshot: null });
  });
});

describe("fleetResult and fleetReportBody", () => {
  it("count the passes, give the stats.ts bounds, and carry the seed, window and each pick into the signed entry", () => {
    const d = (agent: string, result: "pass" | "fail"): FleetOutcome => ({ tenant: "acme", agent, at: day(2), snapshot_id: "s1", result, exit_status: result === "pass" ? 0 : 13, detail: result === "pass" ? null : "digest mismatch", seconds: 1 });
    const r = fleetResult({ seed: "42", from: window.from, to: window.to, population: 9, spec: "builtin" }, [d("a", "pass"), d("b", "fail"), d("c", "pass")]);
    expect(r).toMatchObject({ drilled: 3, passed: 2, lower_bound: clopperPearsonLower(3, 2), lower_bound_wilson: wilsonLower(3, 2), seed: "42", population: 9, window: { from: day(1), to: day(8) } });
    const body = fleetReportBody(r);
    expect(body).toMatchObject({ kind: "fleet", result: "fail", seed: "42", drilled: 3, passed: 2, lower_bound: r.lower_bound });
    expect((body.drills as unknown[])[1]).toEqual({ tenant: "acme", agent_id: "b", at: day(2), snapshot_id: "s1", result: "fail", exit_status: 13, detail: "digest mismatch" });
  });
});
