// Backup, snapshots, verify, restore, drill and copy through s3:// against a
// real Ceph RADOS Gateway on 127.0.0.1 (started by .ci/run), including the
// gateway killed in the middle of an upload and two backups racing for the lock.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, ROOT, type TestAgent } from "./helpers.js";
import { makeBucket } from "./s3/bucket.js";

const endpoint = process.env.AGENTBAK_TEST_S3_ENDPOINT;
const cephDir = process.env.AGENTBAK_TEST_CEPH_DIR;
if (!endpoint) console.warn("S3 end-to-end tests skipped: AGENTBAK_TEST_S3_ENDPOINT is not set (.ci/run starts a Ceph RADOS Gateway and sets it)");

let a: TestAgent;
let bucket: string;
const s3env = () => ({ AGENTBAK_S3_ENDPOINT: endpoint, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true" });
const sha = (p: string) => createHash("sha256").update(readFileSync(p)).digest("hex");

beforeAll(async () => {
  if (!endpoint) return;
  a = await makeAgent({ sizeMb: 3 });
  bucket = `e2e-${randomBytes(4).toString("hex")}`;
  await makeBucket(bucket);
  const i = await a.run(["init", "--repo", `s3://${bucket}/fleet`], s3env());
  if (i.code !== 0) throw new Error(i.stderr);
});
afterAll(() => a?.cleanup());

describe.skipIf(!endpoint)("s3:// repositories", () => {
  const repo = () => `s3://${bucket}/fleet`;
  let first: any;

  it("backup -> snapshots -> verify -> restore -> drill through s3:// with byte-equal results", async () => {
    const b = await a.run(["backup", "--repo", repo(), "--json"], s3env());
    expect(b.code, b.stderr).toBe(0);
    first = json(b);
    expect(first.path).toBe(`${repo()}/tenants/acme/agents/billing-agent/snapshots/${first.snapshot_id}.agentbak`);
    const s = json(await a.run(["snapshots", "--repo", repo(), "--json"], s3env()));
    expect(s.map((e: any) => [e.snapshot_id, e.status])).toEqual([[first.snapshot_id, "ok"]]);
    const v = await a.run(["verify", "latest", "--repo", repo(), "--identity", a.identity, "--json"], s3env());
    expect(v.code, v.stderr).toBe(0);
    expect(json(v).checks.map((c: any) => c.name)).toContain("integrity:state");
    const t = join(a.tmp, "from-s3");
    const r = await a.run(["restore", "latest", "--repo", repo(), "--target", t, "--yes", "--json"], s3env());
    expect([0, 3], r.stderr).toContain(r.code);
    // byte-equal with the same snapshot restored from a local copy of the repository
    const local = join(a.tmp, "local-copy");
    const c = await a.run(["copy", "--from", repo(), "--to", local, "--json"], s3env());
    expect(json(c).copied).toEqual([first.snapshot_id]);
    const t2 = join(a.tmp, "from-local");
    expect([0, 3]).toContain((await a.run(["restore", first.snapshot_id, "--repo", local, "--target", t2, "--yes", "--allow-rollback"])).code);
    expect(sha(join(t, "state/agent.sqlite"))).toBe(sha(join(t2, "state/agent.sqlite")));
    const d = await a.run(["drill", "latest", "--repo", repo(), "--spec", join(ROOT, "drills/reference-agent.json"), "--identity", a.identity, "--report", join(a.tmp, "s3-drill.jsonl"), "--json"], s3env());
    expect([0, 3], d.stderr).toContain(d.code);
    expect(json(d).ok).toBe(true);
  });

  it("the same idempotency key returns the first receipt; two backups at once: one wins the lock", async () => {
    const k1 = json(await a.run(["backup", "--repo", repo(), "--idempotency-key", "job-9", "--json"], s3env()));
    const k2 = json(await a.run(["backup", "--repo", repo(), "--idempotency-key", "job-9", "--json"], s3env()));
    expect(k2.repeated).toBe(true);
    expect(k2.snapshot_id).toBe(k1.snapshot_id);
    const big = await makeAgent({ sizeMb: 12 });
    try {
      const rs = await Promise.all([big.run(["backup", "--repo", repo(), "--json"], s3env()), big.run(["backup", "--repo", repo(), "--json"], s3env())]);
      expect(rs.map((r) => r.code).sort()).toEqual([0, 11]);
      expect(rs.find((r) => r.code === 11)!.stderr).toMatch(/locked \(agent lock of acme\/billing-agent in s3:\/\/\S+\) by pid \d+/);
    } finally {
      big.cleanup();
    }
  });

  it("copy to a second bucket is idempotent and verifies each bundle; a drill runs from there", async () => {
    const other = `copy-${randomBytes(4).toString("hex")}`;
    await makeBucket(other);
    const c1 = json(await a.run(["copy", "--from", repo(), "--to", `s3://${other}/dr`, "--json"], s3env()));
    expect(c1.copied.length).toBeGreaterThanOrEqual(2);
    const c2 = json(await a.run(["copy", "--from", repo(), "--to", `s3://${other}/dr`, "--json"], s3env()));
    expect(c2.copied).toEqual([]);
    expect(c2.skipped.length).toBe(c1.copied.length);
    const d = await a.run(["drill", "random", "--repo", `s3://${other}/dr`, "--spec", join(ROOT, "drills/checks-only.json"), "--identity", a.identity, "--no-report", "--json"], s3env());
    expect([0, 3], d.stderr).toContain(d.code);
  });

  it("restores from s3:// keep the fencing generation, request ids and signed receipts in the bucket", async () => {
    const t1 = join(a.tmp, "fence-1");
    const t2 = join(a.tmp, "fence-2");
    const r1 = json(await a.run(["restore", "latest", "--repo", repo(), "--target", t1, "--yes", "--allow-rollback", "--request-id", "INC-S3", "--json"], s3env()));
    const again = json(await a.run(["restore", "latest", "--repo", repo(), "--target", join(a.tmp, "fence-again"), "--yes", "--allow-rollback", "--request-id", "INC-S3", "--json"], s3env()));
    expect(again.repeated).toBe(true);
    expect(existsSync(join(a.tmp, "fence-again"))).toBe(false);
    const r2 = json(await a.run(["restore", "latest", "--repo", repo(), "--target", t2, "--yes", "--allow-rollback", "--json"], s3env()));
    expect(r2.generation).toBe(r1.generation + 1);
    expect(JSON.parse(readFileSync(join(t2, ".agentbak/restore.json"), "utf8")).repository).toBe(repo());
    const stale = await a.run(["fence", "check", "--target", t1, "--generation", String(r1.generation)], s3env());
    expect(stale.code).toBe(14);
    expect(stale.stderr).toMatch(/superseded \(current generation is \d+\)/);
    expect((await a.run(["fence", "check", "--target", t2, "--generation", String(r2.generation)], s3env())).code).toBe(0);
    expect((await a.run(["activate", "--target", t1, "--yes"], s3env())).code).toBe(14);
    expect((await a.run(["activate", "--target", t2, "--yes"], s3env())).code).toBe(0);
    process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = "true";
    const { S3Store } = await import("../dist/storage/s3.js");
    process.env.AGENTBAK_S3_ENDPOINT = endpoint;
    const st = await new S3Store(repo()).init();
    const audits = String(await st.get("tenants/acme/agents/billing-agent/audit.jsonl")).trim().split("\n").map((l) => JSON.parse(l));
    expect(audits.filter((e) => e.event === "restore").length).toBeGreaterThanOrEqual(2);
    expect(audits.find((e) => e.event === "restore").receipt_signature).toMatch(/BEGIN SSH SIGNATURE/);
  });

  it("incrementals into s3:// store only changed pages and restore byte-identical through the chain", async () => {
    const full = json(await a.run(["backup", "--repo", repo(), "--no-incremental", "--json"], s3env()));
    const Database = (await import("better-sqlite3")).default;
    const db = new Database(join(a.dir, "state/agent.sqlite"));
    db.prepare("UPDATE messages SET content = content || ' (s3 edit)' WHERE id % 97 = 0").run();
    db.close();
    const inc = await a.run(["backup", "--repo", repo(), "--incremental", "--json"], s3env());
    expect(inc.code, inc.stderr).toBe(0);
    const i = json(inc);
    expect(i.parent).toBe(full.snapshot_id);
    expect(i.size).toBeLessThan(full.size / 3);
    const t = join(a.tmp, "s3-inc");
    expect([0, 3]).toContain((await a.run(["restore", i.snapshot_id, "--repo", repo(), "--target", t, "--yes", "--allow-rollback"], s3env())).code);
    const dump = async (p: string) => (await execa("sqlite3", [p, ".dump"])).stdout;
    expect(await dump(join(t, "state/agent.sqlite"))).toBe(await dump(join(a.dir, "state/agent.sqlite")));
  });

  it("an object-lock bucket refuses deletion and forget reports it", async () => {
    const locked = `lock-${randomBytes(4).toString("hex")}`;
    await makeBucket(locked, true);
    const cfg = JSON.parse(readFileSync(a.config, "utf8"));
    const lockedCfg = join(a.dir, "locked.json");
    writeFileSync(lockedCfg, JSON.stringify({ ...cfg, repository: `s3://${locked}/x`, objectLock: { mode: "compliance", days: 1 } }));
    expect((await a.run(["init", "-c", lockedCfg], s3env())).code).toBe(0);
    const b1 = json(await a.run(["backup", "-c", lockedCfg, "--json"], s3env()));
    const b2 = json(await a.run(["backup", "-c", lockedCfg, "--json"], s3env()));
    const f = await a.run(["forget", "-c", lockedCfg, "--keep-last", "1", "--prune", "--json"], s3env());
    expect(f.code, f.stderr).toBe(3);
    const res = json(f);
    expect(res.removed).toEqual([]);
    expect(res.not_removed).toEqual([{ snapshot_id: b1.snapshot_id, reason: "object lock retention refused the deletion" }]);
    expect(json(await a.run(["snapshots", "-c", lockedCfg, "--json"], s3env())).map((e: any) => e.snapshot_id)).toEqual([b1.snapshot_id, b2.snapshot_id]);
    expect((await a.run(["verify", b1.snapshot_id, "-c", lockedCfg, "--identity", a.identity], s3env())).code).toBe(0);
  });

  it("a missing bucket exits 10; wrong credentials name the bucket and operation, never the secret", async () => {
    const missing = await a.run(["snapshots", "--repo", `s3://no-such-bucket-${randomBytes(3).toString("hex")}/x`], s3env());
    expect(missing.code).toBe(10);
    expect(missing.stderr).toMatch(/bucket no-such-bucket-\w+ does not exist/);
    const bad = await a.run(["snapshots", "--repo", repo()], { ...s3env(), AWS_SECRET_ACCESS_KEY: "wrong-secret-value-1234" });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(new RegExp(`s3://${bucket}/fleet/\\S*: access denied \\(403\\) for bucket ${bucket}`));
    expect(bad.stderr).not.toContain("wrong-secret-value-1234");
  });

  it.skipIf(!cephDir)("radosgw killed in the middle of an upload: the backup fails, nothing is listed, a retry succeeds", async () => {
    const big = await makeAgent({ sizeMb: 120 });
    const pidFile = join(cephDir!, "run", "client.rgw.a.pid");
    try {
      const before = json(await big.run(["snapshots", "--repo", repo(), "--json"], s3env())).length;
      process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = "true";
      const { S3Client, ListMultipartUploadsCommand } = await import("@aws-sdk/client-s3");
      const cl = new S3Client({ endpoint, region: "us-east-1", forcePathStyle: true });
      const child = execa("node", [join(ROOT, "bin/agentbak.js"), "backup", "--repo", repo()], { cwd: big.dir, env: { ...big.env, ...s3env(), NO_COLOR: "1" }, reject: false });
      let killed = false;
      for (let i = 0; i < 600 && !killed; i++) {
        const up = await cl.send(new ListMultipartUploadsCommand({ Bucket: bucket })).catch(() => null);
        if (up?.Uploads?.length) {
          process.kill(Number(readFileSync(pidFile, "utf8")), "SIGKILL");
          killed = true;
        } else await new Promise((r) => setTimeout(r, 25));
      }
      expect(killed).toBe(true);
      const r = await child;
      expect(r.exitCode).not.toBe(0);
      await execa("radosgw", ["-c", join(cephDir!, "ceph.conf"), "-n", "client.rgw.a"]);
      for (let i = 0; i < 100; i++) {
        if (await cl.send(new ListMultipartUploadsCommand({ Bucket: bucket })).then(() => true, () => false)) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(json(await big.run(["snapshots", "--repo", repo(), "--json"], s3env())).length).toBe(before);
      const retry = await big.run(["backup", "--repo", repo(), "--json", "--wait", "30s"], s3env());
      expect(retry.code, retry.stderr).toBe(0);
      expect(json(await big.run(["snapshots", "--repo", repo(), "--json"], s3env())).length).toBe(before + 1);
    } finally {
      big.cleanup();
    }
  });
});
