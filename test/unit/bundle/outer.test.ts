/**
 * The outer bundle container (src/bundle/outer.ts): the ustar headers it
 * writes are read by GNU tar; reading is strict (three regular members, in
 * order, named exactly, within their limits, then only the end-of-archive
 * zeros), each refusal a verification error (13) naming what is wrong; the
 * layout read through byte ranges (a remote object) is the one read from the
 * file, in a few reads that never touch the payload.
 */
import { afterAll, describe, expect, it } from "vitest";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BLOCK, parseLayout, readLayout, readLayoutRanges, tarBlocks, tarEnd, tarHeader, tarPadding } from "../../../src/bundle/outer.js";
import { AgentbakError } from "../../../src/errors.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-outer-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const MTIME = new Date("2026-12-06T12:00:00Z");

type M = { name: string; data: Buffer; type?: string; prefix?: string; size?: string };
/** A tar of these members, headers from tarHeader (altered when a member asks), with the end marker. */
function container(members: M[], end = tarEnd()): Buffer {
  const parts: Buffer[] = [];
  for (const m of members) {
    const h = tarHeader(m.name, m.data.length, MTIME);
    if (m.type || m.prefix || m.size) {
      if (m.type) h.write(m.type, 156, 1, "latin1");
      if (m.size) h.write(m.size, 124, 12, "latin1");
      if (m.prefix) h.write(m.prefix, 345, 155, "latin1");
      h.fill(" ", 148, 156);
      let sum = 0;
      for (const b of h) sum += b;
      h.write(sum.toString(8).padStart(6, "0") + "\0 ", 148, 8, "latin1");
    }
    parts.push(h, m.data, tarPadding(m.data.length));
  }
  return Buffer.concat([...parts, end]);
}
const manifest = Buffer.from('{"format":"agentbak-bundle"}');
const sig = Buffer.from("-----BEGIN SSH SIGNATURE-----\nx\n-----END SSH SIGNATURE-----\n");
const payload = Buffer.alloc(3000, 7);
const good = (): M[] => [
  { name: "manifest.json", data: manifest },
  { name: "manifest.sig", data: sig },
  { name: "payload.age", data: payload },
];
let n = 0;
const file = (b: Buffer) => {
  const p = join(tmp, `b${n++}.agentbak`);
  writeFileSync(p, b);
  return p;
};
const refusal = (b: Buffer) => {
  try {
    readLayout(file(b));
  } catch (e) {
    expect(e).toBeInstanceOf(AgentbakError);
    expect((e as AgentbakError).code).toBe(13);
    return (e as Error).message;
  }
  throw new Error("accepted");
};

describe("writing", () => {
  it("GNU tar lists and extracts what tarHeader/tarPadding/tarEnd make: names, sizes, mtime, bytes", () => {
    const p = file(container(good()));
    const listing = execFileSync("tar", ["--utc", "-tvf", p], { encoding: "utf8" }).trim().split("\n");
    expect(listing.map((l) => l.split(/\s+/).slice(2).join(" "))).toEqual([
      `${manifest.length} 2026-12-06 12:00 manifest.json`,
      `${sig.length} 2026-12-06 12:00 manifest.sig`,
      `${payload.length} 2026-12-06 12:00 payload.age`,
    ]);
    const out = join(tmp, "x");
    mkdirSync(out);
    execFileSync("tar", ["-xf", p, "-C", out]);
    expect(readFileSync(join(out, "payload.age")).equals(payload)).toBe(true);
    expect(readFileSync(join(out, "manifest.sig")).equals(sig)).toBe(true);
  });

  it("pads members to whole blocks", () => {
    expect([tarBlocks(0), tarBlocks(1), tarBlocks(512), tarBlocks(513)]).toEqual([0, 512, 512, 1024]);
    expect(tarPadding(700).length).toBe(324);
    expect(tarPadding(1024).length).toBe(0);
    expect(tarEnd().length).toBe(2 * BLOCK);
  });
});

