/**
 * Replication (repository/replicate.ts), the parts that need no bundle: a
 * snapshot named that is not among the source's verified ones is 10 naming it
 * and the filter, never "copied 0"; nothing to copy copies nothing and links
 * no generations. Copying real bundles (verified before sending, read back
 * before committing, idempotent, generations linked):
 * test/e2e/repository.test.ts (copy) and spool.test.ts (flush).
 */
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { replicate } from "../../../src/repository/replicate.js";
import { Repository } from "../../../src/repository/repository.js";
import { AgentbakError } from "../../../src/errors.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-replicate-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const trust = { signers: [], revoked: [] };
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
});
