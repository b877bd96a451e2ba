/**
 * The read plan: how this backup reads its databases, chosen once, before the capture, as data. The databases stage
 * (databases.ts) carries it out; nothing later asks again.
 */
import { join } from "node:path";
import { isDatabase } from "../bundle/manifest.js";
import type { LoadedConfig } from "../config/load.js";
import type { Repository } from "../repository/repository.js";
import type { InspectInput } from "../state/inspect/inspect.js";
import { blockSeed, BlockSumsStore, pageIndexKey, type DeltaBase, type PageIndex } from "../state/pages/index.js";
import type { AgentRef } from "../facts.js";
import { parentIndexes, type ParentChoice, type Unindexed } from "./parent.js";

/**
 * How the databases are read at the instant:
 * - "copy": each copied whole into staging (an incremental then writes its delta from the copy);
 * - "in-place": an incremental the integrity policy does not check reads the live pages inside the snapshot's read
 *   transactions and copies only what changed;
 * - "pinned": a full snapshot keeps the snapshots open; the payload streams the pinned pages and the inspection
 *   worker checks them at the same instant; no copy is written.
 * "in-place" and "pinned" fall back to "copy" at the instant when the databases do not allow them (cut.ts).
 */
export type ReadMode = "copy" | "in-place" | "pinned";

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
  sumStores: Map<string, BlockSumsStore>;
  /** where the copies and deltas go */
  dir: string;
  inspect: Omit<InspectInput, "dbs">;
  /** why a database is stored whole although an incremental was asked for */
  unindexed: Unindexed | null;
}

/**
 * Reads the parent's page indexes and opens the block sums, and chooses the read mode. The block sums are closed,
 * and those of a snapshot not published removed, by the caller's `closers` whatever happens.
 */
export async function planDatabases(lc: LoadedConfig, o: { repo: Repository; home: string }, a: AgentRef, chosen: ParentChoice, snapshotId: string, staging: string, closers: (() => void)[]): Promise<DbPlan> {
  const cfg = lc.config;
  const key = pageIndexKey(o.home);
  const { parents, unindexed } = await parentIndexes(o.repo, chosen.parent, cfg.databases.map((d) => d.name), key);
  const seed = blockSeed(key);
  const sumStores = new Map(cfg.databases.map((d) => [d.name, new BlockSumsStore(o.home, o.repo.location, a.tenant, a.agent, d.name)]));
  const bases = new Map<string, DeltaBase>();
  for (const [name, ix] of parents) {
    const c = chosen.parent!.header.manifest.components.find((x) => x.name === name && isDatabase(x))!;
    const sums = sumStores.get(name)!.open(chosen.parent!.snapshot.snapshot_id, c.full_pages_sha256 ?? c.full_sha256 ?? c.sha256, ix.pageSize, ix.pageCount);
    const out = sums && sumStores.get(name)!.partial(snapshotId);
    if (sums && out) bases.set(name, { sums, seed, out });
    else sums?.close();
  }
  closers.push(() => bases.forEach((b) => b.sums.close()), () => sumStores.forEach((st) => st.discard(snapshotId)));
  const mode = chooseReadMode({ databases: cfg.databases.length, withIndex: parents.size, integrityChecked: integrityChecked(chosen.link, !!chosen.parent, cfg.incremental.integrityEvery) });
  return {
    mode,
    snapshotId,
    parentId: chosen.parent?.snapshot.snapshot_id ?? null,
    key,
    parents,
    bases,
    sumStores,
    dir: join(staging, "db"),
    inspect: { cursors: cfg.cursors, openOperations: cfg.openOperations, timers: cfg.timers, scan: cfg.secretScan.databases },
    unindexed,
  };
}
