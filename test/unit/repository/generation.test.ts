/**
 * Fencing generations across repositories linked by copy (repository/generation.ts),
 * on real local-folder repositories: a reservation goes above every record it
 * can reach and the host's floor and is written into each; a v1 record is a
 * floor; a replica that can not be read is named, never skipped in silence; a
 * damaged record of the repository itself is 13 and nothing is written; links
 * are written both ways and a loop of links ends. The generation log
 * (repository/genlog.ts): one signed, chained, create-only entry per
 * generation; a record edited down lowers nothing, an entry changed or missing
 * under its successor is 13 naming it, an entry no trusted key signed counts
 * and is named, and copy carries the entries.
 */
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { linkReplica, readGenerations, reserveGeneration, unreachableWarning, type OpenRepository } from "../../../src/repository/generation.js";
import { Repository } from "../../../src/repository/repository.js";
import { keys, legacy } from "../../../src/repository/layout.js";
import { AgentbakError } from "../../../src/errors.js";
import { generateSigningKey, publicKeyLine } from "../../../src/crypto/sshsig.js";
import { parseAllowedSigners, type Trust } from "../../../src/crypto/trust.js";
import { readLog } from "../../../src/repository/genlog.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-gen-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const a = { tenant: "acme", agent: "billing-agent" };
let n = 0;
const repo = async () => (await Repository.init(join(dir, `r${n++}`))).repo;
const open: OpenRepository = (l) => Repository.open(l);
const key = generateSigningKey("ops");
const stranger = generateSigningKey("stranger");
const trust: Trust = { signers: parseAllowedSigners(`ops ${publicKeyLine(key.publicKey)}\n`), revoked: [] };
const sign = { trust, key };
/** an entry's file in a folder repository */
const entry = (r: Repository, g: number) => join(r.location, keys.generationEntry(a, g));
const sha = (f: string) => createHash("sha256").update(readFileSync(f)).digest("hex");
const parsed = (r: Repository, g: number) => JSON.parse(readFileSync(entry(r, g), "utf8")) as Record<string, unknown>;

async function failure(p: Promise<unknown>): Promise<AgentbakError> {
  const e = await p.then(() => null, (x: unknown) => x);
  expect(e).toBeInstanceOf(AgentbakError);
  return e as AgentbakError;
}

