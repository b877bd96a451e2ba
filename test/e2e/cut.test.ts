// One cut across databases: every configured database is captured at one
// instant, so a writer whose one logical step updates a.sqlite and then
// b.sqlite is never seen half-way by more than that one step.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import Database from "better-sqlite3";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, ROOT, type TestAgent } from "../helpers.js";
import { manifestOf } from "../craft.js";

let t: TestAgent;

/** A database with `mb` MiB of padding, so copying it takes a while. */
function padded(path: string, mb: number): void {
  const db = new Database(path);
  db.pragma("journal_mode = WAL");
  db.exec("CREATE TABLE pad (id INTEGER PRIMARY KEY, v BLOB)");
  const ins = db.prepare("INSERT INTO pad (v) VALUES (randomblob(4000))");
  db.transaction(() => {
    for (let i = 0; i < mb * 256; i++) ins.run();
  })();
  db.close();
}

const counter = (p: string) => {
  const db = new Database(p, { readonly: true });
  try {
    return db.prepare("SELECT n FROM counter").pluck().get() as number;
  } finally {
    db.close();
  }
};

beforeAll(async () => {
  t = await makeAgent({ sizeMb: 1 });
  padded(join(t.dir, "state/a.sqlite"), 24);
  padded(join(t.dir, "state/b.sqlite"), 24);
  const cfg = JSON.parse(readFileSync(t.config, "utf8"));
  cfg.databases.push({ name: "a", path: "state/a.sqlite" }, { name: "b", path: "state/b.sqlite" });
  cfg.secretScan = { databases: "off" };
  writeFileSync(t.config, JSON.stringify(cfg, null, 2));
});
afterAll(() => t.cleanup());

describe("one cut across databases", () => {
  it("a writer updating a.sqlite then b.sqlite: every snapshot holds them at most one update apart", async () => {
    const w = execa("node", [join(ROOT, "fixtures/agent/pair-writer.js"), join(t.dir, "state/a.sqlite"), join(t.dir, "state/b.sqlite")], { reject: false });
    const gaps: number[] = [];
    const held: number[] = [];
    try {
      await new Promise<void>((res) => w.stdout!.once("data", () => res()));
      for (let i = 0; i < 3; i++) {
        const r = await t.run(["backup", "--json"]);
        expect(r.code, r.stderr).toBe(0);
        const file = await t.file(json(r).path);
        const x = join(t.tmp, `x${i}`);
        mkdirSync(x);
        await execa("sh", ["-c", `tar xOf '${file}' payload.age | age -d -i '${t.identity}' | zstd -d | tar x`], { cwd: x });
        const a = counter(join(x, "db/a.sqlite"));
        const b = counter(join(x, "db/b.sqlite"));
        expect(a).toBeGreaterThan(0);
        gaps.push(a - b);
        const m = manifestOf(file);
        expect(m.cut).toMatchObject({ method: "write-locks", databases: ["a", "b", "state"] });
        expect(Date.parse(m.cut.at)).toBeLessThanOrEqual(Date.parse(m.created_at) + 60_000);
        expect(m.cut.wait_ms).toBeGreaterThanOrEqual(0);
        held.push(m.cut.hold_ms);
      }
    } finally {
      w.kill("SIGKILL");
      await w;
    }
    console.log(`a - b per snapshot: ${gaps.join(", ")}; write locks held (ms): ${held.join(", ")}`);
    for (const g of gaps) expect([0, 1]).toContain(g);
  });

  it("a write lock held longer than cut.waitSeconds: exit 11 naming the database, nothing published", async () => {
    const cfg = JSON.parse(readFileSync(t.config, "utf8"));
    writeFileSync(t.config, JSON.stringify({ ...cfg, cut: { waitSeconds: 1 } }, null, 2));
    const before = json(await t.run(["snapshots", "--json"])).length;
    const holder = execa("node", ["-e", `const D=require(${JSON.stringify(join(ROOT, "node_modules/better-sqlite3"))});const d=new D(process.argv[1]);d.exec("BEGIN IMMEDIATE");console.log("held");setTimeout(()=>{},60000)`, join(t.dir, "state/b.sqlite")], { reject: false });
    try {
      await new Promise<void>((res) => holder.stdout!.once("data", () => res()));
      const t0 = Date.now();
      const r = await t.run(["backup"]);
      expect(r.code, r.stderr).toBe(11);
      expect(r.stderr).toMatch(/database b \(\S+\) is locked by another process .*waited 1s\); pass --wait/);
      expect(Date.now() - t0).toBeLessThan(20_000);
    } finally {
      holder.kill("SIGKILL");
      await holder;
      writeFileSync(t.config, JSON.stringify(cfg, null, 2));
    }
    expect(json(await t.run(["snapshots", "--json"])).length).toBe(before);
    expect(t.leftovers()).toEqual([]);
  });
});
