// forget's plan: retention, the newest drill-passed snapshot, the parents a kept incremental needs; unverifiable bundles never removed.
import { describe, expect, it } from "vitest";
import { newestDrilled, planForget } from "../../../src/repository/forget.js";
import { AgentbakError } from "../../../src/errors.js";

const a = { tenant: "acme", agent: "billing-agent" };
const id = (day: number) => `202603${String(day).padStart(2, "0")}T100000000Z-0000000${day % 10}`;
const snap = (day: number, parent: number | null = null, verified = true) =>
  ({ snapshot_id: id(day), created_at: `2026-03-${String(day).padStart(2, "0")}T10:00:00.000Z`, parent: parent === null ? null : id(parent), header: verified ? {} : null, problem: verified ? undefined : "manifest.sig: signature does not match" }) as any;

describe("newestDrilled", () => {
  it("picks the passing drill with the highest sequence of this agent and tenant, skipping junk lines", () => {
    const lines = [
      { result: "pass", sequence: 3, snapshot_id: "s3", agent_id: "billing-agent", tenant: "acme" },
      "not json",
      { result: "fail", sequence: 9, snapshot_id: "s9", agent_id: "billing-agent", tenant: "acme" },
      { result: "pass", sequence: 7, snapshot_id: "s7", agent_id: "billing-agent" }, // v1 line: no tenant, taken as this one
      { result: "pass", sequence: 8, snapshot_id: "other-tenant", agent_id: "billing-agent", tenant: "globex" },
      { result: "pass", sequence: 12, snapshot_id: "other-agent", agent_id: "support-agent", tenant: "acme" },
    ].map((l) => (typeof l === "string" ? l : JSON.stringify(l)));
    expect(newestDrilled(lines.join("\n") + "\n", a)).toBe("s7");
    expect(newestDrilled("", a)).toBeNull();
  });
});

describe("planForget", () => {
  it("keeps what the rules keep plus every parent of a kept incremental; removes the rest newest first", () => {
    // 1 <- 2 <- 3 (a chain), 4 full, 5 <- 6
    const entries = [snap(1), snap(2, 1), snap(3, 2), snap(4), snap(5), snap(6, 5)];
    const p = planForget(entries, { last: 1 }, null);
    expect(p.kept.map((k) => k.snapshot_id)).toEqual([id(5), id(6)]);
    expect(p.kept.find((k) => k.snapshot_id === id(5))!.reasons).toEqual([`needed by ${id(6)}`]);
    expect(p.remove.map((s: any) => s.snapshot_id)).toEqual([id(4), id(3), id(2), id(1)]);
    expect(p.not_removed).toEqual([]);
  });

  it("keeps the newest drill-passed snapshot and its chain, saying why", () => {
    const entries = [snap(1), snap(2, 1), snap(3)];
    const p = planForget(entries, { last: 1 }, id(2));
    expect(Object.fromEntries(p.kept.map((k) => [k.snapshot_id, k.reasons]))).toEqual({
      [id(1)]: [`needed by ${id(2)}`],
      [id(2)]: ["newest snapshot that passed a drill"],
      [id(3)]: expect.any(Array),
    });
    expect(p.remove).toEqual([]);
  });

  it("never removes a bundle that does not verify: it is reported with the problem", () => {
    const p = planForget([snap(1, null, false), snap(2), snap(3)], { last: 1 }, null);
    expect(p.remove.map((s: any) => s.snapshot_id)).toEqual([id(2)]);
    expect(p.not_removed).toEqual([{ snapshot_id: id(1), reason: expect.stringContaining("manifest.sig: signature does not match") }]);
  });

  it("refuses an empty policy (exit 2) rather than removing everything", () => {
    let err: unknown;
    try { planForget([snap(1)], {}, null); } catch (e) { err = e; }
    expect(err).toBeInstanceOf(AgentbakError);
    expect((err as AgentbakError).code).toBe(2);
    expect((err as Error).message).toMatch(/no retention rule given/);
  });
});
