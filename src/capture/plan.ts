/**
 * The read plan, chosen once before the capture, as data: which snapshot an incremental builds on (the parent: the
 * latest, when its whole chain verifies and is short enough), the parent's page index of each database (verified
 * against the digest its manifest signed), and how this backup reads its databases. The databases stage
 * (databases.ts) carries it out; nothing later asks again.
 */
import { join } from "node:path";
import { isDatabase, type Manifest } from "../bundle/manifest.js";
import type { VerifiedBundle } from "../bundle/reader.js";
import type { LoadedConfig } from "../config/load.js";
import type { ChainHead, Snapshot } from "../repository/repository.js";
import type { InspectInput } from "../state/inspect/inspect.js";
import type { ReadMode } from "../state/inspect/read.js";
import { openSnapshotPages, type DeltaBase, type PageIndex, type ParentDatabase, type SnapshotSums } from "../state/pages/index.js";
import type { AgentRef } from "../facts.js";

/** The snapshot an incremental builds on, verified, and its stored page index of each database that has one. */
export interface Parent {
  snapshot: Snapshot;
  header: VerifiedBundle;
  indexes: Map<string, Buffer | null>;
}

/** The parent, or null and why not (`routine`: expected, the first snapshot or fullEvery; else a warning); `link`: the new snapshot's place in its chain. */
export interface ParentChoice {
  parent: Parent | null;
  reason: string;
  link: number;
  routine?: boolean;
}

/** Why a database is stored whole in an incremental; `routine`: expected (an upgrade), not a warning. */
export interface Unindexed {
  reason: string;
  routine: boolean;
}

/** No parent: the backup was not asked to be incremental. */
const NO_PARENT: ParentChoice = { parent: null, reason: "", link: 0, routine: true };

/**
 * The parent for an incremental: the chain's head (Repository.beginBackup read it), if its whole chain verifies and
 * is short enough; or why not.
 */
function chooseParent(head: ChainHead, fullEvery: number): ParentChoice {
  // a full snapshot starts a sound chain and the warning names the link that does not verify
  if (!head) return { parent: null, reason: "no verified snapshot to build on", link: 0, routine: true };
  if ("unusable" in head) return { parent: null, reason: head.unusable, link: 0 };
  if (head.links + 1 > fullEvery) return { parent: null, reason: `a full snapshot is due after ${fullEvery} incrementals`, link: 0, routine: true };
  // the new snapshot's place in its chain: 1 for the first incremental after a full one
  return { parent: { snapshot: head.snapshot, header: head.header, indexes: head.indexes }, reason: "", link: head.links + 1 };
}

/** The database component `db` of a manifest, if it has one. */
const databaseOf = (m: Manifest, db: string) => m.components.find((x) => x.name === db && isDatabase(x));

/** Why the parent's page index of database `db` can not be built on: missing, malformed, or not the one its manifest signed. */
const missingIndex = (id: string, db: string): Unindexed => ({ reason: `the page index of database ${db} in ${id} is missing or does not match its manifest`, routine: false });

/**
 * What the parent's manifest `m` says of database `db`'s page index, given what is stored (`stored`, null when none
 * is): the index to check against the pages root the manifest signed (the page engine checks it: openSnapshotPages),
 * or why there is none to build on.
 */
export function parentEntry(m: Manifest, db: string, stored: Buffer | null): ParentDatabase | Unindexed {
  const id = m.snapshot_id;
  // before format 4 an index held keyed page hashes, which no pages root is made of: a full snapshot after upgrading is routine
  if (m.format_version < 4) return { reason: `${id} was made by an earlier agentbak (bundle format ${m.format_version}), whose page index an incremental can not build on`, routine: true };
  const c = databaseOf(m, db);
  // a database added to the config since the parent: stored whole, as expected
  if (!c) return { reason: `database ${db} is not in ${id} (added since)`, routine: true };
  if (!stored || !c.page_index_sha256) return missingIndex(id, db);
  return { stored, root: c.page_index_sha256, sha256: c.full_pages_sha256 ?? c.full_sha256 ?? c.sha256 };
}

/**
 * The page engine opened for this snapshot (openSnapshotPages: the key, the parent's checked page indexes, the block
 * sums), the parent's usable page indexes of `dbs`, and the reason one is not usable (a warning's before a routine one).
 */
