// An S3 read that breaks off mid-body is resumed, through the real binary against the shared test gateway and a
// fault proxy on 127.0.0.1 in front of it (src/drill/faultproxy.ts): a GET of the bundle is reset after half its
// body, and the resumed ranged GET after half of the rest; the restore completes byte-identical. An object
// replaced between the reset and the resume is never stitched: If-Match answers 412 and the restore stops
// naming the change (13).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHash, randomBytes } from "node:crypto";
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, makeBucket, type TestAgent } from "../helpers.js";

const endpoint = process.env.AGENTBAK_TEST_S3_ENDPOINT;
let a: TestAgent;
let snapshot: string;
const BUNDLE = /\.agentbak(\?|$)/;

beforeAll(async () => {
  if (!endpoint) return;
  a = await makeAgent({ sizeMb: 3 });
  const bucket = `resume-${randomBytes(4).toString("hex")}`;
  await makeBucket(bucket);
  const cfg = JSON.parse(readFileSync(a.config, "utf8"));
  writeFileSync(a.config, JSON.stringify({ ...cfg, repository: `s3://${bucket}/repo` }, null, 2));
  const i = await a.run(["init"], { AGENTBAK_S3_ENDPOINT: endpoint });
  if (i.code !== 0) throw new Error(i.stderr);
  const b = await a.run(["backup", "--json"], { AGENTBAK_S3_ENDPOINT: endpoint });
  if (b.code !== 0) throw new Error(b.stderr);
  snapshot = json(b).snapshot_id;
});
afterAll(() => a?.cleanup());

/** Restores the snapshot into a new folder, reading the repository through `via`. */
async function restore(via: string) {
  const target = join(a.tmp, `r-${randomBytes(4).toString("hex")}`);
  const r = await a.run(["restore", snapshot, "--target", target, "--yes", "--allow-rollback", "--identity", a.identity], { AGENTBAK_S3_ENDPOINT: via });
  return { r, target };
}

/** Every restored file under `dir` with the SHA-256 of its bytes (not the restore's own records nor git's checkout index and logs, which carry times). */
const tree = (dir: string) =>
  Object.fromEntries(
    (readdirSync(dir, { recursive: true }) as string[])
      .filter((f) => statSync(join(dir, f)).isFile() && !/^\.agentbak\/|^workspace\/\.git\/(index|logs\/)/.test(f))
      .sort()
      .map((f) => [f, createHash("sha256").update(readFileSync(join(dir, f))).digest("hex")]),
  );

describe.skipIf(!endpoint)("an S3 read resumes after a reset mid-body", () => {
  it("the bundle's GET and its resumed ranged GET each reset after half their body: the restore completes byte-identical to one read directly", async () => {
    const { startFaultProxy } = await import("../../dist/drill/faultproxy.js");
    const proxy = await startFaultProxy(endpoint!, "s3_reset", { times: 2, paths: BUNDLE });
    const through = await restore(proxy.url).finally(() => proxy.stop());
    expect([0, 3], through.r.stderr).toContain(through.r.code); // 3: the fixture's credentials are missing here
    expect(through.r.stderr).toContain(`restored ${snapshot}`);
    expect(proxy.faulted).toBe(2);
    const direct = await restore(endpoint!);
    expect([0, 3], direct.r.stderr).toContain(direct.r.code);
    const want = tree(direct.target);
    expect(Object.keys(want).length).toBeGreaterThan(3);
    expect(tree(through.target)).toEqual(want);
  });

  it("an object replaced between the reset and the resume is never stitched: 412 on If-Match, the restore stops naming the change (13)", async () => {
    const { startFaultProxy } = await import("../../dist/drill/faultproxy.js");
    const { S3Client, PutObjectCommand } = await import("@aws-sdk/client-s3");
    const c = new S3Client({ endpoint, region: "us-east-1", forcePathStyle: true });
    let replaced = "";
    const onFault = async (path: string) => {
      const [bucket, ...key] = decodeURIComponent(path.split("?")[0]!).slice(1).split("/");
      replaced = key.join("/");
      await c.send(new PutObjectCommand({ Bucket: bucket, Key: replaced, Body: randomBytes(4096) }));
    };
    const proxy = await startFaultProxy(endpoint!, "s3_reset", { times: 1, paths: BUNDLE, onFault });
    const { r } = await restore(proxy.url).finally(() => proxy.stop());
    expect(replaced).toMatch(BUNDLE);
    expect(r.code, r.stderr).toBe(13);
    expect(r.stderr).toContain(replaced);
    expect(r.stderr).toMatch(/the object changed while it was read \(HTTP 412 on If-Match\)/);
  });
});
