// Issue 32, "trust at the edges", the server's points: what `serve`, `mcp`, `verify`, `snapshots`, `backup` and `flush`
// answer must be true. A repository renamed, emptied or replaced under a running server (folder and bucket); a chain
// whose link is damaged; a damaged spooled bundle and two flushes at once; a loopback server asked by another Host or
// Origin, MCP batches, and the OpenAPI document against every answer. Real processes, real sockets, real files.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, renameSync, rmSync, mkdirSync, writeFileSync, openSync, writeSync, readSync, closeSync, statSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { createServer } from "node:net";
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { join } from "node:path";
import { BIN, closedPort, flipByte, json, makeAgent, makeBucket, SNAPS, storeAt, type TestAgent } from "../helpers.js";
import { api, makeToken, mcpHttp, mcpStdio, startServer, tool, type Server } from "../agentapi-helpers.js";

const endpoint = process.env.AGENTBAK_TEST_S3_ENDPOINT;

/** Every file under `dir`, relative, sorted (a folder tree to compare before and after). */
function tree(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return (readdirSync(dir, { recursive: true, withFileTypes: true }) as any[])
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name).slice(dir.length + 1))
    .sort();
}

/** The agent's audit entries of the agent interface, from a repository folder. */
function auditEntries(repo: string): any[] {
  const f = join(repo, "tenants/acme/agents/billing-agent/audit.jsonl");
  if (!existsSync(f)) return [];
  return readFileSync(f, "utf8").trim().split("\n").map((l) => JSON.parse(l)).filter((e) => e.event === "agent-interface");
}


