/**
 * The parent stage: which snapshot an incremental builds on (the latest, when its whole chain verifies and is short
 * enough), and the parent's page index of each database, verified against the digest its manifest signed.
 */
import { isDatabase, type Manifest } from "../bundle/manifest.js";
import type { VerifiedBundle } from "../bundle/reader.js";
import { checkedPayloads, verifyChain, verifyRemembered } from "../bundle/chain.js";
import type { Trust } from "../crypto/trust.js";
import { AgentbakError } from "../errors.js";
import type { AgentRef } from "../facts.js";
import type { Repository, Snapshot } from "../repository/repository.js";
import { decodeIndex, pagesRoot, type PageIndex } from "../state/pages/index.js";

/** What choosing a parent reads: the repository, the trust it is verified with, AGENTBAK_HOME (the digests already checked). */
export interface ParentContext {
  repo: Repository;
  trust: Trust;
  home: string;
}

/** The snapshot an incremental builds on, verified. */
export interface Parent {
  snapshot: Snapshot;
  header: VerifiedBundle;
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
export const NO_PARENT: ParentChoice = { parent: null, reason: "", link: 0, routine: true };

/** The parent for an incremental: the latest snapshot, if its whole chain verifies and is short enough; or why not. */
export async function chooseParent(o: ParentContext, a: AgentRef, fullEvery: number): Promise<ParentChoice> {
  // the newest snapshot is the chain's head: one that does not verify (itself, or a link below it) is not skipped
  // for an older one, silently; a full snapshot starts a sound chain and the warning names the link
  const newest = (await o.repo.list(o.trust, a)).at(-1);
  if (newest?.status === "invalid") return { parent: null, reason: `chain of ${newest.snapshot_id} is not usable (${newest.problem})`, link: 0 };
  let latest: Snapshot;
  try {
    latest = await o.repo.resolve("latest", o.trust, a);
  } catch (e) {
    if (e instanceof AgentbakError) return { parent: null, reason: "no verified snapshot to build on", link: 0, routine: true };
    throw e;
  }
  const opened = await o.repo.open(latest, o.trust);
  try {
    // every link's payload digest, each read once on this host (by file identity): a large full snapshot is not
    // read again at every incremental built on it
    const checked = checkedPayloads(o.home);
    const v = await verifyRemembered(opened.path, o.trust, checked);
    const chain = await verifyChain(v, opened.links, o.trust, checked);
    checked.save();
    if (chain.length + 1 > fullEvery) return { parent: null, reason: `a full snapshot is due after ${fullEvery} incrementals`, link: 0, routine: true };
    // the new snapshot's place in its chain: 1 for the first incremental after a full one
    return { parent: { snapshot: latest, header: v }, reason: "", link: chain.length + 1 };
  } catch (e) {
    if (!(e instanceof AgentbakError)) throw e;
    return { parent: null, reason: `chain of ${latest.snapshot_id} is not usable (${e.message})`, link: 0 };
  } finally {
    opened.release();
  }
}

/**
 * The parent's page index of database `db`, judged from what is stored (`stored`, null when none is): usable when
 * it matches the pages root the parent's manifest signed.
 * @returns it, or why it can not be used
 */
export function judgeParentIndex(m: Manifest, db: string, stored: Buffer | null, key: Buffer): PageIndex | Unindexed {
  const id = m.snapshot_id;
  // before format 4 an index held keyed page hashes, which no pages root is made of: a full snapshot after upgrading is routine
  if (m.format_version < 4) return { reason: `${id} was made by an earlier agentbak (bundle format ${m.format_version}), whose page index an incremental can not build on`, routine: true };
  const c = m.components.find((x) => x.name === db && isDatabase(x));
  // a database added to the config since the parent: stored whole, as expected
  if (!c) return { reason: `database ${db} is not in ${id} (added since)`, routine: true };
  const missing = { reason: `the page index of database ${db} in ${id} is missing or does not match its manifest`, routine: false };
  if (!stored || !c.page_index_sha256) return missing;
  try {
    const ix = decodeIndex(stored, key);
    // sealed under another key (another host made the parent, or this host's key was replaced): its digests can not be
    // read here, so every page is taken as changed (an index of page size 0 matches no page) and no sums are used
    if (!ix) return { pageSize: 0, pageCount: 0, hashes: Buffer.alloc(0) };
    // the manifest signs the pages root of the index's digests
    return pagesRoot(ix) === c.page_index_sha256 ? ix : missing;
  } catch {
    return missing;
  }
}

/**
 * The parent's usable page indexes of `dbs`, and the reason one is not usable (a warning's before a routine one).
 */
export async function parentIndexes(repo: Repository, parent: Parent | null, dbs: string[], key: Buffer): Promise<{ parents: Map<string, PageIndex>; unindexed: Unindexed | null }> {
  const parents = new Map<string, PageIndex>();
  let unindexed: Unindexed | null = null;
  for (const db of parent ? dbs : []) {
    const m = parent!.header.manifest;
    const c = m.components.find((x) => x.name === db && isDatabase(x));
    const stored = m.format_version >= 4 && c?.page_index_sha256 ? await repo.pageIndex(parent!.snapshot, db) : null;
    const ix = judgeParentIndex(m, db, stored, key);
    if ("hashes" in ix) parents.set(db, ix);
    else if (!unindexed || (unindexed.routine && !ix.routine)) unindexed = ix;
  }
  return { parents, unindexed };
}
