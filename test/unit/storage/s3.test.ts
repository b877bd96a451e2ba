// The parts of the S3 store that need no gateway: parsing s3://BUCKET/PREFIX and refusing bad keys before any request.
// Requests against a real gateway: test/e2e/store.test.ts (conformance) and test/e2e/s3.test.ts (outage).
import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import { parseS3Url, S3Store } from "../../../src/storage/s3.js";
import { AgentbakError } from "../../../src/errors.js";

function code(f: () => unknown): number | undefined {
  try { f(); } catch (e) { expect(e).toBeInstanceOf(AgentbakError); return (e as AgentbakError).code; }
  return undefined;
}

describe("parseS3Url", () => {
  it("splits bucket and prefix; the prefix ends in one / or is empty", () => {
    expect(parseS3Url("s3://bucket")).toEqual({ bucket: "bucket", prefix: "" });
    expect(parseS3Url("s3://bucket/")).toEqual({ bucket: "bucket", prefix: "" });
    expect(parseS3Url("s3://my.bucket-1/a/b")).toEqual({ bucket: "my.bucket-1", prefix: "a/b/" });
    expect(parseS3Url("s3://bucket/a/b///")).toEqual({ bucket: "bucket", prefix: "a/b/" });
  });

  it("refuses what is not a valid bucket name with exit 2 naming the URL", () => {
    for (const bad of ["s3://", "s3://ab", "s3://Bucket/x", "s3://-bucket", "s3://bucket-", "s3://b_ucket", "http://bucket/x", `s3://${"a".repeat(64)}`]) {
      expect(code(() => parseS3Url(bad)), bad).toBe(2);
      let msg = "";
      try { parseS3Url(bad); } catch (e) { msg = (e as Error).message; }
      expect(msg).toBe(`invalid S3 repository URL ${bad} (expected s3://BUCKET/PREFIX)`);
    }
  });
});

describe("S3Store without a gateway", () => {
  it("a bad key is refused (exit 2) before any request is sent", async () => {
    process.env.AGENTBAK_S3_ENDPOINT = "http://127.0.0.1:9"; // discard port: a request would fail differently, and slowly
    try {
      const s = await new S3Store("s3://bucket/p").init();
      for (const op of [() => s.get("a/../b"), () => s.head("/abs"), () => s.put("a//b", "x"), () => s.list("../")]) {
        const e = await op().then(() => null, (x: unknown) => x);
        expect(e).toBeInstanceOf(AgentbakError);
        expect((e as AgentbakError).code).toBe(2);
      }
    } finally {
      delete process.env.AGENTBAK_S3_ENDPOINT;
    }
  });
});

describe("S3Store's SDK load", () => {
  it("a store that only reads never loads the multipart upload package (its load is CPU every listing paid); the client is loaded", async () => {
    const loaded = (pkg: string) => Object.keys(createRequire(import.meta.url).cache).some((k) => k.includes(`/node_modules/${pkg}/`));
    process.env.AGENTBAK_S3_ENDPOINT = "http://127.0.0.1:9";
    try {
      await new S3Store("s3://bucket/p").init();
      expect([loaded("@aws-sdk/client-s3"), loaded("@aws-sdk/lib-storage")]).toEqual([true, false]);
    } finally {
      delete process.env.AGENTBAK_S3_ENDPOINT;
    }
  });
});
