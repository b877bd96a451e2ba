// Issue 32, trust at the edges: who is the authority. Fencing generations are the agent's, not one
// repository's (E5); an approval is one decision, and requests and decisions in the repository are
// signed (E6); the audit log verifies, and an edited, reordered, cut or forged entry is named (E7).
// Everything through the real binary, with real repositories, a second host's AGENTBAK_HOME and an
// MCP server for the agent's requests.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import { createHash } from "node:crypto";
import { cpSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { json, backedUpAgent, makeAgent, makeBucket, ROOT, run, storeAt, type TestAgent, secondHome } from "../helpers.js";
import { mcpStdio, tool } from "../agentapi-helpers.js";
import { nextLine } from "../../dist/crypto/chainlog.js";
import { generateSigningKey } from "../../dist/crypto/sshsig.js";

const AGENT_DIR = "tenants/acme/agents/billing-agent";

describe("[E5] fencing generations belong to the agent", () => {
  let a: TestAgent;
  let b: string;
  let host2: Record<string, string>;
  const t = (n: string) => join(a.tmp, n);
  const restore = async (target: string, env: Record<string, string> = {}, repo?: string) => {
    const r = await a.run(["restore", "latest", "--target", target, "--yes", "--json", ...(repo ? ["--repo", repo] : [])], env);
    expect([0, 3], r.stderr).toContain(r.code); // 3: a credential reference is absent on this host
    return json(r);
  };
  const fence = (target: string, generation: number, env: Record<string, string> = {}) => a.run(["fence", "check", "--target", target, "--generation", String(generation)], env);

  beforeAll(async () => {
    a = await backedUpAgent();
    b = t("repo-b");
    host2 = secondHome(a, "home-2");
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E5] after copy, restores from each repository get increasing generations, and fence check of the older one fails across repositories", async () => {
    expect((await restore(t("t1"))).generation).toBe(1);
    const c = await a.run(["copy", "--from", a.repo, "--to", b, "--json"]);
    expect(c.code, c.stderr).toBe(0);
    // another host, restoring from the copy: nothing of the first host's trusted state helps it
    expect((await restore(t("t2"), host2, b)).generation).toBe(2);
    const old = await fence(t("t1"), 1);
    expect(old.code).toBe(14);
    expect(old.stderr).toMatch(/generation 1 of billing-agent is superseded \(current generation is 2\)/);
    expect((await fence(t("t2"), 2, host2)).code).toBe(0);
    // and back: a restore from the original continues above the copy's, and the copy's restore is fenced
    expect((await restore(t("t3"))).generation).toBe(3);
    const second = await fence(t("t2"), 2, host2);
    expect(second.code).toBe(14);
    expect(second.stderr).toMatch(/generation 2 of billing-agent is superseded \(current generation is 3\)/);
    expect((await fence(t("t3"), 3, host2)).code).toBe(0);
  });

  it("[E5] a linked repository that can not be reached: restore continues above what it sees and names it (3); fence check names it (3)", async () => {
    renameSync(b, `${b}.away`);
    try {
      const r = await a.run(["restore", "latest", "--target", t("t4"), "--yes", "--json"], host2);
      expect(r.code, r.stderr).toBe(3);
      const out = json(r);
      expect(out.generation).toBe(4); // above the original's 3, though the copy (and this host) are unknown
      expect(out.warnings.join("\n")).toContain(`generation: ${b}, a repository linked with this one by copy, could not be read`);
      const f = await fence(t("t4"), 4, host2);
      expect(f.code).toBe(3);
      expect(f.stderr).toContain(`${b}, a repository linked with this one by copy, could not be read`);
    } finally {
      renameSync(`${b}.away`, b);
    }
    // back again: the copy's restore learns of 4 through the original, and continues above it
    expect((await fence(t("t3"), 3, host2)).code).toBe(14);
    expect((await restore(t("t5"), host2, b)).generation).toBe(5);
    expect((await fence(t("t4"), 4)).code).toBe(14);
  });

  it("[E5] a generation record that is not a count is refused (13) naming it; nothing is restored", async () => {
    const rec = join(a.repo, AGENT_DIR, "generation.json");
    const good = readFileSync(rec, "utf8");
    writeFileSync(rec, JSON.stringify({ generation: "9" }));
    try {
      const r = await a.run(["restore", "latest", "--target", t("t6"), "--yes"]);
      expect(r.code).toBe(13);
      expect(r.stderr).toMatch(/generation record tenants\/acme\/agents\/billing-agent\/generation\.json in .* holds generation "9", not a count/);
      expect(existsSync(t("t6"))).toBe(false);
      expect((await fence(t("t3"), 3)).code).toBe(13); // restored from this repository
      // read through a link, the damaged record is named, not trusted (3)
      const linked = await fence(t("t5"), 5);
      expect(linked.code).toBe(3);
      expect(linked.stderr).toMatch(/could not be read \(generation record .* holds generation "9", not a count/);
    } finally {
      writeFileSync(rec, good);
    }
  });

  it.runIf(Boolean(process.env.AGENTBAK_TEST_S3_ENDPOINT))("[E5] across a folder and a bucket: a restore from an S3 copy continues above both folders' and fences them", async () => {
    const bucket = `t-${Date.now().toString(36)}-gen`;
    await makeBucket(bucket);
    const s3 = `s3://${bucket}/copy`;
    const env = { ...host2, AGENTBAK_S3_ENDPOINT: process.env.AGENTBAK_TEST_S3_ENDPOINT! };
    const c = await a.run(["copy", "--from", a.repo, "--to", s3], env);
    expect(c.code, c.stderr).toBe(0);
    expect((await restore(t("t7"), { ...env, ...secondHome(a, "home-3") }, s3)).generation).toBe(6);
    // the folder the copy came from, and the one copied from it before, both hear of 6
    expect((await fence(t("t5"), 5, env)).code).toBe(14);
    expect((await fence(t("t3"), 3)).code).toBe(14);
  });
});

describe("[E5] the generation log: a generation is not lowered from the repository", () => {
  let a: TestAgent;
  let b: string;
  const t = (n: string) => join(a.tmp, n);
  const log = (repo: string, g: number) => join(repo, AGENT_DIR, "generations", `${String(g).padStart(16, "0")}.json`);
  const record = (repo: string) => join(repo, AGENT_DIR, "generation.json");
  /** the record rolled back to `g`, as a writer of the repository can */
  const rollBack = (repo: string, g: number) => writeFileSync(record(repo), JSON.stringify({ ...JSON.parse(readFileSync(record(repo), "utf8")), generation: g }));
  let fresh = 0;
  /** a host that never saw any generation of this agent: keys and signers, no trusted state */
  const freshHost = () => secondHome(a, `fresh-${fresh++}`);
  const restore = async (target: string, repo?: string, env: Record<string, string> = {}) => {
    const r = await a.run(["restore", "latest", "--target", target, "--yes", "--json", ...(repo ? ["--repo", repo] : [])], { ...freshHost(), ...env });
    expect([0, 3], r.stderr).toContain(r.code);
    return json(r).generation as number;
  };
  const fence = (target: string, generation: number, env: Record<string, string> = {}) => a.run(["fence", "check", "--target", target, "--generation", String(generation)], { ...freshHost(), ...env });

  beforeAll(async () => {
    a = await backedUpAgent();
    b = t("repo-b");
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E5] generation.json edited down (2 to 1) is not believed: fence check of generation 1 on a host that never saw 2 exits 14", async () => {
    expect(await restore(t("g1"))).toBe(1);
    expect(await restore(t("g2"))).toBe(2);
    rollBack(a.repo, 1);
    const f = await fence(t("g1"), 1);
    expect(f.code, f.stderr).toBe(14);
    expect(f.stderr).toMatch(/generation 1 of billing-agent is superseded \(current generation is 2\)/);
    expect((await fence(t("g2"), 2)).code).toBe(0);
    // and a restore goes on above the log, not the record
    expect(await restore(t("g3"))).toBe(3);
  });

  it("[E5] an edited log entry is 13 naming it, for fence check and restore; nothing is restored", async () => {
    const entry = log(a.repo, 2);
    const good = readFileSync(entry);
    try {
      writeFileSync(entry, good.toString().replace(/"target": "[^"]*"/, `"target": "${t("elsewhere")}"`));
      for (const r of [await fence(t("g3"), 3), await a.run(["restore", "latest", "--target", t("g-edited"), "--yes"], freshHost())]) {
        expect(r.code, r.stderr).toBe(13);
        expect(r.stderr).toMatch(/generation log entry tenants\/acme\/agents\/billing-agent\/generations\/0000000000000002\.json in .*: edited after it was signed/);
      }
      expect(existsSync(t("g-edited"))).toBe(false);
      // status reads the generation the same way, and names the entry (3)
      const st = await a.run(["status", "--json"], freshHost());
      expect(st.code).toBe(3);
      expect(json(st).agents[0].checks.find((c: { name: string }) => c.name === "generation").detail).toMatch(/^generation log entry .*0000000000000002\.json in .*: edited after it was signed/);
      // written out again unchanged but for its layout: its signature holds, and entry 3's prev names it
      writeFileSync(entry, JSON.stringify(JSON.parse(good.toString())));
      const f = await fence(t("g3"), 3);
      expect(f.code).toBe(13);
      expect(f.stderr).toMatch(/entry .*0000000000000002\.json in .* was changed after entry 3 was written/);
    } finally {
      writeFileSync(entry, good);
    }
    expect((await fence(t("g3"), 3)).code).toBe(0);
    expect(json(await a.run(["status", "--json"], freshHost())).agents[0].checks.map((c: { name: string }) => c.name)).not.toContain("generation");
  });

  it("[E5] a middle entry removed is 13 naming it", async () => {
    const entry = log(a.repo, 2);
    const good = readFileSync(entry);
    rmSync(entry);
    try {
      const f = await fence(t("g3"), 3);
      expect(f.code).toBe(13);
      expect(f.stderr).toMatch(/entry .*0000000000000002\.json in .* is missing: entry 3 was written after it/);
    } finally {
      writeFileSync(entry, good);
    }
  });

  it("[E5] after copy, a restore from the copy continues above both, and a record rolled back on either side lowers nothing", async () => {
    const c = await a.run(["copy", "--from", a.repo, "--to", b]);
    expect(c.code, c.stderr).toBe(0);
    for (const g of [1, 2, 3]) expect(readFileSync(log(b, g))).toEqual(readFileSync(log(a.repo, g)));
    expect(await restore(t("g4"), b)).toBe(4);
    for (const repo of [a.repo, b]) rollBack(repo, 1);
    for (const [target, g] of [["g3", 3], ["g2", 2], ["g1", 1]] as const) {
      const f = await fence(t(target), g);
      expect(f.code, f.stderr).toBe(14);
      expect(f.stderr).toContain("(current generation is 4)");
    }
    expect((await fence(t("g4"), 4)).code).toBe(0);
    expect(await restore(t("g5"))).toBe(5);
    expect(await restore(t("g6"), b)).toBe(6);
  });
  const endpoint = process.env.AGENTBAK_TEST_S3_ENDPOINT;
  it.runIf(Boolean(endpoint))("[E5] in a bucket: the record edited down is not believed (14), a middle entry removed is 13", async () => {
    const env = { AGENTBAK_S3_ENDPOINT: endpoint! };
    const s3 = `s3://t-${Date.now().toString(36)}-genlog/r`;
    await makeBucket(s3.slice(5, -2));
    expect((await a.run(["copy", "--from", a.repo, "--to", s3], env)).code).toBe(0);
    const g = await restore(t("s3-1"), s3, env);
    expect(g).toBe(7); // above the folders' 6
    const store = await storeAt(s3);
    const rec = `${AGENT_DIR}/generation.json`;
    // lowered and unlinked: only the bucket's own log is left to say 7
    await store.put(rec, JSON.stringify({ generation: 1, replicas: [] }));
    const f = await fence(t("s3-1"), 6, env);
    expect(f.code, f.stderr).toBe(14);
    expect(f.stderr).toContain("(current generation is 7)");
    expect((await fence(t("s3-1"), 7, env)).code).toBe(0);
    const middle = `${AGENT_DIR}/generations/${String(3).padStart(16, "0")}.json`;
    const good = await store.get(middle);
    await store.delete(middle);
    try {
      const r = await a.run(["restore", "latest", "--repo", s3, "--target", t("s3-2"), "--yes"], { ...freshHost(), ...env });
      expect(r.code).toBe(13);
      expect(r.stderr).toMatch(/generation log entry .*0000000000000003\.json in s3:\/\/.* is missing: entry 4 was written after it/);
    } finally {
      await store.put(middle, good);
    }
  });

  it.runIf(Boolean(endpoint))("[E5] on an Object Lock bucket with a default retention, the store refuses to delete an entry; one hidden by a delete marker still counts, and is named", async () => {
    const env = { AGENTBAK_S3_ENDPOINT: endpoint! };
    const id = Date.now().toString(36);
    const [locked, leases] = [`t-${id}-genlock`, `t-${id}-genleases`];
    await makeBucket(locked, true);
    await makeBucket(leases);
    const { S3Client, PutObjectLockConfigurationCommand } = await import("@aws-sdk/client-s3");
    const c = new S3Client({ endpoint, region: "us-east-1", forcePathStyle: true });
    await c.send(new PutObjectLockConfigurationCommand({ Bucket: locked, ObjectLockConfiguration: { ObjectLockEnabled: "Enabled", Rule: { DefaultRetention: { Mode: "GOVERNANCE", Days: 1 } } } }));
    const repo = `s3://${locked}/r`;
    expect((await a.run(["init", "--repo", repo, "--leases", `s3://${leases}/l`], env)).code).toBe(0);
    expect((await a.run(["copy", "--from", a.repo, "--to", repo], env)).code).toBe(0);
    const g = await restore(t("lock-1"), repo, env);
    expect(g).toBe(8);
    const store = await storeAt(repo);
    const newest = `${AGENT_DIR}/generations/${String(g).padStart(16, "0")}.json`;
    expect(await store.delete(newest)).toBe(false); // retention refused it
    expect(await store.get(newest)).not.toBeNull();
    await store.put(`${AGENT_DIR}/generation.json`, JSON.stringify({ generation: 1, replicas: [] }));
    const f = await fence(t("lock-1"), g - 1, env);
    expect(f.code, f.stderr).toBe(14);
    expect((await fence(t("lock-1"), g, env)).code).toBe(0);
    // deleted without a version id: a delete marker hides it, the retained version still counts, and is named
    const { DeleteObjectCommand } = await import("@aws-sdk/client-s3");
    await c.send(new DeleteObjectCommand({ Bucket: locked, Key: `r/${newest}` }));
    expect(await store.get(newest)).toBeNull();
    expect((await fence(t("lock-1"), g - 1, env)).code).toBe(14);
    const named = await fence(t("lock-1"), g, env);
    expect(named.code, named.stderr).toBe(3);
    expect(named.stderr).toContain(`generation: ${newest} in ${repo} was deleted without its version id (a delete marker hides it); the version the bucket keeps is counted`);
  });
});

describe("[E6] an approval is one decision; requests and decisions are signed", () => {
  let a: TestAgent;
  let agent: Client;
  let s1: any;
  let s2: any;
  const t = (n: string) => join(a.tmp, n);
  const file = (id: string, part = "") => join(a.repo, AGENT_DIR, "requests", `${id}${part}.json`);
  const edit = (path: string, patch: (r: any) => void) => {
    const r = JSON.parse(readFileSync(path, "utf8"));
    patch(r);
    writeFileSync(path, JSON.stringify(r, null, 2) + "\n");
  };
  const ask = async (snapshot: string, target?: string) => {
    const r = await tool(agent, "request_restore", { snapshot, reason: "memory table corrupted", ...(target ? { target } : {}) });
    if (r.isError) throw new Error(r.text);
    return r.data.request_id as string;
  };
  /** exit 13, naming the record's file, and nothing restored anywhere named */
  const refused = (r: { code: number; stderr: string }, path: string, ...targets: string[]) => {
    expect(r.code, r.stderr).toBe(13);
    expect(r.stderr).toContain(path.slice(a.repo.length + 1));
    for (const x of targets) expect(existsSync(x), x).toBe(false);
  };

  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
    s1 = json(await a.run(["backup", "--json"]));
    s2 = json(await a.run(["backup", "--json"]));
    agent = await mcpStdio(a, ["--tier", "restore-request"]);
  }, 120_000);
  afterAll(async () => {
    await agent?.close();
    a?.cleanup();
  }, 60_000);

  it("[E6] a restore that failed after its approval leaves nothing reusable: another target needs a new prompt or --yes", async () => {
    const busy = t("busy");
    mkdirSync(busy);
    writeFileSync(join(busy, "notes.txt"), "not empty\n");
    const id = await ask(s2.snapshot_id, busy);
    const first = await a.run(["approve", id, "--yes"]);
    expect(first.code).toBe(2);
    expect(first.stderr).toMatch(/is not empty/);
    expect((await tool(agent, "get_restore_request", { request_id: id })).data).toMatchObject({ status: "failed", decision: { decision: "approved" } });
    // the approval was spent by the attempt it was given for
    const again = await a.run(["approve", id, "--target", t("elsewhere")]);
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/no TTY: pass --yes/);
    expect(existsSync(t("elsewhere"))).toBe(false);
    expect((await tool(agent, "get_restore_request", { request_id: id })).data.outcome).toMatchObject({ status: "failed", target: busy });
    const yes = await a.run(["approve", id, "--target", t("elsewhere"), "--yes", "--json"]);
    expect([0, 3], yes.stderr).toContain(yes.code);
    // the decision that stands is the first approval, for the target it named; the outcome is this attempt's
    expect(json(yes).request).toMatchObject({ status: "restored", decision: { target: busy }, outcome: { status: "restored", target: t("elsewhere") } });
  });

  it("[E6] an agent can not propose a relative target (it would land wherever the operator runs approve); an operator's relative --target is signed as the folder it names", async () => {
    for (const target of ["../../restored-here", "restored", "./x"]) {
      const r = await tool(agent, "request_restore", { snapshot: s2.snapshot_id, reason: "relative", target });
      expect(r.isError, target).toBe(true);
      expect(r.text).toMatch(/an absolute path \(a relative one would be resolved in the operator.s working folder\) at target/);
      const p = await tool(agent, "plan_restore", { snapshot: s2.snapshot_id, target });
      expect(p.isError, target).toBe(true);
    }
    expect(json(await a.run(["requests", "--all", "--json"])).filter((r: any) => r.reason === "relative")).toEqual([]);
    // the operator's own --target, relative to where approve runs: the decision and outcome name the absolute folder
    const id = await ask(s2.snapshot_id);
    const cwd = t("ops");
    mkdirSync(cwd);
    const r = await run(["approve", id, "--target", "../rel-target", "--yes", "--json", "-c", a.config], { cwd, env: a.env });
    expect([0, 3], r.stderr).toContain(r.code);
    expect(json(r).request).toMatchObject({ decision: { target: t("rel-target") }, outcome: { status: "restored", target: t("rel-target") } });
    expect(JSON.parse(readFileSync(file(id, ".decision"), "utf8")).target).toBe(t("rel-target"));
  });

  it("[E6] a request whose target was edited in the repository is refused (13) naming its file, by approve, requests and the agent interface", async () => {
    const id = await ask(s2.snapshot_id, t("proposed"));
    edit(file(id), (r) => (r.target = t("attacker")));
    refused(await a.run(["approve", id, "--yes"]), file(id), t("proposed"), t("attacker"));
    refused(await a.run(["requests"]), file(id));
    const seen = await tool(agent, "get_restore_request", { request_id: id });
    expect(seen.isError).toBe(true);
    expect(seen.text).toContain(`requests/${id}.json`);
  });

  it("[E6] a swapped snapshot is refused (13): a request edited to name another snapshot, or another request's record moved in", async () => {
    const id = await ask(s2.snapshot_id, t("swap-1"));
    edit(file(id), (r) => Object.assign(r, { snapshot_id: s1.snapshot_id, sequence: s1.sequence }));
    refused(await a.run(["approve", id, "--yes", "--allow-rollback"]), file(id), t("swap-1"));
    const other = await ask(s1.snapshot_id, t("swap-2"));
    const id2 = await ask(s2.snapshot_id, t("swap-3"));
    writeFileSync(file(id2), readFileSync(file(other))); // signed, but for another request
    const r = await a.run(["approve", id2, "--yes", "--allow-rollback"]);
    refused(r, file(id2), t("swap-2"), t("swap-3"));
    expect(r.stderr).toMatch(/its request_id is .*, not req-/);
  });

  it("[E6] a forged approval, a denial edited to \"approved\" and an outcome edited to \"restored\" are refused (13) naming their files", async () => {
    const forged = await ask(s2.snapshot_id, t("forged"));
    writeFileSync(file(forged, ".decision"), JSON.stringify({ decision: "approved", by: "ops@bastion", at: new Date().toISOString(), reason: null }));
    refused(await a.run(["approve", forged, "--yes"]), file(forged, ".decision"), t("forged"));
    const denied = await ask(s2.snapshot_id, t("denied"));
    expect((await a.run(["deny", denied, "--reason", "use last night's", "--yes"])).code).toBe(0);
    edit(file(denied, ".decision"), (d) => (d.decision = "approved"));
    refused(await a.run(["approve", denied, "--yes"]), file(denied, ".decision"), t("denied"));
    // a failed attempt's outcome, edited to tell the agent and the operator it was restored
    const failed = await ask(s2.snapshot_id, join(a.dir, "state")); // not empty: fails
    expect((await a.run(["approve", failed, "--yes"])).code).toBe(2);
    edit(file(failed, ".outcome"), (o) => Object.assign(o, { status: "restored", generation: 9, error: null }));
    const seen = await tool(agent, "get_restore_request", { request_id: failed });
    expect(seen.isError).toBe(true);
    expect(seen.text).toContain(`requests/${failed}.outcome.json`);
    refused(await a.run(["approve", failed, "--target", t("failed-2"), "--yes"]), file(failed, ".outcome"), t("failed-2"));
  });

  it("[E6] the record that answers a repeated --request-id is signed: one forged or moved in is refused (13), never answered as \"already restored\"", async () => {
    const record = (id: string) => join(a.repo, AGENT_DIR, "idempotency", `restore-${createHash("sha256").update(id).digest("hex")}.json`);
    const first = await a.run(["restore", "latest", "--target", t("req-1"), "--yes", "--json", "--request-id", "INC-1"]);
    expect([0, 3], first.stderr).toContain(first.code);
    cpSync(record("INC-1"), record("INC-2")); // genuine, but INC-1's
    const moved = await a.run(["restore", "latest", "--target", t("req-2"), "--yes", "--request-id", "INC-2"]);
    expect(moved.code, moved.stderr).toBe(13);
    expect(moved.stderr).toMatch(/restore record .* \(request id INC-2\) .*: recorded for another request id or agent \(moved in\)/);
    writeFileSync(record("INC-3"), JSON.stringify({ ...JSON.parse(readFileSync(record("INC-1"), "utf8")).result, signature: undefined }));
    const forged = await a.run(["restore", "latest", "--target", t("req-3"), "--yes", "--request-id", "INC-3"]);
    expect(forged.code, forged.stderr).toBe(13);
    expect(forged.stderr).toMatch(/\(request id INC-3\).*: unsigned, so not accepted as genuine/);
    for (const x of ["req-2", "req-3"]) expect(existsSync(t(x))).toBe(false);
    const keyless = await a.run(["restore", "latest", "--target", t("req-4"), "--yes", "--request-id", "INC-4"], { AGENTBAK_SIGNING_KEY_FILE: t("no-such-key") });
    expect(keyless.code).toBe(12);
    expect(keyless.stderr).toMatch(/--request-id needs a signing key/);
  });

  it("[E6] a backup idempotency record edited to name another snapshot is refused (13), not answered with that snapshot", async () => {
    const k = json(await a.run(["backup", "--json", "--idempotency-key", "nightly-42"]));
    const other = json(await a.run(["backup", "--json"]));
    const rec = join(a.repo, AGENT_DIR, "idempotency", `backup-${createHash("sha256").update("nightly-42").digest("hex")}.json`);
    edit(rec, (r) => Object.assign(r, { snapshot_id: other.snapshot_id, sequence: other.sequence }));
    const r = await a.run(["backup", "--json", "--idempotency-key", "nightly-42"]);
    expect(r.code, r.stdout).toBe(13);
    expect(r.stderr).toMatch(new RegExp(`idempotency record .*backup-[0-9a-f]{64}\\.json in .* names snapshot ${other.snapshot_id}, whose signed manifest carries another idempotency key`));
    expect(k.snapshot_id).not.toBe(other.snapshot_id);
  });
});

