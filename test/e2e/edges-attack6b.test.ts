// Issue 32, the sixth attack (repository side): what a damaged or hostile repository, its gateway or a signal can make
// agentbak say or do, each case through the real binary on a real agent: an S3 gateway whose listing never ends or
// ends without saying where (a proxy in front of the test gateway rewrites its ListObjectsV2 answers), a SIGTERM
// during `forget --prune`'s chunk sweep, a chunk overwritten in place met by a host whose chunk index was lost, a chunk
// cut or grown in place met by the host that stored it, a bundle written over in place under its catalog record, a
// restore target that appears while the bundle is extracted. See docs/security-edges.md, "Sixth attack (repository side)".
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import { randomBytes } from "node:crypto";
import { appendFileSync, copyFileSync, cpSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { createServer, request, type Server } from "node:http";
import { join } from "node:path";
import { chunkedAgent, chunkFiles, json, backedUpAgent, makeAgent, makeBucket, pausedAtStep, run, type TestAgent } from "../helpers.js";

const endpoint = process.env.AGENTBAK_TEST_S3_ENDPOINT;
const AGENT_DIR = "tenants/acme/agents/billing-agent";

/**
 * A proxy in front of the test gateway that passes every request through and rewrites each ListObjectsV2 answer's
 * last page by `rewrite` (the request is signed for the proxy's Host header, which it keeps).
 */
function listingProxy(rewrite: (xml: string) => string): Promise<{ url: string; server: Server }> {
  const up = new URL(endpoint!);
  const server = createServer((req, res) => {
    const body: Buffer[] = [];
    req.on("data", (c: Buffer) => body.push(c));
    req.on("end", () => {
      const fwd = request({ host: up.hostname, port: up.port, method: req.method, path: req.url, headers: req.headers }, (r) => {
        if (req.method !== "GET" || !/[?&]list-type=2/.test(req.url ?? "")) {
          res.writeHead(r.statusCode!, r.headers);
          r.pipe(res);
          return;
        }
        const got: Buffer[] = [];
        r.on("data", (c: Buffer) => got.push(c));
        r.on("end", () => {
          const x = rewrite(Buffer.concat(got).toString());
          const { "content-length": _l, "transfer-encoding": _t, ...h } = r.headers;
          res.writeHead(r.statusCode!, { ...h, "content-length": Buffer.byteLength(x) });
          res.end(x);
        });
      });
      fwd.end(Buffer.concat(body));
    });
  });
  return new Promise((ok) => server.listen(0, "127.0.0.1", () => ok({ url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, server })));
}

describe.skipIf(!endpoint)("[E1] an S3 gateway whose listing never ends, or ends without saying where", () => {
  let a: TestAgent;
  const proxies: Server[] = [];
  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
    const bucket = `a6-${randomBytes(4).toString("hex")}`;
    await makeBucket(bucket);
    writeFileSync(a.config, JSON.stringify({ ...JSON.parse(readFileSync(a.config, "utf8")), repository: `s3://${bucket}/repo` }, null, 2));
    expect((await a.run(["init"], { AGENTBAK_S3_ENDPOINT: endpoint })).code).toBe(0);
    expect((await a.run(["backup"], { AGENTBAK_S3_ENDPOINT: endpoint })).code).toBe(0);
  }, 180_000);
  afterAll(() => {
    for (const s of proxies) s.close();
    a?.cleanup();
  });
  const through = async (rewrite: (xml: string) => string) => {
    const p = await listingProxy(rewrite);
    proxies.push(p.server);
    return { AGENTBAK_S3_ENDPOINT: p.url, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true" };
  };
  const truncated = (extra: string) => (x: string) => x.replace(/<IsTruncated>false<\/IsTruncated>/, `<IsTruncated>true</IsTruncated>${extra}`);

  it("[E1] a continuation token handed out again: snapshots and backup are 1 naming it within seconds (they listed for ever)", async () => {
    const env = await through(truncated("<NextContinuationToken>SAME</NextContinuationToken>"));
    for (const args of [["snapshots"], ["backup"]]) {
      const r = await a.run(args, env, { timeout: 60_000 });
      expect(r.code, r.stderr).toBe(1);
      expect(r.stderr).toMatch(/handed out a continuation token it gave before \(a listing that never ends\)/);
    }
  });

  it("[E1] a listing said to go on with no token: 1 naming it (the keys after the first page were taken as gone)", async () => {
    const r = await a.run(["snapshots"], await through(truncated("")), { timeout: 60_000 });
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toMatch(/says the listing goes on but gives no continuation token/);
    // straight to the gateway, the same listing is whole
    expect((await a.run(["snapshots"], { AGENTBAK_S3_ENDPOINT: endpoint })).code).toBe(0);
  });
});

