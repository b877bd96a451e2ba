// Seeded randomness: a draw is the documented sha256 fraction, a sample is reproducible from its seed and unbiased.
import { describe, expect, it } from "vitest";
import { createHash } from "node:crypto";
import { draw, newSeed, sample } from "../../../src/fleet/random.js";

describe("draw", () => {
  it("is the first 48 bits of sha256(\"<seed>\\0<label>\\0<i>\") over 2^48, as another implementation would compute it", () => {
    const h = createHash("sha256").update("s1\0jitter\x007").digest("hex");
    expect(draw("s1", "jitter", 7)).toBe(parseInt(h.slice(0, 12), 16) / 2 ** 48);
  });

  it("lies in [0, 1) and moves with the seed, the label and the counter", () => {
    const xs = Array.from({ length: 200 }, (_, i) => draw("seed", "l", i));
    for (const x of xs) expect(x >= 0 && x < 1).toBe(true);
    expect(new Set(xs).size).toBe(200);
    expect(draw("seed", "l", 0)).not.toBe(draw("seed2", "l", 0));
    expect(draw("seed", "l", 0)).not.toBe(draw("seed", "m", 0));
  });
});

describe("newSeed", () => {
  it("is 16 hex digits, fresh each time", () => {
    const a = newSeed();
    expect(a).toMatch(/^[0-9a-f]{16}$/);
    expect(newSeed()).not.toBe(a);
  });
});

describe("sample", () => {
  const items = Array.from({ length: 10 }, (_, i) => `h${i}`);

  it("the same seed and label give the same sample; another seed another order", () => {
    expect(sample(items, 4, "abc")).toEqual(sample(items, 4, "abc"));
    const others = ["a", "b", "c", "d", "e"].map((s) => sample(items, 10, s).join());
    expect(new Set(others).size).toBeGreaterThan(1);
    expect(sample(items, 4, "abc", "other")).not.toEqual(sample(items, 4, "abc"));
  });

  it("takes k distinct items of the input, never more than there are, and leaves the input alone", () => {
    const copy = [...items];
    const s = sample(items, 4, "x");
    expect(s).toHaveLength(4);
    expect(new Set(s).size).toBe(4);
    for (const x of s) expect(items).toContain(x);
    expect(items).toEqual(copy);
    expect(sample(items, 50, "x").sort()).toEqual([...items].sort());
    expect(sample(items, 0, "x")).toEqual([]);
    expect(sample([], 3, "x")).toEqual([]);
  });

  it("its first pick is a Fisher–Yates step: index floor(draw(seed, label, 0) * n)", () => {
    expect(sample(items, 1, "q")[0]).toBe(items[Math.floor(draw("q", "sample", 0) * items.length)]);
  });

  it("every item is about equally likely over many seeds (no edge bias)", () => {
    const counts = new Map<string, number>();
    const runs = 4000;
    for (let i = 0; i < runs; i++) for (const x of sample(items, 2, `seed-${i}`)) counts.set(x, (counts.get(x) ?? 0) + 1);
    // each item expected runs * 2 / 10 = 800 times; a biased shuffle (e.g. j over the whole array) misses this band
    for (const x of items) expect(Math.abs((counts.get(x) ?? 0) - 800)).toBeLessThan(120);
  });
});
