/**
 * The durable file-system primitives (src/fsutil.ts) on real files: mkdir -p
 * that names the failing folder, files refused unless regular (a FIFO, a
 * folder, a device), atomic and exclusive writes that leave no temp file
 * behind, pid-named folders swept once their process is gone, and the
 * flush-behind stream (O_EXCL, a start offset, bytes exactly as written).
 */
import { afterAll, describe, expect, it } from "vitest";
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { once } from "node:events";
import {
  atPath,
  createFileExclusive,
  ensureDir,
  ensureDirIn,
  FlushBehindFile,
  fsyncTree,
  isInside,
  openRegular,
  pidAlive,
  pidDir,
  publishExclusive,
  readFileRegular,
  sweepDead,
  tempSibling,
  writeAll,
  writeCacheFile,
  writeCacheFileInSlices,
  writeFileAtomic,
} from "../../src/fsutil.js";
import { closeSync, openSync } from "node:fs";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-fsutil-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
let n = 0;
const fresh = () => {
  const d = join(tmp, `t${n++}`);
  mkdirSync(d);
  return d;
};
const errOf = (f: () => unknown) => {
  try {
    f();
  } catch (e) {
    return e as NodeJS.ErrnoException;
  }
  throw new Error("did not throw");
};
/** a pid that is certainly not running: a child that has exited and been reaped */
const deadPid = () => spawnSync("true").pid!;

describe("ensureDir / ensureDirIn", () => {
  it("makes every missing folder down to the one asked for, with the mode given; an existing folder is fine", () => {
    const d = fresh();
    const deep = join(d, "a", "b", "c");
    ensureDir(deep, 0o700);
    expect(statSync(deep).isDirectory()).toBe(true);
    expect(statSync(join(d, "a")).mode & 0o777).toBe(0o700 & ~process.umask());
    ensureDir(deep);
  });

  it("an ancestor that is a file is ENOTDIR; a path that is itself a file is ENOTDIR naming it", () => {
    const d = fresh();
    writeFileSync(join(d, "f"), "x");
    expect(errOf(() => ensureDir(join(d, "f", "sub"))).code).toBe("ENOTDIR");
    const e = errOf(() => ensureDir(join(d, "f")));
    expect(e.code).toBe("ENOTDIR");
    expect(e.path).toBe(join(d, "f"));
  });

  it("under /proc it fails instead of looping (Node's recursive mkdir loops forever there)", () => {
    const e = errOf(() => ensureDir("/proc/self/agentbak-test/x"));
    expect(typeof e.code).toBe("string");
    expect(existsSync("/proc/self/agentbak-test")).toBe(false);
  });

  it("ensureDirIn never makes the root: a staging folder moved away is ENOENT, not rebuilt where it was", () => {
    const d = fresh();
    const root = join(d, "staging");
    const e = errOf(() => ensureDirIn(root, join(root, "db")));
    expect(e.code).toBe("ENOENT");
    expect(existsSync(root)).toBe(false);
    mkdirSync(root);
    ensureDirIn(root, join(root, "db", "x"));
    expect(statSync(join(root, "db", "x")).isDirectory()).toBe(true);
  });
});

describe("openRegular / readFileRegular / atPath", () => {
  it("reads a regular file; a FIFO (no writer: returns at once), a folder and a device are refused naming the path", () => {
    const d = fresh();
    writeFileSync(join(d, "f"), "hello");
    expect(readFileRegular(join(d, "f"), "utf8")).toBe("hello");
    expect(readFileRegular(join(d, "f")).equals(Buffer.from("hello"))).toBe(true);
    execFileSync("mkfifo", [join(d, "fifo")]);
    const fifo = errOf(() => readFileRegular(join(d, "fifo")));
    expect([fifo.code, fifo.message]).toEqual(["ENOTREG", `${join(d, "fifo")} is a FIFO, not a regular file`]);
    expect(errOf(() => openRegular(d))).toMatchObject({ code: "EISDIR", path: d });
    expect(errOf(() => openRegular("/dev/zero"))).toMatchObject({ code: "ENOTREG", message: "/dev/zero is a device, not a regular file" });
    expect(errOf(() => openRegular(join(d, "none"))).code).toBe("ENOENT");
  });

  it("atPath gives a path to a system error that has none, and leaves other errors alone", () => {
    const sys = Object.assign(new Error("EIO: i/o error, read"), { code: "EIO", syscall: "read" });
    expect(errOf(() => atPath("/x/file", () => { throw sys; })).path).toBe("/x/file");
    const named = Object.assign(new Error("e"), { code: "EIO", syscall: "read", path: "/other" });
    expect(errOf(() => atPath("/x/file", () => { throw named; })).path).toBe("/other");
    const plain = new Error("not a system error");
    expect(errOf(() => atPath("/x/file", () => { throw plain; })).path).toBeUndefined();
    expect(atPath("/x", () => 7)).toBe(7);
  });
});

