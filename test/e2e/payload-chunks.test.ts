// payload.chunks: the sha256 of each 4 MiB of payload.age and their root, which verify hashes on two threads
// (this one and a worker, each taking the next chunk). A payload of many chunks, through the real binary.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { execa } from "execa";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { BIN, json, makeAgent, ROOT, type TestAgent } from "../helpers.js";
import { fileChunksSha256 } from "../../src/bundle/chunks.js";
import { readChunk, readChunkSync, Truncated, type ChunkJob } from "../../src/bundle/chunk-table.js";
import { closeSync, openSync, readSync } from "node:fs";
import { open } from "node:fs/promises";
import { craft, manifestOf } from "../craft.js";

const CHUNK = 4 << 20;
let a: TestAgent;
let file: string;
let m: any;

beforeAll(async () => {
  a = await makeAgent({ sizeMb: 2 });
  // 48 MiB that zstd can not shrink (sha256 in counter mode: the same bytes every run), so the payload spans ~12 chunks
  const db = new Database(join(a.dir, "state/agent.sqlite"));
  db.exec("CREATE TABLE attachments (id INTEGER PRIMARY KEY, body BLOB)");
  const ins = db.prepare("INSERT INTO attachments (body) VALUES (?)");
  for (let i = 0; i < 48; i++) {
    const mib = Buffer.alloc(1 << 20);
    for (let off = 0; off < mib.length; off += 32) createHash("sha256").update(`chunk test ${i}.${off}`).digest().copy(mib, off);
    ins.run(mib);
  }
  db.close();
  const r = await a.run(["backup", "--json"]);
  expect(r.code, r.stderr).toBe(0);
  file = await a.file(json(r).path);
  m = manifestOf(file);
}, 180_000);
afterAll(() => a.cleanup());

