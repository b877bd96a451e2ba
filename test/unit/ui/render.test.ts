import { describe, expect, it } from "vitest";
import { humanAge } from "../../../src/ui/render.js";
import { humanSize } from "../../../src/ui/progress.js";

describe("humanSize", () => {
  it("binary units, one decimal below 10, none above", () => {
    expect([0, 1023, 1024, 1536, 10 * 1024, 5 * 1024 ** 2 + 1, 1024 ** 4, 3 * 1024 ** 5].map(humanSize))
      .toEqual(["0 B", "1023 B", "1.0 KiB", "1.5 KiB", "10 KiB", "5.0 MiB", "1.0 TiB", "3072 TiB"]);
  });
});

describe("humanAge", () => {
  it("the largest unit that fits, rounded down; a time in the future is 0s", () => {
    const now = Date.parse("2026-03-10T12:00:00Z");
    const ago = (s: number) => new Date(now - s * 1000).toISOString();
    expect([0, 59, 60, 3599, 3600, 86_399, 86_400, 10 * 86_400].map((s) => humanAge(ago(s), now))).toEqual(["0s", "59s", "1m", "59m", "1h", "23h", "1d", "10d"]);
    expect(humanAge("2026-03-11T00:00:00Z", now)).toBe("0s");
  });
});
