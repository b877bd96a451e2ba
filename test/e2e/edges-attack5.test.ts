// Issue 32, the fifth attack (agent side): cases the earlier attacks did not try, each through the real binary,
// server or S3 gateway: noncharacters from the agent's database in the drill's JUnit file and the terminal (E2),
// a spool flushed into a repository that replaced the one it was made for (E10), statuses the server answers that
// openapi.json did not list (E11). See docs/security-edges.md, "Fifth attack (agent side)".
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { join } from "node:path";
import { api, makeToken, mcpHttp, startServer, tool } from "../agentapi-helpers.js";
import { closedPort, json, backedUpAgent, makeAgent, makeBucket, SNAPS, storeAt, type TestAgent } from "../helpers.js";

const endpoint = process.env.AGENTBAK_TEST_S3_ENDPOINT;

describe("[E2] noncharacters (U+FFFE, U+FFFF, U+FDD0) from the agent's database are escaped like controls", () => {
  let a: TestAgent;
  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E2] a failing invariant's row holding them: the JUnit file stays well-formed XML (xmllint), the terminal and the file show \\uffff", async () => {
    const db = new Database(join(a.dir, "state/agent.sqlite"));
    db.prepare("INSERT INTO agent_state (key, value) VALUES ('note', ?)").run("a\uffffb\ufffec\ufdd0d ]]> <x>");
    db.close();
    expect((await a.run(["backup"])).code).toBe(0);
    const inv = join(a.tmp, "note.sql");
    writeFileSync(inv, "-- check: no note\n-- severity: error\n-- database: state\nSELECT value FROM agent_state WHERE key = 'note';\n");
    const spec = join(a.tmp, "nonchar.json");
    writeFileSync(spec, JSON.stringify({ name: "nonchar", invariants: [inv] }));
    const junit = join(a.tmp, "junit.xml");
    const r = await a.run(["drill", "latest", "--spec", spec, "--identity", a.identity, "--no-report", "--junit", junit]);
    expect(r.code, r.stderr).toBe(15);
    const xml = readFileSync(junit, "utf8");
    expect(xml).toContain("a\\uffffb\\ufffec\\ufdd0d ]]&gt; &lt;x&gt;");
    expect(xml).not.toMatch(/[\ufffe\uffff\ufdd0]/);
    execFileSync("xmllint", ["--noout", junit]); // throws on a file that is not well-formed
    expect(r.stdout + r.stderr).toContain("a\\uffffb\\ufffec\\ufdd0d");
    expect(r.stdout + r.stderr).not.toMatch(/[\ufffe\uffff\ufdd0]/);
  }, 180_000);

  it("[E2] a label holding one is refused (2), as a control character is", async () => {
    const b = await a.run(["backup", "--label", "x\uffffy"]);
    expect(b.code).toBe(2);
    expect(b.stderr.trim()).toMatch(/^agentbak: --label: .*noncharacters$/);
  }, 60_000);
});

