/**
 * Replication (repository/replicate.ts) between real local repositories,
 * with a real signed bundle a real backup wrote (once, in beforeAll): a copy
 * verifies and commits it in the destination, a second copy skips it, the
 * generation records are linked both ways; a bundle that does not verify ends
 * the run (13) or, given setAside, is handed over with the reason; a snapshot
 * named that is not among the verified ones is 10 naming it and the filter.
 * Against S3 and through the binary: test/e2e/repository.test.ts, spool.test.ts.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { replicate } from "../../../src/repository/replicate.js";
import { Repository } from "../../../src/repository/repository.js";
import { AgentbakError } from "../../../src/errors.js";
import { keys } from "../../../src/repository/layout.js";
import { keygen, loadSigningKey } from "../../../src/crypto/keys.js";
import { loadTrust, type Trust } from "../../../src/crypto/trust.js";
import { loadConfig } from "../../../src/config/load.js";
import { runBackup } from "../../../src/capture/backup.js";
// @ts-expect-error the agent generator is plain JavaScript (fixtures/agent)
import { generateAgent } from "../../../fixtures/agent/generate.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-replicate-"));
const home = join(dir, "home");
const savedHome = process.env.AGENTBAK_HOME;
process.env.AGENTBAK_HOME = home;
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  if (savedHome === undefined) delete process.env.AGENTBAK_HOME;
  else process.env.AGENTBAK_HOME = savedHome;
});
const a = { tenant: "acme", agent: "billing-agent" };
let trust: Trust = { signers: [], revoked: [] };
/** the repository the backup wrote to, and its snapshot */
let origin: Repository;
let snapshotId: string;

beforeAll(async () => {
  const k = keygen(home, "ops");
  const agent = join(dir, "agent");
  mkdirSync(agent);
  const g = generateAgent(agent, { recipient: k.recipient, sizeMb: 0.25, seed: 5 });
  origin = (await Repository.init(join(agent, "backups"))).repo;
  trust = loadTrust(home);
  snapshotId = (await runBackup(loadConfig(g.config), { repo: origin, trust, home, signingKey: loadSigningKey(join(home, "signing-key")), principal: "ops" })).snapshot_id;
});
let n = 0;
const repo = async () => (await Repository.init(join(dir, `r${n++}`))).repo;

describe("replicate", () => {
  it("nothing to copy: copies nothing, writes nothing into the destination", async () => {
    const [src, dst] = [await repo(), await repo()];
    const before = readdirSync(dst.location, { recursive: true });
    expect(await replicate(src, dst, trust, { ids: [], signingKey: null, linkGenerations: true })).toEqual({ from: src.location, to: dst.location, copied: [], skipped: [], warnings: [] });
    expect(readdirSync(dst.location, { recursive: true })).toEqual(before);
  });

  it("a snapshot named that is not among the verified ones is 10 naming it and the filter", async () => {
    const [src, dst] = [await repo(), await repo()];
    const id = "20260301T100000000Z-0a1b2c3d";
    const e = await replicate(src, dst, trust, { ids: [id], signingKey: null }).then(() => null, (x: unknown) => x);
    expect(e).toBeInstanceOf(AgentbakError);
    expect([(e as AgentbakError).code, (e as Error).message]).toEqual([10, `snapshot ${id} not found among the verified snapshots in ${src.location}`]);
    const f = await replicate(src, dst, trust, { ids: [id], tenant: "acme", signingKey: null }).then(() => null, (x: Error) => x);
    expect(f?.message).toBe(`snapshot ${id} not found among the verified snapshots in ${src.location} (tenant acme, agent any)`);
  });

  it("copies a verified bundle, committed and listed in the destination; a second copy skips it; generations are linked both ways", async () => {
    const dst = await repo();
    const r = await replicate(origin, dst, trust, { ids: [], signingKey: null, linkGenerations: true });
    expect(r).toMatchObject({ copied: [snapshotId], skipped: [], warnings: [] });
    const listed = await dst.list(trust, a);
    expect(listed.map((e) => [e.snapshot_id, e.status])).toEqual([[snapshotId, "ok"]]);
    expect(await dst.committed(a, snapshotId)).toBe(true);
    expect(await dst.readJson(keys.generation(a))).toMatchObject({ replicas: [origin.location] });
    expect(await origin.readJson(keys.generation(a))).toMatchObject({ replicas: [dst.location] });
    expect((await replicate(origin, dst, trust, { ids: [snapshotId], signingKey: null })).skipped).toEqual([snapshotId]);
  });

  it("a bundle that no longer verifies ends the run (13), or is set aside with the reason; nothing reaches the destination", async () => {
    const src = await repo();
    await replicate(origin, src, trust, { ids: [], signingKey: null });
    const s = (await src.list(trust, a))[0]!;
    const file = join(src.location, s.key);
    const b = readFileSync(file);
    // a byte inside payload.age (after its age header, before the tar's closing blocks): the signed manifest still
    // verifies, the payload digest does not
    const age = b.indexOf("age-encryption.org/v1");
    expect(age).toBeGreaterThan(0);
    b[age + Math.floor((b.length - 1024 - age) / 2)]! ^= 0xff;
    writeFileSync(file, b);
    const dst = await repo();
    const e = await replicate(src, dst, trust, { ids: [], signingKey: null }).then(() => null, (x: unknown) => x);
    expect(e).toBeInstanceOf(AgentbakError);
    expect((e as AgentbakError).code).toBe(13);
    const aside: [string, string][] = [];
    const r = await replicate(src, dst, trust, { ids: [], signingKey: null, setAside: async (x, why) => void aside.push([x.snapshot_id, why]) });
    expect(r.copied).toEqual([]);
    expect(aside.map(([id]) => id)).toEqual([snapshotId]);
    expect(aside[0]![1]).toMatch(/payload/);
    expect(await dst.list(trust, a)).toEqual([]);
  });
});