export function parentPages(parent: Parent | null, dbs: string[], at: { home: string; repo: string; tenant: string; agent: string }, snapshotId: string) {
  const entries = new Map<string, ParentDatabase>();
  const verdicts = new Map<string, Unindexed>();
  for (const db of parent ? dbs : []) {
    const e = parentEntry(parent!.header.manifest, db, parent!.indexes.get(db) ?? null);
    if ("reason" in e) verdicts.set(db, e);
    else entries.set(db, e);
  }
  const pages = openSnapshotPages(at, dbs, snapshotId, parent ? { snapshotId: parent.snapshot.snapshot_id, dbs: entries } : null);
  const parents = new Map<string, PageIndex>();
  let unindexed: Unindexed | null = null;
  for (const db of parent ? dbs : []) {
    const ix = pages.indexes.get(db) ?? verdicts.get(db) ?? missingIndex(parent!.snapshot.snapshot_id, db);
    if ("hashes" in ix) parents.set(db, ix);
    else if (!unindexed || (unindexed.routine && !ix.routine)) unindexed = ix;
  }
  return { key: pages.key, sums: pages.sums, parents, unindexed };
}
/** How the databases are read at the instant (state/inspect/read.ts): "in-place" and "pinned" fall back to "copy" when the databases do not allow them. */
export type { ReadMode };

/** The read mode for these databases: `withIndex`, how many have a usable parent page index. */
export function chooseReadMode(p: { databases: number; withIndex: number; integrityChecked: boolean }): ReadMode {
  if (!p.databases) return "copy";
  if (!p.integrityChecked && p.withIndex === p.databases) return "in-place";
  return p.withIndex === 0 ? "pinned" : "copy";
}

/** Whether this snapshot runs integrity_check: every full one, and every integrityEvery-th link of a chain. */
export const integrityChecked = (link: number, hasParent: boolean, integrityEvery: number) => !hasParent || link % integrityEvery === 0;

/** Everything the databases stage needs, decided before the capture. */
export interface DbPlan {
  mode: ReadMode;
  snapshotId: string;
  /** the parent's id, when its page indexes are built on */
  parentId: string | null;
  /** this host's page-index key (AGENTBAK_HOME) */
  key: Buffer;
  /** the parent's page index of each database that has a usable one */
  parents: Map<string, PageIndex>;
  /** this host's block sums of the parent's databases, when it made that parent: the deltas then hold changed blocks */
  bases: Map<string, DeltaBase>;
  /** this snapshot's block sums of each database: where they are written, kept once it is published */
  sums: SnapshotSums;
  /** where the copies and deltas go */
  dir: string;
  inspect: Omit<InspectInput, "dbs">;
  /** why a database is stored whole although an incremental was asked for */
  unindexed: Unindexed | null;
  /** an incremental was asked for (the option, else the config) */
  incremental: boolean;
  /** the parent it builds on, or why none */
  chosen: ParentChoice;
}

/**
 * Chooses the parent when an incremental is asked for (by the option, else the config: `o.incremental`) from `head`,
 * the chain's head the repository read, opens the page engine for this snapshot (its parent's page indexes judged, the
 * block sums), and chooses the read mode; a full snapshot instead of the incremental asked for, and a database stored
 * whole, are warnings unless routine. The caller ends the block sums (`sums.finish`) whatever happens.
 */
export function planDatabases(
  lc: LoadedConfig,
  o: { home: string; location: string; incremental: boolean },
  a: AgentRef,
  x: { snapshotId: string; staging: string; warnings: string[]; head: ChainHead },
): DbPlan {
  const { snapshotId, staging } = x;
  const cfg = lc.config;
  const { incremental } = o;
  const names = cfg.databases.map((d) => d.name);
  const chosen = incremental ? chooseParent(x.head, cfg.incremental.fullEvery) : NO_PARENT;
  // a full snapshot that fullEvery asks for, or the first one, is routine (in the receipt); one forced by a chain that does not verify is a warning
  if (incremental && !chosen.parent && !chosen.routine) x.warnings.push(`full snapshot instead of an incremental: ${chosen.reason}`);
  const { key, sums, parents, unindexed } = parentPages(chosen.parent, names, { home: o.home, repo: o.location, tenant: a.tenant, agent: a.agent }, snapshotId);
  // a database stored whole: after an upgrade routinely (in the receipt), a damaged or missing index with a warning
  if (unindexed && !unindexed.routine) x.warnings.push(`${unindexed.reason}: stored whole`);
  const mode = chooseReadMode({ databases: cfg.databases.length, withIndex: parents.size, integrityChecked: integrityChecked(chosen.link, !!chosen.parent, cfg.incremental.integrityEvery) });
  return {
    mode,
    snapshotId,
    parentId: chosen.parent?.snapshot.snapshot_id ?? null,
    key,
    parents,
    bases: sums.bases,
    sums,
    dir: join(staging, "db"),
    inspect: { cursors: cfg.cursors, openOperations: cfg.openOperations, timers: cfg.timers, scan: cfg.secretScan.databases, recall: cfg.recall.filter((r) => cfg.databases.some((d) => d.name === r.store)) },
    unindexed,
    incremental,
    chosen,
  };
}
