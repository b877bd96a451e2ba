/**
 * Row counts read off a database's pages while they are read for another
 * reason (the page index, the secret scan), instead of `SELECT count(*)`
 * walking every table a second time through SQLite (350 ms of a 1.2 GB
 * incremental's critical path in the profile).
 *
 * SQLite's file format: a b-tree page starts with its type (13 table leaf,
 * 5 table interior, 10 index leaf, 2 index interior; on page 1 after the
 * 100-byte file header), its cell count at +3, an interior page's right-most
 * child at +8, and its cell pointers (2 bytes each, from the page's start)
 * after the header; an interior cell starts with its left child's page
 * number. A rowid table's rows are its leaf cells; a WITHOUT ROWID table is an
 * index b-tree, whose every cell, interior or leaf, is a row (SQLite's
 * sqlite3BtreeCount counts the same way).
 *
 * The census records each page's type and cell count and each interior page's
 * children; a table is counted by walking its tree from its root page. Pages
 * nobody's tree reaches (free pages, overflow pages) are recorded as
 * whatever their first byte says and never looked at. Anything a sound tree
 * can not hold (a child outside the file, a page reached twice, a page of the
 * wrong type, a page below the root with no cells or more than fit in a page:
 * what SQLite itself calls corrupt on the way down) makes count() answer null,
 * and the caller asks SQLite.
 */

/** b-tree page types (the first byte of the page's header) */
export const TABLE_LEAF = 13;
export const TABLE_INTERIOR = 5;
export const INDEX_LEAF = 10;
export const INDEX_INTERIOR = 2;

/** What a thread's census of some of the pages holds: posted to another thread (its arrays moved) and merged there. */
export interface CensusPart {
  kind: Uint8Array;
  cells: Uint16Array;
  /** per interior page: its number, its child count n, then n child page numbers */
  links: Uint32Array;
}

export class BtreeCensus {
  private kind: Uint8Array;
  private cells: Uint16Array;
  private links: Uint32Array;
  private linked = 0;
  private where: Map<number, number> | null = null;
  /** count()'s visited pages: the call's number per page, so no clearing between tables */
  private seen: Uint32Array | null = null;
  private walks = 0;

  constructor(
    readonly pageSize: number,
    readonly pageCount: number,
  ) {
    // index 0 unused: pages are numbered from 1
    this.kind = new Uint8Array(pageCount + 1);
    this.cells = new Uint16Array(pageCount + 1);
    this.links = new Uint32Array(1024);
  }

  /** Records the whole pages of `run`, the first of which is page `first`. */
  pages(run: Buffer, first: number): void {
    const ps = this.pageSize;
    const n = run.length / ps;
    for (let i = 0; i < n; i++) {
      const p = first + i;
      if (p > this.pageCount) return;
      const base = i * ps;
      const hdr = base + (p === 1 ? 100 : 0);
      const kind = run[hdr]!;
      if (kind !== TABLE_LEAF && kind !== TABLE_INTERIOR && kind !== INDEX_LEAF && kind !== INDEX_INTERIOR) continue;
      const cells = run.readUInt16BE(hdr + 3);
      this.kind[p] = kind;
      this.cells[p] = cells;
      if (kind === TABLE_INTERIOR || kind === INDEX_INTERIOR) this.interior(run, base, hdr, p, cells);
    }
  }

  private interior(run: Buffer, base: number, hdr: number, p: number, cells: number): void {
    const ps = this.pageSize;
    // the cell pointers must fit in the page, and each cell's child number too; otherwise the page is left unknown
    if (hdr - base + 12 + 2 * cells > ps) return void (this.kind[p] = 0);
    this.room(2 + cells + 1);
    const at = this.linked;
    this.links[at] = p;
    this.links[at + 1] = cells + 1;
    for (let c = 0; c < cells; c++) {
      const off = run.readUInt16BE(hdr + 12 + 2 * c);
      if (off + 4 > ps) return void (this.kind[p] = 0);
      this.links[at + 2 + c] = run.readUInt32BE(base + off);
    }
    this.links[at + 2 + cells] = run.readUInt32BE(hdr + 8);
    this.linked = at + 3 + cells;
  }

  private room(more: number): void {
    if (this.linked + more <= this.links.length) return;
    const grown = new Uint32Array(Math.max(this.links.length * 2, this.linked + more));
    grown.set(this.links.subarray(0, this.linked));
    this.links = grown;
  }

  /** This census's pages first..last, to hand to another thread's census (merge). */
  part(first: number, last: number): CensusPart {
    return { kind: this.kind.slice(first, last + 1), cells: this.cells.slice(first, last + 1), links: this.links.slice(0, this.linked) };
  }

  /** Takes in another thread's census of pages `first`.. (part()). */
  merge(part: CensusPart, first: number): void {
    this.kind.set(part.kind, first);
    this.cells.set(part.cells, first);
    this.room(part.links.length);
    this.links.set(part.links, this.linked);
    this.linked += part.links.length;
    this.where = null;
  }

  /**
   * The rows of the table whose tree starts at `root` (`withoutRowid`: an
   * index b-tree), or null when its pages do not make a sound tree.
   */
  count(root: number, withoutRowid: boolean): number | null {
    const where = (this.where ??= this.index());
    const leaf = withoutRowid ? INDEX_LEAF : TABLE_LEAF;
    const most = Math.floor((this.pageSize - 8) / 6);
    const inner = withoutRowid ? INDEX_INTERIOR : TABLE_INTERIOR;
    const seen = (this.seen ??= new Uint32Array(this.pageCount + 1));
    const walk = ++this.walks;
    const todo = [root];
    let rows = 0;
    while (todo.length) {
      const p = todo.pop()!;
      if (p < 1 || p > this.pageCount || seen[p] === walk) return null;
      seen[p] = walk;
      const k = this.kind[p];
      if (this.cells[p]! > most || (p !== root && this.cells[p]! < 1)) return null;
      if (k === leaf) rows += this.cells[p]!;
      else if (k === inner) {
        if (withoutRowid) rows += this.cells[p]!;
        const at = where.get(p);
        if (at === undefined) return null;
        for (let c = 0; c < this.links[at + 1]!; c++) todo.push(this.links[at + 2 + c]!);
      } else return null;
    }
    return rows;
  }

  private index(): Map<number, number> {
    const m = new Map<number, number>();
    for (let at = 0; at < this.linked; at += 2 + this.links[at + 1]!) m.set(this.links[at]!, at);
    return m;
  }
}