describe.skipIf(!endpoint)("[E10] a spool is flushed only into the repository its snapshots were made for", () => {
  let a: TestAgent;
  let repo: string;
  const up = () => ({ AGENTBAK_S3_ENDPOINT: endpoint! });
  const spoolFolder = () => join(a.home, "spool", readdirSync(join(a.home, "spool"))[0]!);
  const spooled = () => {
    const dir = join(spoolFolder(), SNAPS);
    return existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith(".commit")).map((f) => f.slice(0, -".commit".length)) : [];
  };
  const remote = async () => ((await (await storeAt(repo)).list(`${SNAPS}/`)) as string[]).filter((k) => k.endsWith(".commit")).map((k) => k.slice(SNAPS.length + 1, -".commit".length));

  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
    const bucket = `a5-${randomBytes(4).toString("hex")}`;
    await makeBucket(bucket);
    repo = `s3://${bucket}/repo`;
    writeFileSync(a.config, JSON.stringify({ ...JSON.parse(readFileSync(a.config, "utf8")), repository: repo }, null, 2));
    expect((await a.run(["init"], up())).code).toBe(0);
    expect((await a.run(["backup"], up())).code).toBe(0);
  }, 180_000);
  afterAll(() => a?.cleanup());

  it("[E10] the bucket emptied and initialised again while a bundle waited: flush is 10 naming both ids, uploads nothing, keeps the bundle; a backup warns (3)", async () => {
    const s = json(await a.run(["backup", "--json", "--label", "waiting"], { AGENTBAK_S3_ENDPOINT: await closedPort() }));
    expect(s.status).toBe("spooled");
    const oldId = JSON.parse(readFileSync(join(spoolFolder(), "spool.json"), "utf8")).remote_id;
    expect(oldId).toMatch(/^[0-9a-f]{32}$/);
    // the repository replaced at the same location: every object removed, a new one initialised there
    const store = await storeAt(repo);
    for (const k of (await store.list("")) as string[]) await store.delete(k);
    expect((await a.run(["init"], up())).code).toBe(0);
    const f = await a.run(["flush"], up());
    expect(f.code, f.stderr).toBe(10);
    expect(f.stderr).toMatch(new RegExp(`repository ${repo} was replaced: 1 spooled snapshot\\(s\\) in .* were made for repository ${oldId}, and the one there now is [0-9a-f]{32}; they are not uploaded into it`));
    expect(spooled()).toEqual([s.snapshot_id]);
    expect(await remote()).toEqual([]);
    // a backup into the new repository is its own business (committed); what waited for the old one stays, said
    const b = await a.run(["backup", "--json"], up());
    expect(b.code, b.stderr).toBe(3);
    expect(json(b).status).toBe("committed");
    expect(json(b).warnings.join("\n")).toMatch(/not uploaded yet: repository .* was replaced/);
    expect(await remote()).toEqual([json(b).snapshot_id]);
    expect(spooled()).toEqual([s.snapshot_id]);
    // the operator's way to upload them there anyway, as the message says
    const rec = join(spoolFolder(), "spool.json");
    const { remote_id: _, ...rest } = JSON.parse(readFileSync(rec, "utf8"));
    writeFileSync(rec, JSON.stringify(rest));
    const again = await a.run(["flush", "--json"], up());
    expect(again.code, again.stderr).toBe(0);
    expect(json(again)[0].flushed).toEqual([s.snapshot_id]);
    expect(spooled()).toEqual([]);
  }, 240_000);
});

/** One request by node:http (its Host header is ours to set): status and JSON body. */
function raw(url: string, method: string, path: string, headers: Record<string, string>, body?: string): Promise<{ status: number; body: any }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: u.hostname, port: u.port, method, path, headers: { ...(body !== undefined ? { "content-length": String(Buffer.byteLength(body)) } : {}), ...headers } }, (res) => {
      let text = "";
      res.on("data", (d) => (text += d));
      res.on("end", () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
    });
    req.on("error", reject);
    req.end(body);
  });
}

describe("[E11] statuses the server answers that openapi.json did not list", () => {
  let a: TestAgent;
  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E11] POST /v1/backups and /v1/restores with a body that is not JSON (415), GET /healthz from another Origin (403) or Host (421): each answered, each listed with the error body", async () => {
    const t = await makeToken(a, "acme", "billing-agent", "restore-request");
    const srv = await startServer(a);
    try {
      const host = new URL(srv.url).host;
      const doc = (await raw(srv.url, "GET", "/v1/openapi.json", { host })).body;
      const listed = (path: string, method: string, status: number) => doc.paths[path][method].responses[String(status)]?.content?.["application/json"]?.schema;
      for (const [path, type] of [["/v1/backups", "text/plain"], ["/v1/restores", "application/x-www-form-urlencoded"]] as const) {
        const r = await raw(srv.url, "POST", path, { host, authorization: `Bearer ${t.token}`, "content-type": type }, '{"reason":"x"}');
        expect(r.status, JSON.stringify(r.body)).toBe(415);
        expect(r.body).toEqual({ error: { code: 2, message: expect.any(String) } });
        expect(listed(path, "post", 415), `POST ${path} 415`).toEqual({ $ref: "#/components/schemas/Error" });
      }
      const fromElsewhere = await raw(srv.url, "GET", "/healthz", { host, origin: "http://evil.example" });
      expect(fromElsewhere.status).toBe(403);
      expect(fromElsewhere.body.error.code).toBe(14);
      expect(listed("/healthz", "get", 403)).toEqual({ $ref: "#/components/schemas/Error" });
      const rebound = await raw(srv.url, "GET", "/healthz", { host: "evil.example" });
      expect(rebound.status).toBe(421);
      expect(listed("/healthz", "get", 421)).toEqual({ $ref: "#/components/schemas/Error" });
    } finally {
      await srv.stop();
    }
  }, 120_000);
});

