// One conformance suite for every object store: a local folder always, and an
// S3-compatible bucket (the Ceph RADOS Gateway .ci/run starts on 127.0.0.1)
// when AGENTBAK_TEST_S3_ENDPOINT is set.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { LocalStore } from "../../dist/storage/local.js";
import { S3Store } from "../../dist/storage/s3.js";
import type { ObjectStore } from "../../dist/storage/store.js";
import { makeBucket } from "../helpers.js";

const endpoint = process.env.AGENTBAK_TEST_S3_ENDPOINT;
if (!endpoint) console.warn("S3 conformance tests skipped: AGENTBAK_TEST_S3_ENDPOINT is not set (.ci/run starts a Ceph RADOS Gateway and sets it)");

const tmp = mkdtempSync(join(tmpdir(), "agentbak-store-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const backends: [string, () => Promise<ObjectStore>, boolean][] = [
  ["local folder", async () => new LocalStore(mkdtempSync(join(tmp, "store-"))), false],
  [
    "S3 (Ceph RADOS Gateway)",
    async () => {
      const b = `conf-${randomBytes(4).toString("hex")}`;
      await makeBucket(b);
      process.env.AGENTBAK_S3_ENDPOINT = endpoint;
      return new S3Store(`s3://${b}/some/prefix`).init();
    },
    !endpoint,
  ],
];

describe.each(backends)("object store conformance: %s", (_name, make, skip) => {
  let s: ObjectStore;
  beforeAll(async () => {
    if (!skip) s = await make();
  });

  it.skipIf(skip)("put, get, head, range get", async () => {
    expect(await s.put("a/b.json", '{"x":1}')).toBe(true);
    expect((await s.get("a/b.json"))!.toString()).toBe('{"x":1}');
    expect(await s.head("a/b.json")).toMatchObject({ size: 7 });
    expect((await s.getRange("a/b.json", 1, 4)).toString()).toBe('"x":');
  });

  it.skipIf(skip)("never overwrites with ifNoneMatch; concurrent writers: exactly one wins", async () => {
    expect(await s.put("commit/1", "first", { ifNoneMatch: true })).toBe(true);
    expect(await s.put("commit/1", "second", { ifNoneMatch: true })).toBe(false);
    expect((await s.get("commit/1"))!.toString()).toBe("first");
    const rs = await Promise.all([1, 2, 3, 4, 5].map((i) => s.put("commit/race", `w${i}`, { ifNoneMatch: true })));
    expect(rs.filter(Boolean)).toHaveLength(1);
    const winner = rs.findIndex(Boolean) + 1;
    expect((await s.get("commit/race"))!.toString()).toBe(`w${winner}`);
  });

  it.skipIf(skip)("list with a prefix, across pages", async () => {
    // in batches of 50: a thousand connections at once only measures how fast the gateway accepts them
    for (let b = 0; b < 1005; b += 50) await Promise.all(Array.from({ length: Math.min(50, 1005 - b) }, (_, i) => s.put(`many/${String(b + i).padStart(4, "0")}`, "")));
    await s.put("manyother/x", "");
    const keys = await s.list("many/");
    expect(keys).toHaveLength(1005);
    expect(keys[0]).toBe("many/0000");
    expect(keys.at(-1)).toBe("many/1004");
  });

  it.skipIf(skip)("tagged: the keys list gives, across pages, each with an identity that changes when the object is written again, even with the same bytes", async () => {
    const tags = await s.tagged("many/");
    expect([...tags.keys()]).toEqual(await s.list("many/"));
    const before = tags.get("many/0007")!.tag;
    expect(before).toBeTruthy();
    await new Promise((r) => setTimeout(r, 1100)); // S3 times are whole seconds
    await s.put("many/0007", ""); // the same (empty) bytes again: another write all the same
    await s.put("many/0008", "changed");
    const after = await s.tagged("many/");
    expect(after.get("many/0007")!.tag).not.toBe(before);
    expect(after.get("many/0008")!.tag).not.toBe(tags.get("many/0008")!.tag);
    expect(after.get("many/0009")!.tag).toBe(tags.get("many/0009")!.tag);
    expect(after.get("many/0008")!.size).toBe("changed".length);
    expect((await s.tagged("nothing/")).size).toBe(0);
  });

  it.skipIf(skip)("folders: the names directly under a prefix that hold keys, sorted; none under a missing one", async () => {
    for (const k of ["f/b/x/1", "f/a/2", "f/a/y/3", "f/top", "fz/c/4"]) await s.put(k, "");
    expect(await s.folders("f/")).toEqual(["a", "b"]);
    expect(await s.folders("f/a/")).toEqual(["y"]);
    expect(await s.folders("nothing/")).toEqual([]);
  });

  it.skipIf(skip)("streaming upload and download of a large file (multipart on S3)", async () => {
    const f = join(tmp, `big-${Math.random()}`);
    const data = randomBytes(21 * 1024 * 1024);
    writeFileSync(f, data);
    await s.upload("big/object", f);
    expect(await s.head("big/object")).toMatchObject({ size: data.length });
    const back = join(tmp, `back-${Math.random()}`);
    await s.download("big/object", back);
    expect(readFileSync(back).equals(data)).toBe(true);
    expect((await s.getRange("big/object", 20 * 1024 * 1024, 20 * 1024 * 1024 + 9)).equals(data.subarray(20 * 1024 * 1024, 20 * 1024 * 1024 + 10))).toBe(true);
  });

  it.skipIf(skip)("missing objects: get and head say so, range and download exit 10", async () => {
    expect(await s.get("nope")).toBe(null);
    expect(await s.head("nope")).toBe(null);
    await expect(s.getRange("nope", 0, 10)).rejects.toMatchObject({ code: 10 });
    await expect(s.download("nope", join(tmp, `n-${Math.random()}`))).rejects.toMatchObject({ code: 10 });
  });

  it.skipIf(skip)("delete; an interrupted upload leaves no object", async () => {
    await s.put("d/x", "1");
    expect(await s.delete("d/x")).toBe(true);
    expect(await s.get("d/x")).toBe(null);
    expect(await s.delete("d/never-existed")).toBe(true);
    await expect(s.upload("d/partial", join(tmp, "no-such-file"))).rejects.toThrow();
    expect(await s.head("d/partial")).toBe(null);
    expect((await s.list("d/")).filter((k) => k.includes("tmp"))).toEqual([]);
    expect(await s.hidden("d/")).toEqual(new Map()); // deleted with its versions (or never versioned): nothing kept
  });
});

describe.skipIf(!endpoint)("S3 listings read without the SDK's deserializer (scanListPage)", () => {
  it("hostile keys come back exactly, with the ETag, time and size the SDK's own deserializer reads, in list, tagged and folders", async () => {
    const b = `conf-x-${randomBytes(4).toString("hex")}`;
    await makeBucket(b);
    process.env.AGENTBAK_S3_ENDPOINT = endpoint;
    const s = await new S3Store(`s3://${b}/p`).init();
    const hostile = ["a&b/x", "amp&amp;/lit", "lt<gt>/<Key>k</Key>", `q"'/z`, "emoji😀/é日本", "ctrl\u0001\u001f/k", "cr\rlf\n/k", "tab\t/k", "sp /k ", "ent&#x41;;/&lt;"];
    for (const k of hostile) await s.put(k, `v-${k}`);
    const sorted = [...hostile].sort();
    expect(await s.list("")).toEqual(sorted);
    expect(await s.folders("")).toEqual(sorted.map((k) => k.slice(0, k.indexOf("/"))));
    const { S3Client, ListObjectsV2Command } = await import("@aws-sdk/client-s3");
    const c = new S3Client({ endpoint, region: process.env.AWS_REGION ?? "us-east-1", forcePathStyle: true });
    const r = await c.send(new ListObjectsV2Command({ Bucket: b, Prefix: "p/" }));
    const sdk = new Map((r.Contents ?? []).map((o) => [o.Key!.slice(2), { tag: `${o.ETag}:${o.LastModified!.getTime()}`, size: Number(o.Size) }]));
    expect(sdk.size).toBe(hostile.length);
    expect(await s.tagged("")).toEqual(sdk);
    expect([...(await s.tagged(""))].map(([k, t]) => [k, t.size])).toEqual(sorted.map((k) => [k, Buffer.byteLength(`v-${k}`)]));
    await expect(s.list("nothing/")).resolves.toEqual([]);
  });
});

describe.skipIf(!endpoint)("hidden: objects a delete marker hides in a versioned bucket", () => {
  it("names each hidden key with its newest kept version's bytes; objects present, or deleted with their versions, are not hidden", async () => {
    const b = `conf-v-${randomBytes(4).toString("hex")}`;
    await makeBucket(b, true); // Object Lock: versioned
    process.env.AGENTBAK_S3_ENDPOINT = endpoint;
    const s = await new S3Store(`s3://${b}/p`).init();
    await s.put("h/a", "first");
    await s.put("h/a", "second");
    await s.put("h/b", "kept");
    await s.put("h/c", "gone");
    expect(await s.delete("h/c")).toBe(true); // every version: nothing left to hide
    const { S3Client, DeleteObjectCommand } = await import("@aws-sdk/client-s3");
    const c = new S3Client({ endpoint, region: "us-east-1", forcePathStyle: true });
    await c.send(new DeleteObjectCommand({ Bucket: b, Key: "p/h/a" })); // no version id: a delete marker
    expect(await s.get("h/a")).toBe(null);
    expect(await s.list("h/")).toEqual(["h/b"]);
    expect(await s.hidden("h/")).toEqual(new Map([["h/a", Buffer.from("second")]]));
  });
});
