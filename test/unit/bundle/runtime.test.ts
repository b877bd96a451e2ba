/**
 * Runtime compatibility (src/bundle/runtime.ts): only the facts a target's
 * config states are compared; a difference is compatible only when the
 * snapshot recorded a value and a declared pattern (`*` = any run of
 * characters, every other character literal) matches all of it.
 */
import { describe, expect, it } from "vitest";
import { describeDifference, runtimeDifferences } from "../../../src/bundle/runtime.js";

const snap = { agent_version: "1.4.2", image_digest: "sha256:aaa", models: { chat: "gpt-x-2025", embedding: "e5-large" }, host: "h" };

describe("runtimeDifferences", () => {
  it("nothing stated, nothing compared; the same values are no difference", () => {
    expect(runtimeDifferences(snap, {})).toEqual([]);
    expect(runtimeDifferences(snap, { agentVersion: "1.4.2", imageDigest: "sha256:aaa", models: { chat: "gpt-x-2025" } })).toEqual([]);
  });

  it("each stated fact that differs, keyed, with both values; a model the snapshot did not record is null", () => {
    expect(runtimeDifferences(snap, { agentVersion: "1.5.0", imageDigest: "sha256:bbb", models: { embedding: "e5-small", rerank: "r1" } })).toEqual([
      { key: "agent_version", what: "agent version", snapshot: "1.4.2", here: "1.5.0", compatible: false },
      { key: "image_digest", what: "image digest", snapshot: "sha256:aaa", here: "sha256:bbb", compatible: false },
      { key: "model:embedding", what: "model embedding", snapshot: "e5-large", here: "e5-small", compatible: false },
      { key: "model:rerank", what: "model rerank", snapshot: null, here: "r1", compatible: false },
    ]);
  });

  it("a declared pattern makes a difference compatible when it matches the snapshot's whole value", () => {
    const d = (agentVersion: string[], models?: Record<string, string[]>) =>
      runtimeDifferences(snap, { agentVersion: "1.5.0", models: { chat: "gpt-y" }, compatible: { agentVersion, models } }).map((x) => [x.key, x.compatible]);
    expect(d(["1.4.*"], { chat: ["gpt-x-*"] })).toEqual([["agent_version", true], ["model:chat", true]]);
    expect(d(["1.4"])).toEqual([["agent_version", false], ["model:chat", false]]);
    expect(d(["*.4.2"])).toEqual([["agent_version", true], ["model:chat", false]]);
    // "." is a dot, not any character; regex syntax in a pattern is literal
    expect(d(["1x4x2"])[0]).toEqual(["agent_version", false]);
    expect(d(["1.4.[0-9]"])[0]).toEqual(["agent_version", false]);
    expect(d(["2.*", "1.4.2"])[0]).toEqual(["agent_version", true]);
    // and a dot in a pattern does not match another character in the value
    const x = runtimeDifferences({ ...snap, agent_version: "1x4x2" }, { agentVersion: "1.5.0", compatible: { agentVersion: ["1.4.2"] } });
    expect(x.map((y) => y.compatible)).toEqual([false]);
  });

  it("a value the snapshot did not record is never compatible, whatever the pattern", () => {
    const r = runtimeDifferences({ ...snap, agent_version: null }, { agentVersion: "1.5.0", compatible: { agentVersion: ["*"] } });
    expect(r).toEqual([{ key: "agent_version", what: "agent version", snapshot: null, here: "1.5.0", compatible: false }]);
  });

  it("describeDifference reads as snapshot -> here", () => {
    const [a, m] = runtimeDifferences({ ...snap, agent_version: null }, { agentVersion: "1.5.0", models: { chat: "gpt-y" } });
    expect(describeDifference(a!)).toBe("agent version (not recorded) -> 1.5.0");
    expect(describeDifference(m!)).toBe("model chat gpt-x-2025 -> gpt-y");
  });
});