describe("[E1] SIGTERM during forget --prune's chunk sweep", () => {
  let a: TestAgent;
  beforeAll(async () => {
    a = await chunkedAgent();
    expect((await a.run(["backup"])).code).toBe(0);
    // a second backup of another 3 MiB: the first one's chunks are unreferenced once it is forgotten
    writeFileSync(join(a.dir, "models/adapter.bin"), randomBytes(3 * 1024 * 1024));
    expect((await a.run(["backup"])).code).toBe(0);
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E1] nothing is deleted after the signal (the sweep went on to the end, on a folder), the grant is marked released, exit 130; a forget after it sweeps them", async () => {
    const before = chunkFiles(a);
    const child = execa("node", [join(import.meta.dirname, "../../bin/agentbak.js"), "forget", "--keep-last", "1", "--prune", "--prune-grace", "0s"], {
      cwd: a.dir,
      env: { ...a.env, NO_COLOR: "1", AGENTBAK_PAUSE_STEP: "chunks-marked" },
      reject: false,
    });
    expect(await pausedAtStep(child.pid!)).toBe(true);
    process.kill(child.pid!, "SIGTERM");
    process.kill(child.pid!, "SIGCONT");
    const r = await child;
    expect(r.exitCode, String(r.stderr)).toBe(130);
    expect(chunkFiles(a)).toEqual(before);
    const locks = join(a.repo, AGENT_DIR, "locks/agent");
    const newest = readdirSync(locks).sort().at(-1)!;
    expect(JSON.parse(readFileSync(join(locks, newest), "utf8")).released).toBe(true);
    const f = await a.run(["forget", "--keep-last", "1", "--prune", "--prune-grace", "0s", "--json"]);
    expect(f.code, f.stderr).toBe(0);
    expect(json(f).chunks.deleted).toBeGreaterThan(0);
    expect(chunkFiles(a).length).toBeLessThan(before.length);
  });
});

describe("[E1] a chunk overwritten in place, met by a host whose known-chunks index was lost", () => {
  let a: TestAgent;
  let first: string;
  beforeAll(async () => {
    a = await chunkedAgent();
    first = json(await a.run(["backup", "--json"])).snapshot_id;
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E1] the next backup writes it again (it adopted the bytes there: the new snapshot's verify said verified, and only decrypting found it); the new snapshot verifies with the identity", async () => {
    const chunks = join(a.repo, AGENT_DIR, "chunks");
    const victim = join(chunks, chunkFiles(a).find((f) => statSync(join(chunks, f)).size > 100_000)!);
    writeFileSync(victim, randomBytes(statSync(victim).size)); // same size, other bytes
    rmSync(join(a.home, "cache", "chunks"), { recursive: true, force: true }); // a host whose index was lost (or a new one)
    const memory = join(a.dir, "memory", readdirSync(join(a.dir, "memory"))[0]!);
    appendFileSync(memory, " ");
    const b = await a.run(["backup", "--json"]);
    expect(b.code, b.stderr).toBe(0);
    const v = await a.run(["verify", json(b).snapshot_id, "--identity", a.identity]);
    expect(v.code, v.stderr).toBe(0);
    // the snapshot that named the damaged bytes stays refused, naming the chunk (its digest is signed)
    const old = await a.run(["verify", first, "--identity", a.identity]);
    expect(old.code).toBe(13);
    expect(old.stderr).toMatch(/does not match its digest/);
  });
});

