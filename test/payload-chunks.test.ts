// payload.chunks: the sha256 of each 4 MiB of payload.age and their root, which verify hashes on two threads
// (this one and a worker, each taking the next chunk). A payload of many chunks, through the real binary.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { execa } from "execa";
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, type TestAgent } from "./helpers.js";
import { manifestOf } from "./craft.js";

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

  it("a bundle cut short inside its payload is refused (13)", async () => {
    const p = join(a.tmp, "short.agentbak");
    writeFileSync(p, readFileSync(file));
    truncateSync(p, readFileSync(file).length - 1024 - 7 * CHUNK);
    const r = await a.run(["verify", p]);
    expect(r.code).toBe(13);
    expect(r.stderr).toMatch(/truncated|payload/);
  });
});
