// Drill specs: every shipped spec loads; bad ones are refused naming the file (2), a missing one 10.
import { afterAll, describe, expect, it } from "vitest";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { loadSpec } from "../../../src/drill/spec.js";
import { AgentbakError } from "../../../src/errors.js";

const DRILLS = resolve(import.meta.dirname, "..", "..", "..", "drills");
const tmp = mkdtempSync(join(tmpdir(), "agentbak-spec-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
let n = 0;
const spec = (s: unknown) => {
  const p = join(tmp, `s${n++}.json`);
  writeFileSync(p, typeof s === "string" ? s : JSON.stringify(s));
  return p;
};
const refusal = (p: string) => {
  try { loadSpec(p); } catch (e) { return [(e as AgentbakError).code, (e as Error).message]; }
  return "loaded";
};

describe("loadSpec", () => {
  it("loads every spec in drills/, resolving paths against the spec's folder", () => {
    const files = readdirSync(DRILLS).filter((f) => f.endsWith(".json"));
    expect(files.length).toBeGreaterThanOrEqual(4);
    for (const f of files) {
      const s = loadSpec(join(DRILLS, f));
      expect(s.spec.name.length, f).toBeGreaterThan(0);
      expect(s.resolve("invariants/x.sql")).toBe(join(DRILLS, "invariants/x.sql"));
    }
  });

  it("fills defaults", () => {
    const s = loadSpec(spec({ name: "min", invariants: [] })).spec;
    expect(s).toMatchObject({ crashPoints: [], sinkKill: false, restarts: 3, reconcile: false, reconcileFaults: [], splitBrain: false, owners: {} });
  });

  it("refuses a missing file (10), bad JSON, an unknown key or crash point (2), each naming the file", () => {
    const missing = join(tmp, "none.json");
    expect(refusal(missing)).toEqual([10, expect.stringMatching(new RegExp(`^drill spec ${missing}: no such file, and no shipped spec of that name \\(shipped: .*recovery.*\\)$`))]);
    const bad = spec("{");
    expect(refusal(bad)).toEqual([2, expect.stringMatching(new RegExp(`^drill spec ${bad}: `))]);
    const key = spec({ name: "x", invariants: [], sinkkill: true });
    expect(refusal(key)).toEqual([2, expect.stringMatching(/sinkkill/)]);
    const cp = spec({ name: "x", invariants: [], crashPoints: ["whenever"] });
    expect(refusal(cp)).toEqual([2, expect.stringMatching(/crashPoints\.0/)]);
  });

  it("scenarios that run the agent need its worker (and inject for crashes)", () => {
    const crash = spec({ name: "x", invariants: [], crashPoints: ["after_commit_before_delivery"], worker: { command: ["node", "w.js"] } });
    expect(refusal(crash)).toEqual([2, `drill spec ${crash}: crashPoints, sinkKill and splitBrain need worker and inject`]);
    const rec = spec({ name: "x", invariants: [], reconcile: true });
    expect(refusal(rec)).toEqual([2, `drill spec ${rec}: reconcile and reconcileFaults need worker (it runs after reconciliation)`]);
  });
});
