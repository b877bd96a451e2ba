// Object keys: relative, slash-separated; an empty, `.` or `..` segment or a NUL is refused with exit 2 before any store sees it.
import { describe, expect, it } from "vitest";
import { checkKey } from "../../../src/storage/store.js";
import { AgentbakError } from "../../../src/errors.js";

describe("checkKey", () => {
  it("splits a good key into its segments", () => {
    expect(checkKey("tenants/acme/agents/a/snapshots/x.commit")).toEqual(["tenants", "acme", "agents", "a", "snapshots", "x.commit"]);
    expect(checkKey("sequence")).toEqual(["sequence"]);
    expect(checkKey(".tmp-x/..a")).toEqual([".tmp-x", "..a"]); // dots inside a name are fine
  });

  it("refuses absolute keys, empty segments, . and .., NUL: exit 2 naming the key", () => {
    for (const bad of ["", "/etc/passwd", "a//b", "a/", "./a", "a/../b", "..", "a/.", "a\0b"]) {
      let err: unknown;
      try { checkKey(bad); } catch (e) { err = e; }
      expect(err, JSON.stringify(bad)).toBeInstanceOf(AgentbakError);
      expect((err as AgentbakError).code).toBe(2);
      expect((err as Error).message).toBe(`invalid object key ${JSON.stringify(bad)}`);
    }
  });

  it("a key quoted in the message is cut at 200 characters", () => {
    let err: unknown;
    try { checkKey("x".repeat(500) + "/.."); } catch (e) { err = e; }
    expect((err as Error).message).toBe(`invalid object key ${JSON.stringify("x".repeat(200))}`);
  });
});
