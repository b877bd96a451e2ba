// mapLimit: results in the items' order, never more than n at once, every item once; a rejection rejects the whole.
import { describe, expect, it } from "vitest";
import { mapLimit } from "../../src/limit.js";

describe("mapLimit", () => {
  it("keeps order, runs at most n at once and each item once", async () => {
    let running = 0;
    let peak = 0;
    const seen: number[] = [];
    const out = await mapLimit([...Array(50).keys()], 7, async (x) => {
      running++;
      peak = Math.max(peak, running);
      seen.push(x);
      await new Promise((r) => setTimeout(r, (x * 37) % 5));
      running--;
      return x * 2;
    });
    expect(out).toEqual([...Array(50).keys()].map((x) => x * 2));
    expect(peak).toBe(7);
    expect([...seen].sort((a, b) => a - b)).toEqual([...Array(50).keys()]);
  });

  it("an empty list and n above the length; a rejection rejects", async () => {
    expect(await mapLimit([], 64, async (x) => x)).toEqual([]);
    expect(await mapLimit([1, 2], 64, async (x) => x + 1)).toEqual([2, 3]);
    await expect(mapLimit([1, 2, 3], 2, async (x) => (x === 2 ? Promise.reject(new Error("no 2")) : x))).rejects.toThrow("no 2");
  });
});