describe("[E7] the audit log can be verified", () => {
  let a: TestAgent;
  let log: string;
  let head: string;
  const verify = (env: Record<string, string> = {}, ...args: string[]) => a.run(["audit", "verify", "--json", ...args], env);
  const lines = () => readFileSync(log, "utf8").split("\n").slice(0, -1);
  /** Runs `fn` on a damaged log (and head), then puts the genuine ones back. */
  const damaged = async (damage: (lines: string[]) => string[], fn: () => Promise<void>) => {
    const [l, h] = [readFileSync(log), readFileSync(head)];
    writeFileSync(log, damage(lines()).map((x) => x + "\n").join(""));
    try {
      await fn();
    } finally {
      writeFileSync(log, l);
      writeFileSync(head, h);
    }
  };
  const named = (r: { code: number; stderr: string }, why: RegExp, dir = AGENT_DIR) => {
    expect(r.code, r.stderr).toBe(13);
    expect(r.stderr).toContain(`${dir}/audit.`);
    expect(r.stderr).toMatch(why);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
  };

  beforeAll(async () => {
    a = await backedUpAgent();
    expect([0, 3]).toContain((await a.run(["restore", "latest", "--target", join(a.tmp, "t1"), "--yes"])).code);
    log = join(a.repo, AGENT_DIR, "audit.jsonl");
    head = join(a.repo, AGENT_DIR, "audit.head.json");
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E7] an untouched audit log verifies (0), up to its signed head", async () => {
    const r = await verify();
    expect(r.code, r.stderr).toBe(0);
    const out = json(r);
    expect(out).toMatchObject({ ok: true, entries: lines().length, head: { entries: lines().length }, warnings: [] });
    expect(lines().length).toBeGreaterThanOrEqual(2);
  });

  it("[E7] an edited entry and reordered entries are named (13)", async () => {
    await damaged(
      (l) => l.map((x, i) => (i === 1 ? x.replace(/"user":"[^"]*"/, '"user":"someone-else"') : x)),
      async () => named(await verify(), /audit\.jsonl in .*: entry 1 \(line 2\): .*edited/),
    );
    await damaged(
      (l) => [l[1]!, l[0]!, ...l.slice(2)],
      async () => named(await verify(), /entry 0 \(line 1\): index is 1, expected 0/),
    );
  });

  it("[E7] the log replaced by a FIFO, or by a link to /dev/zero, is damage named (13) at once, not a usage error (2) or a hang", async () => {
    const saved = readFileSync(log);
    try {
      for (const plant of [["mkfifo", log], ["ln", "-s", "/dev/zero", log]]) {
        rmSync(log, { force: true });
        await execa(plant[0]!, plant.slice(1));
        const r = await verify();
        expect(r.code, r.stderr).toBe(13);
        expect(r.stderr).toMatch(/object tenants\/acme\/agents\/billing-agent\/audit\.jsonl in .* is damaged: it is (a FIFO|a device)/);
      }
    } finally {
      rmSync(log, { force: true });
      writeFileSync(log, saved);
    }
    expect((await verify()).code).toBe(0);
  });

  it("[E7] entries cut off the end are found by the signed head record (13)", async () => {
    const n = lines().length;
    await damaged(
      (l) => l.slice(0, -1),
      async () => named(await verify({ AGENTBAK_HOME: secondHome(a, "home-cut").AGENTBAK_HOME }), new RegExp(`cut short or replaced: its signed head record .* names ${n} entries .* holds only ${n - 1}`)),
    );
  });

  it("[E7] a log whose head record is gone verifies only with a warning that a cut is not detectable from the repository (3)", async () => {
    const h = readFileSync(head);
    rmSync(head);
    try {
      const r = await verify(secondHome(a, "home-nohead"));
      expect(r.code, r.stderr).toBe(3);
      expect(r.stderr).toMatch(/audit\.head\.json is missing .*: entries cut off the end of the log can not be detected from the repository alone/);
    } finally {
      writeFileSync(head, h);
    }
  });

  it("[E7] a cut together with an older genuine head: found by a host that verified further (13), not from the repository alone (0 on a host that never did)", async () => {
    const [oldLog, oldHead] = [readFileSync(log), readFileSync(head)];
    expect((await a.run(["backup"])).code).toBe(0);
    expect((await verify()).code).toBe(0); // this host now saw the log reach further
    await damaged(
      () => oldLog.toString().split("\n").slice(0, -1),
      async () => {
        writeFileSync(head, oldHead);
        named(await verify(), /cut short or replaced: this host's trusted state .* names \d+ entries/);
        const fresh = await verify(secondHome(a, "home-fresh"));
        expect(fresh.code, fresh.stderr).toBe(0);
      },
    );
  });

  it("[E7] forged entries are named (13): signed by a key not in allowed_signers, or unsigned", async () => {
    const text = () => readFileSync(log, "utf8");
    const body = { at: new Date().toISOString(), tenant: "acme", agent_id: "billing-agent", event: "restore-approved", by: "ops@bastion" };
    const n = lines().length;
    await damaged(
      (l) => [...l, nextLine(text(), body, generateSigningKey("mallory"), "agentbak-receipt").line.trimEnd()],
      async () => named(await verify(), new RegExp(`entry ${n} \\(line ${n + 1}\\): signer key SHA256:\\S+ is not in allowed_signers`)),
    );
    await damaged(
      (l) => [...l, nextLine(text(), body, null, "agentbak-receipt").line.trimEnd()],
      async () => named(await verify(), new RegExp(`entry ${n} \\(line ${n + 1}\\): unsigned .* not accepted as genuine`)),
    );
  });

  it("[E7] another agent's log moved in is named (13)", async () => {
    const other = join(a.repo, "tenants/globex/agents/billing-agent");
    mkdirSync(other, { recursive: true });
    cpSync(log, join(other, "audit.jsonl"));
    cpSync(head, join(other, "audit.head.json"));
    named(await verify({}, "--tenant", "globex"), /entry 0 \(line 1\): its tenant is "acme", not globex/, "tenants/globex/agents/billing-agent");
  });

  it("[E7] the drill report in the repository: a cut-off tail (the last drills) is found by its signed head (13)", async () => {
    const drill = () => a.run(["drill", "latest", "--spec", join(ROOT, "drills/checks-only.json"), "--identity", a.identity]);
    for (let i = 0; i < 2; i++) expect([0, 3]).toContain((await drill()).code);
    const report = join(a.repo, AGENT_DIR, "drills/report.jsonl");
    expect((await a.run(["report", "verify"])).code).toBe(0);
    const whole = readFileSync(report, "utf8");
    writeFileSync(report, whole.split("\n").slice(0, 1).join("\n") + "\n");
    try {
      const r = await a.run(["report", "verify"]);
      expect(r.code, r.stderr).toBe(13);
      expect(r.stderr).toMatch(/drills\/report\.jsonl in .* was cut short or replaced: its signed head record .*report\.head\.json .* names 2 entries .* holds only 1/);
    } finally {
      writeFileSync(report, whole);
    }
  });

  it("[E7] an entry written without a signing key is not accepted as genuine (13)", async () => {
    const r = await a.run(["restore", "latest", "--target", join(a.tmp, "t-nokey"), "--yes"], { AGENTBAK_SIGNING_KEY_FILE: join(a.tmp, "no-such-key") });
    expect([0, 3]).toContain(r.code);
    expect(r.stderr).toMatch(/no signing key: the restore receipt and the target.s restore record are unsigned/);
    named(await verify(), /: entry \d+ \(line \d+\): unsigned/);
  });
});
