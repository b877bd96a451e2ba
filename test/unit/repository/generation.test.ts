/**
 * Fencing generations across repositories linked by copy (repository/generation.ts),
 * on real local-folder repositories: a reservation goes above every record it
 * can reach and the host's floor and is written into each; a v1 record is a
 * floor; a replica that can not be read is named, never skipped in silence; a
 * damaged record of the repository itself is 13 and nothing is written; links
 * are written both ways and a loop of links ends.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { linkReplica, readGenerations, reserveGeneration, unreachableWarning, type OpenRepository } from "../../../src/repository/generation.js";
import { Repository } from "../../../src/repository/repository.js";
import { keys, legacy } from "../../../src/repository/layout.js";
import { AgentbakError } from "../../../src/errors.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-gen-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const a = { tenant: "acme", agent: "billing-agent" };
let n = 0;
const repo = async () => (await Repository.init(join(dir, `r${n++}`))).repo;
const open: OpenRepository = (l) => Repository.open(l);

async function failure(p: Promise<unknown>): Promise<AgentbakError> {
  const e = await p.then(() => null, (x: unknown) => x);
  expect(e).toBeInstanceOf(AgentbakError);
  return e as AgentbakError;
}

describe("reserveGeneration", () => {
  it("starts at 1, counts up, and stays above the host's floor; the record keeps what it does not own", async () => {
    const r = await repo();
    expect((await readGenerations(r, a, open)).highest).toBe(0);
    expect((await reserveGeneration(r, a, 0, { by: "t1" }, open)).generation).toBe(1);
    expect((await reserveGeneration(r, a, 0, { by: "t2" }, open)).generation).toBe(2);
    expect((await reserveGeneration(r, a, 9, {}, open)).generation).toBe(10);
    await r.writeJson(keys.generation(a), { ...(await r.readJson<object>(keys.generation(a))), note: "kept" });
    await reserveGeneration(r, a, 0, {}, open);
    expect(await r.readJson(keys.generation(a))).toMatchObject({ generation: 11, note: "kept", by: "t2", issued_in: r.location, replicas: [] });
  });

  it("a v1 record (state/generation-<agent>.json) is a floor", async () => {
    const r = await repo();
    await r.writeJson(legacy.generation(a.agent), { generation: 41 });
    expect((await readGenerations(r, a, open)).highest).toBe(41);
    expect((await reserveGeneration(r, a, 0, {}, open)).generation).toBe(42);
  });

  it("a restore from a copy supersedes the original: the number goes above both and is written into both", async () => {
    const src = await repo();
    const dst = await repo();
    await reserveGeneration(src, a, 0, {}, open);
    await reserveGeneration(src, a, 0, {}, open); // src at 2
    expect(await linkReplica(src, dst, a)).toEqual([]);
    expect(await dst.readJson(keys.generation(a))).toMatchObject({ generation: 2, replicas: [src.location] });
    expect(await src.readJson(keys.generation(a))).toMatchObject({ generation: 2, replicas: [dst.location] });
    const g = await reserveGeneration(dst, a, 0, {}, open);
    expect(g).toEqual({ generation: 3, unreachable: [] });
    for (const r of [src, dst]) expect((await r.readJson<{ generation: number }>(keys.generation(a)))!.generation).toBe(3);
    const view = await readGenerations(src, a, open);
    expect(view.seen.map((s) => s.location).sort()).toEqual([src.location, dst.location].sort());
  });

  it("a linked replica that can not be opened is named in unreachable; the reservation still goes on where it can", async () => {
    const r = await repo();
    const gone = join(dir, "never-made");
    await r.writeJson(keys.generation(a), { generation: 5, replicas: [gone] });
    const view = await readGenerations(r, a, open);
    expect(view.highest).toBe(5);
    expect(view.unreachable).toEqual([{ location: gone, reason: expect.stringContaining("repository not found") }]);
    const g = await reserveGeneration(r, a, 0, {}, open);
    expect(g.generation).toBe(6);
    expect(g.unreachable.map((u) => u.location)).toEqual([gone]);
    expect(unreachableWarning(g.unreachable[0]!)).toMatch(new RegExp(`^generation: ${gone}, a repository linked with this one by copy, could not be read \\(repository not found.*keep any agent restored from it stopped$`));
  });

  it("a replica whose record is damaged is unreachable; this repository's own damaged record is 13 and nothing is written", async () => {
    const r = await repo();
    const other = await repo();
    await other.writeJson(keys.generation(a), { generation: "lots" });
    await r.writeJson(keys.generation(a), { generation: 2, replicas: [other.location] });
    const g = await reserveGeneration(r, a, 0, {}, open);
    expect(g.generation).toBe(3);
    expect(g.unreachable[0]!.reason).toContain(`holds generation "lots", not a count`);
    for (const bad of [[1, 2], { generation: -1 }, { generation: Number.MAX_SAFE_INTEGER }, { generation: 1, replicas: "x" }, { generation: 1, replicas: [""] }]) {
      await r.writeJson(keys.generation(a), bad);
      const e = await failure(reserveGeneration(r, a, 0, {}, open));
      expect(e.code, JSON.stringify(bad)).toBe(13);
      expect(e.message).toMatch(new RegExp(`^generation record ${keys.generation(a)} in ${r.location} .*; it must not be guessed`));
      expect(await r.readJson(keys.generation(a))).toEqual(bad);
    }
  });

  it("the next number past the largest exact integer is refused with 14", async () => {
    const r = await repo();
    const e = await failure(reserveGeneration(r, a, Number.MAX_SAFE_INTEGER, {}, open));
    expect(e.code).toBe(14);
    expect(e.message).toContain("is not exact");
  });

  it("a loop of links, or the same repository spelled otherwise, is read once", async () => {
    const x = await repo();
    const y = await repo();
    await x.writeJson(keys.generation(a), { generation: 1, replicas: [y.location, `${x.location}/`] });
    await y.writeJson(keys.generation(a), { generation: 7, replicas: [x.location] });
    const view = await readGenerations(x, a, open);
    expect(view.highest).toBe(7);
    expect(view.seen).toHaveLength(2);
    expect(view.unreachable).toEqual([]);
  });

  it("a flood of links ends after 16 repositories, the rest named", async () => {
    const r = await repo();
    const many = await Promise.all(Array.from({ length: 20 }, () => repo()));
    await r.writeJson(keys.generation(a), { generation: 1, replicas: many.map((m) => m.location) });
    const view = await readGenerations(r, a, open);
    expect(view.seen).toHaveLength(16);
    expect(view.unreachable).toHaveLength(5);
    expect(view.unreachable[0]!.reason).toBe("more than 16 linked repositories");
  });
});