describe("reading a bundle file", () => {
  it("finds the members, the payload's offset and size, without reading the payload into memory", () => {
    const b = container(good());
    const l = readLayout(file(b));
    expect(l.manifest.equals(manifest)).toBe(true);
    expect(l.signature).toBe(sig.toString("latin1"));
    expect(l.payloadSize).toBe(payload.length);
    expect(b.subarray(l.payloadOffset, l.payloadOffset + l.payloadSize).equals(payload)).toBe(true);
    expect(l.fileSize).toBe(b.length);
  });

  it.each<[string, () => Buffer, RegExp]>([
    ["an empty file", () => Buffer.alloc(0), /^bundle truncated at byte 0$/],
    ["a member missing", () => container(good().slice(0, 2)), /^bundle member payload.age missing$/],
    ["members out of order", () => container([good()[1]!, good()[0]!, good()[2]!]), /^bundle member 1 is "manifest.sig", expected manifest.json$/],
    ["a member under a prefix", () => container([{ ...good()[0]!, prefix: "evil" }, ...good().slice(1)]), /^bundle member 1 is "evil\/manifest.json", expected manifest.json$/],
    ["a member that is a folder", () => container([good()[0]!, { ...good()[1]!, type: "5" }, good()[2]!]), /^bundle member manifest.sig is not a regular file$/],
    ["a symlink member", () => container([good()[0]!, good()[1]!, { ...good()[2]!, type: "2" }]), /^bundle member payload.age is not a regular file$/],
    ["a manifest over 8 MiB", () => container([{ name: "manifest.json", data: Buffer.alloc(8 * 1024 * 1024 + 1, 0x20) }, ...good().slice(1)]), /^bundle member manifest.json is 8388609 bytes, over the 8388608-byte limit$/],
    ["a signature over 16 KiB", () => container([good()[0]!, { name: "manifest.sig", data: Buffer.alloc(16 * 1024 + 1) }, good()[2]!]), /^bundle member manifest.sig is 16385 bytes, over the 16384-byte limit$/],
    ["a payload cut short", () => container(good()).subarray(0, 5 * BLOCK + 100), /^bundle truncated inside payload.age$/],
    ["no end-of-archive marker", () => container(good(), Buffer.alloc(0)), /^bundle truncated: end-of-archive marker missing$/],
    ["a fourth member", () => container([...good(), { name: "extra", data: Buffer.from("x") }]), /^bundle has an extra member or trailing data$/],
    ["trailing bytes after the marker", () => Buffer.concat([container(good()), Buffer.from("junk")]), /^bundle has an extra member or trailing data$/],
  ])("refuses %s (13)", (_what, make, message) => {
    expect(refusal(make())).toMatch(message);
  });

  it("refuses a header whose checksum does not add up, and a size field that is not octal", () => {
    const b = container(good());
    b[BLOCK * 0 + 10] ^= 1; // a byte of manifest.json's name field
    expect(refusal(b)).toBe("bundle member manifest.json: tar header checksum mismatch");
    const c = container([{ ...good()[0]!, size: "0000000009a\0" }, ...good().slice(1)]);
    expect(refusal(c)).toBe("bundle member manifest.json: invalid tar size field");
  });

  it("more zero blocks after the marker are allowed; a FIFO named as the bundle is refused before any read", () => {
    const p = file(Buffer.concat([container(good()), Buffer.alloc(BLOCK * 4)]));
    expect(readLayout(p).payloadSize).toBe(payload.length);
    const fifo = join(tmp, "fifo.agentbak");
    execFileSync("mkfifo", [fifo]);
    expect(() => readLayout(fifo)).toThrow(/is a FIFO, not a regular file/);
  });
});

describe("reading through byte ranges", () => {
  it("gives the file's layout, in a few reads that skip a large payload", async () => {
    const big = [good()[0]!, good()[1]!, { name: "payload.age", data: Buffer.alloc(5 << 20, 3) }];
    const b = container(big);
    const reads: [number, number][] = [];
    const l = await readLayoutRanges("remote.agentbak", b.length, async (s, e) => {
      reads.push([s, e]);
      return b.subarray(s, e + 1);
    });
    const fromFile = parseLayout("remote.agentbak", b.length, (k, at) => b.subarray(at, at + k));
    expect(l).toEqual(fromFile);
    expect(reads.length).toBeLessThanOrEqual(3);
    const payloadStart = l.payloadOffset;
    const read = reads.reduce((s, [a, z]) => s + (z - a + 1), 0);
    expect(read).toBeLessThan(200 * 1024);
    expect(reads.every(([a, z]) => z < payloadStart + 64 * 1024 || a >= payloadStart + l.payloadSize)).toBe(true);
  });

  it("a large manifest is fetched as the header asks; a malformed container is the same 13 as from a file", async () => {
    const large = [{ name: "manifest.json", data: Buffer.alloc(300 * 1024, 0x20) }, good()[1]!, good()[2]!];
    const b = container(large);
    const l = await readLayoutRanges("r", b.length, async (s, e) => b.subarray(s, e + 1));
    expect(l.manifest.length).toBe(300 * 1024);
    const bad = Buffer.concat([container(good()), Buffer.from("junk")]);
    await expect(readLayoutRanges("r", bad.length, async (s, e) => bad.subarray(s, e + 1))).rejects.toMatchObject({ code: 13, message: "bundle has an extra member or trailing data" });
    await expect(readLayoutRanges("r", 0, async () => Buffer.alloc(0))).rejects.toMatchObject({ code: 13 });
  });
});
