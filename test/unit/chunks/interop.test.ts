/**
 * A stored chunk opens with stock tools: `age -d -i KEY chunk | zstd -d`
 * gives exactly the plaintext range it covers (its offset is the sum of the
 * lengths listed before it).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import { createCipheriv, createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalStore } from "../../../src/storage/local.js";
import { generateIdentity, identityString } from "../../../src/crypto/age.js";
import { ChunkStore } from "../../../src/chunks/store.js";

let tmp: string;
beforeAll(() => void (tmp = mkdtempSync(join(tmpdir(), "chunk-interop-"))));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe("a chunk and stock tools", () => {
  it("age -d -i KEY <chunk> | zstd -d is the plaintext range the manifest says it covers", async () => {
    const id = generateIdentity();
    const keyFile = join(tmp, "key.txt");
    writeFileSync(keyFile, identityString(id) + "\n", { mode: 0o600 });
    const home = join(tmp, "home");
    mkdirSync(home);
    const repo = new LocalStore(join(tmp, "repo"), { create: true });
    const cs = new ChunkStore(repo, "tenants/t/agents/a/chunks");
    // half keystream, half text: raw and compressed zstd blocks both
    const content = Buffer.concat([
      createCipheriv("aes-128-ctr", Buffer.alloc(16, 7), Buffer.alloc(16)).update(Buffer.alloc(3 << 20)),
      Buffer.from("policy: never refund over 500 without approval\n".repeat(60_000)),
    ]);
    writeFileSync(join(tmp, "adapter.bin"), content);
    const w = await cs.writer({ home, location: repo.root, scope: { tenant: "t", agent: "a" }, recipients: [id.recipient] });
    const r = await w.putFile(join(tmp, "adapter.bin"));
    expect(r.chunks.length).toBeGreaterThan(2);
    let offset = 0;
    for (const c of r.chunks) {
      const obj = join(repo.root, cs.key(c.id));
      const out = await execa("sh", ["-c", `age -d -i '${keyFile}' '${obj}' | zstd -d -q`], { encoding: "buffer", stripFinalNewline: false });
      const plain = Buffer.from(out.stdout as Uint8Array);
      expect(plain.length).toBe(c.length);
      expect(plain.equals(content.subarray(offset, offset + c.length))).toBe(true);
      offset += c.length;
    }
    expect(offset).toBe(content.length);
    expect(createHash("sha256").update(content).digest("hex")).toBe(r.sha256);
  });
});
