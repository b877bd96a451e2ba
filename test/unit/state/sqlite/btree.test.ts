/**
 * Row counts read off the pages (state/sqlite/btree.ts) against SQLite's own
 * `count(*)` on real files: multi-level rowid trees, WITHOUT ROWID tables
 * (whose interior cells are rows too), overflow chains, free pages,
 * auto-vacuum's pointer-map pages, the smallest and largest page sizes, a
 * table whose root is page 2 and an FTS5 table's shadow tables. A census that
 * does not hold a sound tree answers null and SQL counts instead.
 */
import Database from "better-sqlite3";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { BtreeCensus } from "../../../../src/state/sqlite/btree.js";
import { hashTail } from "../../../../src/state/pages/delta.js";
import { FilePages, readPages } from "../../../../src/state/sqlite/pagefile.js";
import { openDefensive, tableCounts } from "../../../../src/state/sqlite/open.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-btree-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
function make(pageSize: number, setup: (d: Database.Database) => void, pragmas: string[] = []): string {
  const p = join(dir, `t${n++}.sqlite`);
  const d = new Database(p);
  d.pragma(`page_size = ${pageSize}`);
  for (const x of pragmas) d.pragma(x);
  d.transaction(() => setup(d))();
  d.close();
  return p;
}

/** The whole file's census, read in runs as the backup reads it. */
function census(p: string, keep: (page: number) => boolean = () => true): BtreeCensus {
  const src = new FilePages(p);
  try {
    const c = new BtreeCensus(src.pageSize, src.pageCount);
    readPages(src, (run, first, ps) => {
      for (let i = 0; i < run.length / ps; i++) if (keep(first + i)) c.pages(run.subarray(i * ps, (i + 1) * ps), first + i);
    });
    return c;
  } finally {
    src.close();
  }
}

/** The counts from the census, and how many tables it answered itself (not through SQL). */
function both(p: string, c: BtreeCensus): { fromPages: Record<string, number>; sql: Record<string, number>; answered: number } {
  const db = openDefensive(p);
  try {
    const tables = db.prepare("SELECT name, rootpage FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").all() as { name: string; rootpage: number }[];
    const wr = new Set((db.pragma("table_list") as { name: string; wr: number }[]).filter((t) => t.wr).map((t) => t.name));
    const answered = tables.filter((t) => t.rootpage > 0 && c.count(t.rootpage, wr.has(t.name)) !== null).length;
    return { fromPages: tableCounts(db, c).counts, sql: tableCounts(db).counts, answered };
  } finally {
    db.close();
  }
}

const rows = (d: Database.Database, count: number, width: number) => {
  d.exec("CREATE TABLE r (id INTEGER PRIMARY KEY, v TEXT)");
  const ins = d.prepare("INSERT INTO r (v) VALUES (?)");
  for (let i = 0; i < count; i++) ins.run("x".repeat(width + (i % 37)));
};

/** A rowid table `r` and a WITHOUT ROWID table `kv`. */
const rowsAndKeys = (d: Database.Database, rowCount: number, keyCount: number) => {
  rows(d, rowCount, 30);
  d.exec("CREATE TABLE kv (k TEXT PRIMARY KEY, v) WITHOUT ROWID");
  const kv = d.prepare("INSERT INTO kv VALUES (?, ?)");
  for (let i = 0; i < keyCount; i++) kv.run(`k${i}`, i);
};

