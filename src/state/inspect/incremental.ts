/**
 * Page deltas of an incremental snapshot against its parent, with the secret
 * scan of the changed pages and the inspection: from a copy of the database
 * (writeDeltaOf), or — for an incremental the integrity policy does not
 * check — from the live pages themselves, read in place inside the
 * snapshot's read transactions (deltasInPlace; no copy is made), split
 * between this thread and an inspection worker. In state/inspect/, above the
 * page engine (state/pages/) and the secret scan it combines: the engine
 * itself stays free of SQLite connections (a chain is rebuilt without them).
 */
import { join } from "node:path";
import { AgentbakError, Exit, ioErrno, ioError } from "../../errors.js";
import { BtreeCensus } from "../sqlite/btree.js";
import type { InPlaceViews } from "../sqlite/cut.js";
import type { DB } from "../sqlite/open.js";
import { consecutiveRuns, listedRunPages, readListedPages, readPages, splitPage, withPages, type PageSource } from "../sqlite/pagefile.js";
import { ChangedPagesScan, changedPagesFindings } from "../secrets/pagescan.js";
import type { SecretFinding } from "../secrets/scan.js";
import { changedIn, DeltaWriter, hashesFrom, indexPages, PageDigest, PageHasher, pagesRoot, setHashes, storedIndex, usableBase, type DeltaBase, type PageIndex, type SumsRef, type TailPart } from "../pages/index.js";
import { hashTailInWorker, inspectSnapshot, type InspectInput, type InspectResult } from "./inspect.js";

/** A database's pages that changed since its parent, written to `file`, with the new page index. */
export interface Delta {
  /** the new page index and its pages root (what the manifest records for the rebuilt file) */
  ix: PageIndex & { root: string; size: number };
  pages: number[];
  file: string;
  /** token-like values in the changed pages (the others were scanned when their snapshot was made) */
  findings: SecretFinding[];
  /** whether the new snapshot's block sums were written (the parent's were at hand: the delta holds changed blocks) */
  sums: boolean;
  /** the new page index as stored (storedIndex: the changes since the parent's) */
  stored: Buffer;
  /** the manifest's record of the delta (deltaMeta) */
  meta: ReturnType<typeof deltaMeta>;
}

/** What a delta's page index is stored under: this host's page-index key, and the parent's snapshot id. */
export interface IndexSeal {
  key: Buffer;
  parentId: string;
}

/** The manifest's record of a delta. */
export const deltaMeta = (d: Pick<Delta, "ix" | "pages">) => ({ full_pages_sha256: d.ix.root, full_size: d.ix.size, page_size: d.ix.pageSize, page_count: d.ix.pageCount, changed_pages: d.pages.length });

/**
 * The delta of one database against its parent's page index. Read in place,
 * the changed pages among those hashed on this thread go in from the run
 * being hashed (no second read), and those among the worker's pages are read
 * once its hashes are back; from a copy, all are read (writeDeltaOf).
 */
class PageDelta {
  readonly pages: number[] = [];
  private readonly writer: DeltaWriter;
  private readonly scanner: ChangedPagesScan | null;
  private readonly most: number;
  constructor(
    private readonly snap: PageSource,
    private readonly parent: PageIndex,
    base: DeltaBase | null,
    readonly file: string,
    scan: boolean,
    private readonly seal: IndexSeal,
  ) {
    // only the pages that changed can hold a new secret: scanned as they go into the delta
    this.scanner = scan ? new ChangedPagesScan(snap) : null;
    this.writer = new DeltaWriter(snap, file, base, this.scanner);
    this.most = listedRunPages(snap.pageSize);
  }

  /** A run just digested here (`hashes`: its pages' digests): its changed pages, consecutive ones together. */
  hashed(run: Buffer, first: number, hashes: Buffer): void {
    this.add(run, first, changedIn(this.parent, this.snap.pageSize, hashes, first));
  }

  /** A run read here, whose pages `changed` (ascending) differ from the parent's: they go into the delta from it. */
  add(run: Buffer, first: number, changed: number[]): void {
    const ps = this.snap.pageSize;
    for (const [p, k] of consecutiveRuns(changed, this.most)) this.writer.add(run.subarray((p - first) * ps, (p - first + k) * ps), p);
    for (const p of changed) this.pages.push(p);
  }

  /** A run read here, given the parent's block sums: the pages whose sums differ go into the delta from it. @returns them */
  summed(run: Buffer, first: number): number[] {
    const changed = this.writer.addChanged(run, first);
    for (const p of changed) this.pages.push(p);
    return changed;
  }

  /** Pages found changed elsewhere (by the worker's sums; ascending, after those added so far): read and added. */
  listed(changed: ArrayLike<number>): void {
    const pages = Array.from(changed);
    readListedPages(this.snap, pages, (run, first) => this.writer.add(run, first));
    for (const p of pages) this.pages.push(p);
  }

