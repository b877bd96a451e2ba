/**
 * One chunk as stored (src/chunks/seal.ts): ids keyed per host, agent and
 * recipient set (the same plaintext, another agent or another set of
 * recipients: another id); a frame that `zstd -d` reads and that says its
 * size; decompression that takes exactly the length the manifest says and
 * refuses anything else; an age file `age -d` opens, and NO_IDENTITY for a
 * key it was not sealed to.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFileSync } from "node:child_process";
import { createCipheriv, createHmac, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateIdentity, identityString, type AgeIdentity } from "../../../src/crypto/age.js";
import { agentChunkKey, chunkId, compressChunk, decompressChunk, decryptChunk, encryptChunk } from "../../../src/chunks/seal.js";

let tmp: string;
let id: AgeIdentity;
beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), "agentbak-seal-"));
  id = generateIdentity();
  writeFileSync(join(tmp, "key.txt"), identityString(id) + "\n", { mode: 0o600 });
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const plain = Buffer.concat([createCipheriv("aes-128-ctr", Buffer.alloc(16, 3), Buffer.alloc(16)).update(Buffer.alloc(40_000)), Buffer.from("row ".repeat(10_000))]);
const scope = { tenant: "acme", agent: "billing-agent" };

describe("chunk ids", () => {
  const host = randomBytes(32);
  it("an HMAC-SHA256 of the plaintext under the agent's key: equal chunks, equal ids", () => {
    const k = agentChunkKey(host, scope, ["age1b", "age1a"]);
    expect(k.length).toBe(32);
    expect(chunkId(k, plain)).toBe(createHmac("sha256", k).update(plain).digest("hex"));
    expect(chunkId(k, Buffer.from(plain))).toBe(chunkId(k, plain));
  });

  it("the recipients are a set (order and repeats do not matter); another set, agent, tenant or host key is another key", () => {
    const k = agentChunkKey(host, scope, ["age1b", "age1a"]);
    expect(agentChunkKey(host, scope, ["age1a", "age1b", "age1a"]).equals(k)).toBe(true);
    const others = [
      agentChunkKey(host, scope, ["age1a"]),
      agentChunkKey(host, { ...scope, agent: "other" }, ["age1a", "age1b"]),
      agentChunkKey(host, { ...scope, tenant: "other" }, ["age1a", "age1b"]),
      agentChunkKey(randomBytes(32), scope, ["age1a", "age1b"]),
      // the fields are kept apart: "acme"+"x" is not "acm"+"ex"
      agentChunkKey(host, { tenant: "acm", agent: "ebilling-agent" }, ["age1a", "age1b"]),
    ];
    for (const o of others) expect(o.equals(k)).toBe(false);
  });
});

describe("compression", () => {
  it("one zstd frame stock zstd reads, and that states its size", () => {
    const frame = compressChunk(plain);
    writeFileSync(join(tmp, "c.zst"), frame);
    expect(execFileSync("zstd", ["-dc", join(tmp, "c.zst")]).equals(plain)).toBe(true);
    expect(execFileSync("zstd", ["-lv", join(tmp, "c.zst")], { encoding: "utf8" })).toMatch(/Decompressed Size: .*\(80000 B\)/);
    expect(decompressChunk(frame, plain.length).equals(plain)).toBe(true);
    expect(decompressChunk(compressChunk(Buffer.alloc(0)), 0).length).toBe(0);
  });

  it("refuses another length, bytes after the frame, and what is not a frame", () => {
    const frame = compressChunk(plain);
    expect(() => decompressChunk(frame, plain.length - 1)).toThrow(`zstd frame holds ${plain.length} bytes, expected ${plain.length - 1}`);
    expect(() => decompressChunk(Buffer.concat([frame, Buffer.from("x")]), plain.length)).toThrow("1 bytes after the zstd frame");
    expect(() => decompressChunk(Buffer.from("not zstd at all"), 15)).toThrow(/^not a zstd frame/);
    // a frame made by stock zstd from a pipe does not state its size
    const piped = execFileSync("sh", ["-c", "printf hello | zstd -c"]);
    expect(() => decompressChunk(piped, 5)).toThrow("zstd frame holds an unknown number of bytes, expected 5");
  });
});

describe("encryption", () => {
  it("an age file that age -d opens; decryptChunk gives it back; another key is NO_IDENTITY", async () => {
    const sealed = await encryptChunk(compressChunk(plain), [id.recipient]);
    writeFileSync(join(tmp, "chunk"), sealed);
    const opened = execFileSync("sh", ["-c", `age -d -i key.txt chunk | zstd -dc`], { cwd: tmp });
    expect(opened.equals(plain)).toBe(true);
    expect(decompressChunk(await decryptChunk(sealed, [id]), plain.length).equals(plain)).toBe(true);
    const e = await decryptChunk(sealed, [generateIdentity()]).then(() => null, (x: NodeJS.ErrnoException) => x);
    expect(e?.code).toBe("NO_IDENTITY");
    const damaged = Buffer.from(sealed);
    damaged[damaged.length - 5] ^= 1;
    await expect(decryptChunk(damaged, [id])).rejects.toThrow();
    // a recipient that does not parse: an error, never a chunk sealed to nobody
    await expect((async () => encryptChunk(Buffer.from("x"), ["age1notarecipient"]))()).rejects.toThrow();
  });
});
