// The spool: an s3:// repository that can not be reached (AGENTBAK_S3_ENDPOINT at a closed port of
// 127.0.0.1) gets its backups in a local spool — receipt "spooled", exit 3, within a bounded time —
// and `agentbak flush` or the next backup uploads them to the real Ceph gateway, verified, in order,
// with their idempotency keys. Needs the gateway (AGENTBAK_TEST_S3_ENDPOINT); skipped without it.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomBytes } from "node:crypto";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { closedPort, json, makeAgent, makeBucket, SNAPS, storeAt, type TestAgent } from "../helpers.js";
import { api, makeToken, startServer } from "../agentapi-helpers.js";

const endpoint = process.env.AGENTBAK_TEST_S3_ENDPOINT;
let a: TestAgent;
let repo: string;
let closed: string;

describe.skipIf(!endpoint)("spool", () => {
  const up = () => ({ AGENTBAK_S3_ENDPOINT: endpoint! });
  const down = () => ({ AGENTBAK_S3_ENDPOINT: closed });
  const remote = async () => ((await (await storeAt(repo)).list(`${SNAPS}/`)) as string[]).filter((k) => k.endsWith(".commit")).map((k) => k.slice(SNAPS.length + 1, -".commit".length));
  const spooled = () => {
    const root = join(a.home, "spool");
    const dir = existsSync(root) ? readdirSync(root).map((d) => join(root, d, SNAPS)).find((d) => existsSync(d)) : undefined;
    return dir ? readdirSync(dir).filter((f) => f.endsWith(".commit")).map((f) => f.slice(0, -".commit".length)) : [];
  };
  let first: any;
  let offline: any;

  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
    const bucket = `spool-${randomBytes(4).toString("hex")}`;
    await makeBucket(bucket);
    repo = `s3://${bucket}/repo`;
    writeFileSync(a.config, JSON.stringify({ ...JSON.parse(readFileSync(a.config, "utf8")), repository: repo }, null, 2));
    expect((await a.run(["init"], up())).code).toBe(0);
    closed = await closedPort();
    first = json(await a.run(["backup", "--json", "--idempotency-key", "k0"], up()));
    expect(first).toMatchObject({ status: "committed", sequence: 1 });
  }, 180_000);
  afterAll(() => a?.cleanup());

  it("a backup while the repository is unreachable is spooled: receipt spooled, exit 3, a bounded wait", async () => {
    const t0 = Date.now();
    const r = await a.run(["backup", "--json", "--idempotency-key", "k1", "--label", "offline"], down());
    const seconds = (Date.now() - t0) / 1000;
    expect(r.code, r.stderr).toBe(3);
    offline = json(r);
    expect(offline).toMatchObject({ status: "spooled", repeated: false, sequence: 2 }); // continues the repository's sequence
    expect(offline.warnings.join("\n")).toMatch(new RegExp(`repository ${repo} is unreachable \\(.*ECONNREFUSED.*\\); the signed bundle waits in ${a.home}/spool/`));
    expect(offline.path.startsWith(join(a.home, "spool"))).toBe(true);
    expect(seconds).toBeLessThan(30);
    // a signed bundle that verifies on its own, and nothing in the remote yet
    const v = await a.run(["verify", offline.path, "--identity", a.identity, "--json"]);
    expect(v.code, v.stderr).toBe(0);
    expect(await remote()).toEqual([first.snapshot_id]);
    expect(spooled()).toEqual([offline.snapshot_id]);
  });

  it("while still unreachable the same key returns the spooled receipt, and a key the repository answered returns its receipt", async () => {
    const again = json(await a.run(["backup", "--json", "--idempotency-key", "k1", "--label", "offline"], down()));
    expect(again).toMatchObject({ snapshot_id: offline.snapshot_id, repeated: true, status: "spooled" });
    const k0 = json(await a.run(["backup", "--json", "--idempotency-key", "k0"], down()));
    expect(k0).toMatchObject({ snapshot_id: first.snapshot_id, repeated: true, status: "committed" });
    expect(spooled()).toEqual([offline.snapshot_id]);
  });

  it("agentbak flush uploads it into the real repository, verified; the key then answers from there", async () => {
    const f = await a.run(["flush", "--json"], up());
    expect(f.code, f.stderr).toBe(0);
    expect(json(f)).toEqual([{ remote: repo, spool: expect.stringContaining(join(a.home, "spool")), flushed: [offline.snapshot_id], already: [], quarantined: [], warnings: [] }]);
    expect(await remote()).toEqual([first.snapshot_id, offline.snapshot_id]);
    expect(spooled()).toEqual([]);
    const listed = json(await a.run(["snapshots", "--json"], up())).find((s: any) => s.snapshot_id === offline.snapshot_id);
    expect(listed).toMatchObject({ status: "ok", sequence: 2, label: "offline" });
    const k1 = json(await a.run(["backup", "--json", "--idempotency-key", "k1", "--label", "offline"], up()));
    expect(k1).toMatchObject({ snapshot_id: offline.snapshot_id, repeated: true, status: "committed" });
    expect(k1.path).toBe(`${repo}/${SNAPS}/${offline.snapshot_id}.agentbak`);
    const none = await a.run(["flush", "--json"], up());
    expect(json(none)[0].flushed).toEqual([]);
  });

  it("flush while the repository is still down fails (exit 1) and keeps the bundle", async () => {
    const s = json(await a.run(["backup", "--json"], down()));
    expect(s.status).toBe("spooled");
    const f = await a.run(["flush"], down());
    expect(f.code).toBe(1);
    expect(f.stderr).toMatch(/unreachable/);
    expect(spooled()).toEqual([s.snapshot_id]);
    // the next backup that reaches the repository uploads what waited, parents and older ones first
    const next = json(await a.run(["backup", "--json"], up()));
    expect(next).toMatchObject({ status: "committed", sequence: s.sequence + 1, warnings: [] });
    expect(await remote()).toEqual(expect.arrayContaining([s.snapshot_id, next.snapshot_id]));
    expect(spooled()).toEqual([]);
  });

  it("through the HTTP server: a checkpoint while the repository is down is spooled, and GET says so", async () => {
    const t = await makeToken(a, "acme", "billing-agent", "checkpoint");
    const srv = await startServer(a, [], down());
    try {
      const r = await api(srv.url, t.token, "POST", "/v1/backups", { body: { label: "server-offline" } });
      expect(r.status, JSON.stringify(r.body)).toBe(201);
      expect(r.body).toMatchObject({ status: "spooled" });
      const g = await api(srv.url, t.token, "GET", r.body.status_url);
      expect(g.status).toBe(200);
      expect(g.body).toMatchObject({ snapshot_id: r.body.snapshot_id, status: "spooled", verification: "ok" });
      // the listing says the repository is down rather than pretending the spool is all there is
      const l = await api(srv.url, t.token, "GET", "/v1/snapshots");
      expect(l.body.snapshots.map((s: any) => [s.snapshot_id, s.status])).toEqual([[r.body.snapshot_id, "spooled"]]);
      expect(l.body.warnings.join()).toMatch(/unreachable.*only the spooled snapshots are listed/);
      // a committed snapshot can not be looked up while the repository is down: 503, not 404
      expect((await api(srv.url, t.token, "GET", `/v1/backups/${first.snapshot_id}`)).status).toBe(503);
      // within the retry window the next checkpoint does not wait for the repository again
      const t0 = Date.now();
      const r2 = await api(srv.url, t.token, "POST", "/v1/backups", { body: {} });
      expect(r2.body.status).toBe("spooled");
      expect(Date.now() - t0).toBeLessThan(15_000);
      // both checkpoints are audited beside their bundles, with the token's identity
      const spoolAudit = readdirSync(join(a.home, "spool")).map((d) => join(a.home, "spool", d, "tenants/acme/agents/billing-agent/audit.jsonl")).find((f) => existsSync(f))!;
      const calls = readFileSync(spoolAudit, "utf8").trim().split("\n").map((l) => JSON.parse(l)).filter((e) => e.event === "agent-interface" && e.operation === "create_backup");
      expect(calls.map((e) => [e.by, e.snapshot_id])).toEqual([[`token ${t.id}`, r.body.snapshot_id], [`token ${t.id}`, r2.body.snapshot_id]]);
    } finally {
      await srv.stop();
    }
    expect(json(await a.run(["flush", "--json"], up()))[0].flushed.length).toBe(2);
  });

  it("[E1] flush while serve checkpoints the same agent: every spooled bundle is uploaded once, no sequence is issued twice, the listing has no gap", async () => {
    const waiting = [json(await a.run(["backup", "--json"], down())), json(await a.run(["backup", "--json"], down()))];
    expect(waiting.map((w) => w.status)).toEqual(["spooled", "spooled"]);
    const t = await makeToken(a, "acme", "billing-agent", "checkpoint");
    const srv = await startServer(a, [], up());
    let checkpoints: any[];
    try {
      // the server's checkpoints flush the spool too (after their own commit): both race for the same bundles
      const [f, ...posted] = await Promise.all([
        a.run(["flush", "--json"], up()),
        api(srv.url, t.token, "POST", "/v1/backups", { body: { label: "during-flush-1" } }),
        api(srv.url, t.token, "POST", "/v1/backups", { body: { label: "during-flush-2" } }),
      ]);
      expect(f.code, f.stderr).toBe(0);
      checkpoints = posted.map((p) => p.body);
      for (const p of posted) expect([201, 423], JSON.stringify(p.body)).toContain(p.status); // 423: flush or the other checkpoint held the agent
    } finally {
      await srv.stop();
    }
    // each checkpoint committed, or was refused (423) while flush or the other one held the agent: never two at once
    const committed = checkpoints.filter((c) => c.status === "committed");
    expect(spooled()).toEqual([]);
    const ids = await remote();
    for (const w of [...waiting, ...committed]) expect(ids.filter((id) => id === w.snapshot_id)).toHaveLength(1);
    // uploaded once: one publish (backup or copy) in the repository's audit log per snapshot
    const audit = String(await (await storeAt(repo)).get("tenants/acme/agents/billing-agent/audit.jsonl")).trim().split("\n").map((l) => JSON.parse(l));
    const published = audit.filter((e) => e.event === "backup" || e.event === "copy").map((e) => e.snapshot_id);
    expect(published.length).toBe(new Set(published).size);
    for (const w of waiting) expect(published.filter((id) => id === w.snapshot_id)).toHaveLength(1);
    // every sequence from 1 to the newest is listed, once, and verifies
    const list = json(await a.run(["snapshots", "--json"], up()));
    expect(list.every((e: any) => e.status === "ok")).toBe(true);
    expect(list.map((e: any) => e.sequence).sort((x: number, y: number) => x - y)).toEqual(Array.from({ length: list.length }, (_, i) => i + 1));
  });
});
