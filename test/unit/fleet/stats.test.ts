/**
 * The fleet figure (src/fleet/stats.ts): Clopper–Pearson and Wilson one-sided
 * lower bounds against reference values computed independently (scipy 1.17
 * beta.ppf and norm.ppf, and a 40-digit mpmath bisection on the binomial tail,
 * which agree to 1e-11), the exact method's coverage computed exactly, and
 * the seeded sample: reproducible, uniform, and a planted unrecoverable agent
 * moves the bound when it is drawn.
 */
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { clopperPearsonLower, fleetFigure, normalQuantile, sampleFleet, wilsonLower } from "../../../src/fleet/stats.js";
import { draw, sample } from "../../../src/fleet/random.js";

// [drilled, passed, Clopper–Pearson one-sided 95% lower, Wilson one-sided 95% lower]
const REFERENCE: [number, number, number, number][] = [
  [10, 10, 0.7411344491, 0.7870580299],
  [50, 50, 0.9418449209, 0.9486668142],
  [50, 49, 0.9086018693, 0.9151947058],
  [50, 45, 0.8011669975, 0.8084624858],
  [20, 18, 0.7173814751, 0.7383369537],
  [100, 97, 0.9242892063, 0.9272896567],
  [1000, 990, 0.9830968249, 0.9833430075],
  [30, 1, 0.0017083156, 0.0074718788],
  [7, 3, 0.1287563928, 0.1864431904],
  [200, 200, 0.9851329608, 0.9866528393],
  [1, 1, 0.05, 0.2698659488],
  [5, 0, 0, 0],
];

describe("fleet figure: one-sided 95% lower bounds on the recoverable fraction", () => {
  it.each(REFERENCE)("%i drilled, %i passed: Clopper–Pearson %f, Wilson %f", (n, x, cp, w) => {
    expect(clopperPearsonLower(n, x)).toBeCloseTo(cp, 9);
    expect(wilsonLower(n, x)).toBeCloseTo(w, 9);
    expect(fleetFigure(n, x)).toEqual({ drilled: n, passed: x, confidence: 0.95, lower_bound: clopperPearsonLower(n, x), lower_bound_wilson: wilsonLower(n, x) });
  });

  it("the normal quantile matches scipy's norm.ppf", () => {
    expect(normalQuantile(0.95)).toBeCloseTo(1.6448536269514722, 8);
    expect(normalQuantile(0.99)).toBeCloseTo(2.3263478740408408, 8);
    expect(normalQuantile(0.9)).toBeCloseTo(1.2815515655446004, 8);
    expect(normalQuantile(0.01)).toBeCloseTo(-2.3263478740408408, 8);
  });

  it("nothing drilled says nothing (0); counts that are not a count of a count are refused (2)", () => {
    expect(fleetFigure(0, 0)).toMatchObject({ lower_bound: 0, lower_bound_wilson: 0 });
    for (const [n, x] of [[5, 6], [-1, 0], [3, 1.5], [Number.NaN, 0]]) expect(() => clopperPearsonLower(n!, x!)).toThrow(expect.objectContaining({ code: 2 }));
    expect(() => wilsonLower(10, 5, 1)).toThrow(expect.objectContaining({ code: 2 }));
  });

  it("the exact bound covers: for every true fraction p, P(bound <= p) >= 95% (computed exactly, n = 25)", () => {
    const n = 25;
    const bounds = Array.from({ length: n + 1 }, (_, x) => clopperPearsonLower(n, x));
    const pmf = (x: number, p: number) => {
      let c = 1;
      for (let i = 1; i <= x; i++) c = (c * (n - x + i)) / i;
      return c * p ** x * (1 - p) ** (n - x);
    };
    for (let p = 0.005; p < 1; p += 0.005) {
      const coverage = bounds.reduce((s, b, x) => s + (b <= p ? pmf(x, p) : 0), 0);
      expect(coverage, `p = ${p}`).toBeGreaterThanOrEqual(0.95 - 1e-12);
    }
  });

  it("properties: between 0 and the observed fraction, rising with each pass; Wilson below the observed fraction too", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 400 }), fc.double({ min: 0, max: 1, noNaN: true }), (n, f) => {
        const x = Math.round(f * n);
        const cp = clopperPearsonLower(n, x);
        expect(cp).toBeGreaterThanOrEqual(0);
        expect(cp).toBeLessThanOrEqual(x / n + 1e-12);
        if (x < n) expect(clopperPearsonLower(n, x + 1)).toBeGreaterThan(cp);
        expect(wilsonLower(n, x)).toBeLessThanOrEqual(x / n + 1e-12);
      }),
      { numRuns: 200 },
    );
  });

  it("a large fleet is quick: 100,000 drilled, 99,900 passed", () => {
    const t0 = performance.now();
    const cp = clopperPearsonLower(100_000, 99_900);
    expect(cp).toBeGreaterThan(0.998);
    expect(cp).toBeLessThan(0.999);
    expect(performance.now() - t0).toBeLessThan(2000);
  });
});

