// The per-agent catalog record through the real binary, against a folder and (project s3) the Ceph gateway:
// backups write it, `snapshots --all` lists from it (counted store requests: a record new to this host costs one
// LIST and one GET of its agent, one this host checked before and unchanged since costs nothing beyond the
// tenant's LIST; no HEAD, no bundle read), and a record is trusted only where the objects agreed: a deleted,
// edited or stale record is set aside and the listing equals the objects'; a bundle deleted behind an unchanged
// record's back is named missing by --fresh (and from then on); a backup killed between its commit and its
// record leaves no record, so its snapshot is listed; a record where earlier builds kept it is read and moved;
// forget rewrites it. (The tenant's summary, and status --all: catalog-status.test.ts.)
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
// @ts-expect-error plain JS fixture
import { generateAgent } from "../../fixtures/agent/generate.js";
import { json, makeAgent, type TestAgent } from "../helpers.js";

let a: TestAgent;
const AGENTS = ["billing-agent", "agent-2", "agent-3"];
const cfg = (id: string) => (id === "billing-agent" ? a.config : join(a.tmp, id, "agentbak.json"));
const catalogKey = (id: string) => `tenants/acme/catalog/${id}.json`;
const oldCatalogKey = (id: string) => `tenants/acme/agents/${id}/catalog.json`;
const snapsDir = (id: string) => `tenants/acme/agents/${id}/snapshots`;
let counter = 0;

/** `snapshots --all --json` with the store's requests counted: the entries, and the requests by operation. */
async function listAll(...flags: string[]): Promise<{ entries: any[]; counts: Record<string, number> }> {
  const file = join(a.tmp, `counts-${counter++}.jsonl`);
  const r = await a.run(["snapshots", "--all", "--repo", a.repo, "--json", ...flags], { AGENTBAK_STORE_COUNTS: file });
  expect(r.code, r.stderr).toBe(0);
  const counts: Record<string, number> = {};
  for (const line of readFileSync(file, "utf8").split("\n").filter(Boolean))
    for (const [op, n] of Object.entries(JSON.parse(line).counts as Record<string, number>)) counts[op] = (counts[op] ?? 0) + n;
  return { entries: json(r), counts };
}

/** The listing from the objects themselves: each agent listed alone (no catalog record is read for one agent). */
async function fromObjects(): Promise<any[]> {
  const out: any[] = [];
  for (const id of [...AGENTS].sort()) {
    const r = await a.run(["snapshots", "--repo", a.repo, "--tenant", "acme", "--agent", id, "--json"]);
    expect(r.code, r.stderr).toBe(0);
    out.push(...json(r));
  }
  return out;
}

const change = (id: string) => {
  const dir = id === "billing-agent" ? a.dir : join(a.tmp, id);
  const db = new Database(join(dir, "state", "agent.sqlite"));
  db.exec("CREATE TABLE IF NOT EXISTS touched (x); INSERT INTO touched VALUES (randomblob(64))");
  db.close();
};
const backup = async (id: string) => {
  const b = await a.run(["backup", "-c", cfg(id), "--json"]);
  expect(b.code, b.stderr).toBe(0);
  return json(b).snapshot_id as string;
};

beforeAll(async () => {
  a = await makeAgent({ sizeMb: 0.2 });
  for (const id of AGENTS.slice(1)) {
    mkdirSync(join(a.tmp, id));
    generateAgent(join(a.tmp, id), { recipient: a.recipient, sizeMb: 0.1, seed: AGENTS.indexOf(id) + 1, agentId: id, repository: a.repo });
  }
  for (const id of AGENTS) await backup(id);
  change("billing-agent");
  await backup("billing-agent");
}, 120_000);
afterAll(() => a?.cleanup());

