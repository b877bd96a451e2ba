/**
 * Block sums (state/pages/blocks.ts) over real SQLite files: they find exactly
 * the pages an update changed, a parent's sums plus the changed pages' make
 * the same file as summing the new database afresh, and as a cache they are
 * used only when they match (page count, page size, snapshot) and dropped,
 * never trusted, when they can not be read or written.
 */
import Database from "better-sqlite3";
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { BlockSummer, BlockSumsStore, blockSeed, blockSize, NextSums, pageSums, ParentSums, SnapshotSums, SumsDiff, sumBlocks, sumsPerPage } from "../../../../src/state/pages/blocks.js";
import { readPages, withPages } from "../../../../src/state/sqlite/pagefile.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-blocks-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const seed = blockSeed(Buffer.from("a page-index key"));
let n = 0;

/** A database of `pageSize` with 400 rows, and a copy after `change` ran on it. */
function pair(pageSize: number, change: (d: Database.Database) => void): { before: string; after: string } {
  const before = join(dir, `b${n}.sqlite`);
  const after = join(dir, `a${n++}.sqlite`);
  const d = new Database(before);
  d.pragma(`page_size = ${pageSize}`);
  d.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)");
  const ins = d.prepare("INSERT INTO t (v) VALUES (?)");
  d.transaction(() => { for (let i = 0; i < 400; i++) ins.run(`row ${i} `.repeat(20)); })();
  d.close();
  copyFileSync(before, after);
  const e = new Database(after);
  change(e);
  e.close();
  return { before, after };
}

/** The sums file of a database, made by BlockSummer as a backup makes it. */
function sumsOf(db: string): string {
  const out = join(dir, `s${n++}.sums`);
  withPages(db, (src) => {
    const s = new BlockSummer(src.pageSize, seed, out);
    readPages(src, (run) => s.update(run));
    expect(s.close()).toBe(true);
  });
  return out;
}

/** Pages whose bytes differ between two files of `ps` (the new one's page count). */
function differing(a: string, b: string, ps: number): number[] {
  const x = readFileSync(a);
  const y = readFileSync(b);
  const out: number[] = [];
  for (let p = 1; p <= y.length / ps; p++) if ((p - 1) * ps >= x.length || !x.subarray((p - 1) * ps, p * ps).equals(y.subarray((p - 1) * ps, p * ps))) out.push(p);
  return out;
}

describe("sums", () => {
  it("1 KiB blocks (the page when smaller), 8 bytes each; the seed depends on the key", () => {
    expect([blockSize(512), blockSize(1024), blockSize(4096), blockSize(65536)]).toEqual([512, 1024, 1024, 1024]);
    expect([sumsPerPage(512), sumsPerPage(4096), sumsPerPage(65536)]).toEqual([8, 32, 512]);
    expect(blockSeed(Buffer.from("a page-index key"))).toEqual(seed);
    expect(blockSeed(Buffer.from("another key"))).not.toEqual(seed);
  });

  it("a change to any one word of a block changes its sum, and only its block's; an unaligned buffer sums the same", () => {
    const page = Buffer.alloc(4096);
    for (let i = 0; i < page.length; i++) page[i] = (i * 31) & 0xff;
    const base = pageSums(page, seed);
    for (const off of [0, 4, 1020, 1024, 2050, 4092]) {
      const p = Buffer.from(page);
      p[off]! ^= 1;
      const s = pageSums(p, seed);
      const block = Math.floor(off / 1024);
      for (let b = 0; b < 4; b++) expect(s.subarray(b * 8, b * 8 + 8).equals(base.subarray(b * 8, b * 8 + 8)), `off ${off} block ${b}`).toBe(b !== block);
    }
    const odd = Buffer.alloc(4097);
    page.copy(odd, 1);
    const out = Buffer.alloc(32);
    sumBlocks(odd.subarray(1), 1024, seed, out, 0);
    expect(out.equals(base)).toBe(true);
    expect(pageSums(page, blockSeed(Buffer.from("x"))).equals(base)).toBe(false);
  });
});

