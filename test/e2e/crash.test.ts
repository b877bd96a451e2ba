// kill -9 at every instrumented step of backup and restore, and I/O faults
// (ENOSPC on a small tmpfs, a read-only filesystem): the repository lists only
// bundles that verify, a target holds exactly the old or the new state, and
// leftovers are swept by the next run.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { heldLeases, json, makeAgent, STORE, type TestAgent } from "../helpers.js";
import { CRASH_STEPS } from "../../dist/crashpoint.js";

let a: TestAgent;
beforeAll(async () => {
  a = await makeAgent({ sizeMb: 2 });
});
afterAll(() => a.cleanup());

async function listedAllVerify(t: TestAgent): Promise<number> {
  const s = json(await t.run(["snapshots", "--json"]));
  for (const e of s) {
    expect(e.status, e.problem).toBe("ok");
    const v = await t.run(["verify", e.snapshot_id, "--identity", t.identity]);
    expect(v.code, v.stderr).toBe(0);
  }
  return s.length;
}

describe("kill -9 during backup", () => {
  it.each(CRASH_STEPS.backup)("[T27] at %s: only verifiable bundles are listed; the next run sweeps leftovers and sequences stay unique", async (step) => {
    const r = await a.run(["backup", "--idempotency-key", `k-${step}`], { AGENTBAK_CRASH_STEP: step });
    expect(r.code).toBe(-1); // killed by a signal
    await listedAllVerify(a);
    const after = await a.run(["backup", "--json", "--idempotency-key", `k-${step}`]);
    expect(after.code, after.stderr).toBe(0);
    const rec = json(after);
    expect(await (await a.store()).head(rec.path.slice(a.repo.length + 1))).not.toBe(null);
    expect(a.leftovers()).toEqual([]);
    const seqs = json(await a.run(["snapshots", "--json"])).map((e: any) => e.sequence);
    expect(new Set(seqs).size).toBe(seqs.length);
    // the idempotency key gives exactly one snapshot, whichever side of the crash published it
    const again = json(await a.run(["backup", "--json", "--idempotency-key", `k-${step}`]));
    expect(again.snapshot_id).toBe(rec.snapshot_id);
  });
});

describe("kill -9 during restore", () => {
  it.each(CRASH_STEPS.restore)("[T28] at %s: the target is absent or a complete, suspended restore", async (step) => {
    const target = join(a.tmp, `crash-${step}`);
    const r = await a.run(["restore", "latest", "--target", target, "--yes", "--allow-rollback"], { AGENTBAK_CRASH_STEP: step });
    expect(r.code).toBe(-1);
    if (existsSync(target)) {
      // new state: every piece in place, integrity ok, and suspended
      expect(existsSync(join(target, ".agentbak/SUSPENDED"))).toBe(true);
      const ic = await execa("sqlite3", [join(target, "state/agent.sqlite"), "PRAGMA integrity_check"]);
      expect(ic.stdout).toBe("ok");
      expect(existsSync(join(target, "workspace/src/draft-reply.txt"))).toBe(true);
    }
    // the next restore sweeps the dead run's staging folder
    const again = await a.run(["restore", "latest", "--target", join(a.tmp, `after-${step}`), "--yes", "--allow-rollback"]);
    expect([0, 3]).toContain(again.code);
    expect(readdirSync(a.tmp).filter((e) => e.startsWith(".agentbak-restore-"))).toEqual([]);
  });
});

