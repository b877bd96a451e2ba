// The pure parts of the status gather: the chain the newest snapshot heads, and durations for people.
import { describe, expect, it } from "vitest";
import { chainOf, human } from "../../../src/status/gather.js";

const entry = (id: string, parent: string | null, status = "ok") => ({ snapshot_id: id, parent, status, kind: parent ? "incremental" : "full", size: 10 }) as any;

describe("chainOf", () => {
  it("walks the newest snapshot's parents back to its full one and counts the links that verify", () => {
    const list = [entry("a", null), entry("b", null), entry("c", "b"), entry("d", "c", "invalid")];
    expect(chainOf(list, 10)).toEqual({ head: "d", links: 3, verified: 2, next_full_in: 8 });
    expect(chainOf(list, null)!.next_full_in).toBeNull();
    expect(chainOf(list, 2)!.next_full_in).toBe(0);
    expect(chainOf([], 10)).toBeNull();
  });
  it("ends at a loop of parent ids instead of walking forever", () => {
    expect(chainOf([entry("x", "y"), entry("y", "x")], 5)).toMatchObject({ links: 2 });
  });
});

describe("human", () => {
  it("names a duration in the unit that reads best", () => {
    expect([human(45), human(600), human(7200), human(8 * 86400)]).toEqual(["45 s", "10 min", "2.0 h", "8.0 d"]);
  });
});
