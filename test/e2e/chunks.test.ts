// Large files in the agent's chunk store (issue 35 phase 2, docs/chunk-store.md), through the real binary: a 3 MiB
// file is stored as chunks that a second backup reuses (no new object, a small bundle); restore fetches, checks and
// decrypts them byte-identical; a deleted or swapped chunk is 13 for verify and restore, naming the chunk and the file,
// with nothing left at the target. Runs against a folder and (the "s3" project) a bucket on the test gateway.
import { execa } from "execa";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BIN, json, makeAgent, pausedAtStep, STORE, type TestAgent } from "../helpers.js";

const CHUNKS = "tenants/acme/agents/billing-agent/chunks";
let a: TestAgent;
let adapter: Buffer;

beforeAll(async () => {
  a = await makeAgent();
  mkdirSync(join(a.dir, "models"));
  adapter = randomBytes(3 * 1024 * 1024);
  writeFileSync(join(a.dir, "models/adapter.bin"), adapter);
  const cfg = JSON.parse(readFileSync(a.config, "utf8"));
  writeFileSync(a.config, JSON.stringify({ ...cfg, files: [...cfg.files, "models/*.bin"] }, null, 2));
}, 120_000);
afterAll(() => a?.cleanup());

const manifestOf = async (path: string) => JSON.parse((await execa("tar", ["xOf", await a.file(path), "manifest.json"])).stdout);
const chunkKeys = async () => ((await (await a.store()).list(`${CHUNKS}/`)) as string[]).filter((k) => /\/[0-9a-f]{64}$/.test(k));
const backup = async () => {
  const r = await a.run(["backup", "--json"]);
  expect(r.code, r.stderr).toBe(0);
  return json(r);
};
const restoreInto = (dir: string, id = "latest") => a.run(["restore", id, "--target", join(a.tmp, dir), "--yes", "--allow-rollback"]);

