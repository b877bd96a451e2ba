import { describe, expect, it } from "vitest";
import { parseDuration } from "../../src/duration.js";
import { AgentbakError } from "../../src/errors.js";

describe("parseDuration", () => {
  it("reads each unit, and seconds when there is none", () => {
    expect([parseDuration("250ms"), parseDuration("30s"), parseDuration("5m"), parseDuration("2h"), parseDuration("7d"), parseDuration("1w"), parseDuration("45")])
      .toEqual([250, 30_000, 300_000, 7_200_000, 604_800_000, 604_800_000, 45_000]);
    expect(parseDuration("0s")).toBe(0);
  });

  it("refuses anything else with a usage error (exit 2) quoting the input", () => {
    for (const bad of ["", "5 m", "1.5h", "-3s", "3x", "h", "2H", "1d2h", " 5m"]) {
      let err: unknown;
      try { parseDuration(bad); } catch (e) { err = e; }
      expect(err, bad).toBeInstanceOf(AgentbakError);
      expect((err as AgentbakError).code, bad).toBe(2);
      expect((err as Error).message, bad).toContain(`"${bad}"`);
    }
  });
});
