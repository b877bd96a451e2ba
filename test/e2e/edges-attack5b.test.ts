// Issue 32, the fifth attack (repository side): what a damaged or hostile repository can make agentbak say about the
// chunk store, the newest snapshot and an export's output, each case through the real binary on a real agent with a
// 3 MiB file stored as chunks in a folder repository. See docs/security-edges.md, "Fifth attack (repository side)".
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomBytes } from "node:crypto";
import { cpSync, existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, type TestAgent } from "../helpers.js";

const AGENT_DIR = "tenants/acme/agents/billing-agent";

/** An agent whose `models/adapter.bin` (3 MiB) is stored as chunks. */
async function chunkedAgent(): Promise<TestAgent> {
  const a = await makeAgent({ sizeMb: 1 });
  mkdirSync(join(a.dir, "models"));
  writeFileSync(join(a.dir, "models/adapter.bin"), randomBytes(3 * 1024 * 1024));
  const cfg = JSON.parse(readFileSync(a.config, "utf8"));
  writeFileSync(a.config, JSON.stringify({ ...cfg, files: [...cfg.files, "models/*.bin"] }, null, 2));
  return a;
}

const chunkFiles = (a: TestAgent) =>
  readdirSync(join(a.repo, AGENT_DIR, "chunks"), { recursive: true })
    .map(String)
    .filter((f) => /^[0-9a-f]{2}\/[0-9a-f]{64}$/.test(f));

describe("[E1] a chunk deleted behind the known-chunks index", () => {
  let a: TestAgent;
  beforeAll(async () => {
    a = await chunkedAgent();
    expect((await a.run(["backup"])).code).toBe(0);
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E1] the next backup stores it again: the new snapshot verifies (never committed naming a chunk the repository lacks)", async () => {
    const victim = chunkFiles(a)[0]!;
    rmSync(join(a.repo, AGENT_DIR, "chunks", victim));
    const b = await a.run(["backup", "--json"]);
    expect(b.code, b.stderr).toBe(0);
    expect(existsSync(join(a.repo, AGENT_DIR, "chunks", victim))).toBe(true);
    const v = await a.run(["verify", json(b).snapshot_id, "--identity", a.identity]);
    expect(v.code, v.stderr).toBe(0);
  });
});
