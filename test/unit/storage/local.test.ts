// The local-folder store's promises beyond the conformance suite (test/e2e/store.test.ts): a folder that is
// gone is "not found" and never begun again, ifNoneMatch never overwrites, uploads are linked (the file is
// consumed), temp files never show in a listing, and sweep removes only what dead processes left.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { afterAll, describe, expect, it } from "vitest";
import { LocalStore } from "../../../src/storage/local.js";
import { AgentbakError } from "../../../src/errors.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-local-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
const fresh = () => new LocalStore(join(dir, `r${n++}`), { create: true });

async function failure(p: Promise<unknown>): Promise<AgentbakError> {
  const e = await p.then(() => null, (x: unknown) => x);
  expect(e).toBeInstanceOf(AgentbakError);
  return e as AgentbakError;
}

/** a pid that is certainly not running: a child that has exited */
const deadPid = () => spawnSync(process.execPath, ["-e", "0"]).pid!;

describe("LocalStore", () => {
  it("put with ifNoneMatch writes once and never overwrites; without it replaces", async () => {
    const s = fresh();
    expect(await s.put("a/b.json", "one", { ifNoneMatch: true })).toBe(true);
    expect(await s.put("a/b.json", "two", { ifNoneMatch: true })).toBe(false);
    expect((await s.get("a/b.json"))!.toString()).toBe("one");
    expect(await s.put("a/b.json", "three")).toBe(true);
    expect((await s.get("a/b.json"))!.toString()).toBe("three");
  });

  it("a repository folder removed or renamed under it is not found (10) at the next write, and is not made again", async () => {
    const s = fresh();
    await s.put("x", "1");
    renameSync(s.root, s.root + ".moved");
    for (const op of [() => s.put("y", "2"), () => s.append("log", "l\n"), () => s.list("snapshots/"), () => s.upload("z", join(dir, "nofile"))]) {
      const e = await failure(op());
      expect(e.code).toBe(10);
      expect(e.message).toBe(`repository not found: ${s.root} (no such folder)`);
    }
    expect(() => s.tempDir("backup")).toThrow(/repository not found/);
    expect(existsSync(s.root)).toBe(false);
  });

  it("missing objects: get and head answer null, getRange/download/localPath exit 10 naming the key", async () => {
    const s = fresh();
    expect(await s.get("nope")).toBeNull();
    expect(await s.head("nope")).toBeNull();
    for (const op of [() => s.getRange("nope", 0, 3), () => s.download("nope", join(dir, "dl")), () => s.localPath("nope")]) {
      const e = await failure(op());
      expect(e.code).toBe(10);
      expect(e.message).toBe(`object nope not found in ${s.root}`);
    }
    expect(await s.list("none/")).toEqual([]); // a folder of it that does not exist is empty
  });

  it("upload links the finished file into place: same inode, the source is consumed, an existing object is never replaced", async () => {
    const s = fresh();
    const tmp = s.tempDir("backup");
    const f = join(tmp, "bundle");
    writeFileSync(f, "payload");
    const ino = statSync(f).ino;
    await s.upload("snap/1.agentbak", f);
    expect(existsSync(f)).toBe(false);
    expect(statSync(join(s.root, "snap/1.agentbak")).ino).toBe(ino);
    const g = join(tmp, "other");
    writeFileSync(g, "other");
    const e = await s.upload("snap/1.agentbak", g).then(() => null, (x: NodeJS.ErrnoException) => x);
    expect(e?.code).toBe("EEXIST");
    expect(readFileSync(join(s.root, "snap/1.agentbak"), "utf8")).toBe("payload");
  });

  it("getRange is inclusive and stops at the end; head's etag changes when the object does", async () => {
    const s = fresh();
    await s.put("o", "0123456789");
    expect((await s.getRange("o", 2, 4)).toString()).toBe("234");
    expect((await s.getRange("o", 8, 100)).toString()).toBe("89");
    const h1 = (await s.head("o"))!;
    expect(h1.size).toBe(10);
    await s.put("o", "0123456789"); // same bytes, a new file
    expect((await s.head("o"))!.etag).not.toBe(h1.etag);
  });

  it("append adds lines in place", async () => {
    const s = fresh();
    await s.append("logs/chain.log", "a\n");
    await s.append("logs/chain.log", "b\n");
    expect((await s.get("logs/chain.log"))!.toString()).toBe("a\nb\n");
  });

  it("list: sorted keys under the prefix only, never temp files or the tmp folder", async () => {
    const s = fresh();
    for (const k of ["snaps/b", "snaps/a", "snaps/sub/c", "other/d", "snapshot"]) await s.put(k, k);
    writeFileSync(join(s.root, "snaps", ".tmp-b-123-0badf00d"), "half");
    const t = s.tempDir("restore");
    writeFileSync(join(t, "staged"), "x");
    expect(await s.list("snaps/")).toEqual(["snaps/a", "snaps/b", "snaps/sub/c"]);
    expect(await s.list("snap")).toEqual(["snaps/a", "snaps/b", "snaps/sub/c", "snapshot"]);
    expect(await s.list("")).not.toContain(expect.stringMatching(/^tmp\//));
  });

  it("tempDir is inside the repository (so uploads are links) and names this process", () => {
    const s = fresh();
    const t = s.tempDir("backup");
    expect(t.startsWith(join(s.root, "tmp", `backup-${process.pid}-`))).toBe(true);
    expect(statSync(t).mode & 0o777).toBe(0o700);
  });

  it("sweep removes staging folders and temp siblings of dead processes, and leaves this process's", async () => {
    const s = fresh();
    const dead = deadPid();
    const mine = s.tempDir("backup");
    mkdirSync(join(s.root, "tmp", `backup-${dead}-0123abcd`));
    await s.put("snaps/a", "a");
    writeFileSync(join(s.root, "snaps", `.tmp-a-${dead}-89abcdef`), "half");
    writeFileSync(join(s.root, "snaps", `.tmp-a-${process.pid}-89abcdef`), "mine");
    expect(await s.sweep()).toBe(2);
    expect(existsSync(mine)).toBe(true);
    expect(existsSync(join(s.root, "tmp", `backup-${dead}-0123abcd`))).toBe(false);
    expect(existsSync(join(s.root, "snaps", `.tmp-a-${dead}-89abcdef`))).toBe(false);
    expect(existsSync(join(s.root, "snaps", `.tmp-a-${process.pid}-89abcdef`))).toBe(true);
  });

  it("bad keys are refused (exit 2) before touching the disk", async () => {
    const s = fresh();
    const e = await failure(s.put("../escape", "x"));
    expect(e.code).toBe(2);
    expect(existsSync(join(s.root, "..", "escape"))).toBe(false);
  });
});
