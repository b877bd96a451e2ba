/**
 * What one snapshot takes of the page engine, opened in one call before its capture (openSnapshotPages): this host's
 * page-index key, the parent's page index of each database checked against the pages root its manifest signed, and
 * this snapshot's block sums, opened on the parent's ones this host kept. The block sums are then finished in one
 * call as well (SnapshotSums.finish: kept once the snapshot is published, else removed). Above pageindex.ts and
 * blocks.ts, as delta.ts is; neither imports it.
 */
import { SnapshotSums } from "./blocks.js";
import { pageIndexKey, signedIndex, type PageIndex } from "./pageindex.js";

/** A parent's database as its manifest describes it: the stored index, the pages root it signed, and its digest. */
export interface ParentDatabase {
  stored: Buffer;
  root: string;
  sha256: string;
}

/** What a snapshot builds on in the page engine. */
export interface SnapshotPages {
  /** this host's page-index key (AGENTBAK_HOME/page-index-key) */
  key: Buffer;
  /**
   * the parent's page index of each database offered: null when it is malformed or not the one its manifest signed;
   * one sealed under another key (another host made the parent, or this host's key was replaced) is an index of page
   * size 0, which matches no page (every page counts as changed) and whose block sums are never used
   */
  indexes: Map<string, PageIndex | null>;
  /** this snapshot's block sums of each database, on the parent's this host kept (finish ends them) */
  sums: SnapshotSums;
}

/**
 * Opens the page engine for snapshot `snapshotId` of the databases `dbs` of the agent `at`: the key, the parent's
 * checked page indexes (`parent.dbs`: the databases its manifest gives an index for) and the block sums.
 * @throws AgentbakError when this host's page-index key is damaged (pageIndexKey)
 */
export function openSnapshotPages(
  at: { home: string; repo: string; tenant: string; agent: string },
  dbs: string[],
  snapshotId: string,
  parent: { snapshotId: string; dbs: Map<string, ParentDatabase> } | null,
): SnapshotPages {
  const key = pageIndexKey(at.home);
  const indexes = new Map<string, PageIndex | null>();
  // the parent's digest and shape of each database with a usable index: its block sums, when this host kept them
  const shapes = new Map<string, { sha256: string; pageSize: number; pageCount: number }>();
  for (const [db, p] of parent?.dbs ?? []) {
    const ix = checkedIndex(p, key);
    indexes.set(db, ix);
    if (ix) shapes.set(db, { sha256: p.sha256, pageSize: ix.pageSize, pageCount: ix.pageCount });
  }
  const sums = new SnapshotSums(at, dbs, snapshotId, parent ? { snapshotId: parent.snapshotId, dbs: shapes } : null, key);
  return { key, indexes, sums };
}

/** A parent's stored index when it is the one its manifest signed (signedIndex), else null (a malformed one too). */
function checkedIndex(p: ParentDatabase, key: Buffer): PageIndex | null {
  try {
    return signedIndex(p.stored, key, p.root);
  } catch {
    return null;
  }
}
