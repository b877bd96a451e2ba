// The age layer against the stock `age` binary and the age-encryption package.
import { describe, expect, it, beforeAll, afterAll } from "vitest";
import { execa } from "execa";
import fc from "fast-check";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, createReadStream, createWriteStream } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import { AgeDecryptStream, AgeEncryptStream, generateIdentity, identityString, parseIdentities, parseRecipient } from "../../../src/crypto/age.js";
import * as ageJs from "age-encryption";

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "agentbak-crypto-"));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function encrypt(data: Buffer, recipients: string[], cuts: number[] = []): Promise<Buffer> {
  const chunks: Buffer[] = [];
  const parts: Buffer[] = [];
  let at = 0;
  for (const c of [...cuts.filter((c) => c > 0 && c < data.length), data.length].sort((x, y) => x - y)) parts.push(data.subarray(at, (at = c)));
  await pipeline(Readable.from(parts.length ? parts : [data]), new AgeEncryptStream(recipients), async function* (src) {
    for await (const c of src) chunks.push(c as Buffer);
  });
  return Buffer.concat(chunks);
}

async function decrypt(data: Buffer, ids = [] as ReturnType<typeof generateIdentity>[], chunkSize = data.length || 1): Promise<Buffer> {
  const parts: Buffer[] = [];
  for (let i = 0; i < data.length; i += chunkSize) parts.push(data.subarray(i, i + chunkSize));
  const out: Buffer[] = [];
  await pipeline(Readable.from(parts), new AgeDecryptStream(ids), async function* (src) {
    for await (const c of src) out.push(c as Buffer);
  });
  return Buffer.concat(out);
}

describe("age payload encryption", () => {
  const sizes = [0, 1, 65535, 65536, 65537, 3 * 65536, 300_001];

  it.each(sizes)("our %i-byte file decrypts with the age CLI", async (n) => {
    const id = generateIdentity();
    const idFile = join(dir, `id-${n}.txt`);
    writeFileSync(idFile, identityString(id) + "\n");
    const data = randomBytes(n);
    const enc = await encrypt(data, [id.recipient]);
    writeFileSync(join(dir, "f.age"), enc);
    // stripFinalNewline off: random data ends in "\n" one time in 256
    const r = await execa("age", ["-d", "-i", idFile, join(dir, "f.age")], { encoding: "buffer", stripFinalNewline: false });
    expect(Buffer.from(r.stdout).equals(data)).toBe(true);
  });

  // the stream seals a chunk where it lies when a whole one (and a byte more) is at hand, and copies the rest aside:
  // every way the plaintext can arrive gives the same valid age file
  it.each([0, 1, 65536, 65537, 131072, 131073, 200_000])("our %i-byte file, fed in pieces that cross the 64 KiB chunks every way, decrypts with the age CLI", async (n) => {
    const id = generateIdentity();
    const idFile = join(dir, `id-p${n}.txt`);
    writeFileSync(idFile, identityString(id) + "\n");
    const data = randomBytes(n);
    const ways = [
      Array.from({ length: Math.ceil(n / 7) }, (_, i) => i * 7), // small pieces
      [65536, 131072], // exactly at chunk ends
      [1, 65537, 65538, 131073], // a byte past them
      [100, 70_000, 140_000], // a piece larger than a chunk after a partial one
    ];
    for (const cuts of ways) {
      const enc = await encrypt(data, [id.recipient], cuts);
      const chunks = Math.max(1, Math.ceil(n / 65536));
      writeFileSync(join(dir, "pieces.age"), enc);
      const r = await execa("age", ["-d", "-i", idFile, join(dir, "pieces.age")], { encoding: "buffer", stripFinalNewline: false });
      expect(Buffer.from(r.stdout).equals(data), `${n} bytes cut at ${cuts.slice(0, 5).join(",")}`).toBe(true);
      // payload = 16-byte nonce + the plaintext + a 16-byte tag per chunk, after the header
      const header = enc.indexOf("\n", enc.indexOf("\n---") + 1) + 1;
      expect(enc.length - header).toBe(16 + n + 16 * chunks);
      expect((await decrypt(enc, [id], 1000)).equals(data)).toBe(true);
    }
  });

  it.each(sizes)("the age CLI's %i-byte file decrypts here, fed whole and byte-chunked", async (n) => {
    const id = generateIdentity();
    const data = randomBytes(n);
    writeFileSync(join(dir, "p"), data);
    await execa("age", ["-r", id.recipient, "-o", join(dir, "p.age"), join(dir, "p")]);
    const enc = readFileSync(join(dir, "p.age"));
    expect((await decrypt(enc, [id])).equals(data)).toBe(true);
    expect((await decrypt(enc, [id], 7)).equals(data)).toBe(true);
  });

  it("interoperates with the age-encryption package (identity format and decryption)", async () => {
    const idStr = await ageJs.generateX25519Identity();
    const [id] = parseIdentities(idStr);
    expect(id!.recipient).toBe(await ageJs.identityToRecipient(idStr));
    const data = randomBytes(100_000);
    const d = new ageJs.Decrypter();
    d.addIdentity(idStr);
    const out = await d.decrypt(await encrypt(data, [id!.recipient]));
    expect(Buffer.from(out).equals(data)).toBe(true);
  });

  it("several recipients can each decrypt", async () => {
    const a = generateIdentity(), b = generateIdentity();
    const enc = await encrypt(Buffer.from("hello"), [a.recipient, b.recipient]);
    expect((await decrypt(enc, [b])).toString()).toBe("hello");
    expect((await decrypt(enc, [a])).toString()).toBe("hello");
  });

  it("refuses a file for another recipient, a flipped bit anywhere, and truncation", async () => {
    const id = generateIdentity();
    const enc = await encrypt(randomBytes(70_000), [id.recipient]);
    await expect(decrypt(enc, [generateIdentity()])).rejects.toThrow(/no identity matched/);
    for (const off of [5, 30, 60, 100, enc.indexOf("---") + 5, enc.length - 1, enc.length - 20_000]) {
      const bad = Buffer.from(enc);
      bad[off]! ^= 0x01;
      await expect(decrypt(bad, [id])).rejects.toThrow();
    }
    await expect(decrypt(enc.subarray(0, enc.length - 17), [id])).rejects.toThrow();
    await expect(decrypt(enc.subarray(0, 200), [id])).rejects.toThrow();
  });

  it("identities round-trip through the age-keygen format for arbitrary 32-byte keys (property)", () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 32, maxLength: 32 }), (bytes) => {
        const text = identityString({ secret: Buffer.from(bytes), recipient: "" });
        const [back] = parseIdentities(text);
        return /^AGE-SECRET-KEY-1[0-9A-Z]{58}$/.test(text) && back!.secret.equals(Buffer.from(bytes)) && parseRecipient(back!.recipient).length === 32;
      }),
    );
  });
});
