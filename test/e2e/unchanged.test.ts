// backup --skip-if-unchanged: no bundle when nothing changed since this host's
// last snapshot; any change to a database (a commit in WAL or rollback-journal
// mode), the workspace, a captured file or the config takes a new one.
import Database from "better-sqlite3";
import { execa } from "execa";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, statSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { json, makeAgent, STORE, type TestAgent } from "../helpers.js";

let a: TestAgent;
beforeAll(async () => {
  a = await makeAgent();
}, 120_000);
afterAll(() => a?.cleanup());

const snapshotIds = async () => json(await a.run(["snapshots", "--json"])).map((e: any) => e.snapshot_id as string);
const skip = async () => {
  const r = await a.run(["backup", "--skip-if-unchanged", "--json"]);
  expect([0, 3], r.stderr).toContain(r.code);
  return json(r);
};

describe("the last workspace capture, reused across processes", () => {
  it("an unchanged workspace's capture comes from AGENTBAK_HOME/cache (0600); an edit is captured afresh and restores", async () => {
    expect((await a.run(["backup"])).code).toBe(0);
    const cache = join(a.home, "cache");
    const file = readdirSync(cache).find((f) => f.startsWith("workspace-"))!;
    expect(statSync(join(cache, file)).mode & 0o777).toBe(0o600);
    const before = readFileSync(join(cache, file), "utf8");
    expect((await a.run(["backup"])).code).toBe(0);
    expect(readFileSync(join(cache, file), "utf8")).toBe(before);
    writeFileSync(join(a.dir, "workspace/notes.txt"), "written between two backups\n");
    const b = json(await a.run(["backup", "--json"]));
    expect(readFileSync(join(cache, file), "utf8")).not.toBe(before);
    const r = await a.run(["restore", b.snapshot_id, "--target", join(a.tmp, "ws-restored"), "--yes", "--allow-rollback"]);
    expect([0, 3], r.stderr).toContain(r.code);
    expect(readFileSync(join(a.tmp, "ws-restored/workspace/notes.txt"), "utf8")).toBe("written between two backups\n");
  });
});

