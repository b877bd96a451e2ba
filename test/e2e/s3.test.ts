// What only object storage has, against a real Ceph RADOS Gateway on 127.0.0.1
// (started by .ci/run): Object Lock retention, a missing bucket, wrong
// credentials, and the gateway killed in the middle of an upload. Everything
// else a repository does runs against a bucket too (the "s3" project in
// vitest.config.ts runs the repository test files against one).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, ROOT, type TestAgent } from "../helpers.js";
import { makeBucket } from "../helpers.js";

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

  it("an object-lock bucket refuses deletion and forget reports it", async () => {
    const locked = `lock-${randomBytes(4).toString("hex")}`;
    await makeBucket(locked, true);
    // Ceph RGW honours no conditional write in a versioned bucket: the leases live in an unversioned one (docs/repositories.md)
    const leases = `leases-${randomBytes(4).toString("hex")}`;
    await makeBucket(leases);
    const cfg = JSON.parse(readFileSync(a.config, "utf8"));
    const lockedCfg = join(a.dir, "locked.json");
    writeFileSync(lockedCfg, JSON.stringify({ ...cfg, repository: `s3://${locked}/x`, objectLock: { mode: "compliance", days: 1 } }));
    expect((await a.run(["init", "-c", lockedCfg, "--leases", `s3://${leases}/l`], s3env())).code).toBe(0);
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

  it.skipIf(!cephDir)("radosgw killed in the middle of an upload: the backup is spooled, nothing half-uploaded is listed, the retry uploads both", async () => {
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
      // the upload failed with the gateway gone: the signed bundle waits in the local spool (exit 3, a warning)
      expect(r.exitCode, r.stderr).toBe(3);
      expect(r.stderr).toMatch(/unreachable.*waits in/);
      await execa("radosgw", ["-c", join(cephDir!, "ceph.conf"), "-n", "client.rgw.a"]);
      for (let i = 0; i < 100; i++) {
        if (await cl.send(new ListMultipartUploadsCommand({ Bucket: bucket })).then(() => true, () => false)) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(json(await big.run(["snapshots", "--repo", repo(), "--json"], s3env())).length).toBe(before);
      const retry = await big.run(["backup", "--repo", repo(), "--json", "--wait", "30s"], s3env());
      expect(retry.code, retry.stderr).toBe(0);
      const after = json(await big.run(["snapshots", "--repo", repo(), "--json"], s3env()));
      expect(after.length).toBe(before + 2);
      for (const e of after) expect(e.status, e.problem).toBe("ok");
    } finally {
      big.cleanup();
    }
  });
});