describe("row counts from a census of the pages", () => {
  for (const pageSize of [512, 4096, 65536])
    it(`equal count(*) on every table, page size ${pageSize}`, () => {
      const p = make(pageSize, (d) => {
        rows(d, 20_000, 40);
        d.exec("CREATE TABLE kv (k TEXT PRIMARY KEY, v BLOB) WITHOUT ROWID");
        const kv = d.prepare("INSERT INTO kv VALUES (?, ?)");
        for (let i = 0; i < 15_000; i++) kv.run(`key-${String(i).padStart(8, "0")}-${"k".repeat(i % 50)}`, Buffer.alloc(20, i));
        d.exec("CREATE TABLE big (id INTEGER PRIMARY KEY, b BLOB)");
        const big = d.prepare("INSERT INTO big (b) VALUES (?)");
        for (let i = 0; i < 40; i++) big.run(Buffer.alloc(200_000, i)); // overflow chains
        d.exec("CREATE TABLE empty (a)");
        d.exec("CREATE INDEX r_v ON r (v)");
        d.exec("DELETE FROM r WHERE id % 3 = 0"); // free pages, and leaves emptied unevenly
      });
      const { fromPages, sql, answered } = both(p, census(p));
      expect(fromPages).toEqual(sql);
      expect(sql.r).toBe(20_000 - Math.floor(20_000 / 3));
      expect(sql.kv).toBe(15_000);
      expect(answered).toBe(4);
    });

  it("equal count(*) with auto-vacuum's pointer-map pages and a table rooted at page 2", () => {
    const p = make(
      1024,
      (d) => {
        rows(d, 30_000, 20);
        d.exec("CREATE TABLE later (id INTEGER PRIMARY KEY, t TEXT)");
        const ins = d.prepare("INSERT INTO later (t) VALUES (?)");
        for (let i = 0; i < 5000; i++) ins.run(`row ${i}`);
      },
      ["auto_vacuum = FULL"],
    );
    const db = openDefensive(p);
    const root = (db.prepare("SELECT rootpage FROM sqlite_schema WHERE name = 'r'").pluck().get() as number);
    db.close();
    // with auto-vacuum page 2 is the first pointer-map page, and the first table follows it
    expect(root).toBe(3);
    const { fromPages, sql, answered } = both(p, census(p));
    expect(fromPages).toEqual({ r: 30_000, later: 5000 });
    expect(sql).toEqual(fromPages);
    expect(answered).toBe(2);
  });

  it("counts an FTS5 table's shadow tables from pages and the virtual table itself through SQL", () => {
    const p = make(4096, (d) => {
      d.exec("CREATE VIRTUAL TABLE docs USING fts5(body)");
      const ins = d.prepare("INSERT INTO docs (body) VALUES (?)");
      for (let i = 0; i < 3000; i++) ins.run(`document ${i} about ${i % 7 ? "cats" : "dogs"}`);
    });
    const { fromPages, sql } = both(p, census(p));
    expect(fromPages).toEqual(sql);
    expect(sql.docs).toBe(3000);
    expect(sql.docs_content).toBe(3000);
  });

  it("answers null for a tree with a page it never saw, and the counts fall back to SQL", () => {
    const p = make(4096, (d) => rows(d, 50_000, 30));
    const whole = census(p);
    const db = openDefensive(p);
    const root = db.prepare("SELECT rootpage FROM sqlite_schema WHERE name = 'r'").pluck().get() as number;
    db.close();
    expect(whole.count(root, false)).toBe(50_000);
    // one leaf left out: that tree is not sound here
    const holed = census(p, (page) => page !== root + 40);
    expect(holed.count(root, false)).toBeNull();
    expect(both(p, holed).fromPages).toEqual({ r: 50_000 });
    // and a tree read as the wrong kind is not counted either
    expect(whole.count(root, true)).toBeNull();
  });

  it("answers null for a child pointer outside the file, a page reached twice, and a page below the root with no cells or too many", () => {
    const p = make(4096, (d) => rows(d, 50_000, 30));
    const src = new FilePages(p);
    const db = openDefensive(p);
    const root = db.prepare("SELECT rootpage FROM sqlite_schema WHERE name = 'r'").pluck().get() as number;
    db.close();
    const page = Buffer.alloc(src.pageSize);
    src.read(root, 1, page);
    expect(page[0]).toBe(5); // an interior page: the test's premise
    const read = (patch: (b: Buffer) => void) => {
      const c = new BtreeCensus(src.pageSize, src.pageCount);
      readPages(src, (run, first) => c.pages(run, first));
      const b = Buffer.from(page);
      patch(b);
      c.pages(b, root);
      return c.count(root, false);
    };
    const firstCell = page.readUInt16BE(12);
    expect(read(() => undefined)).toBe(50_000);
    expect(read((b) => b.writeUInt32BE(src.pageCount + 1, firstCell))).toBeNull();
    // the right-most child made the same as the first cell's child: one subtree reached twice
    expect(read((b) => b.writeUInt32BE(b.readUInt32BE(firstCell), 8))).toBeNull();
    // a page below the root with no cells, or with more than fit in a page: what SQLite calls corrupt on the way down
    const child = page.readUInt32BE(firstCell);
    for (const cells of [0, Math.floor((src.pageSize - 8) / 6) + 1]) {
      const c = new BtreeCensus(src.pageSize, src.pageCount);
      readPages(src, (run, first) => c.pages(run, first));
      const b = Buffer.alloc(src.pageSize);
      src.read(child, 1, b);
      b.writeUInt16BE(cells, 3);
      c.pages(b, child);
      expect(c.count(root, false), `${cells} cells`).toBeNull();
    }
    src.close();
  });

  it("a census split between two threads' reads and merged equals one read of the whole", () => {
    const p = make(4096, (d) => rowsAndKeys(d, 40_000, 20_000));
    const src = new FilePages(p);
    const split = Math.floor(src.pageCount / 2);
    const head = new BtreeCensus(src.pageSize, src.pageCount);
    const tail = new BtreeCensus(src.pageSize, src.pageCount);
    readPages(src, (run, first, ps) => {
      for (let i = 0; i < run.length / ps; i++) (first + i <= split ? head : tail).pages(run.subarray(i * ps, (i + 1) * ps), first + i);
    });
    src.close();
    expect(both(p, head).answered).toBeLessThan(2); // half the pages can not answer for both trees
    // what the worker posts is structured-cloned: the part is copied as a message would copy it
    head.merge(structuredClone(tail.part(split + 1, tail.pageCount)), split + 1);
    const { fromPages, sql, answered } = both(p, head);
    expect(answered).toBe(2);
    expect(fromPages).toEqual(sql);
    expect(sql).toEqual({ r: 40_000, kv: 20_000 });
  });
});

describe("the worker's part of an in-place read", () => {
  it("hashTail's census of the pages after `from`, merged into a census of the pages up to it, counts as one read of the whole", () => {
    const p = make(4096, (d) => rowsAndKeys(d, 120_000, 30_000));
    const src = new FilePages(p);
    try {
      expect(src.pageCount).toBeGreaterThan(1024 + 100); // more than one of readPages' 4 MiB runs
      // a split inside a 4 MiB run (the tail starts part-way through the run readPages hands hashTail) and one at a run's end
      for (const from of [Math.floor(src.pageCount / 3) + 7, 1024]) {
        const head = new BtreeCensus(src.pageSize, src.pageCount);
        readPages(src, (run, first) => head.pages(run, first), from);
        const tail = hashTail(src, from);
        expect(tail.census.kind.length).toBe(src.pageCount - from);
        head.merge(structuredClone(tail.census), from + 1);
        const { fromPages, answered } = both(p, head);
        expect(answered, `from ${from}`).toBe(2);
        expect(fromPages).toEqual({ r: 120_000, kv: 30_000 });
      }
    } finally {
      src.close();
    }
  });
});
