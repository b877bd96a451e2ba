/**
 * The page delta (state/pages/delta.ts) over real SQLite files: a delta of
 * whole pages, or of the changed 1 KiB blocks given the parent's sums, applied
 * to the parent rebuilds the new database byte for byte (grown or shrunk) and
 * writes the new snapshot's sums; a malformed delta is refused before it
 * writes outside the file; the tail read digests the pages after the split.
 */
import Database from "better-sqlite3";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { applyDelta, DeltaWriter, hashTail, usableBase, type DeltaBase } from "../../../../src/state/pages/delta.js";
import { BlockSummer, blockSeed, ParentSums } from "../../../../src/state/pages/blocks.js";
import { indexPages } from "../../../../src/state/pages/pageindex.js";
import { readListedPages, readPages, withPages } from "../../../../src/state/sqlite/pagefile.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-delta-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const seed = blockSeed(Buffer.from("key"));
let n = 0;
const f = (name: string) => join(dir, `${name}${n++}`);

function pair(pageSize: number, change: (d: Database.Database) => void): { before: string; after: string } {
  const before = f("before");
  const after = f("after");
  const d = new Database(before);
  d.pragma(`page_size = ${pageSize}`);
  d.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)");
  const ins = d.prepare("INSERT INTO t (v) VALUES (?)");
  d.transaction(() => { for (let i = 0; i < 500; i++) ins.run(`row ${i} `.repeat(20)); })();
  d.close();
  copyFileSync(before, after);
  const e = new Database(after);
  change(e);
  e.close();
  return { before, after };
}
function sumsOf(db: string): string {
  const out = f("sums");
  withPages(db, (src) => { const s = new BlockSummer(src.pageSize, seed, out); readPages(src, (r) => s.update(r)); s.close(); });
  return out;
}
function changedPages(a: string, b: string, ps: number): number[] {
  const x = readFileSync(a);
  const y = readFileSync(b);
  const out: number[] = [];
  for (let p = 1; p <= y.length / ps; p++) if ((p - 1) * ps >= x.length || !x.subarray((p - 1) * ps, p * ps).equals(y.subarray((p - 1) * ps, p * ps))) out.push(p);
  return out;
}
/** Writes a delta of `after` against `before` (listed changed pages), applies it to a copy of `before`. */
function roundTrip(before: string, after: string, base: DeltaBase | null): { delta: number; rebuilt: Buffer; sumsWhole: boolean } {
  const ps = new Database(after, { readonly: true }).pragma("page_size", { simple: true }) as number;
  const pages = statSync(after).size / ps;
  const out = f("delta");
  const w = new DeltaWriter({ pageSize: ps, pageCount: pages }, out, base);
  withPages(after, (src) => readListedPages(src, changedPages(before, after, ps), (run, first) => w.add(run, first)));
  const sumsWhole = w.finish();
  const copy = f("rebuilt");
  copyFileSync(before, copy);
  applyDelta(copy, out);
  return { delta: statSync(out).size, rebuilt: readFileSync(copy), sumsWhole };
}

const changes: [string, (d: Database.Database) => void][] = [
  ["a few rows updated", (d) => d.prepare("UPDATE t SET v = 'new value' WHERE id IN (3, 250, 499)").run()],
  ["grown", (d) => d.transaction(() => { for (let i = 0; i < 300; i++) d.prepare("INSERT INTO t (v) VALUES (?)").run("more ".repeat(50)); })()],
  ["shrunk by VACUUM", (d) => { d.exec("DELETE FROM t WHERE id > 50"); d.exec("VACUUM"); }],
];

