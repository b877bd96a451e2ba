// The embedding-model compatibility policy as pure functions, without a disk: what counts as a change, and
// how a change becomes a refusal or (allowed) an approval.
import { describe, expect, it } from "vitest";
import { embeddingChanges } from "../../../src/bundle/manifest.js";
import { embeddingPolicy } from "../../../src/restore/policy.js";

const small = { model: "text-embedding-3-small", dimension: 1536 };
const manifest = (components: any[]) => ({ components }) as any;
const m = manifest([
  { name: "state", kind: "sqlite", embedding: small },
  { name: "memory", kind: "lancedb", embedding: small },
  { name: "old", kind: "sqlite" },
]);

describe("embedding compatibility", () => {
  it("the same model and dimension, or a store the config does not name, is no change", () => {
    expect(embeddingChanges(m, new Map([["state", small], ["memory", small]]))).toEqual({ changes: [], unknown: [] });
    expect(embeddingChanges(m, new Map())).toEqual({ changes: [], unknown: [] });
  });

  it("another model, another dimension, or no model configured for recorded vectors are changes", () => {
    const e = embeddingChanges(m, new Map<string, any>([["state", { model: "text-embedding-3-large", dimension: 1536 }], ["memory", { ...small, dimension: 768 }]]));
    expect(e.changes).toEqual([
      "vector store state: the snapshot's vectors are from text-embedding-3-small (dimension 1536), the config here uses text-embedding-3-large (dimension 1536)",
      "vector store memory: the snapshot's vectors are from text-embedding-3-small (dimension 1536), the config here uses text-embedding-3-small (dimension 768)",
    ]);
    expect(embeddingChanges(m, new Map([["state", undefined]])).changes).toEqual(["vector store state: the snapshot's vectors are from text-embedding-3-small (dimension 1536), the config here names no embedding model"]);
  });

  it("a bundle that recorded no model is only a warning", () => {
    expect(embeddingChanges(m, new Map([["old", small]]))).toEqual({ changes: [], unknown: ["vector store old: the snapshot records no embedding model; the config here uses text-embedding-3-small (dimension 1536)"] });
  });

  it("a change is refused, or with the override needs approval; unknowns warn", () => {
    const e = { changes: ["vector store state: x"], unknown: ["vector store old: y"] };
    const refused = { refusals: [] as string[], needs_approval: [] as string[], warnings: [] as string[] };
    embeddingPolicy(e, false, refused);
    expect(refused).toEqual({ refusals: ["vector store state: x; pass --allow-embedding-change and approve to restore it anyway"], needs_approval: [], warnings: ["vector store old: y"] });
    const allowed = { refusals: [] as string[], needs_approval: [] as string[], warnings: [] as string[] };
    embeddingPolicy(e, true, allowed);
    expect(allowed).toEqual({ refusals: [], needs_approval: ["vector store state: x"], warnings: ["vector store old: y"] });
  });
});