describe("[E1] a server never reports a lost checkpoint as committed (folder repository)", () => {
  let a: TestAgent;
  let srv: Server;
  let cp: { token: string; id: string };
  let first: any;

  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
    cp = await makeToken(a, "acme", "billing-agent", "checkpoint");
    srv = await startServer(a);
    const r = await api(srv.url, cp.token, "POST", "/v1/backups", { body: { label: "before" } });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    first = r.body;
  }, 120_000);
  afterAll(async () => {
    await srv?.stop();
    a?.cleanup();
  }, 60_000);

  it("[E1] the receipt names the checkpoint by snapshot id and status URL, never by a path on the server", async () => {
    expect(first).toMatchObject({ status: "committed", status_url: `/v1/backups/${first.snapshot_id}` });
    expect(first).not.toHaveProperty("path");
    expect(JSON.stringify(first)).not.toContain(a.tmp);
  });

  it("[E1] plan_restore (MCP over HTTP) names the snapshot by id, never the bundle's path on the server, and checks no credential there", async () => {
    const c = await mcpHttp(srv.url, cp.token);
    try {
      const p = await tool(c, "plan_restore", { snapshot: first.snapshot_id, target: join(a.tmp, "plan-only") });
      expect(p.isError, p.text).toBe(false);
      expect(p.data.plan).toMatchObject({ snapshot_id: first.snapshot_id });
      expect(p.data.plan).not.toHaveProperty("bundle");
      expect(JSON.stringify(p.data)).not.toContain(a.repo);
      // nor what exists on the server's host: a credential check at a target the agent names would be a probe of
      // whether any file there is readable (or an environment variable set); the operator's restore checks them
      expect(p.data.plan.credentials.map((c: { name: string }) => c.name)).toEqual(["llm", "mail"]);
      for (const c of p.data.plan.credentials) expect(c, JSON.stringify(c)).toMatchObject({ status: "unchecked", detail: expect.stringMatching(/^not checked for an agent's plan/) });
    } finally {
      await c.close();
    }
  });

  it("[E1] a repository folder renamed under serve: 404 code 10 'repository not found', never 201, no folder re-created, no empty listing", async () => {
    const moved = `${a.repo}.moved`;
    renameSync(a.repo, moved);
    try {
      const audited = auditEntries(moved).length;
      const b = await api(srv.url, cp.token, "POST", "/v1/backups", { body: { label: "lost" } });
      expect(b.status, JSON.stringify(b.body)).toBe(404);
      expect(b.body.error.code).toBe(10);
      expect(b.body.error.message).toMatch(/^repository not found: /);
      const l = await api(srv.url, cp.token, "GET", "/v1/snapshots");
      expect(l.status, JSON.stringify(l.body)).toBe(404);
      expect(l.body.error).toMatchObject({ code: 10 });
      const g = await api(srv.url, cp.token, "GET", `/v1/backups/${first.snapshot_id}`);
      expect(g.status).toBe(404);
      expect(g.body.error.message).toMatch(/^repository not found: /);
      // nothing was written where the repository was, and nothing into the moved one either
      expect(existsSync(a.repo), "the repository folder was re-created").toBe(false);
      expect(auditEntries(moved).length).toBe(audited);
      expect(srv.log()).toMatch(/audit entry for create_backup .* not written/);
    } finally {
      renameSync(moved, a.repo);
    }
    // back in place: the same repository, served again
    const again = await api(srv.url, cp.token, "GET", "/v1/snapshots");
    expect(again.status).toBe(200);
    expect(again.body.snapshots.map((s: any) => s.snapshot_id)).toEqual([first.snapshot_id]);
  });

  it("[E1] an unmounted repository (an empty folder left in its place): 404 code 10, the folder stays empty", async () => {
    const moved = `${a.repo}.unmounted`;
    renameSync(a.repo, moved);
    mkdirSync(a.repo);
    try {
      const b = await api(srv.url, cp.token, "POST", "/v1/backups", { body: {} });
      expect(b.status, JSON.stringify(b.body)).toBe(404);
      expect(b.body.error).toMatchObject({ code: 10 });
      const l = await api(srv.url, cp.token, "GET", "/v1/snapshots");
      expect(l.status).toBe(404);
      expect(readdirSync(a.repo)).toEqual([]);
    } finally {
      rmSync(a.repo, { recursive: true });
      renameSync(moved, a.repo);
    }
  });

  it("[E1] another repository initialised in its place is not the one the server opened (id differs): 404 code 10", async () => {
    const moved = `${a.repo}.old`;
    renameSync(a.repo, moved);
    try {
      const init = await a.run(["init", "--repo", a.repo, "--yes"]);
      expect(init.code, init.stderr).toBe(0);
      const before = tree(a.repo);
      const b = await api(srv.url, cp.token, "POST", "/v1/backups", { body: {} });
      expect(b.status, JSON.stringify(b.body)).toBe(404);
      expect(b.body.error.message).toMatch(/is not the repository this process opened/);
      expect(tree(a.repo)).toEqual(before);
    } finally {
      rmSync(a.repo, { recursive: true, force: true });
      renameSync(moved, a.repo);
    }
  });

  it("[E1] a repository renamed during a checkpoint (by the pre hook): 404 code 10, never 201, nothing re-created", async () => {
    const cfg = JSON.parse(readFileSync(a.config, "utf8"));
    const hooked = join(a.dir, "hooked.json");
    writeFileSync(hooked, JSON.stringify({ ...cfg, hooks: { pre: [`mv ${a.repo} ${a.repo}.midway`] } }));
    const s = await startServer(a, ["-c", hooked]);
    try {
      const b = await api(s.url, cp.token, "POST", "/v1/backups", { body: { label: "midway" } });
      expect(b.status, JSON.stringify(b.body)).toBe(404);
      expect(b.body.error).toMatchObject({ code: 10 });
      expect(existsSync(a.repo), `re-created: ${tree(a.repo).join(", ")}`).toBe(false);
      // the moved repository has no snapshot labelled midway committed
      const listed = json(await a.run(["snapshots", "--json", "--repo", `${a.repo}.midway`]));
      expect(listed.map((e: any) => e.label)).not.toContain("midway");
    } finally {
      await s.stop();
      renameSync(`${a.repo}.midway`, a.repo);
    }
  });

  it("[E1] MCP on stdio: create_backup and list_snapshots on a renamed repository fail with exit status 10", async () => {
    const c = await mcpStdio(a, ["--tier", "checkpoint"]);
    try {
      expect((await tool(c, "list_snapshots")).isError).toBe(false);
      renameSync(a.repo, `${a.repo}.gone`);
      try {
        const r = await tool(c, "create_backup", { label: "lost" });
        expect(r.isError, r.text).toBe(true);
        expect(r.data.error).toMatchObject({ code: 10 });
        expect(r.text).toMatch(/repository not found/);
        const l = await tool(c, "list_snapshots");
        expect(l.isError, l.text).toBe(true);
        expect(l.data.error.code).toBe(10);
        expect(existsSync(a.repo)).toBe(false);
      } finally {
        renameSync(`${a.repo}.gone`, a.repo);
      }
    } finally {
      await c.close();
    }
  });

  it("[E1] backup on the command line into a folder removed during the run: exit 10, the folder is not re-created", async () => {
    const cfg = JSON.parse(readFileSync(a.config, "utf8"));
    const hooked = join(a.dir, "hooked-cli.json");
    writeFileSync(hooked, JSON.stringify({ ...cfg, hooks: { pre: [`mv ${a.repo} ${a.repo}.cli`] } }));
    try {
      const r = await a.run(["backup", "-c", hooked]);
      expect(r.code, r.stderr).toBe(10);
      expect(r.stderr).toMatch(/repository not found/);
      expect(existsSync(a.repo)).toBe(false);
    } finally {
      renameSync(`${a.repo}.cli`, a.repo);
    }
  });
});

/**
 * A TCP proxy to the gateway that goes down for good right after it carried the answer to the first request whose
 * line matches `cut` (every connection closed, new ones refused): an outage at an exact step of a real run.
 */
async function cuttingProxy(target: string, cut: RegExp): Promise<{ url: string; cutAt: () => boolean; close(): void }> {
  const t = new URL(target);
  const { connect } = await import("node:net");
  const sockets = new Set<import("node:net").Socket>();
  let down = false;
  const server = createServer((client) => {
    if (down) return void client.destroy();
    const upstream = connect(Number(t.port), t.hostname);
    sockets.add(client).add(upstream);
    let cutting = false;
    client.on("data", (d) => {
      if (cut.test(d.toString("latin1").split("\r\n", 1)[0]!)) cutting = true;
      upstream.write(d);
    });
    upstream.on("data", (d) => {
      client.write(d, () => {
        if (!cutting || down) return;
        down = true;
        for (const s of sockets) s.destroy();
        server.close();
      });
    });
    for (const s of [client, upstream]) s.on("error", () => undefined).on("close", () => (client.destroy(), upstream.destroy()));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, cutAt: () => down, close: () => (server.close(), sockets.forEach((s) => s.destroy())) };
}

describe.skipIf(!endpoint)("[E1] a server never reports a lost checkpoint as committed (S3)", () => {
  let a: TestAgent;
  let repo: string;
  const up = () => ({ AGENTBAK_S3_ENDPOINT: endpoint! });

  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
    const bucket = `edges-${randomBytes(4).toString("hex")}`;
    await makeBucket(bucket);
    repo = `s3://${bucket}/repo`;
    writeFileSync(a.config, JSON.stringify({ ...JSON.parse(readFileSync(a.config, "utf8")), repository: repo }, null, 2));
    expect((await a.run(["init"], up())).code).toBe(0);
  }, 180_000);
  afterAll(() => a?.cleanup());

  it("[E1] a bucket prefix whose repository marker is gone under serve: 404 code 10, not spooled, not committed", async () => {
    const cp = await makeToken(a, "acme", "billing-agent", "checkpoint");
    const srv = await startServer(a, [], up());
    try {
      const ok = await api(srv.url, cp.token, "POST", "/v1/backups", { body: {} });
      expect(ok.status, JSON.stringify(ok.body)).toBe(201);
      const st = await storeAt(repo);
      for (const k of (await st.list("")) as string[]) await st.delete(k);
      const b = await api(srv.url, cp.token, "POST", "/v1/backups", { body: { label: "lost" } });
      expect(b.status, JSON.stringify(b.body)).toBe(404);
      expect(b.body.error).toMatchObject({ code: 10 });
      expect(b.body.error.message).toMatch(/^repository not found: s3:\/\//);
      const l = await api(srv.url, cp.token, "GET", "/v1/snapshots");
      expect(l.status, JSON.stringify(l.body)).toBe(404);
      // nothing was written into the bucket, and nothing waits in a spool as if the repository were only down
      expect(await st.list("")).toEqual([]);
      const spool = join(a.home, "spool");
      expect(existsSync(spool) ? tree(spool).filter((f) => f.endsWith(".agentbak")) : []).toEqual([]);
    } finally {
      await srv.stop();
    }
  });

  it("[E1] the repository unreachable right after a checkpoint's commit: answered committed (same id, a warning), never 'spooled' with a second snapshot", async () => {
    expect((await a.run(["init"], up())).code).toBe(0); // the previous case emptied the prefix
    const proxy = await cuttingProxy(endpoint!, /^PUT \S+\.commit[?\s]/);
    try {
      const r = await a.run(["backup", "--json", "--idempotency-key", "cut-1"], { AGENTBAK_S3_ENDPOINT: proxy.url });
      expect(proxy.cutAt(), "the proxy never saw the commit marker").toBe(true);
      const receipt = json(r);
      expect(receipt.status, r.stderr).toBe("committed");
      expect(r.code).toBe(3);
      expect(receipt.warnings.join("\n")).toMatch(/is committed in s3:.*then the repository became unreachable/);
      const committed = ((await (await storeAt(repo)).list(`${SNAPS}/`)) as string[]).filter((k) => k.endsWith(".commit"));
      expect(committed).toEqual([`${SNAPS}/${receipt.snapshot_id}.commit`]);
      const spool = join(a.home, "spool");
      expect(existsSync(spool) ? tree(spool).filter((f) => f.endsWith(".agentbak")) : []).toEqual([]);
      // the key answers with that snapshot once the repository is back
      const again = json(await a.run(["backup", "--json", "--idempotency-key", "cut-1"], up()));
      expect(again).toMatchObject({ snapshot_id: receipt.snapshot_id, repeated: true, status: "committed" });
    } finally {
      proxy.close();
    }
  });
});

/** Where each tar member's data starts and how long it is, by name. */
function tarMembers(file: string): Map<string, { offset: number; size: number }> {
  const b = readFileSync(file);
  const out = new Map<string, { offset: number; size: number }>();
  for (let at = 0; at + 512 <= b.length && b[at] !== 0; ) {
    const name = b.subarray(at, at + 100).toString("utf8").replace(/\0.*$/s, "");
    const size = parseInt(b.subarray(at + 124, at + 136).toString("utf8").replace(/\0.*$/s, "").trim(), 8);
    out.set(name, { offset: at + 512, size });
    at += 512 + Math.ceil(size / 512) * 512;
  }
  return out;
}

describe("[E4] verify, snapshots and backup check the whole chain, without keys too", () => {
  let a: TestAgent;
  const db = () => join(a.dir, "state", "agent.sqlite");
  const change = async () => void (await execa("sqlite3", [db(), "CREATE TABLE IF NOT EXISTS edge_rows(x); INSERT INTO edge_rows VALUES (randomblob(3000));"]));
  const bundle = (id: string) => join(a.repo, SNAPS, `${id}.agentbak`);
  /** A full snapshot and two incrementals on it: [full, middle, head]. */
  const chain = async () => {
    const ids: string[] = [];
    for (const flag of ["--no-incremental", "--incremental", "--incremental"]) {
      await change();
      const r = await a.run(["backup", flag, "--json"]);
      expect(r.code, r.stderr).toBe(0);
      ids.push(json(r).snapshot_id);
    }
    const [, middle, head] = ids;
    expect(json(await a.run(["snapshots", "--json"])).find((e: any) => e.snapshot_id === head)).toMatchObject({ parent: middle, status: "ok" });
    return ids as [string, string, string];
  };
  const damages: [string, (file: string) => void, boolean][] = [
    ["its manifest", (f) => flipByte(f, tarMembers(f).get("manifest.json")!.offset + 40), true],
    ["its signature", (f) => flipByte(f, tarMembers(f).get("manifest.sig")!.offset + 200), true],
    ["its payload digest", (f) => flipByte(f, -3000), false],
  ];

  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
  }, 120_000);
  afterAll(() => a?.cleanup());

  for (const [what, damage, listed] of damages) {
    it(`[E4] a parent whose ${what.replace("its ", "")} is damaged: verify refuses the incremental (13) naming the link, with and without --identity${listed ? "; snapshots shows it invalid (parent <id>: ...)" : ""}; backup --incremental starts a full one and says why`, async () => {
      const [, middle, head] = await chain();
      const file = bundle(middle);
      const original = readFileSync(file);
      damage(file);
      try {
        const keyless = await a.run(["verify", head]);
        expect(keyless.code, keyless.stdout).toBe(13);
        expect(keyless.stderr).toContain(`parent snapshot ${middle} of ${head}`);
        const deep = await a.run(["verify", head, "--identity", a.identity]);
        expect(deep.code, deep.stdout).toBe(13);
        expect(deep.stderr).toContain(`parent snapshot ${middle} of ${head}`);
        if (listed) {
          const l = json(await a.run(["snapshots", "--json"])).find((e: any) => e.snapshot_id === head);
          expect(l).toMatchObject({ status: "invalid" });
          expect(l.problem).toMatch(new RegExp(`^parent ${middle}: `));
          const human = await a.run(["snapshots"]);
          expect(human.stdout).toMatch(new RegExp(`${head}.*invalid: parent ${middle}: `));
        }
        const r = await a.run(["backup", "--incremental", "--json"]);
        expect(r.code, r.stderr).toBe(3);
        const receipt = json(r);
        expect(receipt).toMatchObject({ kind: "full", parent: null });
        expect(receipt.full_reason).toContain(middle);
        expect(r.stderr).toMatch(new RegExp(`full snapshot instead of an incremental: chain of ${head} is not usable \\(.*${middle}`));
      } finally {
        writeFileSync(file, original);
      }
      expect((await a.run(["verify", head])).code).toBe(0);
    });
  }

  it("[E4] verify without keys names the chain it checked", async () => {
    const [, middle, head] = await chain();
    const r = json(await a.run(["verify", head, "--json"]));
    expect(r.checks.find((c: any) => c.name === "chain")).toMatchObject({ ok: true, detail: expect.stringMatching(/^2 parent link\(s\) verified/) });
    expect(middle).toBeTruthy();
  });
});