describe("atomic and exclusive writes", () => {
  it("writeFileAtomic replaces the file whole, with the mode given, and leaves no temp file", () => {
    const d = fresh();
    const p = join(d, "sub", "state.json");
    writeFileAtomic(p, "one", 0o600);
    writeFileAtomic(p, Buffer.from("two"), 0o600);
    expect(readFileSync(p, "utf8")).toBe("two");
    expect(statSync(p).mode & 0o777).toBe(0o600);
    expect(readdirSync(join(d, "sub"))).toEqual(["state.json"]);
  });

  it("writeFileAtomic over a folder fails and removes its temp file", () => {
    const d = fresh();
    mkdirSync(join(d, "taken"));
    writeFileSync(join(d, "taken", "x"), "");
    expect(() => writeFileAtomic(join(d, "taken"), "data")).toThrow();
    expect(readdirSync(d)).toEqual(["taken"]);
  });

  it("writeCacheFile writes a private file whole (no temp left)", () => {
    const d = fresh();
    writeCacheFile(join(d, "c", "known"), "abc");
    expect(readFileSync(join(d, "c", "known"), "utf8")).toBe("abc");
    expect(statSync(join(d, "c", "known")).mode & 0o777).toBe(0o600);
    expect(readdirSync(join(d, "c"))).toEqual(["known"]);
  });

  it("writeCacheFileInSlices writes the head last and every part in order, across slices and parts larger than one; a head of the wrong length leaves the old file", () => {
    const d = fresh();
    const p = join(d, "c", "sliced");
    // parts around the 1 MiB slice: small ones, one that straddles a slice's end, one larger than a slice, multi-byte UTF-8
    const parts = ["{", "é".repeat(300_000), "x".repeat(700_000), "→".repeat(500_000), "y".repeat(3 << 20), "}"];
    let seen = 0;
    function* counted() {
      for (const x of parts) {
        seen += x.length;
        yield x;
      }
    }
    // the head is asked for after the last part: it sees them all
    writeCacheFileInSlices(p, 5, counted(), () => `${String(seen % 10_000).padStart(4, "0")}\n`);
    const want = Buffer.concat([Buffer.from(`${String(parts.join("").length % 10_000).padStart(4, "0")}\n`), Buffer.from(parts.join(""))]);
    expect(readFileSync(p).equals(want)).toBe(true);
    expect(statSync(p).mode & 0o777).toBe(0o600);
    expect(() => writeCacheFileInSlices(p, 5, ["new"], () => "toolong\n")).toThrow(/not 5/);
    expect(readFileSync(p).equals(want)).toBe(true);
    expect(readdirSync(join(d, "c"))).toEqual(["sliced"]);
  });

  it("createFileExclusive never overwrites: the second is EEXIST, the first's bytes stay, no temp is left", () => {
    const d = fresh();
    const p = join(d, "marker");
    createFileExclusive(p, "first");
    expect(errOf(() => createFileExclusive(p, "second")).code).toBe("EEXIST");
    expect(readFileSync(p, "utf8")).toBe("first");
    expect(readdirSync(d)).toEqual(["marker"]);
  });

  it("publishExclusive moves a finished temp into place, and refuses an existing name (the temp stays for the caller)", () => {
    const d = fresh();
    const t = tempSibling(join(d, "bundle"));
    expect(t.startsWith(join(d, ".tmp-bundle-"))).toBe(true);
    writeFileSync(t, "payload");
    publishExclusive(t, join(d, "bundle"));
    expect(readdirSync(d)).toEqual(["bundle"]);
    writeFileSync(t, "other");
    expect(errOf(() => publishExclusive(t, join(d, "bundle"))).code).toBe("EEXIST");
    expect(readFileSync(join(d, "bundle"), "utf8")).toBe("payload");
  });

  it("writeAll writes every byte from an offset, at a position", () => {
    const d = fresh();
    const p = join(d, "f");
    writeFileSync(p, "0123456789");
    const fd = openSync(p, "r+");
    try {
      writeAll(fd, Buffer.from("xxABCxx"), 2, 3, 4);
    } finally {
      closeSync(fd);
    }
    expect(readFileSync(p, "utf8")).toBe("0123ABC789");
  });
});