describe("SumsDiff against the parent's sums", () => {
  for (const ps of [512, 4096]) {
    it(`finds exactly the pages an update changed (pages of ${ps})`, () => {
      const { before, after } = pair(ps, (d) => d.prepare("UPDATE t SET v = 'changed' WHERE id IN (5, 200, 399)").run());
      const parent = ParentSums.open(sumsOf(before), ps)!;
      expect(parent.pageCount).toBe(statSync(before).size / ps);
      const diff = new SumsDiff(parent, seed, ps);
      const found: number[] = [];
      withPages(after, (src) => readPages(src, (run, first) => found.push(...diff.changed(run, first).pages)));
      diff.close();
      expect(found).toEqual(differing(before, after, ps));
      expect(found.length).toBeGreaterThan(0);
    });
  }

  it("pages past the parent's end, or with no parent sums at all, are all changed", () => {
    const { before, after } = pair(4096, (d) => d.transaction(() => { for (let i = 0; i < 300; i++) d.prepare("INSERT INTO t (v) VALUES (?)").run("new ".repeat(100)); })());
    const parent = ParentSums.open(sumsOf(before), 4096)!;
    const diff = new SumsDiff(parent, seed, 4096);
    const found: number[] = [];
    let known = 0;
    withPages(after, (src) => readPages(src, (run, first) => { const r = diff.changed(run, first); found.push(...r.pages); known += r.known; }));
    diff.close();
    expect(known).toBe(parent.pageCount);
    expect(found).toEqual(differing(before, after, 4096));
    const none = new SumsDiff(null, seed, 4096);
    withPages(after, (src) => readPages(src, (run, first) => expect(none.changed(run, first).pages).toHaveLength(run.length / 4096)));
  });

  it("ParentSums.open: a missing file is null; readRun past the end has none", () => {
    expect(ParentSums.open(join(dir, "none.sums"), 4096)).toBeNull();
    const { before } = pair(4096, () => undefined);
    const p = ParentSums.open(sumsOf(before), 4096)!;
    const out = Buffer.alloc(32 * 4);
    expect(p.readRun(p.pageCount - 1, 4, out)).toBe(2);
    expect(p.readRun(p.pageCount + 1, 4, out)).toBe(0);
    p.close();
  });
});

describe("NextSums", () => {
  it("the parent's sums with the changed pages' set afresh equal the new database's own sums, grown or shrunk", () => {
    for (const change of [
      (d: Database.Database) => d.prepare("UPDATE t SET v = 'x' WHERE id % 50 = 0").run(),
      (d: Database.Database) => d.transaction(() => { for (let i = 0; i < 200; i++) d.prepare("INSERT INTO t (v) VALUES (?)").run("grow ".repeat(80)); })(),
      (d: Database.Database) => { d.exec("DELETE FROM t WHERE id > 100"); d.exec("VACUUM"); },
    ]) {
      const { before, after } = pair(4096, change);
      const parent = ParentSums.open(sumsOf(before), 4096)!;
      const out = join(dir, `next${n++}.sums`);
      const pages = statSync(after).size / 4096;
      const next = new NextSums(parent, out, pages);
      const changed = differing(before, after, 4096);
      const whole = readFileSync(after);
      for (const p of changed) next.setRun(p, pageSums(whole.subarray((p - 1) * 4096, p * 4096), seed), 1);
      expect(next.close()).toBe(true);
      parent.close();
      expect(readFileSync(out).equals(readFileSync(sumsOf(after)))).toBe(true);
    }
  });
});