describe.skipIf(!endpoint)("[E10] the spool: a damaged bundle is set aside, the rest upload; two flushes at once", () => {
  let a: TestAgent;
  let repo: string;
  let closed: string;
  const up = () => ({ AGENTBAK_S3_ENDPOINT: endpoint! });
  const down = () => ({ AGENTBAK_S3_ENDPOINT: closed });
  const spoolRoot = () => join(a.home, "spool", readdirSync(join(a.home, "spool"))[0]!);
  const spooled = () => tree(join(spoolRoot(), SNAPS)).filter((f) => f.endsWith(".commit")).map((f) => f.slice(0, -".commit".length));
  const remote = async () => ((await (await storeAt(repo)).list(`${SNAPS}/`)) as string[]).filter((k) => k.endsWith(".commit")).map((k) => k.slice(SNAPS.length + 1, -".commit".length));
  const offline = async (n: number) => {
    const ids: string[] = [];
    for (let i = 0; i < n; i++) {
      const r = await a.run(["backup", "--json", "--label", `offline-${i}`], down());
      expect(r.code, r.stderr).toBe(3);
      expect(json(r).status).toBe("spooled");
      ids.push(json(r).snapshot_id);
    }
    return ids;
  };

  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
    const bucket = `edges-${randomBytes(4).toString("hex")}`;
    await makeBucket(bucket);
    repo = `s3://${bucket}/repo`;
    writeFileSync(a.config, JSON.stringify({ ...JSON.parse(readFileSync(a.config, "utf8")), repository: repo }, null, 2));
    expect((await a.run(["init"], up())).code).toBe(0);
    closed = await closedPort();
  }, 180_000);
  afterAll(() => a?.cleanup());

  for (const [what, damage] of [
    ["payload", (f: string) => flipByte(f, -3000)],
    ["signature", (f: string) => flipByte(f, tarMembers(f).get("manifest.sig")!.offset + 200)],
  ] as const) {
    it(`[E10] one spooled bundle with a damaged ${what} is named and quarantined (not deleted); the later ones still upload (exit 3)`, async () => {
      const ids = await offline(3);
      const victim = ids[1]!;
      const file = join(spoolRoot(), SNAPS, `${victim}.agentbak`);
      damage(file);
      const damaged = readFileSync(file);
      const f = await a.run(["flush", "--json"], up());
      expect(f.code, f.stderr).toBe(3);
      const [res] = json(f);
      expect(res.flushed).toEqual([ids[0], ids[2]]);
      expect(res.quarantined).toEqual([{ snapshot_id: victim, problem: expect.any(String), path: expect.stringContaining(join(a.home, "spool")) }]);
      expect(res.quarantined[0].problem).toMatch(what === "payload" ? /payload\.age: digest mismatch/ : /manifest\.sig/);
      expect(await remote()).toEqual(expect.arrayContaining([ids[0], ids[2]]));
      expect(await remote()).not.toContain(victim);
      expect(spooled()).toEqual([]);
      // set aside byte for byte, with the reason beside it
      expect(readFileSync(res.quarantined[0].path).equals(damaged)).toBe(true);
      expect(JSON.parse(readFileSync(res.quarantined[0].path.replace(/\.agentbak$/, ".problem.json"), "utf8"))).toMatchObject({ snapshot_id: victim, problem: res.quarantined[0].problem });
      const human = await a.run(["flush"], up());
      expect(human.code).toBe(0); // nothing left to do, the quarantined one is not retried
    });
  }

  it("[E10] a damaged spooled link takes the incrementals built on it aside too, named; what it does not carry uploads", async () => {
    const ids: string[] = [];
    for (const flag of ["--no-incremental", "--incremental", "--incremental"]) {
      await execa("sqlite3", [join(a.dir, "state", "agent.sqlite"), "CREATE TABLE IF NOT EXISTS edge_rows(x); INSERT INTO edge_rows VALUES (randomblob(3000));"]);
      const r = await a.run(["backup", flag, "--json"], down());
      expect(r.code, r.stderr).toBe(3);
      ids.push(json(r).snapshot_id);
    }
    const [full, middle, head] = ids as [string, string, string];
    flipByte(join(spoolRoot(), SNAPS, `${middle}.agentbak`), -3000);
    const f = await a.run(["flush"], up());
    expect(f.code, f.stderr).toBe(3);
    expect(f.stderr).toContain(`spooled snapshot ${middle} does not verify, set aside (not uploaded, not deleted)`);
    expect(f.stderr).toMatch(new RegExp(`spooled snapshot ${head} does not verify, set aside .*: parent ${middle} was set aside`));
    expect(await remote()).toContain(full);
    expect(await remote()).not.toContain(head);
    expect(spooled()).toEqual([]);
  });

  it("[E10] another agent's bundle dropped into this agent's spool is set aside, never uploaded as this agent's", async () => {
    // a second agent of the same host and keys, its snapshot spooled while the repository is down
    const otherCfg = join(a.dir, "other-agent.json");
    const cfg = JSON.parse(readFileSync(a.config, "utf8"));
    writeFileSync(otherCfg, JSON.stringify({ ...cfg, agent: { ...cfg.agent, id: "other-agent" } }, null, 2));
    const o = await a.run(["backup", "-c", otherCfg, "--json"], down());
    expect(o.code, o.stderr).toBe(3);
    const foreign = json(o).snapshot_id as string;
    const otherSnaps = join(spoolRoot(), SNAPS.replace("billing-agent", "other-agent"));
    // moved into billing-agent's spooled snapshots, beside one of its own
    const [own] = await offline(1);
    for (const ext of [".agentbak", ".commit"]) renameSync(join(otherSnaps, `${foreign}${ext}`), join(spoolRoot(), SNAPS, `${foreign}${ext}`));
    const f = await a.run(["flush", "--json"], up());
    expect(f.code, f.stderr).toBe(3);
    const [res] = json(f);
    expect(res.flushed).toEqual([own]);
    expect(res.quarantined).toEqual([{ snapshot_id: foreign, problem: "manifest names another snapshot, agent or tenant than where it is stored", path: expect.stringContaining(join("billing-agent", "quarantine")) }]);
    expect(await remote()).toContain(own);
    // never listed or uploaded as billing-agent's snapshot
    expect(await remote()).not.toContain(foreign);
    const listed = await a.run(["snapshots", "--json"], up());
    expect(json(listed).map((e: { snapshot_id: string }) => e.snapshot_id)).not.toContain(foreign);
  });

  it("[E10] a spooled bundle replaced by a FIFO (or a link to /dev/zero) is set aside, named, and flush ends in seconds: the later ones upload", async () => {
    for (const plant of [(f: string) => execa("mkfifo", [f]), (f: string) => execa("ln", ["-s", "/dev/zero", f])]) {
      const ids = await offline(3);
      const victim = ids[0]!;
      const file = join(spoolRoot(), SNAPS, `${victim}.agentbak`);
      rmSync(file);
      await plant(file);
      // before the fix flush blocked for ever opening the FIFO (a synchronous read no signal could end)
      const t0 = Date.now();
      const f = await a.run(["flush", "--json"], up(), { timeout: 60_000 });
      expect(Date.now() - t0).toBeLessThan(30_000);
      expect(f.code, f.stderr).toBe(3);
      const [res] = json(f);
      expect(res.flushed).toEqual([ids[1], ids[2]]);
      expect(res.quarantined).toEqual([{ snapshot_id: victim, problem: expect.stringContaining("bundle object is missing"), path: expect.stringMatching(/\.problem\.json$/) }]);
      expect(existsSync(res.quarantined[0].path)).toBe(true);
      expect(await remote()).not.toContain(victim);
      expect(spooled()).toEqual([]);
    }
  });

  it("[E10] two flush runs at once both end 0; each spooled snapshot is uploaded exactly once", async () => {
    const ids = await offline(3);
    const [x, y] = await Promise.all([a.run(["flush", "--json"], up()), a.run(["flush", "--json"], up())]);
    expect(x.code, x.stderr).toBe(0);
    expect(y.code, y.stderr).toBe(0);
    const flushed = [...json(x)[0].flushed, ...json(y)[0].flushed];
    expect([...flushed].sort()).toEqual([...ids].sort()); // each once, by one of them
    expect(await remote()).toEqual(expect.arrayContaining(ids));
    expect(spooled()).toEqual([]);
    // the remote's audit log has one arrival per snapshot
    const audit = String(await (await storeAt(repo)).get("tenants/acme/agents/billing-agent/audit.jsonl")).trim().split("\n").map((l) => JSON.parse(l));
    for (const id of ids) expect(audit.filter((e) => e.event === "copy" && e.snapshot_id === id).length, id).toBe(1);
  });

  it("[E10] a flush killed (SIGKILL) right after it set a damaged bundle aside: the next flush names it (escaped, 3), the later ones upload once; then it is not repeated", async () => {
    const ids = await offline(3);
    const victim = ids[1]!;
    flipByte(join(spoolRoot(), SNAPS, `${victim}.agentbak`), -3000);
    const killed = await a.run(["flush", "--json"], { ...up(), AGENTBAK_CRASH_STEP: "flush-set-aside" });
    expect(killed.code, killed.stderr).toBe(-1); // killed by the signal: no exit code, nothing reported
    expect(killed.stdout).toBe("");
    const note = join(spoolRoot(), "tenants/acme/agents/billing-agent/quarantine", `${victim}.problem.json`);
    // agent-controlled text can reach the note's reason (a bundle's own words): never raw on the terminal
    writeFileSync(note, JSON.stringify({ ...JSON.parse(readFileSync(note, "utf8")), problem: "digest mismatch \x1b[31mred\u202e" }));
    const next = await a.run(["flush"], up());
    expect(next.code, next.stderr).toBe(3);
    expect(next.stderr).toContain(`spooled snapshot ${victim} does not verify, set aside by an earlier run that did not report it (not uploaded, not deleted)`);
    expect(next.stderr).toContain("digest mismatch \\x1b[31mred\\u202e");
    expect(next.stderr).not.toMatch(/[\x1b\u202e]/);
    expect(next.stdout + next.stderr).toMatch(/[12] spooled snapshot\(s\) uploaded/);
    expect(JSON.parse(readFileSync(note, "utf8")).reported_at).toEqual(expect.any(String));
    const commits = ((await (await storeAt(repo)).list(`${SNAPS}/`)) as string[]).filter((k) => k.endsWith(".commit"));
    for (const id of [ids[0]!, ids[2]!]) expect(commits.filter((k) => k.includes(id)).length, id).toBe(1);
    expect(await remote()).not.toContain(victim);
    expect(spooled()).toEqual([]);
    // named once: the flush after says nothing of it
    const after = await a.run(["flush", "--json"], up());
    expect(after.code, after.stderr).toBe(0);
    expect(json(after)).toEqual([expect.objectContaining({ flushed: [], quarantined: [] })]);
  });
});