  /** The pages from `first` on, digested elsewhere (by the worker, or all of a copy): the changed ones are read and added. */
  rest(first: number, hashes: Buffer): void {
    if (!hashes.length) return; // none: by sums, this thread read every page
    const changed = changedIn(this.parent, this.snap.pageSize, hashes, first);
    readListedPages(this.snap, changed, (run, at) => this.writer.add(run, at));
    for (const p of changed) this.pages.push(p);
  }

  /** `src`: what the findings name rows through (a copy's path when there is no pinned connection). */
  finish(name: string, ix: Delta["ix"], pinned?: DB, src: string | PageSource = this.snap): Delta {
    const sums = this.writer.finish();
    const stored = storedIndex(ix, this.seal.key, { pages: this.pages, parentId: this.seal.parentId, parentPageSize: this.parent.pageSize });
    const meta = deltaMeta({ ix, pages: this.pages });
    return { ix, pages: this.pages, file: this.file, findings: this.scanner ? changedPagesFindings(src, name, this.scanner.finish(), pinned) : [], sums, stored, meta };
  }

  abandon(): void {
    this.writer.abandon();
  }
}

/** Writes the delta of a copy of a database (its path) against `parent`, with the copy's page index, stored under `seal`. */
export function writeDeltaOf(copy: string, name: string, parent: PageIndex, base: DeltaBase | null, file: string, o: { scan: boolean; seal: IndexSeal }): Delta {
  const ix = indexPages(copy);
  return withPages(copy, (from) => {
    const d = new PageDelta(from, parent, base, file, o.scan, o.seal);
    try {
      d.rest(1, ix.hashes);
    } catch (e) {
      d.abandon(); // the file is left to the backup's clean-up
      throw e;
    }
    return d.finish(name, ix, undefined, copy);
  });
}

/**
 * Of the pages of an in-place read, the share the calling thread reads (and
 * digests, or sums), which also writes the delta of the changed pages among
 * them and scans them for secrets; the worker reads the rest, and its changed
 * pages are read again here (a few percent of the pages).
 */
const MAIN_SHARE = 0.45;
/**
 * By block sums a page costs this thread ~1.7 times what it costs the worker
 * (the changed pages' delta and scan, and the worker's changed pages read
 * again here): a 1194 MiB database after the bench's 1% update, split half
 * and half, kept this thread busy 1.0 s and the worker 0.5 s.
 */
const SUMS_MAIN_SHARE = 0.28;

/**
 * Reads every database in place (inside the instant openInstant holds), its
 * first pages here and the rest in a worker thread reading the same
 * descriptors: the page index — each page digested, or with this host's
 * block sums of the parent only the pages whose sums differ (the others keep
 * the parent's digests) —, the delta of the changed pages (those the worker
 * found are read again here, as it hands them over), the pages root from the index (no read of the
 * whole file for its sha256), the row counts from the pages both threads
 * read, and the cursors and open operations through the pinned connections
 * (no integrity_check: the policy did not ask for one).
 * @throws an I/O error naming the database and the file it failed on.
 */