describe("the per-agent catalog record", () => {
  it("backup writes a signed record per agent naming each committed snapshot; snapshots --all lists from it: a LIST and a GET per agent on a host new to them, the tenant's LIST alone once checked; no HEAD", async () => {
    const store = await a.store();
    for (const id of AGENTS) {
      const rec = JSON.parse(String(await store.get(catalogKey(id))));
      expect(rec.kind).toBe("agent-catalog");
      expect(typeof rec.signature).toBe("string");
      const commits = (await store.list(`${snapsDir(id)}/`)).filter((k: string) => k.endsWith(".commit")).map((k: string) => k.split("/").at(-1)!.replace(/\.commit$/, ""));
      expect(rec.snapshots.map((s: any) => s.snapshot_id)).toEqual(commits);
    }
    const { entries, counts } = await listAll();
    expect(entries).toEqual(await fromObjects());
    expect(entries.map((e: any) => e.status)).toEqual(["ok", "ok", "ok", "ok"]);
    expect(entries.filter((e: any) => e.agent_id === "billing-agent")).toHaveLength(2);
    // the repository marker, then per agent its record; no snapshot's bundle is opened or even looked at
    expect(counts.head ?? 0).toBe(0);
    expect(counts.get).toBe(1 + AGENTS.length);
    // folders of layout v1 and of tenants, the tenant's agents and its catalog folder, and one LIST per agent's snapshots folder
    expect(counts.list).toBe(4 + AGENTS.length);
    // again from this host: the records are unchanged (the catalog folder's LIST says so), none is read again
    const warm = await listAll();
    expect(warm.entries).toEqual(entries);
    expect(warm.counts).toEqual({ get: 1, list: 4 });
    // --fresh checks every record against its agent's folder again (and, having read them all, writes the tenant's summary)
    const fresh = await listAll("--fresh");
    expect(fresh.entries).toEqual(entries);
    expect(fresh.counts).toEqual({ get: 1 + AGENTS.length, list: 4 + AGENTS.length, put: 1 });
  });

  it("a record that is missing, edited or not JSON is set aside: the agent is listed from its objects, the same listing", async () => {
    const store = await a.store();
    const want = await fromObjects();
    const saved = await store.get(catalogKey("agent-2"));
    await store.delete(catalogKey("agent-2"));
    const rec = JSON.parse(String(await store.get(catalogKey("agent-3"))));
    rec.snapshots[0].label = "forged"; // the signature no longer matches
    await store.put(catalogKey("agent-3"), JSON.stringify(rec));
    await store.put(catalogKey("billing-agent"), "{not json");
    const { entries, counts } = await listAll();
    expect(entries).toEqual(want);
    expect(entries.some((e: any) => e.label === "forged")).toBe(false);
    // the three agents were read from their objects: a HEAD per snapshot
    expect(counts.head).toBeGreaterThanOrEqual(want.length);
    // the next backup of each writes its record again
    await store.put(catalogKey("agent-2"), saved);
    for (const id of ["agent-3", "billing-agent"]) await backup(id);
    const again = await listAll();
    expect(again.counts.head ?? 0).toBe(0);
    expect(again.entries).toEqual(await fromObjects());
  }, 120_000);

  it("a stale record (one snapshot behind the objects) is not trusted: the newer snapshot is listed", async () => {
    const store = await a.store();
    const old = await store.get(catalogKey("agent-2"));
    change("agent-2");
    const id = await backup("agent-2");
    await store.put(catalogKey("agent-2"), old); // a genuine, signed record of before that backup
    const { entries } = await listAll();
    expect(entries.filter((e: any) => e.agent_id === "agent-2").map((e: any) => e.snapshot_id)).toContain(id);
    expect(entries).toEqual(await fromObjects());
  }, 60_000);

  it("a bundle deleted behind an unchanged record's back: the listing from this host's checked record misses it (documented), --fresh names it missing and so does every listing after", async () => {
    const store = await a.store();
    await listAll(); // agent-3's record checked by this host
    const victim = (await fromObjects()).find((e: any) => e.agent_id === "agent-3")!;
    await store.delete(`${snapsDir("agent-3")}/${victim.snapshot_id}.agentbak`);
    const warm = await listAll();
    expect(warm.entries.find((x: any) => x.snapshot_id === victim.snapshot_id).status).toBe("ok");
    for (const flags of [["--fresh"], []]) {
      const { entries } = await listAll(...flags);
      const e = entries.find((x: any) => x.snapshot_id === victim.snapshot_id);
      expect(e.status).toBe("invalid");
      expect(e.problem).toMatch(/committed but the bundle object is missing/);
      expect(entries).toEqual(await fromObjects());
    }
  }, 60_000);

  it("forget rewrites the record: the kept snapshots only, listed with no HEAD", async () => {
    const f = await a.run(["forget", "-c", cfg("billing-agent"), "--keep-last", "1", "--json"]);
    expect(f.code, f.stderr).toBe(0);
    const kept = json(f).kept.map((k: any) => k.snapshot_id);
    expect(json(f).removed.length).toBeGreaterThan(0);
    const rec = JSON.parse(String(await (await a.store()).get(catalogKey("billing-agent"))));
    expect(rec.snapshots.map((s: any) => s.snapshot_id)).toEqual(kept);
    // agent-2's record is still the stale one put back and agent-3's still names the deleted bundle: those two
    // are read from their objects (a HEAD per bundle there), billing-agent from its record alone
    const { entries, counts } = await listAll();
    expect(entries.filter((e: any) => e.agent_id === "billing-agent").map((e: any) => e.snapshot_id)).toEqual(kept);
    expect(counts.head ?? 0).toBe(entries.filter((e: any) => e.agent_id !== "billing-agent" && !/bundle object is missing/.test(e.problem ?? "")).length);
    expect(entries).toEqual(await fromObjects());
  }, 60_000);

  it("the host's cache of checked records is trusted only under its HMAC: an entry edited in it is not listed, and every record is read again", async () => {
    const { entries } = await listAll(); // the cache written (or already there)
    const dir = join(a.home, "cache");
    const file = readdirSync(dir).find((f) => f.startsWith("catalogs-"))!;
    const text = readFileSync(join(dir, file), "utf8");
    const nl = text.indexOf("\n");
    const body = JSON.parse(text.slice(nl + 1));
    for (const [, e] of body.entries) for (const x of e.record.snapshots) x.label = "forged";
    writeFileSync(join(dir, file), `${text.slice(0, nl)}\n${JSON.stringify(body)}`);
    const after = await listAll();
    expect(after.entries).toEqual(entries);
    expect(after.entries.some((e: any) => e.label === "forged")).toBe(false);
    // every record taken again from the store: from the tenant's signed summary where its ETag still matches, else read and checked
    expect(after.counts.get).toBeGreaterThanOrEqual(2);
  }, 60_000);

  it("--all with --agent is refused (2)", async () => {
    const r = await a.run(["snapshots", "--all", "--agent", "x", "--repo", a.repo]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--all lists every agent: pass --all or --agent, not both/);
  });

  it("a backup killed between its commit and its record leaves no record: the next listing names its snapshot, read from the objects", async () => {
    const store = await a.store();
    await listAll(); // every record checked by this host
    change("agent-3");
    const r = await a.run(["backup", "-c", cfg("agent-3"), "--json"], { AGENTBAK_CRASH_STEP: "published" });
    expect(r.code).toBe(-1); // SIGKILL
    expect(await store.get(catalogKey("agent-3"))).toBeNull();
    const commits = (await store.list(`${snapsDir("agent-3")}/`)).filter((k: string) => k.endsWith(".commit")).map((k: string) => k.split("/").at(-1)!.replace(/\.commit$/, ""));
    const { entries, counts } = await listAll();
    expect(entries.filter((e: any) => e.agent_id === "agent-3").map((e: any) => e.snapshot_id)).toEqual(commits);
    expect(entries).toEqual(await fromObjects());
    expect(counts.head).toBeGreaterThan(0); // agent-3 from its objects
    await backup("agent-3"); // writes the record again
    expect(JSON.parse(String(await store.get(catalogKey("agent-3")))).snapshots).toHaveLength(commits.length + 1);
  }, 60_000);

  it("a record where earlier builds kept it (the agent's folder) is read with no HEAD, and the agent's next backup moves it", async () => {
    const store = await a.store();
    await store.delete("tenants/acme/catalog/_summary"); // this test counts the records read (catalog-status.test.ts tests the summary)
    change("agent-2");
    await backup("agent-2"); // a current record (the one there is the stale one put back above)
    await store.put(oldCatalogKey("agent-2"), (await store.get(catalogKey("agent-2")))!);
    await store.delete(catalogKey("agent-2"));
    const want = await fromObjects();
    const { entries, counts } = await listAll();
    expect(entries).toEqual(want);
    expect(counts.head ?? 0).toBe(0);
    // the marker, agent-2's at the old place (not in the catalog folder) and agent-3's (rewritten by the backup above);
    // billing-agent's is unchanged since this host checked it
    expect(counts.get).toBe(3);
    change("agent-2");
    await backup("agent-2");
    expect(await store.get(oldCatalogKey("agent-2"))).toBeNull();
    expect(JSON.parse(String(await store.get(catalogKey("agent-2")))).agent_id).toBe("agent-2");
  }, 60_000);
});