describe("I/O faults", () => {
  // the faults of a local disk under a local repository, or of a file helper: the same work in both test projects
  // (their repository is a local folder even in the "s3" one), so they run in the local project only
  const localDisk = it.skipIf(STORE === "s3");
  const mnt = () => join(a.tmp, "mnt");
  async function mount(opts: string): Promise<boolean> {
    mkdirSync(mnt(), { recursive: true });
    const r = await execa("mount", ["-t", "tmpfs", "-o", opts, "tmpfs", mnt()], { reject: false });
    return r.exitCode === 0;
  }
  const umount = () => execa("umount", [mnt()], { reject: false });
  /** A failure told plainly: exit 1, the errno and a path under `where`, one line, never 13, no stack or raw dump. */
  const plainIoFailure = (r: { code: number; stderr: string }, errno: string, where: string) => {
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toContain(errno);
    expect(r.stderr).toContain(where);
    expect(r.stderr).not.toMatch(/internal error|\n\s+at |triggerUncaughtException|Node\.js v/);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
  };

  localDisk("[T29] ENOSPC at every stage of a backup (tmpfs of growing size): exit 1 naming errno and path, staging and lock removed, nothing listed that does not verify", async (ctx) => {
    if (!(await mount("size=64k"))) return ctx.skip();
    await umount();
    // incompressible rows, so the payload and the bundle need as much room as the database copy
    const big = await makeAgent({ sizeMb: 1 });
    try {
      await execa("sqlite3", [join(big.dir, "state/agent.sqlite"), "CREATE TABLE noise(b BLOB); WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 400) INSERT INTO noise SELECT randomblob(4000) FROM c;"]);
      // a WAL database is read in place (no copy); a rollback-journal one is copied to staging first
      for (const mode of ["WAL", "DELETE"]) {
        await execa("sqlite3", [join(big.dir, "state/agent.sqlite"), `PRAGMA journal_mode=${mode};`]);
        const stages = new Set<string>();
        let succeeded = 0;
        // 2.9 MB of database: room for no copy, for the copy but not the payload, for the payload but not the bundle, for all
        for (const kb of [2000, 3400, 4000, 4600, 5200, 5800, 6400, 9000]) {
          expect(await mount(`size=${kb}k`)).toBe(true);
          try {
            const repo = join(mnt(), "repo");
            const { Repository } = await import("../../dist/repository/repository.js");
            await Repository.init(repo);
            const r = await big.run(["backup", "--repo", repo, "--json"]);
            if (r.code === 0) {
              succeeded++;
              expect(json(r).databases_read).toBe(mode === "WAL" ? "in-place" : "copy");
            } else {
              plainIoFailure(r, "ENOSPC", mnt());
              stages.add(/database state/.test(r.stderr) ? "database copy" : /payload\.age|\.agentbak|\.pageindex|\.json|audit/.test(r.stderr) ? "after the database copy" : "other");
            }
            expect(readdirSync(join(repo, "tmp"))).toEqual([]);
            expect(heldLeases(join(repo, "tenants/acme/agents/billing-agent/locks"))).toEqual([]);
            const listed = json(await big.run(["snapshots", "--repo", repo, "--json"]));
            for (const e of listed) expect(e.status, e.problem).toBe("ok");
            expect(listed.length).toBe(r.code === 0 ? 1 : listed.length);
          } finally {
            await umount();
          }
        }
        // in place, nothing of the database is written before the payload
        expect([...stages].sort(), mode).toEqual(mode === "WAL" ? ["after the database copy"] : ["after the database copy", "database copy"]);
        expect(succeeded, mode).toBeGreaterThan(0);
      }
    } finally {
      big.cleanup();
    }
  });

  localDisk("[T29] the one full-write helper every writer uses: on a full disk it fails with ENOSPC where a single write(2) comes back short", async (ctx) => {
    if (!(await mount("size=64k"))) return ctx.skip();
    try {
      const { openSync, writeSync, closeSync } = await import("node:fs");
      const { writeAll } = await import("../../dist/fsutil.js");
      const data = Buffer.alloc(256 * 1024, 1);
      const short = openSync(join(mnt(), "short"), "w");
      const n = writeSync(short, data);
      closeSync(short);
      expect(n).toBeLessThan(data.length); // what a bare writeSync leaves: a short file and no error
      rmSync(join(mnt(), "short"));
      const fd = openSync(join(mnt(), "full"), "w");
      try {
        expect(() => writeAll(fd, data)).toThrow(expect.objectContaining({ code: "ENOSPC" }));
        expect(() => writeAll(fd, data, 0, data.length, 0)).toThrow(expect.objectContaining({ code: "ENOSPC" }));
      } finally {
        closeSync(fd);
      }
    } finally {
      await umount();
    }
  });

  localDisk("[T29] the flush-behind file sink (bundles, restored components): every byte in order across short writes and background fdatasyncs, ENOSPC from a full disk, never over an existing file", async (ctx) => {
    const { FlushBehindFile } = await import("../../dist/fsutil.js");
    const { pipeline } = await import("node:stream/promises");
    const { Readable } = await import("node:stream");
    const { randomBytes } = await import("node:crypto");
    // odd-sized chunks, a flush every 10,000 bytes: many background fdatasyncs overlap the writes
    const chunks = Array.from({ length: 400 }, (_, i) => randomBytes(1 + ((i * 7919) % 9000)));
    const out = join(a.tmp, "flush-behind");
    await pipeline(Readable.from(chunks), new FlushBehindFile(out, 0o600, { every: 10_000 }));
    expect(readFileSync(out).equals(Buffer.concat(chunks))).toBe(true);
    await expect(pipeline(Readable.from([Buffer.from("x")]), new FlushBehindFile(out, 0o600))).rejects.toMatchObject({ code: "EEXIST" });
    expect(readFileSync(out).equals(Buffer.concat(chunks))).toBe(true);
    if (!(await mount("size=64k"))) return ctx.skip();
    try {
      const big = Array.from({ length: 8 }, () => randomBytes(32 * 1024));
      await expect(pipeline(Readable.from(big), new FlushBehindFile(join(mnt(), "full"), 0o600, { every: 16 * 1024 }))).rejects.toMatchObject({ code: "ENOSPC" });
    } finally {
      await umount();
    }
  });

  it("[T29] ENOSPC during restore: exit 1 naming errno and path, never 13; the target is not created and staging is removed", async (ctx) => {
    expect((await a.run(["backup"])).code).toBe(0);
    if (!(await mount("size=512k"))) return ctx.skip();
    try {
      const r = await a.run(["restore", "latest", "--target", join(mnt(), "t"), "--yes", "--allow-rollback"]);
      plainIoFailure(r, "ENOSPC", mnt());
      expect(readdirSync(mnt())).toEqual([]);
    } finally {
      await umount();
    }
  });

  it("[T29] EIO reading the bundle during restore: exit 1 naming errno and the bundle, never 13 (a good backup is not called corrupt)", async () => {
    const b = json(await a.run(["backup", "--json"]));
    // an injected read error on every stream read of the bundle (the decrypting pass streams it; the header
    // and digest passes read it with readSync and a FileHandle, which this does not touch)
    const inject = `data:text/javascript,import fs from "node:fs";const want=process.env.AGENTBAK_TEST_EIO;const fds=new Set();const open=fs.open;fs.open=function(p,...rest){const cb=rest.pop();return open.call(fs,p,...rest,(err,fd)=>{if(!err&&String(p)===want)fds.add(fd);cb(err,fd)})};const read=fs.read;fs.read=function(fd,...rest){if(fds.has(fd)){const cb=rest.pop();return process.nextTick(cb,Object.assign(new Error("EIO: i/o error, read"),{errno:-5,code:"EIO",syscall:"read"}))}return read.call(fs,fd,...rest)};`;
    const file = await a.file(b.path);
    const target = join(a.tmp, "eio-target");
    const r = await a.run(["restore", file, "--target", target, "--yes", "--allow-rollback"], { AGENTBAK_TEST_EIO: file }, { nodeArgs: ["--import", inject] });
    plainIoFailure(r, "EIO", file);
    expect(existsSync(target)).toBe(false);
    expect(readdirSync(a.tmp).filter((e) => e.startsWith(".agentbak-restore-"))).toEqual([]);
  });

  localDisk("[T29] EIO at each stage of a backup (injected read/write errors): exit 1 naming errno and the file, staging and lock removed, nothing new listed", async () => {
    // a local repository in both test projects: these are faults of a local disk
    const repo = join(a.tmp, "eio-repo");
    const { Repository } = await import("../../dist/repository/repository.js");
    await Repository.init(repo);
    expect((await a.run(["backup", "--repo", repo])).code).toBe(0);
    const before = json(await a.run(["snapshots", "--repo", repo, "--json"])).map((e: any) => e.snapshot_id);
    const inject = join(import.meta.dirname, "..", "fixtures", "eio-inject.mjs");
    const dbFile = join(a.dir, "state/agent.sqlite");
    expect(String((await execa("sqlite3", [dbFile, "PRAGMA journal_mode;"])).stdout)).toBe("wal");
    // [read or write, files it fails on, what the error line must name, the database's journal mode]
    const stages: [string, string, RegExp, string?][] = [
      ["read", "/state/agent\\.sqlite$", /database state: reading .*\/state\/agent\.sqlite: EIO/],
      ["read", "/state/agent\\.sqlite$", /database state: reading .*\/state\/agent\.sqlite: EIO/, "DELETE"],
      ["read", "/workspace/", /EIO: i\/o error, read \(.*\/workspace\//],
      ["read", "/memory/", /EIO: i\/o error, read \(.*\/memory\//],
      // only a rollback-journal database is copied to staging (a WAL one is read in place)
      ["write", "/db/[^/]+\\.sqlite$", /database state: copying to .*\/db\/state\.sqlite: EIO/, "DELETE"],
      ["write", "/workspace/", /EIO: i\/o error, write \(.*\/workspace\//],
      // the payload is written straight into the bundle file, then the head before it
      ["write", "\\.agentbak$", /\.agentbak: EIO|EIO.*\.agentbak/],
      ["write", "/locks/", /EIO: i\/o error, write \(.*\/locks\/agent\/\d{16}\.lease\)/],
      ["read", "agentbak-repository\\.json$", /EIO: i\/o error, read \(.*agentbak-repository\.json\)/],
    ];
    for (const [op, path, names, mode] of stages) {
      if (mode) await execa("sqlite3", [dbFile, `PRAGMA journal_mode=${mode};`]);
      const r = await a.run(["backup", "--repo", repo], { AGENTBAK_TEST_EIO_OP: op, AGENTBAK_TEST_EIO_PATH: path }, { nodeArgs: ["--import", inject] });
      if (mode) await execa("sqlite3", [dbFile, "PRAGMA journal_mode=WAL;"]);
      plainIoFailure(r, "EIO", "/");
      expect(r.stderr, `${op} ${path}`).toMatch(names);
      expect(readdirSync(join(repo, "tmp")), `${op} ${path}`).toEqual([]);
      expect(heldLeases(join(repo, "tenants/acme/agents/billing-agent/locks")), `${op} ${path}`).toEqual([]);
    }
    // an incremental that reads the live pages in place (no copy) names the database too
    expect(json(await a.run(["backup", "--repo", repo, "--incremental", "--json"])).databases_read).toBe("in-place");
    const inc = await a.run(["backup", "--repo", repo, "--incremental"], { AGENTBAK_TEST_EIO_OP: "read", AGENTBAK_TEST_EIO_PATH: "/state/agent\\.sqlite$" }, { nodeArgs: ["--import", inject] });
    plainIoFailure(inc, "EIO", "/");
    expect(inc.stderr).toMatch(/database state: reading .*\/state\/agent\.sqlite: EIO/);
    expect(readdirSync(join(repo, "tmp"))).toEqual([]);
    const after = json(await a.run(["snapshots", "--repo", repo, "--json"]));
    expect(after.map((e: any) => e.snapshot_id).slice(0, -1)).toEqual(before); // and the one good incremental
    for (const e of after) expect(e.status, e.problem).toBe("ok");
  });

  it("[T29] EROFS: backup into a repository on a read-only filesystem, and restore under one, exit 1 naming errno and writing nothing", async (ctx) => {
    expect((await a.run(["backup"])).code).toBe(0);
    if (!(await mount("size=4m"))) return ctx.skip();
    try {
      const repo = join(mnt(), "repo");
      const { Repository } = await import("../../dist/repository/repository.js");
      await Repository.init(repo);
      await execa("mount", ["-o", "remount,ro", mnt()]);
      plainIoFailure(await a.run(["backup", "--repo", repo]), "EROFS", mnt());
      const r = await a.run(["restore", "latest", "--target", join(mnt(), "t"), "--yes", "--allow-rollback"]);
      plainIoFailure(r, "EROFS", mnt());
      expect(readdirSync(mnt()).sort()).toEqual(["repo"]);
      expect(readdirSync(repo).sort()).toEqual(["agentbak-repository.json"]);
    } finally {
      await umount();
    }
  });
});
