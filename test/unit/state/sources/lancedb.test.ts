/**
 * LanceDB as a state source (state/sources/lancedb.ts), on a real embedded
 * LanceDB folder (no server): every table captured at one pinned version as
 * an Arrow stream with its row count and vector dimension, checked without
 * the library's store, restored into an empty folder with the counts checked
 * there; a changed count or dimension, or a file that is no Arrow stream, is 13.
 */
import { mkdtempSync, rmSync, writeFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { lancedbDriver } from "../../../../src/state/sources/lancedb.js";
import { AgentbakError } from "../../../../src/errors.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-lance-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const spec = { name: "memory", kind: "lancedb", path: "lance" } as unknown as Parameters<typeof lancedbDriver.capture>[0];

async function failure(p: Promise<unknown>): Promise<AgentbakError> {
  const e = await p.then(() => null, (x: unknown) => x);
  expect(e).toBeInstanceOf(AgentbakError);
  return e as AgentbakError;
}

describe("lancedb source", () => {
  it("captures each table with rows and dimension, checks the files, restores them into an empty folder", async () => {
    const lancedb = await import("@lancedb/lancedb");
    const folder = join(dir, "lance");
    const db = await lancedb.connect(folder);
    await db.createTable("memories", Array.from({ length: 25 }, (_, i) => ({ id: i, text: `m${i}`, vector: [i, i + 1, i + 2, i + 3] })));
    await db.createTable("notes", [{ id: 1, body: "no vectors here" }]);
    db.close();
    const out = join(dir, "captured");
    mkdirSync(out);
    const cap = await lancedbDriver.capture(spec, folder, out);
    expect(cap.files.map((f) => [f.path, f.records, f.dimension])).toEqual([
      ["sources/memory/memories.arrows", { memories: 25 }, 4],
      ["sources/memory/notes.arrows", { notes: 1 }, undefined],
    ]);
    expect(await lancedbDriver.check("memory", cap.files)).toBe("2 table(s) readable; row counts and vector dimensions match");

    const target = join(dir, "restored");
    expect(await lancedbDriver.occupant(target, cap.files, false)).toBeNull();
    const r = await lancedbDriver.restore("memory", cap.files, target, 0);
    expect(r).toMatchObject({ records: { memories: 25, notes: 1 }, dimensions: { memories: 4 }, skipped: [] });
    const back = await lancedb.connect(target);
    expect((await back.tableNames()).sort()).toEqual(["memories", "notes"]);
    expect(await (await back.openTable("memories")).countRows()).toBe(25);
    back.close();
    expect(await lancedbDriver.occupant(target, cap.files, false)).toBe("the folder holds 3 entries"); // the caller names the folder

    // a manifest that says otherwise: 13 naming the table
    const lie = (await failure(lancedbDriver.check("memory", [{ ...cap.files[0]!, records: { memories: 26 } }])));
    expect([lie.code, lie.message]).toEqual([13, "source memory: table memories holds 25 rows, manifest says 26"]);
    const dim = await failure(lancedbDriver.check("memory", [{ ...cap.files[0]!, dimension: 8 }]));
    expect(dim.message).toBe("source memory: table memories has vector dimension 4, manifest says 8");
    const junk = join(dir, "junk.arrows");
    writeFileSync(junk, "not arrow");
    const nj = await failure(lancedbDriver.check("memory", [{ ...cap.files[0]!, file: junk }]));
    expect([nj.code, nj.message.startsWith("source memory: sources/memory/memories.arrows is not an Arrow stream")]).toEqual([13, true]);
  });

  it("a folder that does not exist is 10 naming it", async () => {
    const e = await failure(lancedbDriver.capture(spec, join(dir, "none"), dir));
    expect([e.code, e.message]).toEqual([10, `source memory: ${join(dir, "none")} not found`]);
  });
});
