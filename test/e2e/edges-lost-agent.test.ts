// The fourth attack on issue 32, point 1: a server (and the command line) never reports a lost checkpoint as
// committed. A repository path turned into a file or a symbolic link loop under a running server is "repository
// not found" (10), as a renamed folder is; an agent's own folder moved out of a repository this host backed it up
// into is refused (10) by every listing and backup, never listed as empty nor begun again. Real binary, real serve
// and mcp, folder repositories.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { existsSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { makeAgent, type TestAgent } from "../helpers.js";
import { api, makeToken, mcpStdio, otherTenant, startServer, tool, type Server } from "../agentapi-helpers.js";

describe("[E1] a repository path that is a file or a symbolic link loop is 'repository not found' (10) everywhere", () => {
  let a: TestAgent;
  let srv: Server;
  let cp: { token: string; id: string };

  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
    cp = await makeToken(a, "acme", "billing-agent", "checkpoint");
    srv = await startServer(a);
    const r = await api(srv.url, cp.token, "POST", "/v1/backups", { body: { label: "before" } });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
  }, 120_000);
  afterAll(async () => {
    await srv?.stop();
    a?.cleanup();
  }, 60_000);

  const cases: [string, (repo: string) => void, RegExp][] = [
    ["a regular file", (repo) => writeFileSync(repo, "hi\n"), /it is a file, not a folder/],
    ["a symbolic link to itself (ELOOP)", (repo) => symlinkSync(repo, repo), /a symbolic link that loops/],
  ];
  for (const [what, replace, why] of cases)
    it(`[E1] the repository replaced by ${what} under serve, mcp and the CLI: 404 / exit 10 'repository not found', never 500 or a raw errno`, async () => {
      const moved = `${a.repo}.x`;
      const c = await mcpStdio(a, ["--tier", "checkpoint"]);
      renameSync(a.repo, moved);
      replace(a.repo);
      try {
        for (const [method, path] of [["POST", "/v1/backups"], ["GET", "/v1/snapshots"]] as const) {
          const r = await api(srv.url, cp.token, method, path, method === "POST" ? { body: { label: "lost" } } : {});
          expect(r.status, `${method} ${path}: ${JSON.stringify(r.body)}`).toBe(404);
          expect(r.body.error.code).toBe(10);
          expect(r.body.error.message).toMatch(/^repository not found: /);
          expect(r.body.error.message).toMatch(why);
        }
        expect(srv.log()).not.toMatch(/ENOTDIR|ELOOP/);
        for (const name of ["create_backup", "list_snapshots"]) {
          const m = await tool(c, name, name === "create_backup" ? { label: "lost" } : {});
          expect(m.isError, m.text).toBe(true);
          expect(m.data.error.code, m.text).toBe(10);
          expect(m.text).toMatch(/repository not found/);
          expect(m.text).not.toMatch(/ENOTDIR|ELOOP/);
        }
        for (const args of [["backup"], ["snapshots"]]) {
          const r = await a.run(args);
          expect(r.code, `${args[0]}: ${r.stderr}`).toBe(10);
          expect(r.stderr).toMatch(/repository not found: .*(not a folder|loops)/);
          expect(r.stderr).not.toMatch(/ENOTDIR|ELOOP/);
        }
      } finally {
        await c.close();
        rmSync(a.repo, { force: true });
        renameSync(moved, a.repo);
      }
      // back in place: served again
      expect((await api(srv.url, cp.token, "GET", "/v1/snapshots")).status).toBe(200);
      expect(existsSync(join(a.repo, "agentbak-repository.json"))).toBe(true);
    }, 120_000);
});