describe("a large file stored as chunks", () => {
  let first: any;
  let second: any;
  let keys: string[];

  it("the first backup stores its chunks once; the manifest (format 5) lists them; the bundle holds the rest", async () => {
    first = await backup();
    const m = await manifestOf(first.path);
    expect(m.format_version).toBe(5);
    const c = m.components.find((x: any) => x.target === "models/adapter.bin");
    expect(c.kind).toBe("file");
    expect(c.size).toBe(adapter.length);
    expect(c.chunks.length).toBeGreaterThanOrEqual(2);
    expect(c.chunks.reduce((n: number, x: number[]) => n + (x[3] as number), 0)).toBe(adapter.length);
    // the small files are still in the payload, unchunked
    expect(m.components.filter((x: any) => x.kind === "file" && !x.chunks).map((x: any) => x.target).sort()).toEqual(["memory/preferences.json", "memory/rules.json"]);
    keys = await chunkKeys();
    expect(keys.map((k) => k.split("/").pop()).sort()).toEqual(c.chunks.map((x: string[]) => x[0]).sort());
    // the random 3 MiB are not in the bundle
    expect(first.size).toBeLessThan(adapter.length / 2);
    // the first backup remembers what it read, though its stat cache could not answer yet (no run had finished under
    // this scan policy): the second is then answered without a read
    const cache = join(a.home, "cache", "chunks");
    const stat = readdirSync(cache).find((f) => f.endsWith(".stat"))!;
    expect(Object.keys(JSON.parse(readFileSync(join(cache, stat), "utf8")).entries)).toEqual([join(a.dir, "models/adapter.bin")]);
  });

  it("a second backup of the unchanged file stores no new chunk, and its bundle is as small", async () => {
    second = await backup();
    expect(await chunkKeys()).toEqual(keys);
    expect(second.size).toBeLessThan(adapter.length / 2);
    const [m1, m2] = [await manifestOf(first.path), await manifestOf(second.path)];
    const list = (m: any) => m.components.find((x: any) => x.target === "models/adapter.bin").chunks;
    expect(list(m2)).toEqual(list(m1));
  });

  it("verify checks every chunk without keys, and with an identity decrypts them", async () => {
    const plain = await a.run(["verify", "latest", "--json"]);
    expect(plain.code, plain.stderr).toBe(0);
    expect(json(plain).checks.find((c: any) => c.name === "chunks").detail).toMatch(new RegExp(`^${keys.length} chunk\\(s\\) of 1 chunked component`));
    const deep = await a.run(["verify", "latest", "--identity", a.identity, "--json"]);
    expect(deep.code, deep.stderr).toBe(0);
    expect(json(deep).checks.find((c: any) => c.name === "components").detail).toMatch(/1 from the chunk store/);
  });

  it("restore writes the file byte-identical", async () => {
    const r = await restoreInto("restored");
    expect([0, 3], r.stderr).toContain(r.code);
    expect(readFileSync(join(a.tmp, "restored/models/adapter.bin")).equals(adapter)).toBe(true);
  });

  it("a drill restores the chunked file through the same checks", async () => {
    const r = await a.run(["drill", "latest", "--identity", a.identity, "--json"]);
    expect([0, 3], r.stderr).toContain(r.code);
    expect(json(r).checks.find((c: any) => c.name === "components")).toMatchObject({ ok: true, detail: expect.stringMatching(/1 from the chunk store/) });
  });

  it("a deleted chunk: verify 13 and restore 13 name the chunk and the file, nothing is left at the target", async () => {
    const store = await a.store();
    const victim = keys[1]!;
    const saved = await store.get(victim);
    await store.delete(victim);
    try {
      const id = victim.split("/").pop()!;
      const v = await a.run(["verify", "latest"]);
      expect(v.code).toBe(13);
      expect(v.stderr).toContain(`chunk ${id} is missing`);
      expect(v.stderr).toContain("models/adapter.bin");
      const r = await restoreInto("missing");
      expect(r.code).toBe(13);
      expect(r.stderr).toContain(`chunk ${id} is missing`);
      expect(r.stderr).toContain("models/adapter.bin");
      expect(existsSync(join(a.tmp, "missing"))).toBe(false);
    } finally {
      await store.put(victim, saved);
    }
    expect((await a.run(["verify", "latest"])).code).toBe(0);
  });

  it("a swapped chunk (another chunk's object under its name): refused before it is decrypted, 13, nothing at the target", async () => {
    const store = await a.store();
    const [x, y] = [keys[0]!, keys[1]!];
    const saved = await store.get(x);
    await store.put(x, await store.get(y));
    try {
      const id = x.split("/").pop()!;
      const v = await a.run(["verify", "latest", "--identity", a.identity]);
      expect(v.code).toBe(13);
      expect(v.stderr).toContain(`chunk ${id} does not match its digest in the manifest`);
      const r = await restoreInto("swapped");
      expect(r.code).toBe(13);
      expect(r.stderr).toContain(`chunk ${id} does not match its digest in the manifest`);
      expect(r.stderr).toContain("models/adapter.bin");
      expect(existsSync(join(a.tmp, "swapped"))).toBe(false);
    } finally {
      await store.put(x, saved);
    }
  });

  it("a changed file stores only the chunks that changed, and restores", async () => {
    const changed = Buffer.from(adapter);
    randomBytes(4096).copy(changed, changed.length - 8192);
    writeFileSync(join(a.dir, "models/adapter.bin"), changed);
    const b = await backup();
    const now = await chunkKeys();
    expect(now.length - keys.length).toBeGreaterThanOrEqual(1);
    expect(now.length - keys.length).toBeLessThan(keys.length);
    const r = await restoreInto("changed", b.snapshot_id);
    expect([0, 3], r.stderr).toContain(r.code);
    expect(readFileSync(join(a.tmp, "changed/models/adapter.bin")).equals(changed)).toBe(true);
  });

  it("compact of an incremental keeps the chunked file's list (its chunks stay where they are) and restores it", async () => {
    const inc = json(await a.run(["backup", "--incremental", "--json"]));
    expect(inc.kind).toBe("incremental");
    const before = await chunkKeys();
    const c = await a.run(["compact", inc.snapshot_id, "--identity", a.identity, "--json"]);
    expect(c.code, c.stderr).toBe(0);
    const full = json(c);
    expect(await chunkKeys()).toEqual(before);
    const list = async (id: string) => (await manifestOf(`${a.repo}/tenants/acme/agents/billing-agent/snapshots/${id}.agentbak`)).components.find((x: any) => x.target === "models/adapter.bin").chunks;
    expect(await list(full.snapshot_id)).toEqual(await list(inc.snapshot_id));
    const r = await restoreInto("compacted", full.snapshot_id);
    expect([0, 3], r.stderr).toContain(r.code);
    expect(readFileSync(join(a.tmp, "compacted/models/adapter.bin")).equals(readFileSync(join(a.dir, "models/adapter.bin")))).toBe(true);
  });
});

