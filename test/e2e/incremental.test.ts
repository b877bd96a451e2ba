// Incremental snapshots, compaction, forget and concurrency through the real binary.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import Database from "better-sqlite3";
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, SNAPS, type TestAgent } from "../helpers.js";
import { manifestOf } from "../craft.js";
import { filePagesRoot } from "../../dist/state/pages/pageindex.js";

let a: TestAgent;
const dbPath = () => join(a.dir, "state/agent.sqlite");
const dump = async (p: string) => (await execa("sqlite3", [p, ".dump"])).stdout;
const sha = (p: string) => createHash("sha256").update(readFileSync(p)).digest("hex");

beforeAll(async () => {
  a = await makeAgent({ sizeMb: 3 });
});
afterAll(() => a.cleanup());

function mutate(step: number): void {
  const db = new Database(dbPath());
  db.pragma("journal_mode = WAL");
  if (step === 1) db.prepare("UPDATE messages SET content = content || ' (edited)' WHERE abs(random()) % 100 = 0").run();
  if (step === 2) {
    const ins = db.prepare("INSERT INTO messages (conversation_id, role, content, created_at) VALUES ('new', 'user', ?, 'now')");
    db.transaction(() => { for (let i = 0; i < 3000; i++) ins.run("x".repeat(500) + i); })();
  }
  if (step === 3) db.prepare("DELETE FROM messages WHERE id % 3 = 0").run();
  if (step === 4) {
    db.pragma("wal_checkpoint(TRUNCATE)");
    db.exec("VACUUM"); // the file shrinks: the delta must truncate
  }
  db.close();
}