describe("[E1] an agent's own folder moved out of a repository this host backed it up into: refused (10) everywhere, nothing re-created", () => {
  let a: TestAgent;
  let srv: Server;
  let cp: { token: string; id: string };
  let seq: number;
  const agentDir = () => join(a.repo, "tenants/acme/agents/billing-agent");

  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
    cp = await makeToken(a, "acme", "billing-agent", "checkpoint");
    srv = await startServer(a);
    for (const label of ["one", "two"]) {
      const r = await api(srv.url, cp.token, "POST", "/v1/backups", { body: { label } });
      expect(r.status, JSON.stringify(r.body)).toBe(201);
      seq = r.body.sequence;
    }
  }, 120_000);
  afterAll(async () => {
    await srv?.stop();
    a?.cleanup();
  }, 60_000);

  it("[E1] serve, mcp, snapshots, backup, status, verify and restore all answer 10 naming the sequence this host committed; no folder is re-created; another agent's first backup still works; put back, it is served again", async () => {
    expect(seq).toBeGreaterThan(1);
    const gone = new RegExp(`^the snapshots of acme/billing-agent are gone from repository .*: this host committed sequence ${seq} there`);
    const c = await mcpStdio(a, ["--tier", "checkpoint"]);
    const elsewhere = join(a.tmp, "elsewhere");
    renameSync(agentDir(), elsewhere);
    try {
      for (const [method, path] of [["GET", "/v1/snapshots"], ["POST", "/v1/backups"]] as const) {
        const r = await api(srv.url, cp.token, method, path, method === "POST" ? { body: { label: "lost" } } : {});
        expect(r.status, `${method} ${path}: ${JSON.stringify(r.body)}`).toBe(404);
        expect(r.body.error.code).toBe(10);
        expect(r.body.error.message).toMatch(gone);
        // the agent is told what to do, never where this host keeps its trusted state
        expect(r.body.error.message).toMatch(/from committed_in in AGENTBAK_HOME\/state\/acme\/billing-agent\.json$/);
        expect(r.body.error.message).not.toContain(a.home);
      }
      for (const name of ["list_snapshots", "create_backup"]) {
        const m = await tool(c, name, name === "create_backup" ? { label: "lost" } : {});
        expect(m.isError, `${name}: ${m.text}`).toBe(true);
        expect(m.data.error.code, m.text).toBe(10);
        expect(m.data.error.message).toMatch(gone);
      }
      for (const args of [["snapshots"], ["backup"], ["status"], ["verify", "latest"], ["restore", "latest", "--target", join(a.tmp, "restored")]]) {
        const r = await a.run(args);
        expect(r.code, `${args[0]}: ${r.stdout}${r.stderr}`).toBe(10);
        expect(r.stderr).toMatch(/the snapshots of acme\/billing-agent are gone from repository/);
      }
      expect(existsSync(agentDir()), "the agent's folder was re-created").toBe(false);
      expect(existsSync(join(a.tmp, "restored"))).toBe(false);
      // an agent this host never committed into this repository is not affected: its first backup commits
      const other = otherTenant(a, "globex");
      const first = await a.run(["backup", "-c", other.config]);
      expect(first.code, first.stderr).toBe(0);
      expect(existsSync(join(a.repo, "tenants/globex/agents/billing-agent/sequence.json"))).toBe(true);
      expect(existsSync(agentDir())).toBe(false);
    } finally {
      await c.close();
      renameSync(elsewhere, agentDir());
    }
    const l = await api(srv.url, cp.token, "GET", "/v1/snapshots");
    expect(l.status, JSON.stringify(l.body)).toBe(200);
    expect(l.body.snapshots.map((s: any) => s.label)).toEqual(["one", "two"]);
    const b = await api(srv.url, cp.token, "POST", "/v1/backups", { body: { label: "three" } });
    expect(b.status, JSON.stringify(b.body)).toBe(201);
    expect(b.body.sequence).toBe(seq + 1);
    // the trusted state names the repository by its id, with the sequence committed there
    const id = JSON.parse(readFileSync(join(a.repo, "agentbak-repository.json"), "utf8")).id;
    expect(JSON.parse(readFileSync(join(a.home, "state", "acme", "billing-agent.json"), "utf8")).committed_in).toEqual({ [id]: seq + 1 });
  }, 180_000);
});

describe("[E1] what a host may do on purpose is not refused: forget, copy to a new repository, a repository deleted and initialised again", () => {
  let a: TestAgent;
  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E1] forget keeps the sequence record (listing and backup go on); a copy's new repository and a re-initialised one take the next backup, above this host's sequence", async () => {
    for (let i = 0; i < 2; i++) expect((await a.run(["backup", "--label", `b${i}`])).code).toBe(0);
    const f = await a.run(["forget", "--keep-last", "1"]);
    expect(f.code, f.stderr).toBe(0);
    expect((await a.run(["snapshots"])).code).toBe(0);
    const third = await a.run(["backup", "--json"]);
    expect(third.code, third.stderr).toBe(0);
    expect(JSON.parse(third.stdout).sequence).toBe(3);
    // copy into a new repository, then back up there: that repository's id was never committed into by this host
    const copy = join(a.tmp, "copy");
    const c = await a.run(["copy", "--from", a.repo, "--to", copy]);
    expect(c.code, c.stderr).toBe(0);
    const there = await a.run(["backup", "--repo", copy, "--json"]);
    expect(there.code, there.stderr).toBe(0);
    expect(JSON.parse(there.stdout).sequence).toBe(4);
    // the repository deleted and initialised again at the same path: another id, the agent begins there
    rmSync(a.repo, { recursive: true });
    expect((await a.run(["init"])).code).toBe(0);
    const fresh = await a.run(["backup", "--json"]);
    expect(fresh.code, fresh.stderr).toBe(0);
    expect(JSON.parse(fresh.stdout).sequence).toBe(5);
  }, 180_000);
});