describe("DeltaWriter + applyDelta", () => {
  for (const [what, change] of changes)
    it(`whole pages: the parent plus the delta is the new database byte for byte (${what})`, () => {
      const { before, after } = pair(4096, change);
      const r = roundTrip(before, after, null);
      expect(r.rebuilt.equals(readFileSync(after))).toBe(true);
      expect(r.delta).toBe(20 + changedPages(before, after, 4096).length * (4 + 4096));
      expect(r.sumsWhole).toBe(false); // no base: no sums written
    });

  it("given the parent's sums: only the changed blocks go in, the rebuild is exact, the new sums equal a fresh summing", () => {
    const { before, after } = pair(4096, changes[0]![1]);
    const out = f("next-sums");
    const base: DeltaBase = { sums: ParentSums.open(sumsOf(before), 4096)!, seed, out };
    const r = roundTrip(before, after, base);
    base.sums.close();
    expect(r.rebuilt.equals(readFileSync(after))).toBe(true);
    const whole = 20 + changedPages(before, after, 4096).length * (4 + 4096);
    expect(r.delta).toBeLessThan(whole);
    expect((r.delta - 20) % (4 + 1024)).toBe(0);
    expect(r.sumsWhole).toBe(true);
    expect(readFileSync(out).equals(readFileSync(sumsOf(after)))).toBe(true);
  });

  it("addChanged finds the changed pages of a whole read by the sums and writes only those", () => {
    const { before, after } = pair(4096, changes[0]![1]);
    const ps = 4096;
    const pages = statSync(after).size / ps;
    const base: DeltaBase = { sums: ParentSums.open(sumsOf(before), ps)!, seed, out: f("s") };
    const out = f("delta");
    const w = new DeltaWriter({ pageSize: ps, pageCount: pages }, out, base);
    const went: number[] = [];
    const scanned: number[] = [];
    const w2 = new DeltaWriter({ pageSize: ps, pageCount: pages }, f("delta"), null, { run: (run, first) => scanned.push(first, run.length / ps) });
    withPages(after, (src) => readPages(src, (run, first) => { went.push(...w.addChanged(run, first)); }));
    w.finish();
    base.sums.close();
    expect(went).toEqual(changedPages(before, after, ps));
    const copy = f("c");
    copyFileSync(before, copy);
    applyDelta(copy, out);
    expect(readFileSync(copy).equals(readFileSync(after))).toBe(true);
    // the secret scan sees each run written, from the same read
    withPages(after, (src) => readListedPages(src, [2, 3, 7], (run, first) => w2.add(run, first)));
    w2.finish();
    expect(scanned).toEqual([2, 2, 7, 1]);
  });

  it("sums of another page size are not used; a delta file that exists is never overwritten", () => {
    const { before } = pair(1024, () => undefined);
    const base: DeltaBase = { sums: ParentSums.open(sumsOf(before), 1024)!, seed, out: f("s") };
    expect(usableBase(base, 4096)).toBeNull();
    expect(usableBase(base, 1024)).toBe(base);
    expect(usableBase(null, 1024)).toBeNull();
    base.sums.close();
    const existing = f("exists");
    writeFileSync(existing, "keep");
    expect(() => new DeltaWriter({ pageSize: 4096, pageCount: 1 }, existing)).toThrow(/EEXIST/);
    expect(readFileSync(existing, "utf8")).toBe("keep");
  });
});

describe("applyDelta refuses a malformed delta", () => {
  const head = (unit: number, count: number, n: number) => {
    const h = Buffer.alloc(20);
    h.write("AGBKDLT1");
    h.writeUInt32BE(unit, 8);
    h.writeUInt32BE(count, 12);
    h.writeUInt32BE(n, 16);
    return h;
  };
  const rec = (p: number, unit: number) => { const r = Buffer.alloc(4 + unit, 7); r.writeUInt32BE(p, 0); return r; };
  it.each([
    ["not a page delta", Buffer.from("AGBKDLT2" + "\0".repeat(12))],
    ["page delta has an invalid page size", head(1000, 4, 0)],
    ["page delta truncated", Buffer.concat([head(1024, 4, 2), rec(1, 1024)])],
    ["page delta names page 5 outside 1..4", Buffer.concat([head(1024, 4, 1), rec(5, 1024)])],
    ["page delta names page 0 outside 1..4", Buffer.concat([head(1024, 4, 1), rec(0, 1024)])],
  ])("%s", (msg, body) => {
    const target = f("t");
    writeFileSync(target, Buffer.alloc(4096, 1));
    const d = f("d");
    writeFileSync(d, body);
    expect(() => applyDelta(target, d)).toThrow(msg);
    // records before the bad one may have gone in (a restore applies deltas to a staged copy it then checks);
    // a record outside the file never writes there
    expect(statSync(target).size).toBe(4096);
  });
});

describe("hashTail", () => {
  it("digests the pages after `from`, and its census covers them", () => {
    const { after } = pair(4096, () => undefined);
    const ix = indexPages(after);
    const from = Math.floor(ix.pageCount / 2);
    const r = withPages(after, (src) => hashTail(src, from));
    expect(r.hashes.equals(ix.hashes.subarray(from * 16))).toBe(true);
    expect(r.census.kind.length).toBe(ix.pageCount - from);
  });

  it("given the parent's sums, hands over only the changed pages with their digests", () => {
    const { before, after } = pair(4096, changes[0]![1]);
    const ix = indexPages(after);
    const parts: { changed: number[]; hashes: Buffer }[] = [];
    withPages(after, (src) => hashTail(src, 1, { file: sumsOf(before), seed }, (p) => parts.push({ changed: [...p.changed], hashes: p.hashes })));
    const changed = parts.flatMap((p) => p.changed);
    expect(changed).toEqual(changedPages(before, after, 4096).filter((p) => p > 1));
    const hashes = Buffer.concat(parts.map((p) => p.hashes));
    changed.forEach((p, i) => expect(hashes.subarray(i * 16, i * 16 + 16).equals(ix.hashes.subarray((p - 1) * 16, p * 16))).toBe(true));
  });
});
