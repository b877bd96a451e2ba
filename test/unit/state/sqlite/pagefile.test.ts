/**
 * Reading a database's pages in runs (state/sqlite/pagefile.ts): the header's
 * page size (1 means 65536), refusal of files that are not SQLite or not whole
 * pages, reads outside the file refused, and the run arithmetic every page
 * reader shares covering each page exactly once.
 */
import Database from "better-sqlite3";
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { consecutiveRuns, FilePages, headerPageSize, listedRunPages, pageRuns, readListedPages, readPages, splitPage, withPages } from "../../../../src/state/sqlite/pagefile.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-pagefile-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function make(pageSize: number, rows: number): string {
  const p = join(dir, `p${pageSize}-${rows}.sqlite`);
  const d = new Database(p);
  d.pragma(`page_size = ${pageSize}`);
  d.exec("CREATE TABLE t (v BLOB)");
  const ins = d.prepare("INSERT INTO t VALUES (randomblob(?))");
  d.transaction(() => { for (let i = 0; i < rows; i++) ins.run(500); })();
  d.close();
  return p;
}

describe("FilePages", () => {
  it("page size from the header (65536 stored as 1) and the page count from the size", () => {
    for (const ps of [512, 4096, 65536]) {
      const p = make(ps, 40);
      const fd = openSync(p, "r");
      expect(headerPageSize(fd)).toBe(ps);
      closeSync(fd);
      const f = new FilePages(p);
      expect(f.pageSize).toBe(ps);
      expect(f.pageCount).toBe(readFileSync(p).length / ps);
      f.close();
    }
  });

  it("refuses a file that is not SQLite, or not whole pages", () => {
    const junk = join(dir, "junk");
    writeFileSync(junk, Buffer.alloc(4096, 1));
    expect(() => new FilePages(junk)).toThrow("not an SQLite database");
    const p = make(1024, 5);
    const torn = join(dir, "torn.sqlite");
    writeFileSync(torn, readFileSync(p).subarray(0, 1024 * 2 + 100));
    expect(() => new FilePages(torn)).toThrow("database file size is not a multiple of its page size (1024)");
  });

  it("reads pages by number; a read before page 1 or past the end is refused naming the pages", () => {
    const p = make(1024, 20);
    const whole = readFileSync(p);
    withPages(p, (src) => {
      const b = Buffer.alloc(2 * 1024);
      src.read(3, 2, b);
      expect(b.equals(whole.subarray(2 * 1024, 4 * 1024))).toBe(true);
      expect(() => src.read(0, 1, b)).toThrow(`short read of pages 0..0 of ${p}`);
      expect(() => src.read(src.pageCount, 2, b)).toThrow(/short read/);
    });
  });
});

describe("runs", () => {
  it("readPages hands every page once, in order, in runs of about 4 MiB, and can start and stop inside the file", () => {
    const p = make(1024, 12000); // about 6-7 MiB: two runs at least
    const whole = readFileSync(p);
    const seen: Buffer[] = [];
    const firsts: number[] = [];
    withPages(p, (src) => readPages(src, (run, first, ps) => { expect(ps).toBe(1024); firsts.push(first); seen.push(Buffer.from(run)); }));
    expect(firsts[0]).toBe(1);
    expect(firsts[1]).toBe(4097);
    expect(Buffer.concat(seen).equals(whole)).toBe(true);
    const part: Buffer[] = [];
    withPages(p, (src) => readPages(src, (run) => part.push(Buffer.from(run)), 10, 5));
    expect(Buffer.concat(part).equals(whole.subarray(4 * 1024, 10 * 1024))).toBe(true);
  });

  it("pageRuns covers start..last exactly; a page bigger than the run is a run of one", () => {
    expect([...pageRuns(4096, 10, 4 * 4096)]).toEqual([[1, 4], [5, 4], [9, 2]]);
    expect([...pageRuns(4096, 10, 4 * 4096, 7)]).toEqual([[7, 4]]);
    expect([...pageRuns(65536, 3, 1000)]).toEqual([[1, 1], [2, 1], [3, 1]]);
    expect([...pageRuns(4096, 0, 1 << 20)]).toEqual([]);
  });

  it("consecutiveRuns groups ascending pages into runs no longer than `most`", () => {
    expect([...consecutiveRuns([1, 2, 3, 7, 8, 10], 100)]).toEqual([[1, 3], [7, 2], [10, 1]]);
    expect([...consecutiveRuns([1, 2, 3, 4, 5], 2)]).toEqual([[1, 2], [3, 2], [5, 1]]);
    expect([...consecutiveRuns([], 4)]).toEqual([]);
  });

  it("readListedPages reads only the listed pages, one read per run", () => {
    const p = make(4096, 200);
    const whole = readFileSync(p);
    const want = [2, 3, 4, 9, 11, 12];
    const got: [number, number][] = [];
    let reads = 0;
    withPages(p, (src) => {
      const counting = { pageSize: src.pageSize, pageCount: src.pageCount, read: (f: number, n: number, b: Buffer) => { reads++; src.read(f, n, b); } };
      readListedPages(counting, want, (run, first) => {
        for (let i = 0; i < run.length / 4096; i++) {
          expect(run.subarray(i * 4096, (i + 1) * 4096).equals(whole.subarray((first + i - 1) * 4096, (first + i) * 4096))).toBe(true);
          got.push([first + i, 1]);
        }
      });
    });
    expect(got.map(([pg]) => pg)).toEqual(want);
    expect(reads).toBe(3);
    expect(listedRunPages(4096)).toBe(256);
    expect(listedRunPages(65536 * 32)).toBe(1);
  });

  it("splitPage falls on a run boundary near the share, never past the end", () => {
    const per = (4 << 20) / 4096; // 1024 pages a run
    expect(splitPage(10_000, 4096, 0.5)).toBe(5 * per);
    expect(splitPage(10_000, 4096, 0.5) % per).toBe(0);
    expect(splitPage(100, 4096, 0.9)).toBe(0); // under half a run: no split
    expect(splitPage(1600, 4096, 1)).toBe(1600); // 2 runs would pass the end
  });
});