/** One HTTP request over a real socket with exactly these headers (fetch does not let a caller set Host). */
async function raw(url: string, method: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<{ status: number; body: any }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: u.hostname, port: u.port, method, path, headers: { ...(body !== undefined ? { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)) } : {}), ...headers } }, (res) => {
      let text = "";
      res.on("data", (d) => (text += d));
      res.on("end", () => {
        let parsed: unknown = text;
        try {
          parsed = JSON.parse(text);
        } catch {
          /* not JSON */
        }
        resolve({ status: res.statusCode!, body: parsed });
      });
    });
    req.on("error", reject);
    req.end(body);
  });
}

/** A JSON-RPC batch of `n` tools/call messages to /mcp. */
const batch = (n: number, tool = "list_snapshots") => JSON.stringify(Array.from({ length: n }, (_, i) => ({ jsonrpc: "2.0", id: i + 1, method: "tools/call", params: { name: tool, arguments: {} } })));
const MCP_HEADERS = { accept: "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18" };

describe("[E11] a loopback server answers only its own address; an MCP batch counts as its parts", () => {
  let a: TestAgent;
  let srv: Server;
  let read: { token: string; id: string };
  let cp: { token: string; id: string };
  let port: string;

  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
    read = await makeToken(a, "acme", "billing-agent", "read");
    cp = await makeToken(a, "acme", "billing-agent", "checkpoint");
    srv = await startServer(a);
    port = new URL(srv.url).port;
    expect((await api(srv.url, cp.token, "POST", "/v1/backups", { body: {} })).status).toBe(201);
  }, 120_000);
  afterAll(async () => {
    await srv?.stop();
    a?.cleanup();
  }, 60_000);

  it("[E11] Host: evil.example (DNS rebinding) is refused with 421 on every route, before any token or audit entry", async () => {
    const audited = auditEntries(a.repo).length;
    const bundles = tree(a.repo).filter((f) => f.endsWith(".agentbak")).length;
    for (const [method, path, body] of [
      ["GET", "/v1/openapi.json", undefined],
      ["GET", "/v1/snapshots", undefined],
      ["POST", "/v1/backups", "{}"],
      ["POST", "/mcp", batch(1)],
    ] as const) {
      const r = await raw(srv.url, method, path, { host: `evil.example:${port}`, authorization: `Bearer ${cp.token}`, ...MCP_HEADERS }, body);
      expect(r.status, `${method} ${path}: ${JSON.stringify(r.body)}`).toBe(421);
      expect(r.body.error.code).toBe(14);
      expect(r.body.error.message).toMatch(/Host "evil\.example:\d+" is not this server/);
    }
    // another port of the same address is another server too
    expect((await raw(srv.url, "GET", "/v1/snapshots", { host: `127.0.0.1:${Number(port) + 1}`, authorization: `Bearer ${read.token}` })).status).toBe(421);
    expect(auditEntries(a.repo).length).toBe(audited);
    expect(tree(a.repo).filter((f) => f.endsWith(".agentbak")).length).toBe(bundles);
  });

  it("[E11] Origin: http://evil.example (or null) is refused with 403 and no audit entry; the bound address and localhost with the right port pass", async () => {
    const audited = auditEntries(a.repo).length;
    for (const origin of ["http://evil.example", `http://evil.example:${port}`, "null", `https://127.0.0.1:${port}`]) {
      const r = await raw(srv.url, "GET", "/v1/snapshots", { host: `127.0.0.1:${port}`, origin, authorization: `Bearer ${read.token}` });
      expect(r.status, origin).toBe(403);
      expect(r.body.error.message).toMatch(/^refused: a request from origin/);
    }
    expect(auditEntries(a.repo).length).toBe(audited);
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`]) {
      const r = await raw(srv.url, "GET", "/v1/snapshots", { host, authorization: `Bearer ${read.token}` });
      expect(r.status, host).toBe(200);
      const same = await raw(srv.url, "GET", "/v1/snapshots", { host, origin: `http://${host}`, authorization: `Bearer ${read.token}` });
      expect(same.status, host).toBe(200);
    }
  });

  it("[E11] an MCP batch counts as its parts: more than 10 messages are refused (400) with no audit entry; 10 add 10", async () => {
    const before = auditEntries(a.repo).length;
    const big = await raw(srv.url, "POST", "/mcp", { host: `127.0.0.1:${port}`, authorization: `Bearer ${read.token}`, ...MCP_HEADERS }, batch(100));
    expect(big.status, JSON.stringify(big.body).slice(0, 300)).toBe(400);
    expect(big.body.error.message).toMatch(/at most 10 JSON-RPC messages/);
    expect(auditEntries(a.repo).length).toBe(before);
    const ten = await raw(srv.url, "POST", "/mcp", { host: `127.0.0.1:${port}`, authorization: `Bearer ${read.token}`, ...MCP_HEADERS }, batch(10));
    expect(ten.status, JSON.stringify(ten.body).slice(0, 300)).toBe(200);
    expect(ten.body).toHaveLength(10);
    expect(auditEntries(a.repo).length).toBe(before + 10);
  });
});