describe("[E1] a chunk cut or grown in place, met by the host that stored it (its index holds it)", () => {
  let a: TestAgent;
  beforeAll(async () => {
    a = await chunkedAgent();
    expect((await a.run(["backup"])).code).toBe(0);
  }, 120_000);
  afterAll(() => a?.cleanup());
  const chunks = () => join(a.repo, AGENT_DIR, "chunks");
  const large = () => chunkFiles(a).filter((f) => statSync(join(chunks(), f)).size > 100_000);

  it("[E1] the next backup stores it again (the index handed it out: a new snapshot committed whose verify was 13); the new snapshot verifies, with and without the identity", async () => {
    const [cut, grown] = large();
    truncateSync(join(chunks(), cut!), 1000);
    appendFileSync(join(chunks(), grown!), "five!");
    appendFileSync(join(a.dir, "memory", readdirSync(join(a.dir, "memory"))[0]!), " ");
    const b = await a.run(["backup", "--json"]);
    expect(b.code, b.stderr).toBe(0);
    const id = json(b).snapshot_id;
    const v = await a.run(["verify", id]);
    expect(v.code, v.stderr).toBe(0);
    expect((await a.run(["verify", id, "--identity", a.identity])).code).toBe(0);
  });
});

describe("[E1] a bundle written over in place by another agent's, under its catalog record", () => {
  let a: TestAgent;
  let other: string;
  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
    // a second agent in the same repository, backed up by the same host
    other = join(a.tmp, "ops");
    cpSync(a.dir, other, { recursive: true, filter: (f) => !f.startsWith(a.repo) });
    const cfg = JSON.parse(readFileSync(join(other, "agentbak.json"), "utf8"));
    writeFileSync(join(other, "agentbak.json"), JSON.stringify({ ...cfg, agent: { ...cfg.agent, id: "ops-agent" }, repository: a.repo }, null, 2));
    expect((await a.run(["backup"])).code).toBe(0);
    expect((await run(["backup"], { cwd: other, env: a.env })).code).toBe(0);
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E1] snapshots --all --fresh and a host that never checked the record list it from the bundle: invalid, status --all --fresh 3 (both said ok from the record)", async () => {
    const snaps = (agent: string) => join(a.repo, "tenants/acme/agents", agent, "snapshots");
    const mine = readdirSync(snaps("billing-agent")).find((f) => f.endsWith(".agentbak"))!;
    const theirs = readdirSync(snaps("ops-agent")).find((f) => f.endsWith(".agentbak"))!;
    copyFileSync(join(snaps("ops-agent"), theirs), join(snaps("billing-agent"), mine));
    const l = await a.run(["snapshots", "--all", "--fresh", "--json"]);
    const entry = json(l).find((e: any) => e.snapshot_id === mine.replace(/\.agentbak$/, ""));
    expect(entry.status).toBe("invalid");
    expect((await a.run(["status", "--all", "--fresh"])).code).toBe(3);
    // a host with the same keys that never listed this repository (no cache of checked records)
    rmSync(join(a.home, "cache"), { recursive: true, force: true });
    const fresh = json(await a.run(["snapshots", "--all", "--json"])).find((e: any) => e.snapshot_id === entry.snapshot_id);
    expect(fresh.status).toBe("invalid");
  });
});

describe("[E5] a restore whose target appears while the bundle is extracted", () => {
  let a: TestAgent;
  beforeAll(async () => {
    a = await backedUpAgent();
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E5] is refused (2) before it issues a generation: the agent restored before it stays current (it was fenced, 14, by a restore that wrote nothing)", async () => {
    const first = join(a.tmp, "first");
    const r = await a.run(["restore", "latest", "--target", first, "--yes", "--json"]);
    expect([0, 3]).toContain(r.code);
    const generation = String(JSON.parse(readFileSync(join(first, ".agentbak/restore.json"), "utf8")).generation);
    const second = join(a.tmp, "second");
    const child = execa("node", [join(import.meta.dirname, "../../bin/agentbak.js"), "restore", "latest", "--target", second, "--yes"], {
      cwd: a.dir,
      env: { ...a.env, NO_COLOR: "1", AGENTBAK_PAUSE_STEP: "extracted" },
      reject: false,
    });
    expect(await pausedAtStep(child.pid!)).toBe(true);
    mkdirSync(second);
    writeFileSync(join(second, "notes.txt"), "someone else's");
    process.kill(child.pid!, "SIGCONT");
    const failed = await child;
    expect(failed.exitCode, String(failed.stderr)).toBe(2);
    expect(String(failed.stderr)).toMatch(/is not empty/);
    const f = await a.run(["fence", "check", "--generation", generation, "--target", first]);
    expect(f.code, f.stderr).toBe(0);
  });
});