export async function deltasInPlace(
  views: InPlaceViews,
  o: { parents: Map<string, PageIndex>; bases: Map<string, DeltaBase>; key: Buffer; parentId: string; dir: string; inspect: Omit<InspectInput, "dbs"> },
): Promise<{ deltas: Map<string, Delta>; inspected: InspectResult }> {
  const names = [...views.keys()];
  const bySums = new Set(names.filter((n) => usableBase(o.bases.get(n), views.get(n)!.snap.pageSize)));
  // the first pages are read here, the rest by the worker
  const split = new Map(names.map((n) => [n, splitPage(views.get(n)!.snap.pageCount, views.get(n)!.snap.pageSize, bySums.has(n) ? SUMS_MAIN_SHARE : MAIN_SHARE)]));
  const sumsOf = (n: string): SumsRef | undefined => {
    const b = bySums.has(n) ? o.bases.get(n)! : undefined;
    return b && { file: b.sums.file, seed: b.seed };
  };
  const open = new Map<string, PageDelta>();
  const heads = new Map<string, PageIndex>();
  // by sums, the pages the worker finds changed come in parts as it reads; each is taken in here when this thread is
  // done with its own pages (their digests into the index, the pages read again into the delta) while the worker reads on
  let abandoned = false;
  const partFailed = new Map<string, unknown>();
  const takePart = (n: string) => (part: TailPart) => {
    if (abandoned || partFailed.has(n)) return;
    try {
      // parts are taken at this thread's awaits, after its own pages: a part with nowhere to go would be pages lost
      const d = open.get(n);
      const head = heads.get(n);
      if (!d || !head) throw new Error(`internal error: pages ${part.changed[0]}.. of database ${n} came before its delta was begun`);
      setHashes(head.hashes, part.changed, part.hashes);
      d.listed(part.changed);
    } catch (e) {
      partFailed.set(n, named(n, e));
    }
  };
  const tails = new Map(names.map((n) => [n, hashTailInWorker(views.get(n)!.snap.pinned(), split.get(n)!, sumsOf(n), bySums.has(n) ? takePart(n) : undefined)]));
  for (const t of tails.values()) t.catch(() => undefined); // awaited below
  const fileOf = (n: string) => join(o.dir, `${n}.delta`);
  const named = (n: string, e: unknown) => {
    const v = views.get(n)!;
    return ioErrno(e) ? ioError(e, `database ${n}: ${(e as NodeJS.ErrnoException).syscall === "write" || (e as NodeJS.ErrnoException).syscall === "open" ? `writing ${fileOf(n)}` : `reading ${v.src}`}`) : e;
  };
  const each = <T>(n: string, f: () => T): T => {
    try {
      return f();
    } catch (e) {
      throw named(n, e);
    }
  };
  try {
    const censuses = new Map(names.map((n) => [n, new BtreeCensus(views.get(n)!.snap.pageSize, views.get(n)!.snap.pageCount)]));
    for (const n of names) {
      const { snap } = views.get(n)!;
      const d = each(n, () => new PageDelta(snap, o.parents.get(n)!, o.bases.get(n) ?? null, fileOf(n), o.inspect.scan !== "off", { key: o.key, parentId: o.parentId }));
      open.set(n, d);
      const census = censuses.get(n)!;
      if (bySums.has(n)) {
        const one = new PageDigest(snap.pageSize);
        const hashes = hashesFrom(o.parents.get(n)!, snap.pageCount);
        each(n, () =>
          readPages(
            snap,
            (run, first) => {
              census.pages(run, first);
              for (const p of d.summed(run, first)) one.into(run, p - first, hashes, p - 1);
            },
            split.get(n)!,
          ),
        );
        heads.set(n, { pageSize: snap.pageSize, pageCount: snap.pageCount, hashes });
        continue;
      }
      const hasher = new PageHasher(snap.pageSize);
      each(n, () =>
        readPages(
          snap,
          (run, first) => {
            census.pages(run, first);
            d.hashed(run, first, hasher.update(run));
          },
          split.get(n)!,
        ),
      );
      heads.set(n, hasher.index());
    }
    // the counts come from the pages both threads read (state/sqlite/btree.ts); the cursors and open operations through the
    // pinned connections
    const inspect = () => inspectSnapshot({ ...o.inspect, dbs: names.map((n) => ({ name: n, file: views.get(n)!.src, scan: false, integrity: false })) }, new Map(names.map((n) => [n, views.get(n)!.db])), censuses);
    const ixs = new Map<string, Delta["ix"]>();
    for (const n of names) {
      const v = views.get(n)!;
      // the worker sends back only a message: it read the live file
      const tail = await tails.get(n)!.catch((e: Error) => {
        throw new AgentbakError(Exit.failure, `database ${n}: reading ${v.src}: ${e.message}`);
      });
      censuses.get(n)!.merge(tail.census, split.get(n)! + 1);
      const head = heads.get(n)!;
      const tailHashes = Buffer.from(tail.hashes.buffer, tail.hashes.byteOffset, tail.hashes.byteLength);
      const shape = { size: v.snap.pageCount * v.snap.pageSize, pageSize: v.snap.pageSize, pageCount: v.snap.pageCount };
      if (partFailed.has(n)) throw partFailed.get(n);
      if (bySums.has(n)) {
        // by sums: the worker's changed pages took their digests in the index begun from the parent's (takePart)
        ixs.set(n, { ...shape, hashes: head.hashes, root: pagesRoot({ ...shape, hashes: head.hashes }) });
        continue;
      }
      const hashes = tailHashes.length ? Buffer.concat([head.hashes, tailHashes]) : head.hashes;
      ixs.set(n, { ...shape, hashes, root: pagesRoot({ ...shape, hashes }) });
      each(n, () => open.get(n)!.rest(split.get(n)! + 1, tailHashes));
    }
    const inspected = inspect();
    const deltas = new Map<string, Delta>();
    for (const n of names) {
      deltas.set(n, each(n, () => open.get(n)!.finish(n, ixs.get(n)!, views.get(n)!.db)));
      open.delete(n);
    }
    return { deltas, inspected };
  } catch (e) {
    // the workers read these snapshots' descriptors: they finish before the snapshots are released
    abandoned = true;
    await Promise.allSettled(tails.values());
    for (const d of open.values()) d.abandon();
    throw e;
  }
}
