// The `files` stage reads a large file in bounded pieces (issue 35): the chunker, the hash, the encryption and the
// secret scan in one pass, so a backup's memory does not grow with the file's size; a token the chunker's pieces cut
// in two is still found, on its line. Through the real binary, with real files.
import { createCipheriv, createHash } from "node:crypto";
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { makeAgent, type TestAgent } from "../helpers.js";
import { chunkLengths } from "../../dist/chunks/fastcdc.js";

const MiB = 2 ** 20;
/**
 * Writes `n` bytes of seeded noise 8 MiB at a time: this process's memory stays small, as it must, since a child's
 * peak RSS (getrusage) starts from its parent's at the fork.
 */
function writeNoise(file: string, n: number, seed: string): void {
  const c = createCipheriv("aes-128-ctr", createHash("sha256").update(seed).digest().subarray(0, 16), Buffer.alloc(16));
  const fd = openSync(file, "w");
  try {
    for (let at = 0; at < n; at += 8 * MiB) writeSync(fd, c.update(Buffer.alloc(Math.min(8 * MiB, n - at))));
  } finally {
    closeSync(fd);
  }
}
let a: TestAgent;
let cfg: any;
const setFiles = (files: string[], scan: string) => writeFileSync(a.config, JSON.stringify({ ...cfg, files: [...cfg.files, ...files], secretScan: { ...cfg.secretScan, files: scan } }, null, 2));

beforeAll(async () => {
  a = await makeAgent({ agentId: "files-memory" });
  mkdirSync(join(a.dir, "models"));
  cfg = JSON.parse(readFileSync(a.config, "utf8"));
}, 120_000);
afterAll(() => a?.cleanup());

it("a 192 MiB file costs the backup no more memory than an 8 MiB one, give or take the pieces (peak RSS)", async () => {
  // the piece a file is read and scanned in is a chunk (at most 8 MiB) plus the reader's 4 MiB block: the large
  // file is 16 times the small one and many times a piece; before, it was read whole (readFileSync) and turned into
  // a string of the same size for the scan, so the peak grew by about twice the file (+370 MiB here)
  writeNoise(join(a.dir, "models/small.bin"), 8 * MiB, "small");
  setFiles(["models/small.bin"], "refuse");
  const small = await a.run(["backup", "--no-incremental"], {}, { rss: true, timeout: 300_000 });
  expect(small.code, small.stderr).toBe(0);
  writeNoise(join(a.dir, "models/large.bin"), 192 * MiB, "large");
  setFiles(["models/large.bin"], "refuse");
  const large = await a.run(["backup", "--no-incremental"], {}, { rss: true, timeout: 300_000 });
  rmSync(join(a.dir, "models/large.bin"));
  expect(large.code, large.stderr).toBe(0);
  const grew = (large.maxRssKb! - small.maxRssKb!) / 1024;
  expect(grew, `peak RSS ${small.maxRssKb! / 1024} MiB for 8 MiB, ${large.maxRssKb! / 1024} MiB for 192 MiB`).toBeLessThan(48);
}, 600_000);

it("a token the chunker cuts in two, in a 20 MiB line with no newline, is found on its line (14) and not captured", async () => {
  // a run of one byte never cuts by content: the chunker cuts at its largest chunk (8 MiB), where the token goes
  const bytes = Buffer.concat([Buffer.from("model header\n"), Buffer.alloc(20 * MiB, "q")]);
  const token = "AKIA" + "ABCDEFGHIJKLMNOP";
  const cuts = (b: Buffer) => chunkLengths(b).reduce((at: number[], n: number) => [...at, (at[at.length - 1] ?? 0) + n], []);
  const cut = cuts(bytes)[0]!;
  Buffer.from(` ${token} `).copy(bytes, cut - 9);
  // the test's own check: the file as written is still cut inside the token
  expect(cuts(bytes).some((c) => c > cut - 8 && c < cut - 8 + token.length)).toBe(true);
  writeFileSync(join(a.dir, "models/q.bin"), bytes);
  setFiles(["models/q.bin"], "refuse");
  const r = await a.run(["backup", "--no-incremental"], {}, { timeout: 300_000 });
  expect(r.code, r.stderr).toBe(14);
  expect(r.stderr).toMatch(/possible secret \(AWS access key id\) in files: models\/q\.bin line 2/);
  // a word run into it is no token: the same file with a letter before it backs up
  Buffer.from(`x${token} `).copy(bytes, cut - 9);
  writeFileSync(join(a.dir, "models/q.bin"), bytes);
  const ok = await a.run(["backup", "--no-incremental"], {}, { timeout: 300_000 });
  expect(ok.code, ok.stderr).toBe(0);
}, 600_000);