describe("payload chunk digests", () => {
  it("the manifest lists the chunks' root, and coreutils compute the same one", async () => {
    expect(m.payload.size).toBeGreaterThan(10 * CHUNK);
    expect(m.payload.chunks.size).toBe(CHUNK);
    const x = join(a.tmp, "x");
    mkdirSync(x);
    await execa("tar", ["xf", file], { cwd: x });
    const per = (await execa("sh", ["-c", `split -b ${CHUNK} --filter=sha256sum payload.age`], { cwd: x })).stdout.split("\n").map((l) => l.slice(0, 64));
    expect(per.length).toBe(Math.ceil(m.payload.size / CHUNK));
    expect(createHash("sha256").update(Buffer.from(per.join(""), "hex")).digest("hex")).toBe(m.payload.chunks.sha256);
  });

  it("verify passes, and names the chunk check", async () => {
    const v = json(await a.run(["verify", m.snapshot_id, "--json"]));
    expect(v.ok).toBe(true);
    expect(v.checks.find((c: any) => c.name === "payload").detail).toMatch(/^sha256 of each 4 MiB chunk \(root [0-9a-f]{16}…\) matches, \d+ bytes$/);
  });

  it("a flipped byte in the first, a middle or the last chunk is found (13), whichever thread hashes it", async () => {
    const b = readFileSync(file);
    const payloadAt = b.length - 1024 - Math.ceil(m.payload.size / 512) * 512; // the outer tar's two zero blocks, the payload padded to 512
    for (const [i, at] of [0, 5, Math.floor(m.payload.size / CHUNK)].map((c, i) => [i, payloadAt + c * CHUNK + 100] as const)) {
      const p = join(a.tmp, `flipped-${i}.agentbak`);
      const c = Buffer.from(b);
      c[at]! ^= 0x40;
      writeFileSync(p, c);
      const r = await a.run(["verify", p]);
      expect(r.code, `chunk flip ${i}: ${r.stderr}`).toBe(13);
      expect(r.stderr).toMatch(/payload\.age: digest mismatch/);
    }
  });

  it("a payload of 16 MiB or more lists each chunk's digest (format 7 on; 8 here, its database attested by the index digests), the same as coreutils' per chunk", async () => {
    expect([m.format_version, m.components.filter((c: any) => c.index_digest_checked !== undefined).length]).toEqual([8, 1]);
    const x = join(a.tmp, "x7");
    mkdirSync(x);
    await execa("tar", ["xf", file], { cwd: x });
    const per = (await execa("sh", ["-c", `split -b ${CHUNK} --filter=sha256sum payload.age`], { cwd: x })).stdout.split("\n").map((l) => l.slice(0, 64));
    expect(m.payload.chunks.digests).toEqual(per);
  });

  it("restore reads the payload once, each chunk checked before it is decrypted: a flipped byte in a middle or the last chunk is 13 naming the chunk, and nothing is placed", async () => {
    const b = readFileSync(file);
    const n = Math.ceil(m.payload.size / CHUNK);
    const payloadAt = b.length - 1024 - Math.ceil(m.payload.size / 512) * 512;
    for (const c of [5, n - 1]) {
      const p = join(a.tmp, `restore-flipped-${c}.agentbak`);
      const x = Buffer.from(b);
      x[payloadAt + c * CHUNK + 100]! ^= 0x40;
      writeFileSync(p, x);
      const target = join(a.tmp, `restore-flipped-${c}`);
      const r = await a.run(["restore", p, "--target", target, "--yes", "--allow-rollback"]);
      expect(r.code, r.stderr).toBe(13);
      // the message of the check made while reading (the separate pass before decrypting says "digest mismatch (not ...")
      expect(r.stderr.trim()).toBe(`agentbak: payload.age: digest mismatch in chunk ${c + 1} of ${n} (not the payload the manifest signed)`);
      expect(existsSync(target)).toBe(false);
    }
    // the bundle as written restores, its database whole
    const target = join(a.tmp, "restored-once");
    const r = await a.run(["restore", file, "--target", target, "--yes", "--allow-rollback"]);
    expect([0, 3], r.stderr).toContain(r.code);
    const db = new Database(join(target, "state/agent.sqlite"), { readonly: true });
    expect((db.prepare("SELECT count(*) AS n, sum(length(body)) AS bytes FROM attachments").get() as any)).toEqual({ n: 48, bytes: 48 << 20 });
    db.close();
  }, 120_000);

  it("verify --identity and drill read the payload once, each chunk checked as it is decrypted; a flipped byte is still 13 naming the chunk", async () => {
    // every read of every thread of one run, in files of their own per thread: the bytes read from `bundle`
    const traced = async (name: string, args: string[], bundle: string) => {
      const dir = join(a.tmp, `strace-${name}`);
      mkdirSync(dir);
      const s = await execa("strace", ["-ff", "-qq", "-y", "-s", "0", "-e", "trace=read,pread64,readv,preadv", "-o", join(dir, "t"), process.execPath, BIN, ...args], { cwd: a.dir, env: { ...a.env, NO_COLOR: "1" }, reject: false, stdin: "ignore" });
      let bytes = 0;
      for (const f of readdirSync(dir))
        for (const line of readFileSync(join(dir, f), "utf8").split("\n")) if (line.includes(`<${bundle}>`)) bytes += Math.max(0, Number(/= (-?\d+)$/.exec(line)?.[1] ?? 0));
      return { code: s.exitCode, stdout: String(s.stdout), stderr: String(s.stderr), bytes };
    };
    const spec = join(ROOT, "drills", "checks-only.json");
    const v = await traced("verify", ["verify", file, "--identity", a.identity, "--json"], file);
    expect(v.code, v.stderr).toBe(0);
    // the payload once and the header: twice the payload before (its digest in a pass of its own, then decrypting it)
    expect(v.bytes).toBeGreaterThanOrEqual(m.payload.size);
    expect(v.bytes).toBeLessThan(m.payload.size + (1 << 20));
    const checks = JSON.parse(v.stdout).checks as { name: string; detail: string }[];
    expect(checks.slice(0, 4).map((c) => c.name)).toEqual(["signature", "manifest", "payload", "components"]);
    expect(checks[2]!.detail).toMatch(/^sha256 of each 4 MiB chunk \(root [0-9a-f]{16}…\) matches, \d+ bytes, each chunk checked as it was read, before it was decrypted$/);
    const d = await traced("drill", ["drill", file, "--spec", spec, "--identity", a.identity, "--no-report", "--json"], file);
    expect([0, 3], d.stderr).toContain(d.code);
    expect(d.bytes).toBeGreaterThanOrEqual(m.payload.size);
    expect(d.bytes).toBeLessThan(m.payload.size + (1 << 20));
    expect(JSON.parse(d.stdout).checks.find((c: any) => c.name === "components").ok).toBe(true);
    // a flipped byte in a middle chunk: found as it is read, before age sees it; the drill can not run (13), as when
    // the payload was hashed in a pass of its own, and its log says nothing passed
    const b = readFileSync(file);
    const n = Math.ceil(m.payload.size / CHUNK);
    const payloadAt = b.length - 1024 - Math.ceil(m.payload.size / 512) * 512;
    const flipped = join(a.tmp, "flipped-deep.agentbak");
    const x = Buffer.from(b);
    x[payloadAt + 5 * CHUNK + 100]! ^= 0x40;
    writeFileSync(flipped, x);
    const message = `payload.age: digest mismatch in chunk 6 of ${n} (not the payload the manifest signed)`;
    const bad = await a.run(["verify", flipped, "--identity", a.identity]);
    expect(bad.code, bad.stderr).toBe(13);
    expect(bad.stderr.trim()).toBe(`agentbak: ${message}`);
    const badDrill = await a.run(["drill", flipped, "--spec", spec, "--identity", a.identity, "--no-report", "--json"]);
    expect(badDrill.code, badDrill.stderr).toBe(13);
    expect(badDrill.stdout + badDrill.stderr).toContain(message);
    expect(badDrill.stdout).not.toMatch(/"ok":\s*true/);
  }, 180_000);

  it("a signed list that does not add up to the signed root, or one in a format-6 manifest, is refused (13) before any chunk is read", async () => {
    const bad = [
      ["list", (x: any) => (x.payload.chunks.digests = [...x.payload.chunks.digests].reverse()), /payload\.chunks\.digests: their root is not payload\.chunks\.sha256/],
      ["short", (x: any) => (x.payload.chunks.digests = x.payload.chunks.digests.slice(1)), /payload\.chunks\.digests lists \d+ chunks; a payload of \d+ bytes has \d+/],
      ["v6", (x: any) => (x.format_version = 6), /payload\.chunks\.digests in a format version 6 manifest \(added in version 7\)/],
    ] as const;
    const { readLayout } = await import("../../dist/bundle/outer.js");
    const l = readLayout(file);
    const payload = readFileSync(file).subarray(l.payloadOffset, l.payloadOffset + l.payloadSize);
    for (const [name, patch, msg] of bad) {
      const out = join(a.tmp, `list-${name}.agentbak`);
      await craft({ baseManifest: m, payloadAge: payload, keyFile: join(a.home, "signing-key"), out, patch: (x) => ((x.payload.chunks.digests = m.payload.chunks.digests), patch(x)) });
      const r = await a.run(["restore", out, "--target", join(a.tmp, `list-${name}`), "--yes", "--allow-rollback"]);
      expect(r.code, r.stderr).toBe(13);
      expect(r.stderr).toMatch(msg);
    }
  }, 120_000);

  it("a bundle cut short inside its payload is refused (13) when its layout is read, before any chunk is hashed", async () => {
    const p = join(a.tmp, "short.agentbak");
    writeFileSync(p, readFileSync(file));
    truncateSync(p, readFileSync(file).length - 1024 - 7 * CHUNK);
    const r = await a.run(["verify", p]);
    expect(r.code).toBe(13);
    expect(r.stderr.trim()).toBe("agentbak: bundle truncated inside payload.age");
  });

  // The chunk readers' own truncation path: the file shrinks after the bundle's layout was read. Real files, real reads.
  describe("a payload file shorter than its job", () => {
    const K = 64 << 10;
    const shortFile = (chunks: number) => {
      const p = join(a.tmp, `short-${chunks}.bin`);
      writeFileSync(p, Buffer.alloc(chunks * K + 100, 7));
      return p;
    };

    it("both readers stop at the first missing byte", async () => {
      const p = shortFile(2);
      const job: ChunkJob = { path: p, start: 0, size: 4 * K, chunkSize: K, next: new SharedArrayBuffer(4), table: new SharedArrayBuffer(4 * 32) };
      const buf = Buffer.alloc(K);
      const fd = openSync(p, "r");
      try {
        expect(readChunkSync(job, 1, buf, (b, got, len, at) => readSync(fd, b, got, len, at))).toHaveLength(K);
        expect(readChunkSync(job, 2, buf, (b, got, len, at) => readSync(fd, b, got, len, at))).toEqual(new Truncated(2 * K + 100));
      } finally {
        closeSync(fd);
      }
      const fh = await open(p, "r");
      try {
        const read = async (b: Buffer, got: number, len: number, at: number) => (await fh.read(b, got, len, at)).bytesRead;
        expect(await readChunk(job, 3, buf, read)).toEqual(new Truncated(3 * K));
      } finally {
        await fh.close();
      }
    });

    it("hashed on this thread alone, the error names the first missing byte (13)", async () => {
      const p = shortFile(3);
      await expect(fileChunksSha256(p, 0, 5 * K, K)).rejects.toMatchObject({ code: 13, message: `bundle truncated at byte ${3 * K + 100}` });
    });

    it("hashed on two threads, whichever one finds the end reports it (13)", async () => {
      const p = shortFile(10);
      // 16 chunks: the worker takes part; a chunk from 10 on is short, and either thread may be the one to read it
      for (let run = 0; run < 3; run++) {
        const e: any = await fileChunksSha256(p, 0, 16 * K, K).then(() => null, (x) => x);
        expect(e?.code).toBe(13);
        const at = Number(/^bundle truncated at byte (\d+)$/.exec(e.message)?.[1]);
        expect(at).toBeGreaterThanOrEqual(10 * K + 100);
        expect(at).toBeLessThan(16 * K);
      }
      // and a whole file of the same 16 chunks hashes to the root made of its chunks' digests
      const whole = join(a.tmp, "whole.bin");
      writeFileSync(whole, Buffer.alloc(16 * K, 7));
      const per = createHash("sha256").update(Buffer.alloc(K, 7)).digest();
      expect(await fileChunksSha256(whole, 0, 16 * K, K)).toBe(createHash("sha256").update(Buffer.concat(Array(16).fill(per))).digest("hex"));
    });
  });
});

