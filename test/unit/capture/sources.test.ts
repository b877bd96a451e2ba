// The state sources stage on a real LanceDB folder: each table staged with its rows, version and dimension, the embedding model
// recorded on the tables that hold vectors only, a dimension the config disagrees with warned about, and a missing source named.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { restoreTargets } from "../../../src/capture/scope.js";
import { captureSources } from "../../../src/capture/sources.js";
import { loadConfig } from "../../../src/config/load.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-sources-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const lance = join(tmp, "memory/lance");
beforeAll(async () => {
  const lancedb = await import("@lancedb/lancedb");
  const db = await lancedb.connect(lance);
  await db.createTable("memories", Array.from({ length: 30 }, (_, i) => ({ id: i, text: `memory ${i}`, vector: [i, i + 1, i + 2, i + 3] })));
  await db.createTable("facts", Array.from({ length: 5 }, (_, i) => ({ id: i, fact: `fact ${i}` })));
  db.close();
});
const config = (sources: unknown[]) => {
  mkdirSync(join(tmp, "agent"), { recursive: true });
  const p = join(tmp, "agent", "agentbak.json");
  writeFileSync(p, JSON.stringify({ agent: { id: "a", tenant: "t" }, repository: "../repo", recipients: ["age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"], sources }));
  return loadConfig(p);
};
let n = 0;
const staging = () => {
  const d = join(tmp, `staging-${n++}`);
  mkdirSync(d);
  return d;
};

/** captureSources as the instant calls it: with the config's restore targets (scope.ts). */
const captureSourcesOf = (lc: ReturnType<typeof loadConfig>, staging: string, warnings: string[], prior: Parameters<typeof captureSources>[4] = null) =>
  captureSources(lc, staging, warnings, restoreTargets(lc).sources, prior);

describe("captureSources", () => {
  it("stages every table with its rows and dimension; the model goes on the vector table only; the instant names the source and its place", async () => {
    const model = { model: "embed-4", dimension: 4 };
    const warnings: string[] = [];
    const dir = staging();
    const r = await captureSourcesOf(config([{ name: "memory", kind: "lancedb", path: "../memory/lance", embedding: model }]), dir, warnings);
    expect(warnings).toEqual([]);
    expect(r.staged.map(({ file: _f, table_version: _v, ...s }) => s)).toEqual([
      { path: "sources/memory/facts.arrows", kind: "lancedb", name: "memory", records: { facts: 5 }, dimension: undefined, fingerprint: expect.stringMatching(/^[0-9a-f]{64}$/) },
      { path: "sources/memory/memories.arrows", kind: "lancedb", name: "memory", records: { memories: 30 }, dimension: 4, embedding: model, fingerprint: expect.stringMatching(/^[0-9a-f]{64}$/) },
    ]);
    // the same table versions again, with the entries a snapshot stored for them: reused whole, nothing staged or read
    const stored = r.staged.map(({ file: _f, ...c }) => ({ ...c, sha256: "a".repeat(64), size: 1, chunks: [["b".repeat(64), "c".repeat(64), 300, 1]] as [string, string, number, number][] }));
    const again = await captureSourcesOf(config([{ name: "memory", kind: "lancedb", path: "../memory/lance", embedding: model }]), staging(), [], new Map(stored.map((c) => [c.path, c])));
    expect(again.staged).toEqual([]);
    expect(again.reused.map((c) => c.path)).toEqual(stored.map((c) => c.path));
    expect(again.reused[1]).toMatchObject({ chunks: stored[1]!.chunks, records: { memories: 30 }, embedding: model });
    for (const s of r.staged) {
      expect(s.file.startsWith(join(dir, "sources", "memory"))).toBe(true);
      expect(existsSync(s.file)).toBe(true);
      expect(typeof s.table_version).toBe("number");
    }
    // outside the config's folder: restored under sources/<name>
    expect(r.instant!.sources).toEqual([{ name: "memory", kind: "lancedb", ref: null, path: "sources/memory", snapshot_at: expect.any(String), server_version: null }]);
    expect(Date.parse(r.instant!.started_at)).toBeLessThanOrEqual(Date.parse(r.instant!.finished_at));
  });

  it("warns when a table's vectors have another dimension than the config's model, naming source, table and model", async () => {
    const warnings: string[] = [];
    await captureSourcesOf(config([{ name: "memory", kind: "lancedb", path: lance, embedding: { model: "embed-3", dimension: 3 } }]), staging(), warnings);
    expect(warnings).toEqual(["source memory: sources/memory/memories.arrows holds vectors of dimension 4, the config's embedding embed-3 has 3"]);
  });

  it("a source folder inside the config's folder keeps its place; a missing one fails (exit 10) naming the source", async () => {
    cpSync(lance, join(tmp, "agent", "vec"), { recursive: true });
    const r = await captureSourcesOf(config([{ name: "near", kind: "lancedb", path: "vec" }]), staging(), []);
    expect(r.instant!.sources[0]!.path).toBe("vec");
    expect(r.staged.map((x) => x.records)).toEqual([{ facts: 5 }, { memories: 30 }]);
    await expect(captureSourcesOf(config([{ name: "far", kind: "lancedb", path: "gone/lance" }]), staging(), [])).rejects.toMatchObject({ code: 10, message: `source far: ${join(tmp, "agent", "gone/lance")} not found` });
  });

  it("no sources: nothing staged, an instant with none", async () => {
    const r = await captureSourcesOf(config([]), staging(), []);
    expect(r.staged).toEqual([]);
    expect(r.instant!.sources).toEqual([]);
  });
});