describe("incremental chains", () => {
  const points: { id: string; dump: string }[] = [];
  it("a full snapshot then four incrementals, each storing only changed pages", async () => {
    const full = json(await a.run(["backup", "--json"]));
    expect(full.databases_read).toBe("in-place"); // a full snapshot of a WAL database: read in place, integrity_check at the same instant
    points.push({ id: full.snapshot_id, dump: await dump(dbPath()) });
    for (let step = 1; step <= 4; step++) {
      mutate(step);
      const r = await a.run(["backup", "--incremental", "--json"]);
      expect(r.code, r.stderr).toBe(0);
      const inc = json(r);
      expect(inc.parent).toBe(points.at(-1)!.id);
      // links 1-4 of the chain, below incremental.integrityEvery (5): changed pages read in place, no copy (the
      // restores below prove each rebuilds byte-identical)
      expect(inc.databases_read).toBe("in-place");
      points.push({ id: inc.snapshot_id, dump: await dump(dbPath()) });
      const c = manifestOf(await a.file(inc.path)).components.find((x: any) => x.name === "state");
      expect(c.kind).toBe("sqlite-delta");
      if (step < 4) expect(c.changed_pages).toBeLessThan(c.page_count); // VACUUM (step 4) rewrites every page
      if (step === 1) expect(inc.size).toBeLessThan(full.size * 0.6);
    }
  });

  it("a token written between snapshots is still refused on an incremental (the changed pages are scanned)", async () => {
    const db = new Database(dbPath());
    const secret = "ghp_" + "Z".repeat(36);
    const id = db.prepare("INSERT INTO messages (conversation_id, role, content, created_at) VALUES ('c', 'tool', ?, 'now')").run(`token ${secret}`).lastInsertRowid;
    db.close();
    const r = await a.run(["backup", "--incremental"]);
    expect(r.code).toBe(14);
    expect(r.stderr).toContain(`messages.content rowid ${id}`);
    expect(r.stderr).not.toContain(secret);
    const db2 = new Database(dbPath());
    db2.prepare("DELETE FROM messages WHERE rowid = ?").run(id);
    db2.close();
    points.at(-1)!.dump = await dump(dbPath());
  });

  it("every point of the chain restores byte-identical to the source at that point", async () => {
    for (const [i, p] of points.entries()) {
      const t = join(a.tmp, `chain-${i}`);
      const r = await a.run(["restore", p.id, "--target", t, "--yes", "--allow-rollback"]);
      expect([0, 3], r.stderr).toContain(r.code);
      expect(await dump(join(t, "state/agent.sqlite"))).toBe(p.dump);
      const m = manifestOf(await a.file(`${a.repo}/${SNAPS}/${p.id}.agentbak`));
      const c = m.components.find((x: any) => x.name === "state");
      // a delta signs its rebuilt database's pages root, a full copy the file's sha256
      if (c.kind === "sqlite-delta") expect(filePagesRoot(join(t, "state/agent.sqlite"))).toBe(c.full_pages_sha256);
      else expect(sha(join(t, "state/agent.sqlite"))).toBe(c.sha256);
    }
  });

  it("a missing link or a substituted link fails verification with 13", async () => {
    const st = await a.store();
    const mid = `${SNAPS}/${points[2]!.id}.agentbak`;
    const aside = await st.get(mid);
    await st.delete(mid);
    try {
      const r = await a.run(["verify", points[4]!.id, "--identity", a.identity]);
      expect(r.code).toBe(13);
      expect(r.stderr).toMatch(new RegExp(`parent snapshot ${points[2]!.id} .*missing`));
      const s = json(await a.run(["snapshots", "--json"]));
      expect(s.find((e: any) => e.snapshot_id === points[3]!.id).status).toBe("invalid");
      // another valid bundle under the missing one's name
      await st.put(mid, await st.get(`${SNAPS}/${points[1]!.id}.agentbak`));
      const sub = await a.run(["verify", points[4]!.id, "--identity", a.identity]);
      expect(sub.code).toBe(13);
      expect(sub.stderr).toMatch(/does not match the manifest digest|manifest names another snapshot/);
    } finally {
      await st.put(mid, aside);
    }
    expect((await a.run(["verify", points[4]!.id, "--identity", a.identity])).code).toBe(0);
  });

  it("a full snapshot is forced every N incrementals", async () => {
    const cfg = JSON.parse(readFileSync(a.config, "utf8"));
    // integrityEvery 1: every incremental is copied and integrity-checked as a full snapshot is
    cfg.incremental = { enabled: true, fullEvery: 4, integrityEvery: 1 };
    writeFileSync(a.config, JSON.stringify(cfg));
    const r = await a.run(["backup", "--json"]); // the chain is already 4 deep
    // routine: exit 0, quiet, the reason in the receipt (cron sees no warning every fullEvery backups)
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe("");
    expect(json(r)).toMatchObject({ kind: "full", parent: null, full_reason: "a full snapshot is due after 4 incrementals" });
    mutate(1);
    const next = json(await a.run(["backup", "--json"]));
    expect(next.parent).toBe(json(r).snapshot_id);
    expect(next.databases_read).toBe("copy");
    cfg.incremental = { enabled: true, fullEvery: 4, integrityEvery: 2 };
    writeFileSync(a.config, JSON.stringify(cfg));
    mutate(1);
    const second = json(await a.run(["backup", "--json"]));
    expect(second).toMatchObject({ parent: next.snapshot_id, databases_read: "copy" }); // link 2 of every 2: checked
    mutate(1);
    const third = json(await a.run(["backup", "--json"]));
    expect(third).toMatchObject({ parent: second.snapshot_id, databases_read: "in-place" }); // link 3: not checked
    expect((await a.run(["verify", third.snapshot_id, "--identity", a.identity])).code).toBe(0);
    points.push({ id: json(r).snapshot_id, dump: "" }, { id: next.snapshot_id, dump: "" }, { id: second.snapshot_id, dump: "" }, { id: third.snapshot_id, dump: "" });
  });

  it("an unverifiable parent (damaged payload) forces a full snapshot instead of building on it", async () => {
    const st = await a.store();
    const parent = `${SNAPS}/${points.at(-1)!.id}.agentbak`;
    const original: Buffer = await st.get(parent);
    const damaged = Buffer.from(original);
    damaged[damaged.length - 3000]! ^= 1;
    await st.put(parent, damaged);
    try {
      const r = await a.run(["backup", "--incremental", "--json"]);
      expect(r.code).toBe(3);
      expect(r.stderr).toMatch(/full snapshot instead of an incremental: chain of .* is not usable \(payload\.age: digest mismatch/);
      expect(json(r).parent).toBe(null);
    } finally {
      await st.put(parent, original);
    }
  });

  it("compact rewrites an incremental as a full snapshot that verifies on its own", async () => {
    const r = await a.run(["compact", points.at(-1)!.id, "--identity", a.identity, "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const c = json(r);
    expect(c.replaces).toBe(points.at(-1)!.id);
    const m = manifestOf(await a.file(c.path));
    expect(m.parent).toBe(null);
    expect(m.compacted_from.snapshot_id).toBe(points.at(-1)!.id);
    expect(m.components.find((x: any) => x.name === "state").kind).toBe("sqlite");
    expect((await a.run(["verify", c.snapshot_id, "--identity", a.identity])).code).toBe(0);
  });
});

describe("forget", () => {
  it("keeps what kept chains need and the newest drilled snapshot; reports what it could not verify", async () => {
    const all = json(await a.run(["snapshots", "--json"]));
    const st = await a.store();
    const bundleKey = (id: string) => `${SNAPS}/${id}.agentbak`;
    // a drill passes on the oldest snapshot
    const d = await a.run(["drill", all[0].snapshot_id, "--spec", join(process.cwd(), "drills/checks-only.json"), "--identity", a.identity]);
    expect([0, 3]).toContain(d.code);
    // one bundle is damaged: forget must leave it and say so
    const victim = all[1].snapshot_id;
    const vb: Buffer = await st.get(bundleKey(victim));
    vb[600]! ^= 1;
    await st.put(bundleKey(victim), vb);
    const dry = json(await a.run(["forget", "--keep-last", "1", "--dry-run", "--json"]));
    const keptIds = dry.kept.map((k: any) => k.snapshot_id);
    expect(keptIds).toContain(all[0].snapshot_id);
    expect(dry.kept.find((k: any) => k.snapshot_id === all[0].snapshot_id).reasons).toContain("newest snapshot that passed a drill");
    expect(dry.not_removed.map((n: any) => n.snapshot_id)).toEqual([victim]);
    const newestInc = all.filter((e: any) => e.status === "ok").at(-1);
    expect(await st.head(bundleKey(newestInc.snapshot_id))).not.toBe(null);
    const r = await a.run(["forget", "--keep-last", "1", "--prune", "--json"]);
    expect(r.code).toBe(3); // the damaged bundle is reported
    const res = json(r);
    for (const id of res.removed) expect(await st.head(bundleKey(id))).toBe(null);
    expect(await st.head(bundleKey(victim))).not.toBe(null);
    // everything still listed as ok verifies deeply (chains intact)
    for (const e of json(await a.run(["snapshots", "--json"])).filter((e: any) => e.status === "ok")) {
      const v = await a.run(["verify", e.snapshot_id, "--identity", a.identity]);
      expect(v.code, `${e.snapshot_id}: ${v.stderr}`).toBe(0);
    }
    // no page index or commit marker is left without its bundle
    const keys: string[] = await st.list(`${SNAPS}/`);
    const live = new Set(keys.filter((f) => f.endsWith(".agentbak")).map((f) => f.split("/").at(-1)!.split(".")[0]));
    for (const f of keys.filter((f) => !f.endsWith(".agentbak"))) expect(live.has(f.split("/").at(-1)!.split(".")[0]), f).toBe(true);
  });

  it("forget --prune and backup never interleave: one waits or exits 11, the repository stays consistent", async () => {
    const rs = await Promise.all([a.run(["backup", "--incremental", "--json"]), a.run(["forget", "--keep-last", "2", "--prune", "--json"])]);
    // one of them may find the lock held (11), never both: the other one ran
    for (const r of rs) expect([0, 3, 11]).toContain(r.code);
    expect(rs.filter((r) => r.code === 11).length).toBeLessThanOrEqual(1);
    const waited = await Promise.all([a.run(["backup", "--incremental", "--wait", "60s"]), a.run(["forget", "--keep-last", "2", "--prune", "--wait", "60s"])]);
    for (const r of waited) expect([0, 3], r.stderr).toContain(r.code);
    for (const e of json(await a.run(["snapshots", "--json"])).filter((e: any) => e.status === "ok")) expect((await a.run(["verify", e.snapshot_id, "--identity", a.identity])).code).toBe(0);
  });

  it("schedule prints a crontab line and systemd units for the config", async () => {
    const r = await a.run(["schedule", "--every", "15m", "--drill-every", "1d", "--json"]);
    const s = json(r);
    const jobs = s.crontab.filter((l: string) => !l.startsWith("#"));
    expect(jobs[0]).toMatch(new RegExp(`^7-59/15 \\* \\* \\* \\* .*\\S+node \\S+agentbak.js backup -c ${a.config} --wait 10m$`));
    expect(jobs.find((l: string) => l.includes(" drill "))).toMatch(/^37 3 \* \* \* .* drill random --within 7d/);
    const u = json(await a.run(["schedule", "--every", "15m", "--drill-every", "1d", "--format", "systemd", "--json"])).systemd;
    expect(u["agentbak-backup-billing-agent.timer"]).toContain("OnCalendar=*-*-* *:07/15:00");
    expect(u["agentbak-drill-billing-agent.service"]).toContain("ExecStart=");
  });
});