describe("the seeded sample", () => {
  const fleet = Array.from({ length: 50 }, (_, i) => `acme/agent-${String(i).padStart(2, "0")}`);
  const window = { from: new Date("2026-11-01T00:00:00Z"), to: new Date("2026-11-08T00:00:00Z") };

  it("the same seed chooses the same agents and points whatever order the fleet comes in; another seed others; it is reported", () => {
    const a = sampleFleet(fleet, { k: 10, seed: "s1", ...window });
    const b = sampleFleet([...fleet].reverse(), { k: 10, seed: "s1", ...window });
    expect(b).toEqual(a);
    expect(a.seed).toBe("s1");
    expect(a.population).toBe(50);
    expect(new Set(a.picks.map((p) => p.agent)).size).toBe(10);
    for (const p of a.picks) {
      expect(fleet).toContain(p.agent);
      expect(Date.parse(p.at)).toBeGreaterThanOrEqual(window.from.getTime());
      expect(Date.parse(p.at)).toBeLessThanOrEqual(window.to.getTime());
    }
    expect(sampleFleet(fleet, { k: 10, seed: "s2", ...window }).picks).not.toEqual(a.picks);
    const fresh = sampleFleet(fleet, { k: 3, ...window });
    expect(fresh.seed).toMatch(/^[0-9a-f]{16}$/);
    expect(sampleFleet(fleet, { k: 3, seed: fresh.seed, ...window })).toEqual(fresh);
  });

  it("an agent whose history starts inside the window is drilled at a point in [its start, to], with the same seed's draw; one older than the window is not moved", () => {
    const since = new Map([["acme/agent-03", new Date("2026-11-07T00:00:00Z")], ["acme/agent-04", new Date("2020-01-01T00:00:00Z")]]);
    const all = sampleFleet(fleet, { k: 50, seed: "s1", ...window }).picks;
    const young = sampleFleet(fleet, { k: 50, seed: "s1", ...window, since }).picks;
    const at = (ps: typeof all, a: string) => Date.parse(ps.find((p) => p.agent === a)!.at);
    // the same fraction of its own, shorter window: (at - from) / span is kept
    const f = (at(all, "acme/agent-03") - window.from.getTime()) / (window.to.getTime() - window.from.getTime());
    expect(at(young, "acme/agent-03")).toBeGreaterThanOrEqual(Date.parse("2026-11-07T00:00:00Z"));
    expect((at(young, "acme/agent-03") - Date.parse("2026-11-07T00:00:00Z")) / 86_400_000).toBeCloseTo(f, 6);
    expect(at(young, "acme/agent-04")).toBe(at(all, "acme/agent-04"));
    expect(young.map((p) => p.agent)).toEqual(all.map((p) => p.agent));
  });

  it("K above the fleet drills every agent once; K below 1 and a window that ends before it starts are refused (2)", () => {
    expect(sampleFleet(fleet, { k: 80, seed: "x", ...window }).picks.map((p) => p.agent).sort()).toEqual(fleet);
    expect(() => sampleFleet(fleet, { k: 0, seed: "x", ...window })).toThrow(expect.objectContaining({ code: 2 }));
    expect(() => sampleFleet(fleet, { k: 2, seed: "x", from: window.to, to: window.from })).toThrow(expect.objectContaining({ code: 2 }));
  });

  it("every agent is about equally likely to be drawn (2,000 seeds, K = 5 of 20: chi-square below the 0.1% critical value)", () => {
    const small = fleet.slice(0, 20);
    const counts = new Map(small.map((a) => [a, 0]));
    for (let s = 0; s < 2000; s++) for (const a of sample(small, 5, `seed-${s}`)) counts.set(a, counts.get(a)! + 1);
    const expected = (2000 * 5) / 20;
    const chi2 = [...counts.values()].reduce((sum, c) => sum + (c - expected) ** 2 / expected, 0);
    expect(chi2).toBeLessThan(43.82); // 19 degrees of freedom, p = 0.001
    const xs = Array.from({ length: 10_000 }, (_, i) => draw("u", "uniform", i));
    expect(Math.min(...xs)).toBeGreaterThanOrEqual(0);
    expect(Math.max(...xs)).toBeLessThan(1);
    expect(xs.reduce((a, b) => a + b, 0) / xs.length).toBeCloseTo(0.5, 1);
  });

  it("a planted unrecoverable agent is caught when the seed draws it, and the bound moves accordingly", () => {
    const planted = "acme/agent-17";
    const seeds = Array.from({ length: 200 }, (_, i) => `round-${i}`);
    const drawn = seeds.find((s) => sampleFleet(fleet, { k: 20, seed: s, ...window }).picks.some((p) => p.agent === planted))!;
    const missed = seeds.find((s) => !sampleFleet(fleet, { k: 20, seed: s, ...window }).picks.some((p) => p.agent === planted))!;
    const figure = (seed: string) => {
      const picks = sampleFleet(fleet, { k: 20, seed, ...window }).picks;
      return fleetFigure(picks.length, picks.filter((p) => p.agent !== planted).length);
    };
    expect(figure(drawn)).toMatchObject({ drilled: 20, passed: 19 });
    expect(figure(drawn).lower_bound).toBeCloseTo(0.7839, 4); // scipy beta.ppf(0.05, 19, 2)
    expect(figure(missed)).toMatchObject({ drilled: 20, passed: 20 });
    expect(figure(missed).lower_bound).toBeCloseTo(0.8609, 4);
  });
});
