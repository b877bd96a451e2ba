/**
 * The chunk store (src/chunks/store.ts) over a real local-folder store: files
 * and streams stored as encrypted chunks named by a keyed hash, stored once;
 * the known-chunks index and the stat cache that let an unchanged file cost
 * nothing; reading back with every check (digest, decryption, length, the
 * whole file's sha256); verification without keys; mark and sweep under a
 * lease, after which no host's index hands out a swept chunk.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createCipheriv, createHash } from "node:crypto";
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buffer } from "node:stream/consumers";
import { LocalStore } from "../../../src/storage/local.js";
import { generateIdentity, type AgeIdentity } from "../../../src/crypto/age.js";
import { ChunkStore, type ChunkRef, type Lease } from "../../../src/chunks/store.js";
import { type ChunkParams } from "../../../src/chunks/fastcdc.js";
import { AgentbakError } from "../../../src/errors.js";

const noise = (n: number, seed: string) => createCipheriv("aes-128-ctr", createHash("sha256").update(seed).digest().subarray(0, 16), Buffer.alloc(16)).update(Buffer.alloc(n));
const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");
const MiB = 2 ** 20;
/** small chunks, so a few MB make many of them */
const P: ChunkParams = { min: 16 * 1024, avg: 64 * 1024, max: 256 * 1024 };
const PREFIX = "tenants/acme/agents/billing-agent/chunks";
const SCOPE = { tenant: "acme", agent: "billing-agent" };

let tmp: string;
let repo: LocalStore;
let cs: ChunkStore;
let id: AgeIdentity;
let home: string;
let data: string;
const lease: Lease = { token: "test-token", assertHeld: async () => undefined };
/** every chunk object there now, by id: what the manifests of this agent sign, as WriterOptions.signed gives them */
const signedNow = async () => {
  const out = new Map<string, Set<string>>();
  for (const f of readdirSync(join(repo.root, PREFIX), { recursive: true }).map(String).filter((f) => /\/[0-9a-f]{64}$/.test(f))) out.set(f.slice(3), new Set([sha(readFileSync(join(repo.root, PREFIX, f)))]));
  return out;
};
const writer = (o: { recipients?: string[]; home?: string; params?: ChunkParams; signed?: () => Promise<Map<string, Set<string>>> } = {}) =>
  cs.writer({ home: o.home ?? home, location: repo.root, scope: SCOPE, recipients: o.recipients ?? [id.recipient], params: o.params ?? P, signed: o.signed ?? signedNow });
const stored = () => readdirSync(join(repo.root, PREFIX), { recursive: true }).filter((f) => /\/[0-9a-f]{64}$/.test(String(f))).length;
const readBack = async (list: ChunkRef[], whole: { sha256: string; size: number }) => buffer(cs.read(list, [id], { ...whole, label: "files/x" }));
const code = async (p: Promise<unknown>) => p.then(() => 0, (e) => (e instanceof AgentbakError ? e.code : -1));

beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), "chunk-store-"));
  repo = new LocalStore(join(tmp, "repo"), { create: true });
  cs = new ChunkStore(repo, PREFIX);
  id = generateIdentity();
  home = join(tmp, "home");
  mkdirSync(home);
  data = join(tmp, "data");
  mkdirSync(data);
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe("storing and reading back", () => {
  it("a file becomes encrypted chunks under the agent's folder, named by id; it reads back byte for byte", async () => {
    const content = Buffer.concat([noise(3 * MiB, "a"), Buffer.from("the agent's prompt ".repeat(50_000))]);
    writeFileSync(join(data, "a.bin"), content);
    const w = await writer();
    const r = await w.putFile(join(data, "a.bin"));
    w.save();
    expect(r.size).toBe(content.length);
    expect(r.sha256).toBe(sha(content));
    expect(r.chunks.length).toBeGreaterThan(10);
    expect(r.stats.newChunks).toBe(new Set(r.chunks.map((c) => c.id)).size);
    expect(r.chunks.reduce((n, c) => n + c.length, 0)).toBe(content.length);
    for (const c of r.chunks) {
      const obj = readFileSync(join(repo.root, PREFIX, c.id.slice(0, 2), c.id));
      expect(obj.subarray(0, 22).toString()).toBe("age-encryption.org/v1\n");
      expect(obj.length).toBe(c.size);
      expect(sha(obj)).toBe(c.sha256);
      // the id reveals nothing: it is not the plaintext's sha256
      expect(obj.includes(Buffer.from("the agent's prompt"))).toBe(false);
    }
    // the compressible part was compressed before encryption
    expect(r.stats.newBytes).toBeLessThan(content.length * 0.8);
    expect((await readBack(r.chunks, r)).equals(content)).toBe(true);
  });

  it("equal content is stored once: another file with the same bytes uploads nothing", async () => {
    const before = stored();
    const copy = join(data, "a-copy.bin");
    writeFileSync(copy, readFileSync(join(data, "a.bin")));
    const w = await writer();
    const r = await w.putFile(copy);
    expect(r.stats.newChunks).toBe(0);
    expect(r.stats.reusedChunks).toBe(r.chunks.length);
    expect(stored()).toBe(before);
  });

  it("a file with bytes inserted at the start reuses most of its chunks", async () => {
    const shifted = join(data, "a-shifted.bin");
    writeFileSync(shifted, Buffer.concat([Buffer.from("one new line\n"), readFileSync(join(data, "a.bin"))]));
    const w = await writer();
    const r = await w.putFile(shifted);
    w.save();
    expect(r.stats.reusedChunks / r.chunks.length).toBeGreaterThanOrEqual(0.9);
  });

  it("a stream in odd pieces is cut like the same bytes in a file (same ids)", async () => {
    const content = readFileSync(join(data, "a.bin"));
    async function* pieces() {
      for (let at = 0, i = 0; at < content.length; i++) {
        const n = [1, 7777, 65536, 300_001][i % 4]!;
        yield content.subarray(at, at + n);
        at += n;
      }
    }
    const w = await writer();
    const r = await w.putStream(pieces());
    const f = await w.putFile(join(data, "a-copy.bin"));
    expect(r.chunks).toEqual(f.chunks);
    expect(r.stats.newChunks).toBe(0);
  });

  it("an empty file is no chunks and reads back empty", async () => {
    writeFileSync(join(data, "empty"), "");
    const w = await writer();
    const r = await w.putFile(join(data, "empty"));
    expect(r.chunks).toEqual([]);
    expect((await readBack(r.chunks, r)).length).toBe(0);
  });

  it("other recipients, or another host's key, give other ids: nothing encrypted to the old recipients is reused", async () => {
    const w = await writer({ recipients: [id.recipient, generateIdentity().recipient] });
    const r = await w.putFile(join(data, "a.bin"));
    expect(r.stats.reusedChunks).toBe(0);
    const other = join(tmp, "other-home");
    mkdirSync(other);
    const w2 = await writer({ home: other });
    const r2 = await w2.putFile(join(data, "a.bin"));
    expect(r2.stats.reusedChunks).toBe(0);
    expect(new Set([...r.chunks, ...r2.chunks].map((c) => c.id)).size).toBe(r.chunks.length + r2.chunks.length);
  });

  it("a recipient that does not parse is a usage error (2) before anything is read", async () => {
    expect(await code(writer({ recipients: ["age1notarecipient"] }))).toBe(2);
  });
});

describe("the known-chunks index and the stat cache", () => {
  let file: string;
  let first: Awaited<ReturnType<Awaited<ReturnType<typeof writer>>["putFile"]>>;

  beforeAll(async () => {
    file = join(data, "adapter.bin");
    writeFileSync(file, noise(4 * MiB, "adapter"));
    // a file written just now may change again within its timestamp's tick: only one older than that is trusted
    const old = new Date(Date.now() - 60_000);
    utimesSync(file, old, old);
    await new Promise((r) => setTimeout(r, 2100)); // its ctime (set by utimes) must be old as well
    const w = await writer();
    first = await w.putFile(file);
    w.save();
  });

  it("an unchanged file is not read again: its chunk list comes from the stat cache", async () => {
    const w = await writer();
    const r = await w.putFile(file);
    expect(r.stats.fromStatCache).toBe(true);
    expect(r.stats.read).toBe(0);
    expect(r.chunks).toEqual(first.chunks);
    expect(r.sha256).toBe(first.sha256);
  });

  it("a file rewritten in place with its size and mtime put back is read again (ctime moved)", async () => {
    const b = readFileSync(file);
    b[123] ^= 1;
    const st = statSync(file);
    writeFileSync(file, b);
    utimesSync(file, st.atime, st.mtime);
    const w = await writer();
    const r = await w.putFile(file);
    w.save();
    expect(r.stats.fromStatCache).toBe(false);
    expect(r.sha256).toBe(sha(b));
    expect(r.stats.newChunks).toBe(1);
  });

  it("a file changed just before it was read is read again next time (racy entry)", async () => {
    const f = join(data, "fresh.bin");
    writeFileSync(f, noise(300_000, "fresh"));
    const w = await writer();
    await w.putFile(f);
    w.save();
    const again = await (await writer()).putFile(f);
    expect(again.stats.fromStatCache).toBe(false);
  });

  it("a file growing while it is read is stored as read and not remembered", async () => {
    const f = join(data, "growing.bin");
    writeFileSync(f, noise(2 * MiB, "growing"));
    const w = await writer();
    const source = w.putFile(f);
    appendFileSync(f, "more");
    const r = await source;
    // the append may land before or after the read: either the stored bytes are the whole file, or the change is reported
    if (r.size === 2 * MiB) expect(r.stats.changedWhileRead).toBe(true);
  });

  it("with the index lost, stored chunks are found by one listing and not uploaded again", async () => {
    rmSync(join(home, "cache"), { recursive: true, force: true });
    const before = stored();
    const w = await writer();
    const r = await w.putFile(join(data, "a.bin"));
    w.save();
    expect(r.stats.newChunks).toBe(0);
    expect(stored()).toBe(before);
    // and the refs are what the objects are
    for (const c of r.chunks) expect(sha(readFileSync(join(repo.root, PREFIX, c.id.slice(0, 2), c.id)))).toBe(c.sha256);
  });

  it("with the index lost, a chunk there whose bytes no manifest signs (a dead run's, or damaged in place) is written again, never adopted", async () => {
    rmSync(join(home, "cache"), { recursive: true, force: true });
    const before = stored();
    const w = await writer({ signed: async () => new Map() });
    const r = await w.putFile(join(data, "a.bin"));
    w.save();
    expect(r.stats.newChunks).toBe(r.chunks.length);
    expect(stored()).toBe(before);
    for (const c of r.chunks) expect(sha(readFileSync(join(repo.root, PREFIX, c.id.slice(0, 2), c.id)))).toBe(c.sha256);
  });

  it("a damaged index or stat cache is read as none", async () => {
    const dir = join(home, "cache", "chunks");
    for (const f of readdirSync(dir)) writeFileSync(join(dir, f), "garbage");
    const w = await writer();
    const r = await w.putFile(join(data, "a.bin"));
    expect(r.stats.newChunks).toBe(0);
    expect(r.sha256).toBe(sha(readFileSync(join(data, "a.bin"))));
  });

  it("a damaged chunk key is refused (12), never replaced silently", async () => {
    const bad = join(tmp, "bad-home");
    mkdirSync(bad);
    writeFileSync(join(bad, "chunk-key"), "not hex\n");
    expect(await code(writer({ home: bad }))).toBe(12);
  });
});