describe("an incremental on a format-7 full snapshot", () => {
  it("restore reads the parent's payload once: its chunks are checked as it is decrypted, not hashed in a pass of their own first", async () => {
    const db = new Database(join(a.dir, "state/agent.sqlite"));
    db.prepare("UPDATE attachments SET body = zeroblob(100) WHERE id = 1").run();
    db.close();
    const r = await a.run(["backup", "--incremental", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    expect(json(r).parent).toBe(m.snapshot_id);
    // every read of every thread, each thread in a file of its own (no call split across lines), descriptors named
    const dir = join(a.tmp, "strace-inc");
    mkdirSync(dir);
    const target = join(a.tmp, "restored-inc");
    const s = await execa("strace", ["-ff", "-qq", "-y", "-s", "0", "-e", "trace=openat,read,pread64,readv,preadv", "-o", join(dir, "t"), process.execPath, BIN, "restore", json(r).snapshot_id, "--target", target, "--yes", "--allow-rollback"], { cwd: a.dir, env: { ...a.env, NO_COLOR: "1" }, reject: false, stdin: "ignore" });
    expect([0, 3], String(s.stderr)).toContain(s.exitCode);
    let bytes = 0;
    let opens = 0;
    for (const f of readdirSync(dir))
      for (const line of readFileSync(join(dir, f), "utf8").split("\n")) {
        if (line.startsWith("openat(") && line.includes(`"${file}"`)) opens++;
        else if (line.includes(`<${file}>`)) bytes += Math.max(0, Number(/= (-?\d+)$/.exec(line)?.[1] ?? 0));
      }
    // opened twice: its header read and checked once (verifyChain), its payload read once (decrypting it)
    expect(opens).toBe(2);
    // the whole payload once (and the header): twice the payload before (chain check, then decryption)
    expect(bytes).toBeGreaterThanOrEqual(m.payload.size);
    expect(bytes).toBeLessThan(m.payload.size + (1 << 20));
    const restored = new Database(join(target, "state/agent.sqlite"), { readonly: true });
    expect(restored.prepare("SELECT length(body) AS n FROM attachments WHERE id = 1").get()).toEqual({ n: 100 });
    restored.close();
    // a flipped byte in the parent's payload is still found before it is decrypted: 13 naming the link and the chunk
    const whole = readFileSync(file);
    const n = Math.ceil(m.payload.size / CHUNK);
    const payloadAt = whole.length - 1024 - Math.ceil(m.payload.size / 512) * 512;
    const flipped = Buffer.from(whole);
    flipped[payloadAt + 5 * CHUNK + 100]! ^= 0x40;
    writeFileSync(file, flipped);
    try {
      const bad = await a.run(["restore", json(r).snapshot_id, "--target", join(a.tmp, "restored-inc-bad"), "--yes", "--allow-rollback"]);
      expect(bad.code, bad.stderr).toBe(13);
      expect(bad.stderr.trim()).toBe(`agentbak: chain: ${m.snapshot_id}: payload.age: digest mismatch in chunk 6 of ${n} (not the payload the manifest signed)`);
      expect(existsSync(join(a.tmp, "restored-inc-bad"))).toBe(false);
    } finally {
      writeFileSync(file, whole);
    }
  }, 180_000);
});