describe("backup --skip-if-unchanged", () => {
  it("nothing changed: exit 0, no output without a TTY, the receipt names the last snapshot, nothing is written", async () => {
    const first = json(await a.run(["backup", "--json"]));
    const before = await snapshotIds();
    const files = STORE === "local" ? readdirSync(join(a.repo, "tenants/acme/agents/billing-agent/snapshots")).sort() : null;
    // the first run with the flag has no fingerprint yet: it takes a snapshot and records one
    const second = await skip();
    expect(second.status).toBe("committed");
    expect(second.snapshot_id).not.toBe(first.snapshot_id);
    const third = await skip();
    expect(third).toMatchObject({ status: "unchanged", snapshot_id: second.snapshot_id, sequence: second.sequence, manifest_sha256: second.manifest_sha256 });
    const plain = await a.run(["backup", "--skip-if-unchanged"]);
    expect(plain.code, plain.stderr).toBe(0);
    expect(plain.stdout + plain.stderr).toBe("");
    expect(await snapshotIds()).toEqual([...before, second.snapshot_id]);
    if (files) {
      // only the second backup's objects are new: the unchanged runs wrote nothing
      const added = readdirSync(join(a.repo, "tenants/acme/agents/billing-agent/snapshots")).filter((f) => !files.includes(f));
      expect(added.length).toBeGreaterThan(0);
      for (const f of added) expect(f).toContain(second.snapshot_id);
    }
    // without the flag a snapshot is always taken
    const forced = json(await a.run(["backup", "--json"]));
    expect(forced.status).toBe("committed");
  });

  it("the backup's own opening of a WAL database (which creates the -wal file) does not count as a change", async () => {
    // a writer that closes last checkpoints and deletes the -wal: the next backup's connection creates it again
    const db = new Database(join(a.dir, "state/agent.sqlite"));
    db.prepare("INSERT OR REPLACE INTO agent_state VALUES ('wal-test', '1')").run();
    db.close();
    expect(existsSync(join(a.dir, "state/agent.sqlite-wal"))).toBe(false);
    expect((await skip()).status).toBe("committed");
    expect(existsSync(join(a.dir, "state/agent.sqlite-wal"))).toBe(true);
    expect((await skip()).status).toBe("unchanged");
  });

  it("a database configured through a symbolic link: a commit by a connection held open (only its -wal, beside the real file, changes) takes a new snapshot", async () => {
    const real = join(a.tmp, "real-state");
    mkdirSync(real);
    const live = join(a.dir, "state/agent.sqlite");
    renameSync(live, join(real, "agent.sqlite"));
    for (const s of ["-wal", "-shm"]) if (existsSync(live + s)) renameSync(live + s, join(real, `agent.sqlite${s}`));
    symlinkSync(join(real, "agent.sqlite"), live);
    const db = new Database(live);
    try {
      db.prepare("INSERT OR REPLACE INTO agent_state VALUES ('symlink-test', '0')").run();
      expect((await skip()).status).toBe("committed");
      expect((await skip()).status).toBe("unchanged");
      db.prepare("INSERT OR REPLACE INTO agent_state VALUES ('symlink-test', '1')").run();
      expect((await skip()).status).toBe("committed");
    } finally {
      db.close();
    }
  });

  it("a commit to the database (WAL mode), then in rollback-journal mode, takes a new snapshot", async () => {
    await skip();
    expect((await skip()).status).toBe("unchanged");
    const db = new Database(join(a.dir, "state/agent.sqlite"));
    db.prepare("INSERT OR REPLACE INTO agent_state VALUES ('unchanged-test', '1')").run();
    expect((await skip()).status).toBe("committed");
    expect((await skip()).status).toBe("unchanged");
    db.pragma("journal_mode = DELETE");
    db.close();
    expect((await skip()).status).toBe("committed");
    expect((await skip()).status).toBe("unchanged");
    // the same size, a rollback-journal commit: the header's change counter moves
    const db2 = new Database(join(a.dir, "state/agent.sqlite"));
    db2.prepare("UPDATE agent_state SET value = '2' WHERE key = 'unchanged-test'").run();
    db2.close();
    expect((await skip()).status).toBe("committed");
    expect((await skip()).status).toBe("unchanged");
  });

  it("a workspace edit, a captured file rewritten to the same size, and a config edit each take a new snapshot", async () => {
    await skip(); // records the fingerprint of whatever the test before left (a snapshot or "unchanged")
    expect((await skip()).status).toBe("unchanged");
    writeFileSync(join(a.dir, "workspace/README.md"), readFileSync(join(a.dir, "workspace/README.md"), "utf8") + "one more line\n");
    expect((await skip()).status).toBe("committed");
    expect((await skip()).status).toBe("unchanged");
    const mem = readdirSync(join(a.dir, "memory")).find((f) => f.endsWith(".json"))!;
    const text = readFileSync(join(a.dir, "memory", mem), "utf8");
    writeFileSync(join(a.dir, "memory", mem), text.replace(/[a-z]/, (c) => (c === "a" ? "b" : "a")));
    expect((await skip()).status).toBe("committed");
    expect((await skip()).status).toBe("unchanged");
    const cfg = JSON.parse(readFileSync(a.config, "utf8"));
    cfg.retention = { ...cfg.retention, keepLast: 50 };
    writeFileSync(a.config, JSON.stringify(cfg, null, 2));
    expect((await skip()).status).toBe("committed");
    expect((await skip()).status).toBe("unchanged");
  });

  it("a large captured file (compared by its identity and times, not read) rewritten in place to the same size, its mtime set back, takes a new snapshot", async () => {
    mkdirSync(join(a.dir, "models"), { recursive: true });
    const big = join(a.dir, "models/adapter.bin");
    writeFileSync(big, Buffer.alloc(1024 * 1024, 1));
    const cfg = JSON.parse(readFileSync(a.config, "utf8"));
    writeFileSync(a.config, JSON.stringify({ ...cfg, files: [...cfg.files, "models/*.bin"] }, null, 2));
    // past the 2 s within which a file's times do not count (a write in the same tick could go unseen)
    await new Promise((r) => setTimeout(r, 2100));
    await skip();
    expect((await skip()).status).toBe("unchanged");
    const { mtime, atime } = statSync(big);
    writeFileSync(big, Buffer.alloc(1024 * 1024, 2));
    utimesSync(big, atime, mtime);
    await new Promise((r) => setTimeout(r, 2100));
    expect((await skip()).status).toBe("committed");
    expect((await skip()).status).toBe("unchanged");
  });

  it("the stat cache: a small file rewritten to its old size and mtime (touch -d) is read again (its ctime moved); a cached digest answers for a file whose identity and times match; --no-stat-cache reads every file; a damaged cache is ignored and rebuilt", async () => {
    const mem = join(a.dir, "memory", readdirSync(join(a.dir, "memory")).find((f) => f.endsWith(".json"))!);
    const text = readFileSync(mem, "utf8");
    expect(statSync(mem).size).toBeLessThan(512 * 1024);
    const settle = () => new Promise((r) => setTimeout(r, 2100)); // past the 2 s within which times do not count
    const cacheFile = () => join(a.home, "cache", readdirSync(join(a.home, "cache")).find((f) => f.startsWith("stat-cache-"))!);
    await settle();
    await skip();
    expect((await skip()).status).toBe("unchanged");
    expect(JSON.parse(readFileSync(cacheFile(), "utf8"))[mem]?.[1]).toBe(createHash("sha256").update(text).digest("hex"));
    // same size, another byte, mtime set back by the real touch: only ctime tells
    const mtime = (await execa("stat", ["-c", "%y", mem])).stdout.trim();
    writeFileSync(mem, text.replace(/[a-z]/, (c) => (c === "a" ? "b" : "a")));
    await execa("touch", ["-m", "-d", mtime, mem]);
    expect((await execa("stat", ["-c", "%y", mem])).stdout.trim()).toBe(mtime);
    await settle();
    expect((await skip()).status).toBe("committed");
    expect((await skip()).status).toBe("unchanged");
    // the cache answers for the file while its identity and times are the recorded ones: a wrong digest put there is
    // believed (the file is not read) ...
    const c = JSON.parse(readFileSync(cacheFile(), "utf8"));
    c[mem][1] = "0".repeat(64);
    writeFileSync(cacheFile(), JSON.stringify(c));
    expect((await skip()).status).toBe("committed");
    // ... --no-stat-cache reads it (the real content differs from that digest) and records what it read
    const paranoid = async () => json(await a.run(["backup", "--skip-if-unchanged", "--no-stat-cache", "--json"]));
    expect((await paranoid()).status).toBe("committed");
    expect((await paranoid()).status).toBe("unchanged");
    expect((await skip()).status).toBe("unchanged");
    // a damaged cache file is ignored (every file read: the same state) and written anew
    writeFileSync(cacheFile(), '{"broken": ');
    expect((await skip()).status).toBe("unchanged");
    expect(JSON.parse(readFileSync(cacheFile(), "utf8"))[mem]?.[0]).toMatch(/^\d+ \d+ \d+ \d+ \d+$/);
    writeFileSync(mem, text);
    expect((await skip()).status).toBe("committed");
  }, 90_000);

  it("the stat cache's summary: while every file's identity and times are the recorded ones, its digest answers without the entries (a wrong one put there, its binding to the entries kept, is believed); --no-stat-cache does not use it", async () => {
    const cacheFile = () => join(a.home, "cache", readdirSync(join(a.home, "cache")).find((f) => f.startsWith("stat-cache-"))!);
    await new Promise((r) => setTimeout(r, 2100)); // every file settled: the summary is written
    await skip();
    expect((await skip()).status).toBe("unchanged");
    const text = readFileSync(cacheFile(), "utf8");
    const m = /^\{"":\["([0-9a-f]{64})","([0-9a-f]{64})","([0-9a-f]{64})"\]/.exec(text);
    expect(m).not.toBeNull();
    // the rest of the file is untouched, so its sha256 (the binding) still holds: only the summary's digest is wrong
    expect(createHash("sha256").update(text.slice(m![0].length)).digest("hex")).toBe(m![3]);
    writeFileSync(cacheFile(), text.replace(m![2]!, "0".repeat(64)));
    expect((await skip()).status).toBe("committed");
    // --no-stat-cache reads every file (the real state differs from that digest) and records the right summary
    const paranoid = json(await a.run(["backup", "--skip-if-unchanged", "--no-stat-cache", "--json"]));
    expect(paranoid.status).toBe("committed");
    expect(readFileSync(cacheFile(), "utf8").slice(0, m![0].length)).toBe(m![0]);
    expect((await skip()).status).toBe("unchanged");
  }, 60_000);

  it("a damaged last-backup record is ignored (a snapshot is taken) and written anew", async () => {
    await skip();
    expect((await skip()).status).toBe("unchanged");
    const rec = readdirSync(join(a.home, "cache")).filter((f) => f.startsWith("last-backup-"));
    expect(rec.length).toBeGreaterThan(0);
    for (const f of rec) writeFileSync(join(a.home, "cache", f), '{"fingerprint": "0');
    expect((await skip()).status).toBe("committed");
    expect((await skip()).status).toBe("unchanged");
  });

  it("a label, or a last snapshot that is gone from the repository, takes a new snapshot", async () => {
    const now = await skip();
    expect(json(await a.run(["backup", "--skip-if-unchanged", "--label", "nightly", "--json"])).status).toBe("committed");
    // the label's snapshot is now the newest: the fingerprint's snapshot is not, so the next one is taken
    const after = await skip();
    expect(after.status).toBe("committed");
    expect(after.snapshot_id).not.toBe(now.snapshot_id);
    expect((await skip()).status).toBe("unchanged");
    const f = await a.run(["forget", "--keep-last", "1", "--json"]);
    expect([0, 3], f.stderr).toContain(f.code);
    // keep-last 1 keeps it; removing its bundle by hand (as a broken repository would) is noticed
    const store = await a.store();
    const keys: string[] = await store.list("tenants/acme/agents/billing-agent/snapshots/");
    for (const k of keys.filter((k) => k.includes(after.snapshot_id))) await store.delete(k);
    const again = await skip();
    expect(again.status).toBe("committed");
    expect(again.snapshot_id).not.toBe(after.snapshot_id);
  });

  it("git status is part of it: staging a file without changing the tree takes a new snapshot", async () => {
    await skip(); // records the fingerprint of whatever the test before left (a snapshot or "unchanged")
    expect((await skip()).status).toBe("unchanged");
    await execa("git", ["-C", join(a.dir, "workspace"), "add", "-A"]);
    expect((await skip()).status).toBe("committed");
  });
});