describe("[E1] an agent's plan_restore tells nothing of what exists on the server's host", () => {
  let a: TestAgent;
  beforeAll(async () => {
    a = await backedUpAgent();
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E1] its warnings do not check credentials: the same answer whether the server's environment holds OPENAI_API_KEY and whether <target>/secrets/smtp-password is a readable file", async () => {
    const t = await makeToken(a, "acme", "billing-agent", "read");
    const holds = join(a.tmp, "holds");
    mkdirSync(join(holds, "secrets"), { recursive: true });
    writeFileSync(join(holds, "secrets", "smtp-password"), "x");
    const answers: string[] = [];
    for (const env of [{ OPENAI_API_KEY: "sk-test" }, {}]) {
      const srv = await startServer(a, [], env);
      try {
        const c = await mcpHttp(srv.url, t.token);
        for (const target of [holds, join(a.tmp, "empty")]) {
          const p = await tool(c, "plan_restore", { snapshot: "latest", target });
          expect(p.isError, p.text).toBe(false);
          expect(p.data.plan.credentials.map((x: any) => x.status)).toEqual(["unchecked", "unchecked"]);
          expect(p.data.warnings.join("\n")).not.toMatch(/credential/);
          answers.push(JSON.stringify(p.data.warnings));
        }
        await c.close();
      } finally {
        await srv.stop();
      }
    }
    expect(new Set(answers).size).toBe(1);
  }, 120_000);
});

describe("[E1] what an agent reads names no folder of the server's host", () => {
  let a: TestAgent;
  beforeAll(async () => {
    a = await backedUpAgent();
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E1] not-found answers (REST and MCP) say 'the repository's folder', never its path, nor AGENTBAK_HOME's", async () => {
    const t = await makeToken(a, "acme", "billing-agent", "restore-request");
    const srv = await startServer(a);
    try {
      const texts: string[] = [];
      const r1 = await api(srv.url, t.token, "POST", "/v1/restores", { body: { reason: "x", snapshot: "20200101T000000000Z-00000000" } });
      expect(r1.status).toBe(404);
      const r2 = await api(srv.url, t.token, "GET", "/v1/restores/req-20200101T000000000Z-00000000");
      expect(r2.status).toBe(404);
      texts.push(r1.body.error.message, r2.body.error.message);
      const c = await mcpHttp(srv.url, t.token);
      for (const [name, args] of [["verify_snapshot", { snapshot: "20200101T000000000Z-00000000" }], ["plan_restore", { snapshot: "20200101T000000000Z-00000000" }], ["get_restore_request", { request_id: "req-20200101T000000000Z-00000000" }]] as const) {
        const m = await tool(c, name, args);
        expect(m.isError, m.text).toBe(true);
        texts.push(m.text);
      }
      await c.close();
      for (const x of texts) {
        expect(x).toMatch(/not found/);
        expect(x).not.toContain(a.repo);
        expect(x).not.toContain(a.home);
      }
      expect(texts.join("\n")).toContain("the repository's folder");
    } finally {
      await srv.stop();
    }
  }, 120_000);
});
