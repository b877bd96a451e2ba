// The bundle is written payload first: payload.age goes to its place in the file as it is encrypted, after room
// kept for the head, and manifest.json (padded with layout_padding) fills that room once the manifest is known.
// A manifest that outgrows its room is written without padding and the payload moved after it. Both through the
// real binary, checked with stock tar, sha256sum and ssh-keygen as well as agentbak's own verify and restore.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { execa } from "execa";
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, type TestAgent } from "../helpers.js";
import { manifestOf } from "../craft.js";

const BLOCK = 512;
const blocks = (n: number) => Math.ceil(n / BLOCK) * BLOCK;

/** The members of a tar as stock tar lists them, and where each one's data starts (read from the headers here). */
async function members(file: string) {
  const listed = (await execa("tar", ["tf", file])).stdout.split("\n");
  const b = readFileSync(file);
  const at: Record<string, { offset: number; size: number }> = {};
  for (let off = 0; off + BLOCK <= b.length; ) {
    const h = b.subarray(off, off + BLOCK);
    if (h.every((x) => x === 0)) break;
    const name = h.subarray(0, 100).toString("latin1").replace(/\0.*$/s, "");
    const size = parseInt(h.subarray(124, 136).toString("latin1").replace(/\0.*$/s, "").trim(), 8);
    at[name] = { offset: off + BLOCK, size };
    off += BLOCK + blocks(size);
  }
  return { listed, at, bytes: b };
}

/** Checks a bundle with stock tools: sha256sum of payload.age, ssh-keygen -Y verify of the manifest. */
async function stockChecks(a: TestAgent, file: string, m: any) {
  const x = join(a.tmp, `x-${m.snapshot_id}`);
  mkdirSync(x);
  await execa("tar", ["xf", file], { cwd: x });
  expect(readdirSync(x).sort()).toEqual(["manifest.json", "manifest.sig", "payload.age"]);
  expect((await execa("sha256sum", ["payload.age"], { cwd: x })).stdout.slice(0, 64)).toBe(m.payload.sha256);
  const allowed = join(a.home, "allowed_signers");
  const principal = readFileSync(allowed, "utf8").trim().split(/\s+/)[0]!;
  const v = await execa("ssh-keygen", ["-Y", "verify", "-f", allowed, "-I", principal, "-n", "agentbak-manifest", "-s", "manifest.sig"], { cwd: x, inputFile: join(x, "manifest.json"), reject: false });
  expect(v.exitCode, v.stderr).toBe(0);
}

let a: TestAgent;
beforeAll(async () => {
  a = await makeAgent({ sizeMb: 2 });
}, 120_000);
afterAll(() => a.cleanup());

describe("bundle written payload first", () => {
  it("manifest.json fills the room kept for it (spaces only), and payload.age sits where it was written", async () => {
    const r = json(await a.run(["backup", "--json"]));
    const file = await a.file(r.path);
    const m = manifestOf(file);
    const { listed, at, bytes } = await members(file);
    expect(listed).toEqual(["manifest.json", "manifest.sig", "payload.age"]);
    expect(m.format_version).toBe(4);
    expect(m.layout_padding).toMatch(/^ +$/);
    // the room is whole blocks, and the manifest is exactly the room: nothing between manifest.sig and payload.age
    const room = at["manifest.json"]!.size;
    expect(room % BLOCK).toBe(0);
    expect(at["payload.age"]!.offset).toBe(BLOCK + room + BLOCK + blocks(at["manifest.sig"]!.size) + BLOCK);
    expect(at["payload.age"]!.size).toBe(m.payload.size);
    const payload = bytes.subarray(at["payload.age"]!.offset, at["payload.age"]!.offset + m.payload.size);
    expect(createHash("sha256").update(payload).digest("hex")).toBe(m.payload.sha256);
    // the end of the archive: the payload's padding and two zero blocks, nothing else
    expect(bytes.length).toBe(at["payload.age"]!.offset + blocks(m.payload.size) + 2 * BLOCK);
    expect(bytes.subarray(at["payload.age"]!.offset + m.payload.size).every((x) => x === 0)).toBe(true);
    await stockChecks(a, file, m);
    const v = await a.run(["verify", r.snapshot_id, "--identity", join(a.home, "age-identity.txt")]);
    expect(v.code, v.stderr).toBe(0);
  });

  it("a manifest larger than its room (300 open operations) is written unpadded, the payload moved after it, and restores", async () => {
    const db = new Database(join(a.dir, "state/agent.sqlite"));
    const task = db.prepare("SELECT task_id FROM tasks LIMIT 1").pluck().get() as string;
    const ins = db.prepare("INSERT INTO deliveries (delivery_id, task_id, idempotency_key, status, provider_receipt, attempted_at, delivered_at) VALUES (?, ?, ?, 'attempted', NULL, ?, NULL)");
    for (let i = 0; i < 300; i++) ins.run(`dlv-layout-${i}`, task, `idem-layout-${i}-${"k".repeat(40)}`, Date.now());
    db.close();
    const r = json(await a.run(["backup", "--no-incremental", "--json"]));
    const file = await a.file(r.path);
    const m = manifestOf(file);
    expect(m.open_operations.length).toBeGreaterThanOrEqual(300);
    expect(m.layout_padding).toBeUndefined();
    const { listed, at, bytes } = await members(file);
    expect(listed).toEqual(["manifest.json", "manifest.sig", "payload.age"]);
    expect(at["manifest.json"]!.size).toBeGreaterThan(30_000);
    expect(at["payload.age"]!.offset).toBe(BLOCK + blocks(at["manifest.json"]!.size) + BLOCK + blocks(at["manifest.sig"]!.size) + BLOCK);
    expect(bytes.length).toBe(at["payload.age"]!.offset + blocks(m.payload.size) + 2 * BLOCK);
    await stockChecks(a, file, m);
    // nothing left beside the bundle in the staging folder (the moved copy replaced the first file)
    expect(readdirSync(join(a.dir, "backups", "tmp")).filter((f) => !f.startsWith("."))).toEqual([]);
    const target = join(a.tmp, "restored-big-manifest");
    const rs = await a.run(["restore", r.snapshot_id, "--target", target, "--yes", "--allow-rollback"]);
    expect([0, 3], rs.stderr).toContain(rs.code);
    const back = new Database(join(target, "state/agent.sqlite"), { readonly: true });
    expect(back.prepare("SELECT count(*) FROM deliveries WHERE delivery_id LIKE 'dlv-layout-%'").pluck().get()).toBe(300);
    back.close();
    // the next backup sizes its room from this manifest: written in place again, padded
    const next = json(await a.run(["backup", "--json"]));
    const nm = manifestOf(await a.file(next.path));
    expect(nm.open_operations.length).toBe(m.open_operations.length);
    expect(nm.layout_padding).toMatch(/^ +$/);
  });
});