describe("BlockSumsStore (AGENTBAK_HOME/cache)", () => {
  it("keeps the committed snapshot's sums only, opens them only for the same database bytes and page count", () => {
    const home = join(dir, "home");
    const st = new BlockSumsStore(home, "/srv/repo", "acme", "billing-agent", "main");
    expect(new BlockSumsStore(home, "/srv/repo", "acme", "billing-agent", "other").dir).not.toBe(st.dir);
    const { before } = pair(4096, () => undefined);
    const pages = statSync(before).size / 4096;
    const partial = st.partial("S1")!;
    expect(partial).toBe(join(st.dir, "S1.partial"));
    expect(statSync(st.dir).mode & 0o777).toBe(0o700);
    copyFileSync(sumsOf(before), partial);
    st.commit("S1", "ab".repeat(32), 4096);
    expect(st.open("S1", "ab".repeat(32), 4096, pages)?.pageCount).toBe(pages);
    expect(st.open("S1", "cd".repeat(32), 4096, pages)).toBeNull(); // other bytes
    expect(st.open("S1", "ab".repeat(32), 4096, pages + 1)).toBeNull(); // another page count
    expect(st.open("S2", "ab".repeat(32), 4096, pages)).toBeNull();
    writeFileSync(st.partial("S2")!, readFileSync(partial.replace("S1.partial", `S1-${"ab".repeat(8)}-4096.sums`)));
    writeFileSync(st.partial("S3")!, "x");
    st.discard("S3");
    expect(existsSync(join(st.dir, "S3.partial"))).toBe(false);
    st.commit("S2", "ef".repeat(32), 4096);
    expect(readdirSync(st.dir)).toEqual([`S2-${"ef".repeat(8)}-4096.sums`]);
  });

  it("a cache that can not be made is none: partial is null, a summer writes nothing and says so", () => {
    const home = join(dir, "filehome");
    writeFileSync(home, "not a folder");
    expect(new BlockSumsStore(home, "/r", "t", "a", "main").partial("S1")).toBeNull();
    const s = new BlockSummer(4096, seed, join(dir, "no-such-folder", "x.sums"));
    s.update(Buffer.alloc(4096));
    expect(s.close()).toBe(false);
  });
});

describe("SnapshotSums (a snapshot's block sums of each database)", () => {
  it("opens the parent's kept sums as bases, keeps this snapshot's on commit, removes the rest on close", () => {
    const home = join(dir, "snaphome");
    const at = { home, repo: "/srv/repo", tenant: "acme", agent: "billing-agent" };
    const key = Buffer.from("a page-index key");
    const { before } = pair(4096, () => undefined);
    const pages = statSync(before).size / 4096;
    // S1, a full snapshot: no parent, no bases; its sums of "main" written to partial and kept by commit
    const s1 = new SnapshotSums(at, ["main", "other"], "S1", null, key);
    expect(s1.bases.size).toBe(0);
    copyFileSync(sumsOf(before), s1.partial("main")!);
    writeFileSync(s1.partial("other")!, "never kept");
    s1.commit("main", "ab".repeat(32), 4096);
    s1.close();
    const main = new BlockSumsStore(home, at.repo, at.tenant, at.agent, "main");
    const other = new BlockSumsStore(home, at.repo, at.tenant, at.agent, "other");
    expect(readdirSync(main.dir)).toEqual([`S1-${"ab".repeat(8)}-4096.sums`]);
    expect(readdirSync(other.dir)).toEqual([]); // not committed: removed
    // S2 builds on S1: the base of "main" is S1's sums (same bytes and shape), none for other bytes
    const s2 = new SnapshotSums(at, ["main", "other"], "S2", { snapshotId: "S1", dbs: new Map([["main", { sha256: "ab".repeat(32), pageSize: 4096, pageCount: pages }], ["other", { sha256: "cd".repeat(32), pageSize: 4096, pageCount: pages }]]) }, key);
    expect([...s2.bases.keys()]).toEqual(["main"]);
    expect(s2.bases.get("main")!.sums.pageCount).toBe(pages);
    expect(s2.bases.get("main")!.seed).toEqual(blockSeed(key));
    expect(s2.bases.get("main")!.out).toBe(join(main.dir, "S2.partial"));
    s2.close(); // not published: S1's sums stay, nothing of S2's
    expect(readdirSync(main.dir)).toEqual([`S1-${"ab".repeat(8)}-4096.sums`]);
    // finish: what a backup does at its end; S3 published keeps its sums of "main" only, S4 not published keeps none
    const s3 = new SnapshotSums(at, ["main", "other"], "S3", null, key);
    copyFileSync(sumsOf(before), s3.partial("main")!);
    writeFileSync(s3.partial("other")!, "never kept");
    s3.finish([{ db: "main", sha256: "ef".repeat(32), pageSize: 4096 }]);
    expect(readdirSync(main.dir)).toEqual([`S3-${"ef".repeat(8)}-4096.sums`]);
    expect(readdirSync(other.dir)).toEqual([]);
    const s4 = new SnapshotSums(at, ["main"], "S4", null, key);
    writeFileSync(s4.partial("main")!, "not published");
    s4.finish(null);
    expect(readdirSync(main.dir)).toEqual([`S3-${"ef".repeat(8)}-4096.sums`]);
  });
});