/** What in `value` the OpenAPI schema does not say (fields it does not list, required ones missing, wrong types). */
function conform(doc: any, schema: any, value: any, at = "$"): string[] {
  if (schema.$ref) return conform(doc, doc.components.schemas[schema.$ref.split("/").at(-1)], value, at);
  for (const k of ["anyOf", "oneOf"]) if (schema[k]) return schema[k].some((s: any) => conform(doc, s, value, at).length === 0) ? [] : [`${at}: ${JSON.stringify(value)?.slice(0, 80)} matches no ${k} branch`];
  const types: string[] | null = schema.type === undefined ? null : [].concat(schema.type);
  if (value === null) return types?.includes("null") || schema.nullable || schema.enum?.includes(null) ? [] : [`${at}: null where the document does not allow it`];
  if (schema.enum && !schema.enum.includes(value)) return [`${at}: ${JSON.stringify(value)} is not one of ${schema.enum.join(", ")}`];
  const t = Array.isArray(value) ? "array" : Number.isInteger(value) ? "integer" : typeof value;
  if (types && !types.some((x) => x === t || (x === "number" && t === "integer"))) return [`${at}: a ${t}, the document says ${types.join("|")}`];
  if (t === "array") return schema.items ? value.flatMap((v: any, i: number) => conform(doc, schema.items, v, `${at}[${i}]`)) : [];
  if (t !== "object") return [];
  const props = schema.properties ?? {};
  return [
    ...Object.keys(value).filter((k) => !(k in props)).map((k) => `${at}.${k}: answered but not in the document`),
    ...(schema.required ?? []).filter((k: string) => !(k in value)).map((k: string) => `${at}.${k}: required by the document but not answered`),
    ...Object.keys(value).filter((k) => k in props).flatMap((k) => conform(doc, props[k], value[k], `${at}.${k}`)),
  ];
}

