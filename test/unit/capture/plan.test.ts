/**
 * The read plan (src/capture/plan.ts): how a backup reads its databases is chosen once, up front, from what the
 * parent offers and the integrity policy, as data.
 */
import { describe, expect, it } from "vitest";
import { chooseReadMode, integrityChecked } from "../../../src/capture/plan.js";

describe("chooseReadMode", () => {
  it("reads a full snapshot pinned in place: no parent index, whatever the integrity policy", () => {
    expect(chooseReadMode({ databases: 2, withIndex: 0, integrityChecked: true })).toBe("pinned");
    expect(chooseReadMode({ databases: 2, withIndex: 0, integrityChecked: false })).toBe("pinned");
  });

  it("reads an unchecked incremental's pages in place only when every database has its parent's index", () => {
    expect(chooseReadMode({ databases: 2, withIndex: 2, integrityChecked: false })).toBe("in-place");
    expect(chooseReadMode({ databases: 2, withIndex: 1, integrityChecked: false })).toBe("copy");
  });

  it("copies an incremental the integrity policy checks (integrity_check reads the copy)", () => {
    expect(chooseReadMode({ databases: 2, withIndex: 2, integrityChecked: true })).toBe("copy");
    expect(chooseReadMode({ databases: 3, withIndex: 1, integrityChecked: true })).toBe("copy");
  });

  it("offers nothing to read in place when there is no database", () => {
    expect(chooseReadMode({ databases: 0, withIndex: 0, integrityChecked: true })).toBe("copy");
  });
});

describe("integrityChecked", () => {
  it("checks every full snapshot and every integrityEvery-th link of a chain", () => {
    expect(integrityChecked(0, false, 5)).toBe(true);
    expect([1, 2, 3, 4, 5, 6, 10].map((link) => integrityChecked(link, true, 5))).toEqual([false, false, false, false, true, false, true]);
    expect(integrityChecked(3, true, 1)).toBe(true);
  });
});
