// Which store a location names: a folder (made only with create), s3://, any other scheme refused, credentials in a URL refused unshown.
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { isUrl, openStore } from "../../../src/storage/open.js";
import { LocalStore } from "../../../src/storage/local.js";
import { S3Store } from "../../../src/storage/s3.js";
import { AgentbakError } from "../../../src/errors.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-open-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function refusal(p: Promise<unknown>): Promise<AgentbakError> {
  const e = await p.then(() => null, (x: unknown) => x);
  expect(e).toBeInstanceOf(AgentbakError);
  return e as AgentbakError;
}

describe("openStore", () => {
  it("a folder is a LocalStore; the folder is made only when asked to create it", async () => {
    const missing = join(dir, "repo");
    const s = await openStore(missing);
    expect(s).toBeInstanceOf(LocalStore);
    expect(s.url).toBe(missing);
    expect(statSync(missing, { throwIfNoEntry: false })).toBeUndefined();
    await openStore(missing, { create: true });
    expect(statSync(missing).isDirectory()).toBe(true);
  });

  it("s3://bucket/prefix is an S3Store with the prefix ending in /", async () => {
    const s = (await openStore("s3://my-bucket/team/repo/")) as S3Store;
    expect(s).toBeInstanceOf(S3Store);
    expect([s.bucket, s.prefix, s.inPlace]).toEqual(["my-bucket", "team/repo/", false]);
  });

  it("credentials in a URL are refused with exit 2 without echoing them", async () => {
    for (const url of ["s3://AKIA:s3cr3t@bucket/p", "https://user:hunter2@host/x"]) {
      const e = await refusal(openStore(url));
      expect(e.code).toBe(2);
      expect(e.message).toContain("must not hold credentials");
      expect(e.message).not.toMatch(/s3cr3t|hunter2|AKIA/);
    }
  });

  it("another scheme is refused with exit 2 naming it", async () => {
    const e = await refusal(openStore("gs://bucket/x"));
    expect(e.code).toBe(2);
    expect(e.message).toBe("unsupported repository URL gs://bucket/x (a folder or s3://BUCKET/PREFIX)");
  });

  it("isUrl: a scheme followed by :// only", () => {
    expect(["s3://b", "HTTPS://x", "git+ssh://h/r"].map(isUrl)).toEqual([true, true, true]);
    expect(["/srv/repo", "./s3:/x", "c:\\repo", "repo"].map(isUrl)).toEqual([false, false, false, false]);
  });
});