describe("reserveGeneration", () => {
  it("starts at 1, counts up, and stays above the host's floor; the record keeps what it does not own", async () => {
    const r = await repo();
    expect((await readGenerations(r, a, open, trust)).highest).toBe(0);
    expect((await reserveGeneration(r, a, 0, { by: "t1" }, open, sign)).generation).toBe(1);
    expect((await reserveGeneration(r, a, 0, { by: "t2" }, open, sign)).generation).toBe(2);
    expect((await reserveGeneration(r, a, 9, {}, open, sign)).generation).toBe(10);
    await r.writeJson(keys.generation(a), { ...(await r.readJson<object>(keys.generation(a))), note: "kept" });
    await reserveGeneration(r, a, 0, {}, open, sign);
    expect(await r.readJson(keys.generation(a))).toMatchObject({ generation: 11, note: "kept", by: "t2", issued_in: r.location, replicas: [] });
  });

  it("a v1 record (state/generation-<agent>.json) is a floor", async () => {
    const r = await repo();
    await r.writeJson(legacy.generation(a.agent), { generation: 41 });
    expect((await readGenerations(r, a, open, trust)).highest).toBe(41);
    expect((await reserveGeneration(r, a, 0, {}, open, sign)).generation).toBe(42);
  });

  it("a restore from a copy supersedes the original: the number goes above both and is written into both", async () => {
    const src = await repo();
    const dst = await repo();
    await reserveGeneration(src, a, 0, {}, open, sign);
    await reserveGeneration(src, a, 0, {}, open, sign); // src at 2
    expect(await linkReplica(src, dst, a, sign)).toEqual([]);
    expect(await dst.readJson(keys.generation(a))).toMatchObject({ generation: 2, replicas: [src.location] });
    expect(await src.readJson(keys.generation(a))).toMatchObject({ generation: 2, replicas: [dst.location] });
    const g = await reserveGeneration(dst, a, 0, {}, open, sign);
    expect(g).toEqual({ generation: 3, unreachable: [] });
    for (const r of [src, dst]) expect((await r.readJson<{ generation: number }>(keys.generation(a)))!.generation).toBe(3);
    const view = await readGenerations(src, a, open, trust);
    expect(view.seen.map((s) => s.location).sort()).toEqual([src.location, dst.location].sort());
  });

  it("a linked replica that can not be opened is named in unreachable; the reservation still goes on where it can", async () => {
    const r = await repo();
    const gone = join(dir, "never-made");
    await r.writeJson(keys.generation(a), { generation: 5, replicas: [gone] });
    const view = await readGenerations(r, a, open, trust);
    expect(view.highest).toBe(5);
    expect(view.unreachable).toEqual([{ location: gone, reason: expect.stringContaining("repository not found") }]);
    const g = await reserveGeneration(r, a, 0, {}, open, sign);
    expect(g.generation).toBe(6);
    expect(g.unreachable.map((u) => u.location)).toEqual([gone]);
    expect(unreachableWarning(g.unreachable[0]!)).toMatch(new RegExp(`^generation: ${gone}, a repository linked with this one by copy, could not be read \\(repository not found.*keep any agent restored from it stopped$`));
  });

  it("a replica whose record is damaged is unreachable; this repository's own damaged record is 13 and nothing is written", async () => {
    const r = await repo();
    const other = await repo();
    await other.writeJson(keys.generation(a), { generation: "lots" });
    await r.writeJson(keys.generation(a), { generation: 2, replicas: [other.location] });
    const g = await reserveGeneration(r, a, 0, {}, open, sign);
    expect(g.generation).toBe(3);
    expect(g.unreachable[0]!.reason).toContain(`holds generation "lots", not a count`);
    for (const bad of [[1, 2], { generation: -1 }, { generation: Number.MAX_SAFE_INTEGER }, { generation: 1, replicas: "x" }, { generation: 1, replicas: [""] }]) {
      await r.writeJson(keys.generation(a), bad);
      const e = await failure(reserveGeneration(r, a, 0, {}, open, sign));
      expect(e.code, JSON.stringify(bad)).toBe(13);
      expect(e.message).toMatch(new RegExp(`^generation record ${keys.generation(a)} in ${r.location} .*; it must not be guessed`));
      expect(await r.readJson(keys.generation(a))).toEqual(bad);
    }
  });

  it("the next number past the largest exact integer is refused with 14", async () => {
    const r = await repo();
    const e = await failure(reserveGeneration(r, a, Number.MAX_SAFE_INTEGER, {}, open, sign));
    expect(e.code).toBe(14);
    expect(e.message).toContain("is not exact");
  });

  it("a loop of links, or the same repository spelled otherwise, is read once", async () => {
    const x = await repo();
    const y = await repo();
    await x.writeJson(keys.generation(a), { generation: 1, replicas: [y.location, `${x.location}/`] });
    await y.writeJson(keys.generation(a), { generation: 7, replicas: [x.location] });
    const view = await readGenerations(x, a, open, trust);
    expect(view.highest).toBe(7);
    expect(view.seen).toHaveLength(2);
    expect(view.unreachable).toEqual([]);
  });

  it("a flood of links ends after 16 repositories, the rest named", async () => {
    const r = await repo();
    const many = await Promise.all(Array.from({ length: 20 }, () => repo()));
    await r.writeJson(keys.generation(a), { generation: 1, replicas: many.map((m) => m.location) });
    const view = await readGenerations(r, a, open, trust);
    expect(view.seen).toHaveLength(16);
    expect(view.unreachable).toHaveLength(5);
    expect(view.unreachable[0]!.reason).toBe("more than 16 linked repositories");
  });
});