describe("an agent without large files", () => {
  it("still writes a format-4 bundle and no chunk store", async () => {
    const b = await makeAgent({ agentId: "small-agent" });
    try {
      const r = await b.run(["backup", "--json"]);
      expect(r.code, r.stderr).toBe(0);
      const m = JSON.parse((await execa("tar", ["xOf", await b.file(json(r).path), "manifest.json"])).stdout);
      expect(m.format_version).toBe(4);
      expect(m.components.some((c: any) => "chunks" in c)).toBe(false);
      expect(await (await b.store()).list("tenants/acme/agents/small-agent/chunks/")).toEqual([]);
    } finally {
      b.cleanup();
    }
  });
});

describe("agentbak export", () => {
  it("writes a self-contained format-4 bundle that stock tar, ssh-keygen, age and zstd open, with the chunked file inside", async () => {
    const out = join(a.tmp, "exported", "latest.agentbak");
    const r = await a.run(["export", "latest", "-o", out, "--identity", a.identity, "--json"]);
    expect(r.code, r.stderr).toBe(0);
    expect(json(r)).toMatchObject({ path: out, format_version: 4, inlined: 1 });
    expect((await execa("tar", ["tf", out])).stdout.split("\n")).toEqual(["manifest.json", "manifest.sig", "payload.age"]);
    const open = join(a.tmp, "exported", "open");
    mkdirSync(open);
    await execa("tar", ["xf", out], { cwd: open });
    const m = JSON.parse(readFileSync(join(open, "manifest.json"), "utf8"));
    expect(m.format_version).toBe(4);
    expect(m.parent).toBe(null);
    expect(m.components.some((c: any) => "chunks" in c)).toBe(false);
    const sig = await execa("ssh-keygen", ["-Y", "verify", "-f", join(a.home, "allowed_signers"), "-I", m.signer.principal, "-n", "agentbak-manifest", "-s", "manifest.sig"], { cwd: open, inputFile: join(open, "manifest.json") });
    expect(sig.stdout).toMatch(/^Good "agentbak-manifest" signature/);
    await execa("bash", ["-c", `age -d -i ${a.identity} payload.age | zstd -d | tar x`], { cwd: open });
    expect(readFileSync(join(open, "files/models/adapter.bin")).equals(readFileSync(join(a.dir, "models/adapter.bin")))).toBe(true);
    const c = m.components.find((x: any) => x.target === "models/adapter.bin");
    expect((await execa("sha256sum", ["files/models/adapter.bin"], { cwd: open })).stdout.slice(0, 64)).toBe(c.sha256);
  });

  it("the exported bundle restores with no repository and no chunk store beside it; the original bundle file alone can not (10)", async () => {
    const away = join(a.tmp, "away");
    mkdirSync(away);
    const exported = join(away, "exported.agentbak");
    expect((await a.run(["export", "latest", "-o", exported, "--identity", a.identity])).code).toBe(0);
    const r = await a.run(["restore", exported, "--target", join(a.tmp, "from-export"), "--yes", "--allow-rollback"]);
    expect([0, 3], r.stderr).toContain(r.code);
    expect(readFileSync(join(a.tmp, "from-export/models/adapter.bin")).equals(readFileSync(join(a.dir, "models/adapter.bin")))).toBe(true);
    // the repository's own bundle copied out alone: its chunks are not at hand
    const latest = json(await a.run(["snapshots", "--json"])).at(-1);
    const alone = join(away, `${latest.snapshot_id}.agentbak`);
    writeFileSync(alone, readFileSync(await a.file(latest.path)));
    const lone = await a.run(["restore", alone, "--target", join(a.tmp, "alone"), "--yes", "--allow-rollback"]);
    expect(lone.code).toBe(10);
    expect(lone.stderr).toMatch(/models\/adapter\.bin.*is stored as chunks in its repository.*agentbak export/);
    expect(existsSync(join(a.tmp, "alone"))).toBe(false);
  });

  it("never replaces a file: an existing --out is 2, untouched", async () => {
    const out = join(a.tmp, "taken.agentbak");
    writeFileSync(out, "mine\n");
    const r = await a.run(["export", "latest", "-o", out, "--identity", a.identity]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`--out ${out} exists`);
    expect(readFileSync(out, "utf8")).toBe("mine\n");
  });
});

