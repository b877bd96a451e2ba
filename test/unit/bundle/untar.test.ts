/**
 * The payload's own tar reader (bundle/untar.ts) against tar-stream's extract, which it replaced for restore:
 * the same members (name, type, size, bytes) and the same refusal, for tars tar-stream's pack writes and for
 * those tars with header bytes changed (checksum made right again, so the change reaches the parse) and cut
 * short, each fed in pieces of random sizes.
 */
import { createHash } from "node:crypto";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import * as tar from "tar-stream";
import { describe, expect, it } from "vitest";
import { decodeHeader, PayloadUntar, type TarHeader } from "../../../src/bundle/untar.js";

type Outcome = { members: string[]; error: string | null };

async function packed(entries: { name: string; data?: string; type?: tar.Headers["type"]; linkname?: string; pax?: Record<string, string> }[]): Promise<Buffer> {
  const pack = tar.pack();
  for (const e of entries) pack.entry({ name: e.name, type: e.type ?? "file", linkname: e.linkname, mtime: new Date(0), mode: 0o644, pax: e.pax }, e.data ?? "");
  pack.finalize();
  const parts: Buffer[] = [];
  for await (const b of pack) parts.push(b as Buffer);
  return Buffer.concat(parts);
}

const show = (h: { name: string; type: string | null; size: number | null | undefined }, bytes: Buffer[]) => `${h.name}|${h.type}|${h.size}|${createHash("sha256").update(Buffer.concat(bytes)).digest("hex").slice(0, 12)}`;

async function viaTarStream(buf: Buffer): Promise<Outcome> {
  const members: string[] = [];
  const extract = tar.extract();
  extract.on("entry", (h, stream, next) => {
    const bytes: Buffer[] = [];
    stream.on("data", (b: Buffer) => bytes.push(Buffer.from(b)));
    stream.on("end", () => (members.push(show(h, bytes)), next()));
    stream.on("error", () => undefined);
  });
  try {
    await pipeline(Readable.from([buf]), extract);
    return { members, error: null };
  } catch (e) {
    return { members, error: (e as Error).message };
  }
}

async function viaUntar(buf: Buffer, pieces: number[]): Promise<Outcome & { given: number; buffers: number; early: number }> {
  const members: string[] = [];
  let given = 0;
  // views handed to a member whose write has not completed, per buffer: a buffer given back with one is a bug
  const open = new Map<ArrayBufferLike, number>();
  let early = 0;
  const chunks: Buffer[] = [];
  for (let at = 0, i = 0; at < buf.length; i++) {
    const n = Math.max(1, pieces[i % pieces.length]!);
    const own = Buffer.allocUnsafeSlow(Math.min(n, buf.length - at)); // an ArrayBuffer each, as the worker's batches
    buf.copy(own, 0, at, at + own.length);
    chunks.push(own);
    at += n;
  }
  const untar = new PayloadUntar(
    (h: TarHeader) => {
      const bytes: Buffer[] = [];
      return {
        data: (v, done) => {
          bytes.push(Buffer.from(v));
          open.set(v.buffer, (open.get(v.buffer) ?? 0) + 1);
          setImmediate(() => (open.set(v.buffer, open.get(v.buffer)! - 1), done()));
        },
        ready: async () => undefined,
        end: async () => void members.push(show(h, bytes)),
        abort: async () => undefined,
      };
    },
    (b) => {
      given++;
      if (open.get(b.buffer)) early++;
    },
  );
  try {
    await pipeline(Readable.from(chunks), untar);
    await new Promise((resolve) => setImmediate(resolve)); // the last writes' callbacks (one turn each, above)
    return { members, error: null, given, buffers: chunks.length, early };
  } catch (e) {
    return { members, error: (e as Error).message, given, buffers: chunks.length, early };
  }
}