describe("checks on the way back, and without keys", () => {
  let r: { sha256: string; size: number; chunks: ChunkRef[] };
  let victim: string;

  beforeAll(async () => {
    writeFileSync(join(data, "v.bin"), noise(2 * MiB, "victim"));
    const w = await writer();
    r = await w.putFile(join(data, "v.bin"));
    w.save();
    victim = join(repo.root, PREFIX, r.chunks[3]!.id.slice(0, 2), r.chunks[3]!.id);
  });

  it("verify without keys: every chunk there with its size, and (read) its digest", async () => {
    expect(await cs.verify(r.chunks, { read: false })).toEqual({ chunks: r.chunks.length, bytes: r.chunks.reduce((n, c) => n + c.size, 0) });
    expect((await cs.verify([...r.chunks, ...r.chunks], { read: true })).chunks).toBe(r.chunks.length);
  });

  it("a flipped bit in a chunk: read and verify --read fail (13) naming the chunk; the HEAD-only check does not see it", async () => {
    const orig = readFileSync(victim);
    const bad = Buffer.from(orig);
    bad[bad.length - 100] ^= 0x40;
    writeFileSync(victim, bad);
    try {
      await expect(readBack(r.chunks, r)).rejects.toThrow(new RegExp(`chunk ${r.chunks[3]!.id} does not match its digest`));
      expect(await code(cs.verify(r.chunks, { read: true }))).toBe(13);
      await cs.verify(r.chunks, { read: false });
    } finally {
      writeFileSync(victim, orig);
    }
  });

  it("a missing chunk: read and verify fail (13) naming it", async () => {
    const orig = readFileSync(victim);
    rmSync(victim);
    try {
      await expect(readBack(r.chunks, r)).rejects.toThrow(/is missing from the repository/);
      await expect(cs.verify(r.chunks, { read: false })).rejects.toThrow(new RegExp(`1 of ${r.chunks.length} chunks failed: .*${r.chunks[3]!.id} is missing`));
    } finally {
      writeFileSync(victim, orig);
    }
  });

  it("a chunk swapped for another valid one of the same agent: refused by its digest before decryption (13)", async () => {
    const swapped = r.chunks.map((c, i) => (i === 3 ? { ...r.chunks[4]!, id: c.id } : c));
    expect(await code(readBack(swapped, r))).toBe(13);
  });

  it("chunks listed in another order: every chunk checks, the whole file's sha256 does not (13)", async () => {
    const reordered = [r.chunks[1]!, r.chunks[0]!, ...r.chunks.slice(2)];
    await expect(readBack(reordered, r)).rejects.toThrow(/sha256 of its chunks' plaintext does not match the manifest/);
  });

  it("a plaintext length that disagrees with the chunk's frame: 13 before a byte of it is given out", async () => {
    const lying = r.chunks.map((c, i) => (i === 0 ? { ...c, length: c.length + 1 } : i === 1 ? { ...c, length: c.length - 1 } : c));
    await expect(readBack(lying, r)).rejects.toThrow(/zstd frame holds \d+ bytes, expected/);
  });

  it("an identity that is not a recipient: 12", async () => {
    expect(await code(buffer(cs.read(r.chunks, [generateIdentity()], { ...r, label: "files/v.bin" })))).toBe(12);
  });

  it("a list that is not a list of chunk refs, or does not add up to the size: 13", async () => {
    expect(() => cs.read([{ ...r.chunks[0]!, id: "../../x" }], [id], { sha256: r.sha256, size: r.chunks[0]!.length, label: "x" })).toThrow(/not a valid chunk reference/);
    expect(() => cs.read(r.chunks, [id], { sha256: r.sha256, size: r.size + 1, label: "x" })).toThrow(/hold \d+ bytes, manifest says/);
    await expect(cs.verify([{ ...r.chunks[0]!, size: -1 }], { read: false })).rejects.toThrow(/not a valid chunk reference/);
  });
});

describe("mark and sweep", () => {
  it("deletes unreferenced chunks older than the grace period, keeps referenced and young ones", async () => {
    writeFileSync(join(data, "keep.bin"), noise(MiB, "keep"));
    writeFileSync(join(data, "drop.bin"), noise(MiB, "drop"));
    const w = await writer();
    const keep = await w.putFile(join(data, "keep.bin"));
    const drop = await w.putFile(join(data, "drop.bin"));
    w.save();
    const referenced = new Set(keep.chunks.map((c) => c.id));
    const young = await cs.sweep(referenced, lease, { graceMs: 3600_000 });
    expect(young.deleted).toBe(0);
    expect(young.young).toBe(young.listed - young.referenced);
    // an hour later everything unreferenced is old enough
    const later = await cs.sweep(referenced, lease, { graceMs: 3600_000, now: new Date(Date.now() + 2 * 3600_000) });
    expect(later.deleted).toBe(later.listed - later.referenced);
    expect(later.deletedBytes).toBeGreaterThan(0);
    expect((await cs.listIds()).size).toBe(referenced.size);
    for (const c of drop.chunks) expect(existsSync(join(repo.root, PREFIX, c.id.slice(0, 2), c.id))).toBe(false);
    await cs.verify(keep.chunks, { read: true });
  });

  it("after a sweep no host's index hands out a swept chunk: the same content is uploaded again", async () => {
    // this host's index still lists drop.bin's chunks, made before the sweep
    const w = await writer();
    const r = await w.putFile(join(data, "drop.bin"), { statCache: false });
    w.save();
    expect(r.stats.newChunks).toBe(r.chunks.length);
    await cs.verify(r.chunks, { read: true });
    // and the stat cache does not answer with chunks the index no longer knows
    writeFileSync(join(data, "drop2.bin"), noise(MiB, "drop2"));
    const old = new Date(Date.now() - 60_000);
    utimesSync(join(data, "drop2.bin"), old, old);
    await new Promise((res) => setTimeout(res, 2100));
    const w2 = await writer();
    const first = await w2.putFile(join(data, "drop2.bin"));
    w2.save();
    await cs.sweep(new Set(), lease, { graceMs: 0, now: new Date(Date.now() + 1000) });
    const w3 = await writer();
    const again = await w3.putFile(join(data, "drop2.bin"));
    expect(again.stats.fromStatCache).toBe(false);
    expect(again.stats.newChunks).toBe(first.chunks.length);
    await cs.verify(again.chunks, { read: true });
  });

  it("a lost lease stops the sweep before its next delete", async () => {
    writeFileSync(join(data, "lease.bin"), noise(MiB, "lease"));
    const w = await writer();
    await w.putFile(join(data, "lease.bin"));
    w.save();
    const n = (await cs.listIds()).size;
    let checks = 0;
    const losing: Lease = {
      token: "t2",
      assertHeld: async () => {
        if (++checks > 3) throw new AgentbakError(11, "lease lost: another process holds the agent");
      },
    };
    await expect(cs.sweep(new Set(), losing, { graceMs: 0, now: new Date(Date.now() + 1000) })).rejects.toThrow(/lease lost/);
    // the first check is before the sweep record; then one before each delete: two deleted, the third refused
    expect((await cs.listIds()).size).toBe(n - 2);
    const rec = JSON.parse(readFileSync(join(repo.root, PREFIX, "sweep.json"), "utf8"));
    expect(rec.token).toBe("t2");
  });
});

// the 96 MiB memory bound: test/e2e/chunk-store-memory.test.ts