describe("the generation log", () => {
  const three = async (k = sign) => {
    const r = await repo();
    for (let i = 0; i < 3; i++) await reserveGeneration(r, a, 0, { snapshot_id: "s", target: `/t${i}`, at: "2026-12-06T00:00:00Z" }, open, k);
    return r;
  };

  it("each reservation writes its own entry: signed, chained to the one before by sha256, naming snapshot, target and host", async () => {
    const r = await three();
    expect(parsed(r, 1)).toMatchObject({ kind: "generation-entry", tenant: "acme", agent_id: "billing-agent", generation: 1, snapshot_id: "s", target: "/t0", issued_in: r.location, prev: null, signature: expect.stringContaining("BEGIN SSH SIGNATURE") });
    expect(parsed(r, 2).prev).toBe(sha(entry(r, 1)));
    expect(parsed(r, 3).prev).toBe(sha(entry(r, 2)));
    expect(await readLog(r.store, r.location, a, trust)).toMatchObject({ top: 3, trustedTop: 3, topDoubt: null });
  });

  it("a record edited down lowers nothing: the entries count, and the next reservation goes above them", async () => {
    const r = await three();
    await r.writeJson(keys.generation(a), { generation: 1, replicas: [] });
    expect(await readGenerations(r, a, open, trust)).toMatchObject({ highest: 3, warnings: [] });
    expect((await reserveGeneration(r, a, 0, {}, open, sign)).generation).toBe(4);
  });

  it("entries no trusted key signed count too, and the generation resting on them is named", async () => {
    const r = await three({ trust, key: null });
    expect(parsed(r, 3).signature).toBeUndefined();
    // an unsigned restore writes record and entry alike: nothing to name
    expect((await readGenerations(r, a, open, trust)).warnings).toEqual([]);
    await r.writeJson(keys.generation(a), { generation: 1, replicas: [] });
    const v = await readGenerations(r, a, open, trust);
    expect(v.highest).toBe(3);
    expect(v.warnings).toEqual([`generation: 3, the current generation of acme/billing-agent, rests on ${keys.generationEntry(a, 3)} in ${r.location}, unsigned; it is counted (believing a higher generation only fences more): if no restore of yours issued it, someone wrote it into the repository`]);
    await reserveGeneration(r, a, 0, {}, open, { trust, key: stranger });
    await r.writeJson(keys.generation(a), { generation: 1, replicas: [] });
    expect((await readGenerations(r, a, open, trust)).warnings[0]).toMatch(/^generation: 4, .* signed by a key this host does not trust/);
  });

  it("an entry changed (its signature, or the prev its successor records) or missing under its successor is 13 naming it; nothing is reserved", async () => {
    const cases: [string, (r: Repository) => void, RegExp][] = [
      ["the newest, signed", (r) => writeFileSync(entry(r, 3), JSON.stringify({ ...parsed(r, 3), target: "/elsewhere" })), /entry .*0000000000000003\.json in .*: edited after it was signed/],
      // the same signed record written out again: its signature still holds, entry 3's prev does not
      ["a middle one", (r) => writeFileSync(entry(r, 2), JSON.stringify(parsed(r, 2))), /entry .*0000000000000002\.json in .* was changed after entry 3 was written/],
      ["a middle one removed", (r) => unlinkSync(entry(r, 2)), /entry .*0000000000000002\.json in .* is missing: entry 3 was written after it/],
      ["the first removed", (r) => unlinkSync(entry(r, 1)), /entry .*0000000000000001\.json in .* is missing: entry 2 was written after it/],
      ["one renamed to another number", (r) => writeFileSync(entry(r, 9), readFileSync(entry(r, 3))), /entry .*0000000000000009\.json in .* is not the entry of generation 9/],
    ];
    for (const [what, damage, message] of cases) {
      const r = await three();
      damage(r);
      for (const e of [await failure(readGenerations(r, a, open, trust)), await failure(reserveGeneration(r, a, 0, {}, open, sign))]) {
        expect(e.code, what).toBe(13);
        expect(e.message, what).toMatch(message);
      }
      expect((await r.readJson<{ generation: number }>(keys.generation(a)))!.generation, what).toBe(3);
    }
  });

  it("what the repository alone can not stop: the newest entries removed together with the record lowered", async () => {
    const r = await three();
    unlinkSync(entry(r, 3));
    await r.writeJson(keys.generation(a), { generation: 2, replicas: [] });
    expect((await readGenerations(r, a, open, trust)).highest).toBe(2); // a host's trusted state, a replica or Object Lock keeps 3
  });

  it("a repository written before the log: its record alone, and the log starts above it", async () => {
    const r = await repo();
    await r.writeJson(keys.generation(a), { generation: 5, replicas: [] });
    expect((await readGenerations(r, a, open, trust)).highest).toBe(5);
    expect((await reserveGeneration(r, a, 0, {}, open, sign)).generation).toBe(6);
    expect(parsed(r, 6).prev).toBeNull();
    expect((await reserveGeneration(r, a, 0, {}, open, sign)).generation).toBe(7);
    expect(parsed(r, 7).prev).toBe(sha(entry(r, 6)));
  });

  it("copy carries the entries byte for byte; a restore from the copy writes its entry into both; a record rolled back on either side lowers nothing", async () => {
    const src = await three();
    const dst = await repo();
    expect(await linkReplica(src, dst, a, sign)).toEqual([]);
    for (const g of [1, 2, 3]) expect(readFileSync(entry(dst, g))).toEqual(readFileSync(entry(src, g)));
    expect((await reserveGeneration(dst, a, 0, {}, open, sign)).generation).toBe(4);
    for (const r of [src, dst]) expect(parsed(r, 4)).toMatchObject({ issued_in: dst.location, prev: sha(entry(r, 3)) });
    for (const r of [src, dst]) await r.writeJson(keys.generation(a), { ...(await r.readJson<object>(keys.generation(a))), generation: 1 });
    for (const r of [src, dst]) expect((await readGenerations(r, a, open, trust)).highest).toBe(4);
  });

  it("a replica whose log went its own way gets the entries it lacks restated onto its own chain, and reads clean", async () => {
    const src = await three();
    const dst = await repo();
    await reserveGeneration(dst, a, 0, {}, open, sign); // dst issued 1 by itself: its own entry 1
    expect(await linkReplica(src, dst, a, sign)).toEqual([]);
    expect(parsed(dst, 2)).toMatchObject({ generation: 2, carried_from: src.location, prev: sha(entry(dst, 1)) });
    expect(parsed(dst, 3).prev).toBe(sha(entry(dst, 2)));
    expect(await readLog(dst.store, dst.location, a, trust)).toMatchObject({ top: 3, trustedTop: 3 });
  });
});