describe("[E11] openapi.json lists every status and field the server answers", () => {
  let a: TestAgent;
  let doc: any;
  const seen = new Set<string>();
  const tok: Record<string, { token: string; id: string }> = {};

  /** One real request; its status must be documented for the route, and its JSON must be what the document says. */
  async function call(url: string, route: [string, string], status: number, path: string, o: { token?: string; headers?: Record<string, string>; body?: string } = {}) {
    const [method, template] = route;
    const r = await raw(url, method, path, { host: new URL(url).host, ...(o.token ? { authorization: `Bearer ${o.token}` } : {}), ...o.headers }, o.body);
    expect(r.status, `${method} ${path}: ${JSON.stringify(r.body).slice(0, 400)}`).toBe(status);
    const documented = doc.paths[template][method.toLowerCase()].responses[String(status)];
    expect(documented, `${method} ${template} answered ${status}, which the document does not list`).toBeDefined();
    const schema = documented.content["application/json"]?.schema;
    // the status page and /metrics answer text (HTML, OpenMetrics) when they succeed
    if (schema) expect(conform(doc, schema, r.body), `${method} ${template} ${status}`).toEqual([]);
    else expect(typeof r.body, `${method} ${template} ${status}`).toBe("string");
    seen.add(`${method} ${template} ${status}`);
    return r.body;
  }
  const B: [string, string] = ["POST", "/v1/backups"];
  const G: [string, string] = ["GET", "/v1/backups/{id}"];
  const L: [string, string] = ["GET", "/v1/snapshots"];
  const R: [string, string] = ["POST", "/v1/restores"];
  const Q: [string, string] = ["GET", "/v1/restores/{id}"];
  const every = [B, G, L, R, Q];
  const PAGE: [string, string] = ["GET", "/"];
  const M: [string, string] = ["GET", "/metrics"];
  const H: [string, string] = ["GET", "/healthz"];
  const reads = [PAGE, M];
  const agentDir = () => join(a.repo, "tenants/acme/agents/billing-agent");

  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
    for (const tier of ["read", "checkpoint", "restore-request"]) tok[tier] = await makeToken(a, "acme", "billing-agent", tier);
    tok.stranger = await makeToken(a, "acme", "support-agent", "restore-request");
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E11] every route and every status, through real requests, answer exactly what the document lists", async () => {
    const srv = await startServer(a);
    try {
      doc = (await raw(srv.url, "GET", "/v1/openapi.json", { host: new URL(srv.url).host })).body;
      const u = srv.url;
      const host = new URL(u).host;
      // the answers that work
      const receipt = await call(u, B, 201, "/v1/backups", { token: tok.checkpoint!.token, headers: { "idempotency-key": "k1" }, body: JSON.stringify({ label: "one" }) });
      const id = receipt.snapshot_id;
      await call(u, G, 200, `/v1/backups/${id}`, { token: tok.read!.token });
      await call(u, L, 200, "/v1/snapshots", { token: tok.read!.token });
      const req = await call(u, R, 202, "/v1/restores", { token: tok["restore-request"]!.token, headers: { "idempotency-key": "r1" }, body: JSON.stringify({ reason: "test", snapshot: id }) });
      await call(u, Q, 200, `/v1/restores/${req.request_id}`, { token: tok.read!.token });
      for (const r of reads) await call(u, r, 200, r[1], { token: tok.read!.token });
      await call(u, H, 200, "/healthz");
      // a request with a decision, and one with an outcome, answer every field of theirs too
      const denied = await call(u, R, 202, "/v1/restores", { token: tok["restore-request"]!.token, body: JSON.stringify({ reason: "to deny", snapshot: id }) });
      expect((await a.run(["deny", denied.request_id, "--reason", "not now", "--yes"])).code).toBe(0);
      expect(await call(u, Q, 200, `/v1/restores/${denied.request_id}`, { token: tok.read!.token })).toMatchObject({ status: "denied", decision: { decision: "denied", reason: "not now" } });
      const approved = await call(u, R, 202, "/v1/restores", { token: tok["restore-request"]!.token, body: JSON.stringify({ reason: "to approve", snapshot: id }) });
      const ap = await a.run(["approve", approved.request_id, "--target", join(a.tmp, "restored"), "--yes"]);
      expect([0, 3], ap.stderr).toContain(ap.code);
      expect(await call(u, Q, 200, `/v1/restores/${approved.request_id}`, { token: tok.read!.token })).toMatchObject({ status: "restored", outcome: { status: "restored", error: null } });
      // the client's mistakes
      await call(u, B, 400, "/v1/backups", { token: tok.checkpoint!.token, body: JSON.stringify({ incremental: "yes" }) });
      await call(u, G, 400, "/v1/backups/not-an-id", { token: tok.read!.token });
      await call(u, R, 400, "/v1/restores", { token: tok["restore-request"]!.token, body: JSON.stringify({ snapshot: id }) });
      await call(u, Q, 400, "/v1/restores/not-an-id", { token: tok.read!.token });
      for (const r of every) await call(u, r, 401, r[1].replace("{id}", r === Q ? req.request_id : id), r[0] === "POST" ? { body: "{}" } : {});
      for (const r of reads) await call(u, r, 401, r[1]);
      for (const r of reads) await call(u, r, 403, r[1], { token: tok.stranger!.token });
      for (const r of reads) await call(u, r, 421, r[1], { token: tok.read!.token, headers: { host: "evil.example" } });
      await call(u, B, 403, "/v1/backups", { token: tok.read!.token, body: "{}" });
      await call(u, G, 403, `/v1/backups/${id}`, { token: tok.stranger!.token });
      await call(u, L, 403, "/v1/snapshots", { token: tok.read!.token, headers: { origin: "http://evil.example" } });
      await call(u, R, 403, "/v1/restores", { token: tok.checkpoint!.token, body: JSON.stringify({ reason: "x" }) });
      await call(u, Q, 403, `/v1/restores/${req.request_id}`, { token: tok.stranger!.token });
      await call(u, G, 404, "/v1/backups/20200101T000000000Z-00000000", { token: tok.read!.token });
      await call(u, R, 404, "/v1/restores", { token: tok["restore-request"]!.token, body: JSON.stringify({ reason: "x", snapshot: "20200101T000000000Z-00000000" }) });
      await call(u, Q, 404, "/v1/restores/req-20200101T000000000Z-00000000", { token: tok.read!.token });
      await call(u, B, 409, "/v1/backups", { token: tok.checkpoint!.token, headers: { "idempotency-key": "k1" }, body: JSON.stringify({ label: "two" }) });
      await call(u, R, 409, "/v1/restores", { token: tok["restore-request"]!.token, headers: { "idempotency-key": "r1" }, body: JSON.stringify({ reason: "other", snapshot: id }) });
      await call(u, B, 413, "/v1/backups", { token: tok.checkpoint!.token, body: JSON.stringify({ label: "x".repeat(100_000) }) });
      await call(u, R, 413, "/v1/restores", { token: tok["restore-request"]!.token, body: JSON.stringify({ reason: "x".repeat(100_000) }) });
      await call(u, B, 415, "/v1/backups", { token: tok.checkpoint!.token, headers: { "content-type": "text/plain" }, body: "{}" });
      await call(u, R, 415, "/v1/restores", { token: tok["restore-request"]!.token, headers: { "content-type": "text/plain" }, body: JSON.stringify({ reason: "x" }) });
      await call(u, H, 403, "/healthz", { headers: { origin: "http://evil.example" } });
      await call(u, H, 421, "/healthz", { headers: { host: "evil.example" } });
      for (const r of every) await call(u, r, 421, r[1].replace("{id}", r === Q ? req.request_id : id), { token: tok["restore-request"]!.token, headers: { host: "evil.example" }, ...(r[0] === "POST" ? { body: "{}" } : {}) });
      // a repository record that does not verify, a snapshot that does not
      const seq = join(agentDir(), "sequence.json");
      const seqText = readFileSync(seq, "utf8");
      writeFileSync(seq, "{not json");
      await call(u, B, 422, "/v1/backups", { token: tok.checkpoint!.token, body: "{}" });
      writeFileSync(seq, seqText);
      const damaged = (await api(u, tok.checkpoint!.token, "POST", "/v1/backups", { body: {} })).body.snapshot_id;
      const file = join(a.repo, SNAPS, `${damaged}.agentbak`);
      flipByte(file, tarMembers(file).get("manifest.sig")!.offset + 200);
      await call(u, R, 422, "/v1/restores", { token: tok["restore-request"]!.token, body: JSON.stringify({ reason: "x", snapshot: damaged }) });
      rmSync(file);
      rmSync(join(a.repo, SNAPS, `${damaged}.commit`));
      // locks held by a live process (this test's): the agent's for a backup, the audit log's for a request (after its 30 s wait)
      // (a lease's newest grant, locks/<name>/<token>.lease, held by this live process: repository/lease.ts)
      const lock = (name: string) => {
        const dir = join(agentDir(), "locks", name);
        mkdirSync(dir, { recursive: true });
        const token = Math.max(0, ...readdirSync(dir).map((f) => Number(f.slice(0, 16)) || 0)) + 1;
        const file = join(dir, `${String(token).padStart(16, "0")}.lease`);
        const grant = { format: "agentbak-lease", token, host: hostname(), pid: process.pid, nonce: "test", acquired_at: new Date().toISOString(), expires_at: new Date(Date.now() + 3_600_000).toISOString(), released: false };
        writeFileSync(file, JSON.stringify(grant));
        return () => writeFileSync(file, JSON.stringify({ ...grant, released: true }));
      };
      let unlock = lock("agent");
      await call(u, B, 423, "/v1/backups", { token: tok.checkpoint!.token, body: "{}" });
      unlock();
      unlock = lock("log");
      await call(u, R, 423, "/v1/restores", { token: tok["restore-request"]!.token, body: JSON.stringify({ reason: "while the log is locked", snapshot: id }) });
      unlock();
      // internal errors: the agent's folders are files where folders should be
      for (const d of ["snapshots", "requests"]) renameSync(join(agentDir(), d), join(agentDir(), `${d}.aside`)), writeFileSync(join(agentDir(), d), "");
      for (const r of every) await call(u, r, 500, r[1].replace("{id}", r === Q ? req.request_id : id), { token: tok["restore-request"]!.token, ...(r === R ? { body: JSON.stringify({ reason: "x" }) } : r === B ? { body: "{}" } : {}) });
      for (const r of reads) await call(u, r, 500, r[1], { token: tok.read!.token });
      for (const d of ["snapshots", "requests"]) rmSync(join(agentDir(), d)), renameSync(join(agentDir(), `${d}.aside`), join(agentDir(), d));
      // the repository's own record damaged (a FIFO in its place: 13, "is damaged"): 422 on every route that reads the repository
      const marker = join(a.repo, "agentbak-repository.json");
      renameSync(marker, `${marker}.aside`);
      execFileSync("mkfifo", [marker]);
      for (const r of every) await call(u, r, 422, r[1].replace("{id}", r === Q ? req.request_id : id), { token: tok["restore-request"]!.token, ...(r === R ? { body: JSON.stringify({ reason: "x", snapshot: id }) } : r === B ? { body: "{}" } : {}) });
      for (const r of reads) await call(u, r, 422, r[1], { token: tok.read!.token });
      rmSync(marker);
      renameSync(`${marker}.aside`, marker);
      // the repository gone
      renameSync(a.repo, `${a.repo}.gone`);
      for (const r of every) await call(u, r, 404, r[1].replace("{id}", r === Q ? req.request_id : id), { token: tok["restore-request"]!.token, ...(r === R ? { body: JSON.stringify({ reason: "x" }) } : r === B ? { body: "{}" } : {}) });
      for (const r of reads) await call(u, r, 404, r[1], { token: tok.read!.token });
      await call(u, H, 503, "/healthz");
      renameSync(`${a.repo}.gone`, a.repo);
      expect(host).toBeTruthy();
    } finally {
      await srv.stop();
    }
  }, 180_000);

  it.skipIf(!endpoint)("[E11] ... and 503 while an object-storage repository can not be reached", async () => {
    const b = await makeAgent({ sizeMb: 1 });
    try {
      const bucket = `edges-${randomBytes(4).toString("hex")}`;
      await makeBucket(bucket);
      writeFileSync(b.config, JSON.stringify({ ...JSON.parse(readFileSync(b.config, "utf8")), repository: `s3://${bucket}/repo` }, null, 2));
      const up = { AGENTBAK_S3_ENDPOINT: endpoint! };
      expect((await b.run(["init"], up)).code).toBe(0);
      const t = await makeToken(b, "acme", "billing-agent", "restore-request");
      const upSrv = await startServer(b, [], up);
      let id: string, reqId: string;
      try {
        id = (await api(upSrv.url, t.token, "POST", "/v1/backups", { body: {} })).body.snapshot_id;
        reqId = (await api(upSrv.url, t.token, "POST", "/v1/restores", { body: { reason: "x", snapshot: id } })).body.request_id;
      } finally {
        await upSrv.stop();
      }
      const downSrv = await startServer(b, [], { AGENTBAK_S3_ENDPOINT: await closedPort() });
      try {
        await call(downSrv.url, G, 503, `/v1/backups/${id}`, { token: t.token });
        await call(downSrv.url, R, 503, "/v1/restores", { token: t.token, body: JSON.stringify({ reason: "x" }) });
        await call(downSrv.url, Q, 503, `/v1/restores/${reqId}`, { token: t.token });
        for (const r of reads) await call(downSrv.url, r, 503, r[1], { token: t.token });
        // and while it is down a checkpoint is spooled (201), the listing says so (200): neither is a 503
        expect((await call(downSrv.url, B, 201, "/v1/backups", { token: t.token, body: "{}" })).status).toBe("spooled");
        expect((await call(downSrv.url, L, 200, "/v1/snapshots", { token: t.token })).warnings.join()).toMatch(/unreachable/);
      } finally {
        await downSrv.stop();
      }
    } finally {
      b.cleanup();
    }
  }, 180_000);

  it("[E11] ... and the document lists no status that no request above produced", () => {
    expect(doc, "the first test did not run").toBeDefined();
    const documented = Object.entries(doc.paths).flatMap(([p, ops]: [string, any]) => Object.entries(ops).flatMap(([m, op]: [string, any]) => Object.keys(op.responses).map((s) => `${m.toUpperCase()} ${p} ${s}`)));
    const unproduced = documented.filter((d) => !seen.has(d) && !(d.endsWith(" 503") && !endpoint));
    expect(unproduced).toEqual([]);
  });
});