describe("pid-named folders", () => {
  it("pidAlive: this process yes, a reaped child no", () => {
    expect(pidAlive(process.pid)).toBe(true);
    expect(pidAlive(deadPid())).toBe(false);
  });

  it("pidDir names the folder with this pid (mode 0700); sweepDead removes only entries of dead processes with the tag", () => {
    const d = fresh();
    const mine = pidDir(join(d, "tmp"), "restore");
    expect(mine).toMatch(new RegExp(`restore-${process.pid}-[0-9a-f]{8}$`));
    expect(statSync(mine).mode & 0o777).toBe(0o700);
    const dead = deadPid();
    mkdirSync(join(d, "tmp", `restore-${dead}-0123abcd`));
    writeFileSync(join(d, "tmp", `restore-${dead}-0123abcd`, "f"), "");
    mkdirSync(join(d, "tmp", `drill-${dead}-0123abcd`));
    mkdirSync(join(d, "tmp", `restore-notapid`));
    expect(sweepDead(join(d, "tmp"), "restore")).toBe(1);
    expect(readdirSync(join(d, "tmp")).sort()).toEqual([`drill-${dead}-0123abcd`, mine.split("/").pop(), "restore-notapid"].sort());
    expect(sweepDead(join(d, "missing"), "restore")).toBe(0);
  });

  it("sweepDead removes a dead writer's .tmp- file by the same rule", () => {
    const d = fresh();
    const dead = deadPid();
    writeFileSync(join(d, `.tmp-state.json-${dead}-deadbeef`), "");
    writeFileSync(join(d, `.tmp-state.json-${process.pid}-deadbeef`), "");
    expect(sweepDead(d, ".tmp-")).toBe(1);
    expect(readdirSync(d)).toEqual([`.tmp-state.json-${process.pid}-deadbeef`]);
  });
});

describe("FlushBehindFile", () => {
  const writeThrough = async (f: FlushBehindFile, parts: Buffer[]) => {
    for (const p of parts) if (!f.write(p)) await once(f, "drain");
    f.end();
    await once(f, "finish");
    await once(f, "close");
  };

  it("writes every byte in order from `start` (the bytes before it left as zeros), syncing behind as it goes", async () => {
    const d = fresh();
    const p = join(d, "out");
    const parts = Array.from({ length: 40 }, (_, i) => Buffer.alloc(10_000 + i, i));
    await writeThrough(new FlushBehindFile(p, 0o600, { start: 512, every: 64 * 1024 }), parts);
    const b = readFileSync(p);
    expect(b.length).toBe(512 + parts.reduce((s, x) => s + x.length, 0));
    expect(b.subarray(0, 512).every((x) => x === 0)).toBe(true);
    expect(b.subarray(512).equals(Buffer.concat(parts))).toBe(true);
    expect(statSync(p).mode & 0o777).toBe(0o600);
  });

  it("refuses an existing file (O_EXCL) and leaves it as it was", async () => {
    const d = fresh();
    const p = join(d, "out");
    writeFileSync(p, "keep");
    const f = new FlushBehindFile(p, 0o600);
    const [e] = (await once(f, "error")) as [NodeJS.ErrnoException];
    expect(e.code).toBe("EEXIST");
    expect(readFileSync(p, "utf8")).toBe("keep");
  });
});

describe("isInside", () => {
  it("is the folder itself or below it, never a sibling sharing its prefix", () => {
    expect(isInside("/a/b", "/a/b")).toBe(true);
    expect(isInside("/a/b/c", "/a/b")).toBe(true);
    expect(isInside("/a/bc", "/a/b")).toBe(false);
    expect(isInside("/a", "/a/b")).toBe(false);
  });
});

describe("fsyncTree", () => {
  const strace = spawnSync("strace", ["-V"]).status === 0;
  // strace sees the fsync calls themselves: one per file and folder and the root, from more than one thread at once
  it.skipIf(!strace)("fsyncs every file and folder under the root, then the root, many at once on libuv's threads", () => {
    const dir = mkdtempSync(join(tmpdir(), "agentbak-fsynctree-"));
    try {
      for (let i = 0; i < 200; i++) {
        ensureDir(join(dir, `d${i % 10}`));
        writeFileSync(join(dir, `d${i % 10}`, `f${i}`), `file ${i}\n`);
      }
      const log = join(dir, "..", `${dir.split("/").pop()}.strace`);
      const mod = join(import.meta.dirname, "../../dist/fsutil.js");
      execFileSync("strace", ["-f", "-qq", "-e", "trace=fsync", "-o", log, process.execPath, "--input-type=module", "-e", `await (await import(${JSON.stringify(mod)})).fsyncTree(${JSON.stringify(dir)})`]);
      // a call another thread's interrupts is logged as "fsync(N <unfinished ...>" and "<... fsync resumed>) = 0"
      const raw = readFileSync(log, "utf8");
      rmSync(log);
      const calls = raw.split("\n").filter((l) => /^\d+\s+fsync\(\d+/.test(l));
      expect(calls.length).toBe(200 + 10 + 1);
      // one fsync still running when another starts: only calls made at once are logged unfinished
      expect(raw).toMatch(/fsync\(\d+ <unfinished \.\.\.>/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("a folder that cannot be listed is an error, not a silent success", async () => {
    await expect(fsyncTree(join(tmpdir(), "agentbak-no-such-folder-" + process.pid))).rejects.toMatchObject({ code: "ENOENT" });
  });
});