describe("forget --prune sweeps the chunk store", () => {
  it("keeps every chunk a kept snapshot lists, and young ones; removes the rest once past the grace period", async () => {
    const listed = async (id: string) => (await manifestOf(`${a.repo}/tenants/acme/agents/billing-agent/snapshots/${id}.agentbak`)).components.flatMap((c: any) => (c.chunks ?? []).map((x: string[]) => x[0]));
    // the adapter changes again: the chunks only the snapshots in between list become unreferenced once they go
    const now = readFileSync(join(a.dir, "models/adapter.bin"));
    randomBytes(4096).copy(now, now.length - 8192);
    writeFileSync(join(a.dir, "models/adapter.bin"), now);
    await backup();
    const all = (await chunkKeys()).map((k) => k.split("/").pop()!).sort();
    // within the grace period (24 h by default) nothing unlisted goes: a backup elsewhere may be about to commit it
    const young = await a.run(["forget", "--keep-last", "1", "--prune", "--json"]);
    expect(young.code, young.stderr).toBe(0);
    // what forget kept (the newest, and the newest that passed a drill): the chunks they list stay
    const kept: string[] = json(young).kept.map((k: any) => k.snapshot_id);
    const keep = [...new Set((await Promise.all(kept.map(listed))).flat())].sort();
    expect(all.length).toBeGreaterThan(keep.length);
    expect(json(young).chunks).toMatchObject({ listed: all.length, referenced: keep.length, deleted: 0, young: all.length - keep.length });
    expect((await chunkKeys()).length).toBe(all.length);
    const r = await a.run(["forget", "--keep-last", "1", "--prune", "--prune-grace", "0s", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    expect(json(r).chunks).toMatchObject({ referenced: keep.length, deleted: all.length - keep.length });
    expect((await chunkKeys()).map((k) => k.split("/").pop()!).sort()).toEqual(keep);
    const v = await a.run(["verify", "latest", "--identity", a.identity]);
    expect(v.code, v.stderr).toBe(0);
    // the next backup learns of the sweep (its epoch) and stores what it needs again
    const b = await backup();
    expect((await a.run(["verify", b.snapshot_id])).code).toBe(0);
  });
});

describe("a sweep whose lease is lost", () => {
  it("stalled past its lease (SIGSTOP) while another process takes the agent lock: on SIGCONT it exits 11 and deletes no chunk", async () => {
    const store = await a.store();
    // an unlisted chunk (as a backup that died before its commit leaves one), due for deletion with no grace
    const orphan = `${CHUNKS}/ab/ab${"0".repeat(62)}`;
    await store.put(orphan, "an orphaned chunk");
    const before = await chunkKeys();
    const child = execa("node", [join(import.meta.dirname, "../../bin/agentbak.js"), "forget", "--keep-last", "100", "--prune", "--prune-grace", "0s"], {
      cwd: a.dir,
      env: { ...a.env, NO_COLOR: "1", AGENTBAK_LEASE_SECONDS: "3", AGENTBAK_PAUSE_STEP: "chunks-marked" },
      reject: false,
    });
    expect(await pausedAtStep(child.pid!)).toBe(true);
    try {
      await new Promise((r) => setTimeout(r, 3500)); // past its lease
      const other = await a.run(["backup", "--json"]);
      expect(other.code, other.stderr).toBe(0);
    } finally {
      process.kill(child.pid!, "SIGCONT");
    }
    const r = await child;
    expect(r.exitCode, String(r.stderr)).toBe(11);
    expect(String(r.stderr)).toMatch(/lost the agent lock/);
    expect(await chunkKeys()).toEqual(before);
    // with the lease held, the orphan goes
    expect((await a.run(["forget", "--keep-last", "100", "--prune", "--prune-grace", "0s"])).code).toBe(0);
    expect(await chunkKeys()).not.toContain(orphan);
  });
});

describe("copy carries the chunks", () => {
  it("sends each snapshot's chunks the destination lacks, checked on arrival; the copy verifies and restores there", async () => {
    const replica = join(a.tmp, "replica");
    const r = await a.run(["copy", "--from", a.repo, "--to", replica, "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const ids = json(await a.run(["snapshots", "--json"])).map((e: any) => e.snapshot_id);
    expect(json(r).copied).toEqual(ids);
    const { LocalStore } = await import("../../dist/storage/local.js");
    const sent = (await new LocalStore(replica).list(`${CHUNKS}/`)).filter((k: string) => /\/[0-9a-f]{64}$/.test(k)).sort();
    expect(sent).toEqual((await chunkKeys()).sort());
    const v = await a.run(["verify", "latest", "--repo", replica, "--identity", a.identity]);
    expect(v.code, v.stderr).toBe(0);
    const back = await a.run(["restore", "latest", "--repo", replica, "--target", join(a.tmp, "from-replica"), "--yes", "--allow-rollback"]);
    expect([0, 3], back.stderr).toContain(back.code);
    expect(readFileSync(join(a.tmp, "from-replica/models/adapter.bin")).equals(readFileSync(join(a.dir, "models/adapter.bin")))).toBe(true);
    // again: nothing to send
    expect(json(await a.run(["copy", "--from", a.repo, "--to", replica, "--json"])).copied).toEqual([]);
  });

  it("a chunk missing in the source: 13 naming it, and the snapshot is not committed in the destination", async () => {
    const store = await a.store();
    const latest = json(await a.run(["snapshots", "--json"])).at(-1).snapshot_id;
    const m = await manifestOf(`${a.repo}/tenants/acme/agents/billing-agent/snapshots/${latest}.agentbak`);
    const id = m.components.find((c: any) => c.chunks).chunks[0][0];
    const key = `${CHUNKS}/${id.slice(0, 2)}/${id}`;
    const saved = await store.get(key);
    await store.delete(key);
    try {
      const r = await a.run(["copy", "--from", a.repo, "--to", join(a.tmp, "replica2"), latest]);
      expect(r.code).toBe(13);
      expect(r.stderr).toContain(`chunk ${id} is missing`);
      const listed = await a.run(["snapshots", "--repo", join(a.tmp, "replica2"), "--json"]);
      expect(json(listed)).toEqual([]);
    } finally {
      await store.put(key, saved);
    }
  });
});

describe("a large state source (a LanceDB table) stored as chunks", () => {
  it("its captured stream goes into the chunk store; unchanged (the same table version), the next backup reads no row and adds no chunk; restore re-imports it; a new version is read again", async () => {
    const b = await makeAgent({ agentId: "vector-agent" });
    try {
      const lancedb = await import("@lancedb/lancedb");
      const ldb = await lancedb.connect(join(b.dir, "memory/lance"));
      const rows = Array.from({ length: 3000 }, (_, i) => ({ id: i, text: `memory ${i}`, vector: Array.from(randomBytes(256)).map((x) => x / 255) }));
      await ldb.createTable("memories", rows);
      ldb.close();
      const cfg = JSON.parse(readFileSync(b.config, "utf8"));
      writeFileSync(b.config, JSON.stringify({ ...cfg, sources: [{ name: "memory", kind: "lancedb", path: "memory/lance" }] }, null, 2));
      const first = json(await b.run(["backup", "--json"]));
      const m = JSON.parse((await execa("tar", ["xOf", await b.file(first.path), "manifest.json"])).stdout);
      expect(m.format_version).toBe(6);
      const mem = m.components.find((c: any) => c.kind === "lancedb");
      expect(mem.chunks.length).toBeGreaterThanOrEqual(1);
      expect(mem.fingerprint).toMatch(/^[0-9a-f]{64}$/);
      const prefix = "tenants/acme/agents/vector-agent/chunks/";
      const listed = async () => ((await (await b.store()).list(prefix)) as string[]).filter((k) => /\/[0-9a-f]{64}$/.test(k));
      const keys = await listed();
      expect(keys.length).toBe(new Set(mem.chunks.map((x: string[]) => x[0])).size);
      // the same version is not read again: the backup opens none of the table's data files (strace sees every open;
      // the fingerprint only stats them, so that one written in place is read again: edges-attack6)
      const log = join(b.tmp, "backup.strace");
      const r2 = await execa("strace", ["-f", "-qq", "-e", "trace=openat,open", "-o", log, process.execPath, BIN, "backup", "--json"], { cwd: b.dir, env: { ...b.env, NO_COLOR: "1" }, reject: false, stdin: "ignore" });
      expect(r2.exitCode, String(r2.stderr)).toBe(0);
      const opened = readFileSync(log, "utf8").split("\n").filter((l) => l.includes("memories.lance/data/"));
      expect(readFileSync(log, "utf8")).toContain("openat(");
      expect(opened).toEqual([]);
      const second = json({ code: 0, stdout: String(r2.stdout), stderr: "" });
      expect(await listed()).toEqual(keys);
      expect(second.size).toBeLessThan(mem.size);
      const m2 = JSON.parse((await execa("tar", ["xOf", await b.file(second.path), "manifest.json"])).stdout);
      expect(m2.components.find((c: any) => c.kind === "lancedb")).toEqual(mem);
      const r = await b.run(["restore", "latest", "--target", join(b.tmp, "restored"), "--yes"]);
      expect([0, 3], r.stderr).toContain(r.code);
      const back = await lancedb.connect(join(b.tmp, "restored/memory/lance"));
      const t = await back.openTable("memories");
      expect(await t.countRows()).toBe(3000);
      back.close();
      // a row added: a new version, read and stored again
      const w = await lancedb.connect(join(b.dir, "memory/lance"));
      await (await w.openTable("memories")).add([{ id: 3000, text: "memory 3000", vector: rows[0]!.vector }]);
      w.close();
      const third = json(await b.run(["backup", "--json"]));
      const m3 = JSON.parse((await execa("tar", ["xOf", await b.file(third.path), "manifest.json"])).stdout);
      const mem3 = m3.components.find((c: any) => c.kind === "lancedb");
      expect(mem3.fingerprint).not.toBe(mem.fingerprint);
      expect(mem3.records).toEqual({ memories: 3001 });
    } finally {
      b.cleanup();
    }
  });
});

describe("with Object Lock", () => {
  // a folder repository takes the config as it is; a bucket without Object Lock would refuse the retention
  it.skipIf(STORE === "s3")("does not chunk (a reused chunk's retention is not extended yet): the large file stays in the locked bundle, format 4", async () => {
    const original = readFileSync(a.config, "utf8");
    writeFileSync(a.config, JSON.stringify({ ...JSON.parse(original), objectLock: { mode: "governance", days: 1 } }, null, 2));
    try {
      const b = await backup();
      const m = await manifestOf(b.path);
      expect(m.format_version).toBe(4);
      const c = m.components.find((x: any) => x.target === "models/adapter.bin");
      expect(c.chunks).toBeUndefined();
      expect(b.size).toBeGreaterThan(adapter.length);
    } finally {
      writeFileSync(a.config, original);
    }
  });
});

describe("the secret scan of a large file the stat cache knows", () => {
  it("a file stored under secretScan off is read and scanned again when the policy becomes refuse (14), and after a refused run", async () => {
    const c = await makeAgent({ agentId: "scan-agent" });
    try {
      mkdirSync(join(c.dir, "models"));
      const big = randomBytes(3 * 1024 * 1024);
      Buffer.from("\nkey = AKIAABCDEFGHIJKLMNOP\n").copy(big, 1024 * 1024);
      writeFileSync(join(c.dir, "models/big.bin"), big);
      // past the stat cache's racy window (a file changed within 2 s of its read is never trusted)
      await new Promise((r) => setTimeout(r, 2500));
      const cfg = JSON.parse(readFileSync(c.config, "utf8"));
      const policy = (files: string) => writeFileSync(c.config, JSON.stringify({ ...cfg, files: [...cfg.files, "models/*.bin"], secretScan: { files } }, null, 2));
      policy("off");
      expect((await c.run(["backup"])).code).toBe(0);
      expect((await c.run(["backup"])).code).toBe(0);
      policy("refuse");
      for (let i = 0; i < 2; i++) {
        const r = await c.run(["backup"]);
        expect(r.code).toBe(14);
        expect(r.stderr).toMatch(/possible secret \(AWS access key id\) in files: models\/big\.bin/);
      }
    } finally {
      c.cleanup();
    }
  });
});

describe("small files packed into the chunk store (format 6)", () => {
  // 240 prompt-like files of 8-16 KB (words, so no secret pattern): 2.9 MB together (about three chunks), more than the 512 KiB from which they pack
  const PACK_CHUNKS = "tenants/acme/agents/pack-agent/chunks";
  let p: TestAgent;
  const words = ["agent", "policy", "refund", "ledger", "prompt", "escalate", "customer", "review", "tool", "limit", "invoice", "approve"];
  const prompt = (seed: number) => {
    let x = seed * 2654435761;
    const n = 8000 + (seed % 5) * 2000;
    const out: string[] = [];
    for (let len = 0; len < n; ) {
      x = (Math.imul(x, 1103515245) + 12345) >>> 0;
      const w = `${words[x % words.length]}${x % 97}`;
      out.push(w);
      len += w.length + 1;
    }
    return `${out.join(" ")}\n`;
  };
  const names = Array.from({ length: 240 }, (_, i) => `prompts/p${String(i).padStart(3, "0")}.md`);
  const chunkBytes = async () => {
    const store = await p.store();
    const keys = ((await store.list(`${PACK_CHUNKS}/`)) as string[]).filter((k) => /\/[0-9a-f]{64}$/.test(k));
    let bytes = 0;
    for (const k of keys) bytes += (await store.head(k)).size;
    return { keys: keys.sort(), bytes };
  };
  const manifest = async (path: string) => JSON.parse((await execa("tar", ["xOf", await p.file(path), "manifest.json"])).stdout);
  let first: any;
  let stored: { keys: string[]; bytes: number };

  beforeAll(async () => {
    p = await makeAgent({ agentId: "pack-agent" });
    mkdirSync(join(p.dir, "prompts"));
    names.forEach((n, i) => writeFileSync(join(p.dir, n), prompt(i + 1)));
    writeFileSync(join(p.dir, "prompts/empty.md"), "");
    const cfg = JSON.parse(readFileSync(p.config, "utf8"));
    writeFileSync(p.config, JSON.stringify({ ...cfg, files: [...cfg.files, "prompts/*.md"] }, null, 2));
  }, 120_000);
  afterAll(() => p?.cleanup());

  it("the first backup packs them: each lists the chunks its range touches, none is in the payload but the empty one", async () => {
    const r = await p.run(["backup", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    first = json(r);
    const m = await manifest(first.path);
    expect(m.format_version).toBe(6);
    const packed = m.components.filter((c: any) => c.target?.startsWith("prompts/") && c.chunks);
    expect(packed.map((c: any) => c.target).sort()).toEqual(names);
    const total = names.reduce((n, x) => n + readFileSync(join(p.dir, x)).length, 0);
    expect(total).toBeGreaterThan(512 * 1024);
    // path order: each file starts where the one before it ended, across chunk boundaries
    for (const c of packed) expect(c.chunk_skip + c.size).toBeLessThanOrEqual(c.chunks.reduce((n: number, x: number[]) => n + x[3]!, 0));
    expect(new Set(packed.flatMap((c: any) => c.chunks.map((x: string[]) => x[0]))).size).toBeGreaterThanOrEqual(2);
    // a file cut by a chunk boundary lists both chunks
    expect(packed.some((c: any) => c.chunks.length === 2)).toBe(true);
    // the payload's tar holds the database, not the 2.9 MB of prompts (nor the two memory files: they are small files too)
    const inPayload = m.components.filter((c: any) => !c.chunks).reduce((n: number, c: any) => n + c.size, 0);
    expect(m.payload.tar_size).toBeLessThan(inPayload + total / 2);
    expect(m.components.find((c: any) => c.target === "memory/rules.json").chunk_skip).toBeGreaterThanOrEqual(0);
    expect(m.components.find((c: any) => c.target === "prompts/empty.md")).toMatchObject({ size: 0 });
    expect(m.components.find((c: any) => c.target === "prompts/empty.md").chunks).toBeUndefined();
    stored = await chunkBytes();
    expect(stored.keys.length).toBeGreaterThanOrEqual(1);
  });

  it("a second backup with nothing changed in them writes no chunk byte", async () => {
    const r = await p.run(["backup", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    expect(await chunkBytes()).toEqual(stored);
    const [m1, m2] = [await manifest(first.path), await manifest(json(r).path)];
    const lists = (m: any) => m.components.filter((c: any) => c.chunk_skip !== undefined).map((c: any) => [c.target, c.chunk_skip, c.chunks]);
    expect(lists(m2)).toEqual(lists(m1));
  });

  it("one changed file costs at most two new chunks; restore gives every file byte-identical; verify passes with and without keys", async () => {
    writeFileSync(join(p.dir, names[120]!), `${prompt(9999)}changed\n`);
    const r = await p.run(["backup", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const now = await chunkBytes();
    const added = now.keys.filter((k) => !stored.keys.includes(k));
    expect(added.length).toBeGreaterThanOrEqual(1);
    expect(added.length).toBeLessThanOrEqual(2);
    const back = await p.run(["restore", "latest", "--target", join(p.tmp, "restored"), "--yes", "--allow-rollback"]);
    expect([0, 3], back.stderr).toContain(back.code);
    for (const n of [...names, "prompts/empty.md"]) expect(readFileSync(join(p.tmp, "restored", n)).equals(readFileSync(join(p.dir, n))), n).toBe(true);
    const plain = await p.run(["verify", "latest", "--json"]);
    expect(plain.code, plain.stderr).toBe(0);
    // every distinct chunk once, however many files share it
    const m = await manifest(json(r).path);
    const distinct = new Set(m.components.flatMap((c: any) => c.chunks?.map((x: string[]) => x[0]) ?? []));
    expect(json(plain).checks.find((c: any) => c.name === "chunks").detail).toMatch(new RegExp(`^${distinct.size} chunk\\(s\\) of ${names.length + 2} chunked component`));
    const deep = await p.run(["verify", "latest", "--identity", p.identity, "--json"]);
    expect(deep.code, deep.stderr).toBe(0);
  });

  it("a missing chunk: restore is 13 naming a packed file and the chunk, nothing placed", async () => {
    const m = await manifest(json(await p.run(["snapshots", "--json"])).at(-1).path);
    const victim = m.components.find((c: any) => c.target === names[0]).chunks[0][0];
    const store = await p.store();
    const key = `${PACK_CHUNKS}/${victim.slice(0, 2)}/${victim}`;
    const saved = await store.get(key);
    await store.delete(key);
    try {
      const r = await p.run(["restore", "latest", "--target", join(p.tmp, "broken"), "--yes", "--allow-rollback"]);
      expect(r.code).toBe(13);
      expect(r.stderr).toMatch(new RegExp(`component files/(memory|prompts)/.*chunk ${victim}`));
      expect(existsSync(join(p.tmp, "broken", names[0]!))).toBe(false);
    } finally {
      await store.put(key, saved);
    }
  });

  it("a drill reads every packed file through the same checks; copy carries their chunks and the copy restores them", async () => {
    const d = await p.run(["drill", "latest", "--identity", p.identity, "--json"]);
    expect([0, 3], d.stderr).toContain(d.code);
    expect(json(d).checks.find((c: any) => c.name === "components")).toMatchObject({ ok: true, detail: expect.stringMatching(new RegExp(`${names.length + 2} from the chunk store`)) });
    const replica = join(p.tmp, "replica");
    const c = await p.run(["copy", "--from", p.repo, "--to", replica, "--json"]);
    expect(c.code, c.stderr).toBe(0);
    const back = await p.run(["restore", "latest", "--repo", replica, "--target", join(p.tmp, "from-replica"), "--yes", "--allow-rollback"]);
    expect([0, 3], back.stderr).toContain(back.code);
    for (const n of names) expect(readFileSync(join(p.tmp, "from-replica", n)).equals(readFileSync(join(p.dir, n))), n).toBe(true);
  });

  it("export writes a format-4 bundle with the packed files back in its payload", async () => {
    const out = join(p.tmp, "exported.agentbak");
    const r = await p.run(["export", "latest", "-o", out, "--identity", p.identity, "--json"]);
    expect(r.code, r.stderr).toBe(0);
    expect(json(r)).toMatchObject({ format_version: 4, inlined: names.length + 2 });
    const open = join(p.tmp, "exported");
    mkdirSync(open);
    await execa("bash", ["-c", `tar xf ${out} && age -d -i ${p.identity} payload.age | zstd -d | tar x`], { cwd: open });
    const em = JSON.parse(readFileSync(join(open, "manifest.json"), "utf8"));
    expect(em.components.some((c: any) => "chunks" in c || "chunk_skip" in c)).toBe(false);
    for (const n of names) expect(readFileSync(join(open, "files", n)).equals(readFileSync(join(p.dir, n))), n).toBe(true);
  });
});
