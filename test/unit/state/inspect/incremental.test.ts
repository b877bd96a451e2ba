/**
 * Incremental deltas (state/inspect/incremental.ts) on real databases: from a
 * copy and read in place from a live database held at an instant (with and
 * without the parent's block sums), the delta applied to the parent rebuilds
 * the snapshot byte for byte, the page index equals the snapshot's own, only
 * the changed pages are scanned for secrets, and the counts, cursors and open
 * operations come through the pinned connections.
 */
import Database from "better-sqlite3";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { deltaMeta, deltasInPlace, writeDeltaOf } from "../../../../src/state/inspect/incremental.js";
import { applyDelta } from "../../../../src/state/pages/delta.js";
import { BlockSummer, blockSeed, ParentSums } from "../../../../src/state/pages/blocks.js";
import { encodeIndex, encodeIndexChanges, indexPages, pagesRoot } from "../../../../src/state/pages/pageindex.js";
import { readPages, withPages } from "../../../../src/state/sqlite/pagefile.js";
import { openInstant } from "../../../../src/state/sqlite/cut.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-incr-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const TOKEN = "ghp_" + "W".repeat(36);
const KEY = Buffer.alloc(32, 9);
const seed = blockSeed(KEY);
let n = 0;
const f = (s: string) => join(dir, `${s}${n++}`);

/** A live WAL database, a parent copy of it (rollback journal, as a snapshot holds it), then `change` applied live. */
function liveAndParent(change: (d: Database.Database) => void): { live: string; parent: string } {
  const live = f("live") + ".sqlite";
  const d = new Database(live);
  d.exec("CREATE TABLE m (id INTEGER PRIMARY KEY, body TEXT); CREATE TABLE cur (pos INTEGER); INSERT INTO cur VALUES (1)");
  const ins = d.prepare("INSERT INTO m (body) VALUES (?)");
  d.transaction(() => { for (let i = 0; i < 600; i++) ins.run(`body ${i} `.repeat(12)); })();
  const parent = f("parent") + ".sqlite";
  d.exec(`VACUUM INTO '${parent}'`);
  d.pragma("journal_mode = WAL");
  change(d);
  d.close();
  return { live, parent };
}
const update = (d: Database.Database) => { d.prepare("UPDATE m SET body = ? WHERE id = 300").run(`now with ${TOKEN}`); d.exec("UPDATE cur SET pos = 2"); };
function sumsOf(db: string): string {
  const out = f("sums");
  withPages(db, (src) => { const s = new BlockSummer(src.pageSize, seed, out); readPages(src, (r) => s.update(r)); s.close(); });
  return out;
}
const rebuild = (parent: string, delta: string) => { const c = f("rebuilt"); copyFileSync(parent, c); applyDelta(c, delta); return readFileSync(c); };

describe("writeDeltaOf (from a copy)", () => {
  it("holds exactly the changed pages; parent + delta is the copy; only changed pages are scanned", () => {
    const { live, parent } = liveAndParent(update);
    const copy = f("copy") + ".sqlite";
    new Database(live).exec(`VACUUM INTO '${copy}'`);
    const ix = indexPages(copy);
    const pix = indexPages(parent);
    const d = writeDeltaOf(copy, "main", pix, null, f("delta"), { scan: true, seal: { key: KEY, parentId: "parent" } });
    const expected = [];
    for (let p = 1; p <= ix.pageCount; p++) if (p > pix.pageCount || !ix.hashes.subarray((p - 1) * 16, p * 16).equals(pix.hashes.subarray((p - 1) * 16, p * 16))) expected.push(p);
    expect(d.pages).toEqual(expected);
    expect(d.pages.length).toBeGreaterThan(0);
    expect(d.pages.length).toBeLessThan(ix.pageCount);
    expect(rebuild(parent, d.file).equals(readFileSync(copy))).toBe(true);
    expect(d.findings.length).toBeGreaterThan(0);
    expect(JSON.stringify(d.findings)).not.toContain(TOKEN);
    expect(d.sums).toBe(false);
    expect(deltaMeta(d)).toEqual({ full_pages_sha256: ix.root, full_size: statSync(copy).size, page_size: 4096, page_count: ix.pageCount, changed_pages: d.pages.length });
    // the delta carries its manifest record and its index as stored: the changes since the parent's, sealed under the key
    expect(d.meta).toEqual(deltaMeta(d));
    expect(d.stored.equals(encodeIndexChanges(ix, d.pages, "parent", KEY))).toBe(true);
    // the token was in the parent already: nothing new to find in the changed pages
    const { live: l2, parent: p2 } = liveAndParent((x) => { x.prepare("UPDATE m SET body = 'plain' WHERE id = 5").run(); });
    const c2 = f("copy");
    new Database(l2).exec(`VACUUM INTO '${c2}'`);
    expect(writeDeltaOf(c2, "main", indexPages(p2), null, f("delta"), { scan: true, seal: { key: KEY, parentId: "parent" } }).findings).toEqual([]);
  });
});

describe("deltasInPlace (read in place at the instant)", () => {
  for (const withSums of [false, true])
    it(`rebuilds the snapshot exactly, with its own page index, counts and cursors${withSums ? " (by the parent's block sums)" : ""}`, async () => {
      const { live, parent } = liveAndParent(update);
      const inst = await openInstant([{ name: "main", src: live, dest: f("unused") }], 1000);
      const out = f("out");
      mkdirSync(out);
      try {
        const views = inst.views();
        const snapCopy = f("snap");
        await views.get("main")!.snap.copyTo(snapCopy); // what the instant holds, for comparison
        const bases = new Map(withSums ? [["main", { sums: ParentSums.open(sumsOf(parent), 4096)!, seed, out: f("next-sums") }]] : []);
        const { deltas, inspected } = await deltasInPlace(views, {
          parents: new Map([["main", indexPages(parent)]]),
          bases,
          key: KEY,
          parentId: "parent",
          dir: out,
          inspect: { cursors: { pos: { database: "main", sql: "SELECT pos FROM cur" } }, scan: "warn" },
        });
        for (const b of bases.values()) b.sums.close();
        const d = deltas.get("main")!;
        const own = indexPages(snapCopy);
        expect(d.ix.hashes.equals(own.hashes)).toBe(true);
        expect(d.ix.root).toBe(pagesRoot(own));
        expect(d.file).toBe(join(out, "main.delta"));
        expect(rebuild(parent, d.file).equals(readFileSync(snapCopy))).toBe(true);
        expect(d.sums).toBe(withSums);
        expect(d.findings.length).toBeGreaterThan(0);
        expect(inspected.dbs[0]).toMatchObject({ integrity: ["skipped"], records: { m: 600, cur: 1 } });
        expect(inspected.cursors).toEqual({ pos: 2 });
        if (withSums) expect(readFileSync(bases.get("main")!.out).equals(readFileSync(sumsOf(snapCopy)))).toBe(true); // the new snapshot's sums
      } finally {
        inst.close();
      }
    });
});