/** a deterministic generator (mulberry32): the cases are the same on every run */
function rng(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function fixSum(block: Buffer): void {
  let c = 8 * 32;
  for (let i = 0; i < 148; i++) c += block[i]!;
  for (let j = 156; j < 512; j++) c += block[j]!;
  block.write(c.toString(8).padStart(6, "0") + "\0 ", 148, "latin1");
}

const long = "state/" + "d".repeat(120) + "/memory.sqlite";

describe("payload tar reader (bundle/untar.ts) against tar-stream", () => {
  it("reads what tar-stream's pack writes: members, long names (pax), empty members, zero blocks, every buffer given back", async () => {
    const buf = await packed([
      { name: "files/a", data: "x".repeat(5000) },
      { name: long, data: "y".repeat(512) },
      { name: "files/empty", data: "" },
      { name: "files/b", data: "z" },
    ]);
    const want = await viaTarStream(buf);
    expect(want.error).toBeNull();
    expect(want.members.map((m) => m.split("|")[0])).toEqual(["files/a", long, "files/empty", "files/b"]);
    for (const pieces of [[buf.length], [1], [511, 1, 513], [4096], [7, 1000, 3]]) {
      const got = await viaUntar(buf, pieces);
      expect({ members: got.members, error: got.error }).toEqual(want);
      expect(got.given, `pieces ${pieces}`).toBe(got.buffers); // every buffer given back once its writes were done
      expect(got.early, `pieces ${pieces}`).toBe(0); // and none before
    }
  });

  it("refuses as tar-stream does: a bad checksum, an unknown format, a cut-off end, a long header over 4 MiB", async () => {
    const buf = await packed([{ name: "files/a", data: "x".repeat(700) }, { name: "files/b", data: "y" }]);
    const bad = Buffer.from(buf);
    bad[10] = 0x41; // name changed, checksum not
    const unknown = Buffer.from(buf);
    unknown.write("xxxxx\0", 257, "latin1");
    fixSum(unknown.subarray(0, 512));
    const huge = Buffer.from(buf);
    huge[156] = "x".charCodeAt(0);
    huge.write("77777777777\0", 124, "latin1");
    fixSum(huge.subarray(0, 512));
    for (const [what, b, re] of [
      ["checksum", bad, /Invalid tar header. Maybe the tar is corrupted/],
      ["format", unknown, /Invalid tar header: unknown format/],
      ["cut in a member", buf.subarray(0, 900), /Unexpected end of data/],
      ["cut in a header", buf.subarray(0, 1536 + 100), /Unexpected end of data/],
      ["long header", huge, /Header exceeds max size/],
    ] as const) {
      const want = await viaTarStream(b);
      expect(want.error, what).toMatch(re);
      const got = await viaUntar(b, [333]);
      expect({ members: got.members, error: got.error }, what).toEqual(want);
    }
  });

  it("symlinks, hard links, directories and fifos come out typed as tar-stream types them", async () => {
    const buf = await packed([
      { name: "files/x", type: "symlink", linkname: "/etc/passwd" },
      { name: "files/y", type: "link", linkname: "files/x" },
      { name: "files/d", type: "directory" },
      { name: "files/f", type: "fifo" },
    ]);
    const want = await viaTarStream(buf);
    expect(want.members.map((m) => m.split("|")[1])).toEqual(["symlink", "link", "directory", "fifo"]);
    expect(await viaUntar(buf, [100])).toMatchObject(want);
  });

  it("600 tars with header bytes changed (checksum made right) or cut: the same members and the same refusal", async () => {
    const base = await packed([
      { name: "files/a", data: "a".repeat(1000) },
      { name: long, data: "b".repeat(3000), pax: { comment: "c" } },
      { name: "files/c", data: "c".repeat(10) },
    ]);
    const r = rng(35);
    // the header blocks: at 0, the pax header and its body, the long member's header, then files/c's
    const heads: number[] = [];
    for (let at = 0; at < base.length; ) {
      const h = decodeHeader(base.subarray(at, at + 512));
      if (!h) break;
      heads.push(at);
      at += 512 + Math.ceil((h.size ?? 0) / 512) * 512;
    }
    expect(heads.length).toBe(4);
    let differed = 0;
    const stuck: string[] = [];
    for (let i = 0; i < 600; i++) {
      const b = Buffer.from(base);
      const at = heads[Math.floor(r() * heads.length)]!;
      // a field: name, mode, size, typeflag, magic, prefix; or the whole block's random byte
      const fields = [
        [0, 100],
        [124, 12],
        [156, 1],
        [257, 8],
        [345, 155],
        [0, 512],
      ] as const;
      const [off, len] = fields[Math.floor(r() * fields.length)]!;
      const n = 1 + Math.floor(r() * 3);
      for (let k = 0; k < n; k++) {
        const pos = at + off + Math.floor(r() * len);
        const pick = r();
        b[pos] = pick < 0.3 ? 0 : pick < 0.5 ? 0x30 + Math.floor(r() * 10) : pick < 0.6 ? 0x80 : Math.floor(r() * 256);
      }
      if (r() < 0.8) fixSum(b.subarray(at, at + 512));
      const cut = r() < 0.2 ? b.subarray(0, Math.floor(r() * b.length)) : b;
      const hang = <T,>(p: Promise<T>, who: string) => Promise.race([p, new Promise<never>((_, rej) => setTimeout(() => rej(new Error(`${who} hung on case ${i}`)), 1000).unref())]);
      // tar-stream never ends on a few of these (a member size that is no number): this reader must end on every one
      const got = await hang(viaUntar(cut, [1 + Math.floor(r() * 2000), 1 + Math.floor(r() * 700)]), "untar");
      const want = await hang(viaTarStream(cut), "tar-stream").catch(() => null);
      if (!want) {
        stuck.push(got.error ?? got.members.join(","));
        continue;
      }
      // tar-stream reads a long header whose size is no positive count as the next block (its own quirk): not compared
      let h: TarHeader | null = null;
      try {
        h = cut.length >= at + 512 ? decodeHeader(cut.subarray(at, at + 512)) : null;
      } catch {
        h = null;
      }
      const oddLong = h && ["pax-header", "pax-global-header", "gnu-long-path", "gnu-long-link-path"].includes(h.type ?? "") && !((h.size ?? 0) > 0);
      if (oddLong) continue;
      if (JSON.stringify({ members: got.members, error: got.error }) !== JSON.stringify(want)) differed++;
      expect({ members: got.members, error: got.error }, `case ${i}`).toEqual(want);
      expect(got.early, `case ${i}`).toBe(0);
    }
    expect(differed).toBe(0);
    // where tar-stream hung, this reader ended: with a refusal, or with a member restore refuses at its header (a
    // size that is no number, which no manifest declares; a directory with bytes, tar-stream's entry stream for
    // which never ends)
    expect(stuck.length).toBeGreaterThan(0);
    for (const s of stuck) expect(s).toMatch(/Invalid tar header|Unexpected end of data|\|(null|NaN)\||\|directory\|/);
  });
});
