/**
 * The repository layer (repository/repository.ts) on real local-folder
 * repositories, the parts that need no bundle (snapshots through the binary:
 * test/e2e/repository.test.ts, backup.test.ts): init is idempotent and keeps
 * its id; open and recheck find a repository gone or replaced (10); records
 * that are not JSON are 13; locks exclude (11); the audit log is a signed
 * hash chain whose edits, cuts and strangers' entries are 13; listing
 * filters keep the newest per agent.
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { catalogEntry, ordinal, Repository, selectEntries, type Snapshot } from "../../../src/repository/repository.js";
import { keys, REPO_CONFIG } from "../../../src/repository/layout.js";
import { generateSigningKey, publicKeyLine } from "../../../src/crypto/sshsig.js";
import { parseAllowedSigners, type Trust } from "../../../src/crypto/trust.js";
import { AgentbakError } from "../../../src/errors.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-repo-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const a = { tenant: "acme", agent: "billing-agent" };
const key = generateSigningKey("ops");
const stranger = generateSigningKey("stranger");
const trust: Trust = { signers: parseAllowedSigners(`ops ${publicKeyLine(key.publicKey)}\n`), revoked: [] };
let n = 0;
const fresh = async () => (await Repository.init(join(dir, `r${n++}`))).repo;

async function failure(p: Promise<unknown>): Promise<AgentbakError> {
  const e = await p.then(() => null, (x: unknown) => x);
  expect(e).toBeInstanceOf(AgentbakError);
  return e as AgentbakError;
}

describe("init, open, recheck", () => {
  it("init creates once and keeps the marker (its id) on a second init; open finds it", async () => {
    const loc = join(dir, `r${n++}`);
    const first = await Repository.init(loc);
    const marker = readFileSync(join(loc, REPO_CONFIG), "utf8");
    expect(first.created).toBe(true);
    expect(JSON.parse(marker)).toMatchObject({ format: "agentbak-repository", id: expect.stringMatching(/^[0-9a-f]{32}$/) });
    const again = await Repository.init(loc);
    expect(again.created).toBe(false);
    expect(readFileSync(join(loc, REPO_CONFIG), "utf8")).toBe(marker);
    expect((await Repository.open(loc)).location).toBe(loc);
  });

  it("open: no marker is 10 naming init; a repository of agentbak 0.1 (agents/ and no marker) opens", async () => {
    const empty = join(dir, `e${n++}`);
    await Repository.init(empty).then(() => rmSync(join(empty, REPO_CONFIG)));
    const e = await failure(Repository.open(empty));
    expect([e.code, e.message]).toEqual([10, `repository not found: ${empty} (no ${REPO_CONFIG}; run agentbak init)`]);
    expect((await failure(Repository.open(join(dir, "never")))).code).toBe(10);
    const v01 = join(dir, `v${n++}`);
    await Repository.init(v01).then(() => rmSync(join(v01, REPO_CONFIG)));
    mkdirSync(join(v01, "agents", "billing-agent"), { recursive: true });
    writeFileSync(join(v01, "agents", "billing-agent", "20260301T100000000Z-0a1b2c3d.commit"), "{}");
    const r = await Repository.open(v01);
    await r.recheck(); // no marker, and still a 0.1 repository: not "gone"
  });

  it("recheck: the marker gone, or another repository in its place, is 10; the same one passes", async () => {
    const r = await fresh();
    await r.recheck();
    const loc = r.location;
    renameSync(loc, `${loc}.old`);
    await Repository.init(loc);
    const replaced = await failure(r.recheck());
    expect(replaced.code).toBe(10);
    expect(replaced.message).toMatch(/is not the repository this process opened \(id [0-9a-f]+, now [0-9a-f]+\): it was replaced/);
    rmSync(join(loc, REPO_CONFIG));
    const gone = await failure(r.recheck());
    expect(gone.message).toContain(`its ${REPO_CONFIG} is gone since this process opened it`);
  });

  it("init --leases: a relative location is refused (2); a folder is recorded, and another one later is refused", async () => {
    const loc = join(dir, `l${n++}`);
    expect((await failure(Repository.init(loc, { leases: "relative/leases" }))).message).toBe("--leases relative/leases: an s3://BUCKET/PREFIX URL or an absolute folder");
    const leases = join(dir, `leases${n++}`);
    await Repository.init(loc, { leases });
    expect(JSON.parse(readFileSync(join(loc, REPO_CONFIG), "utf8")).leases).toBe(leases);
    const e = await failure(Repository.init(loc, { leases: join(dir, "other-leases") }));
    expect([e.code, e.message]).toEqual([2, expect.stringContaining(`keeps its leases in ${leases}`)]);
    // a lock taken through it lives in the leases store, under the repository's id
    const r = await Repository.open(loc);
    const l = await r.lock(a, "agent");
    const id = JSON.parse(readFileSync(join(loc, REPO_CONFIG), "utf8")).id;
    expect(readdirSync(join(leases, "repositories", id, keys.lease(a, "agent"))).length).toBeGreaterThan(0);
    expect(existsSync(join(loc, keys.lease(a, "agent")))).toBe(false);
    await l.release();
  });
});

describe("records and locks", () => {
  it("readJson: missing is undefined, not JSON is 13 naming the record", async () => {
    const r = await fresh();
    expect(await r.readJson("nothing.json")).toBeUndefined();
    await r.store.put("bad.json", "{ not json");
    const e = await failure(r.readJson("bad.json"));
    expect([e.code, e.message]).toEqual([13, `repository record bad.json in ${r.location} is not JSON`]);
    expect(await r.writeJson("x.json", { a: 1 }, { ifNoneMatch: true })).toBe(true);
    expect(await r.writeJson("x.json", { a: 2 }, { ifNoneMatch: true })).toBe(false);
    expect(await r.readJson("x.json")).toEqual({ a: 1 });
  });

  it("restore records by request id round-trip", async () => {
    const r = await fresh();
    expect(await r.restoreRecord(a, "req-1")).toBeUndefined();
    await r.writeRestoreRecord(a, "req-1", { snapshot_id: "S" });
    expect(await r.restoreRecord(a, "req-1")).toEqual({ snapshot_id: "S" });
  });

  it("a held lock makes a second taker fail with 11 naming the lock; released, it is free", async () => {
    const r = await fresh();
    const other = await Repository.open(r.location);
    const held = await r.lock(a, "restore");
    const e = await failure(other.lock(a, "restore"));
    expect(e.code).toBe(11);
    expect(e.message).toContain(`restore lock of acme/billing-agent in ${r.location}`);
    const agentLock = await other.lock(a, "agent"); // another lock of the agent is independent
    await agentLock.release();
    await held.release();
    await (await other.lock(a, "restore")).release();
  });

  it("generation is 0 for a new agent and follows reservations", async () => {
    const r = await fresh();
    expect(await r.generation(a, trust)).toBe(0);
    expect((await r.reserveGeneration(a, 0, {}, { trust, key })).generation).toBe(1);
    expect(await r.generation(a, trust)).toBe(1);
  });

  it("an empty repository lists nothing; an agent id outside the pattern lists nothing", async () => {
    const r = await fresh();
    expect(await r.list(trust)).toEqual([]);
    expect(await r.list(trust, { tenant: "acme", agent: "../x" })).toEqual([]);
  });
});

describe("audit log", () => {
  it("signed entries chain and verify, with a signed head; entries name the agent and this host", async () => {
    const r = await fresh();
    expect((await failure(r.verifyAudit(a, trust, null))).code).toBe(10);
    await r.audit(a, { event: "backup", snapshot_id: "S1" }, key);
    await r.audit(a, { event: "restore", snapshot_id: "S1" }, key);
    const v = await r.verifyAudit(a, trust, null);
    expect(v.entries).toBe(2);
    expect(v.head?.entries).toBe(2);
    expect(v.warnings).toEqual([]);
    const lines = (await r.auditLog(a)).trim().split("\n").map((l) => JSON.parse(l));
    expect(lines[1]).toMatchObject({ event: "restore", tenant: "acme", agent_id: "billing-agent" });
    // how far this host saw it: a checkpoint it still reaches
    expect((await r.verifyAudit(a, trust, { entries: 2, head_sha256: v.head!.head_sha256 })).seen_before).toBe(2);
  });

  it("an edited entry, a cut tail, or a stranger's entry is 13", async () => {
    const r = await fresh();
    for (let i = 0; i < 3; i++) await r.audit(a, { event: "backup", i }, key);
    const file = join(r.location, keys.audit(a));
    const text = readFileSync(file, "utf8");
    writeFileSync(file, text.replace('"i":1', '"i":7'));
    expect((await failure(r.verifyAudit(a, trust, null))).code).toBe(13);
    writeFileSync(file, text.split("\n").slice(0, 2).join("\n") + "\n"); // the last entry cut off
    const cut = await failure(r.verifyAudit(a, trust, null));
    expect([cut.code, cut.message]).toEqual([13, expect.stringContaining("was cut short or replaced")]);
    writeFileSync(file, text);
    await r.audit(a, { event: "forged" }, stranger);
    expect((await failure(r.verifyAudit(a, trust, null))).code).toBe(13);
  });

  it("an unsigned entry (written without a key) is not accepted as genuine: 13", async () => {
    const r = await fresh();
    await r.audit(a, { event: "backup" }, null);
    expect((await failure(r.verifyAudit(a, trust, null))).code).toBe(13);
  });

  it("drill reports chain like the audit log and are read back", async () => {
    const r = await fresh();
    const { location } = await r.appendDrillReport(a, { kind: "drill-report", passed: true }, key);
    expect(location).toBe(`${r.location}/${keys.drillReport(a)}`);
    expect((await r.verifyDrillReport(a, trust)).entries).toBe(1);
    expect(await r.drillReport(a)).toContain('"passed":true');
    expect(await r.drillHistory(a)).toBe(await r.drillReport(a));
  });
});

describe("listing filters", () => {
  const e = (tenant: string, agent: string, id: string, label?: string) => ({ tenant, agent_id: agent, snapshot_id: id, label, dir: "d", key: "k", header: null }) as unknown as Snapshot;
  it("selectEntries keeps a label's entries and the newest N of each tenant and agent, in the original order", () => {
    const list = [e("t", "a", "1", "x"), e("t", "a", "3"), e("t", "b", "2", "x"), e("t", "a", "2", "x"), e("u", "a", "9", "x")];
    expect(selectEntries(list, {})).toEqual(list);
    expect(selectEntries(list, { label: "x" }).map((x) => x.snapshot_id)).toEqual(["1", "2", "2", "9"]);
    expect(selectEntries(list, { latest: 1 }).map((x) => `${x.tenant}/${x.agent_id}/${x.snapshot_id}`)).toEqual(["t/a/3", "t/b/2", "u/a/9"]);
    expect(selectEntries(list, { label: "x", latest: 1 }).map((x) => x.snapshot_id)).toEqual(["2", "2", "9"]);
    expect(Object.keys(catalogEntry(list[0]!))).not.toContain("dir");
  });

  it("ordinal orders by code unit, whatever the locale", () => {
    expect(["b", "B", "a", "_", "é"].sort(ordinal)).toEqual(["B", "_", "a", "b", "é"]);
    expect(ordinal("x", "x")).toBe(0);
  });
});
