/**
 * The databases of one snapshot read at their instant, in the mode the read plan chose up front (capture/plan.ts),
 * as one operation: each copied into staging; an incremental's changed pages read in place inside the snapshot's
 * read transactions (deltasInPlace); or a full snapshot's pages kept pinned, the inspection worker joining the same
 * instant (inspectPinned). "in-place" and "pinned" fall back to a copy when the databases do not allow them
 * (sqlite/cut.ts: Instant). Then what was taken is staged for the payload in one call whatever the mode (stageTaken:
 * the copies beside their inspection), and the inspection settled in one (settleInspection: a pinned read released,
 * the page indexes sealed). In state/inspect/,
 * above sqlite/ and pages/, whose parts it puts together.
 */
import { openInstant, type CopyJob, type Cut, type InPlaceViews } from "../sqlite/cut.js";
import { databasesIdentity } from "../sqlite/identity.js";
import { namedSource } from "../sqlite/livesnap.js";
import { splitPage } from "../sqlite/pagefile.js";
import { HeadHashed, sealIndex, type DeltaBase, type PageIndex, type SnapshotSums } from "../pages/index.js";
import { join } from "node:path";
import { deltasInPlace, writeDeltaOf, type Delta } from "./incremental.js";
import { inspectInWorker, inspectPinned, type InspectInput, type InspectResult } from "./inspect.js";

/**
 * How the databases are read at the instant:
 * - "copy": each copied whole into staging (an incremental then writes its delta from the copy);
 * - "in-place": an incremental the integrity policy does not check reads the live pages inside the snapshot's read
 *   transactions and copies only what changed;
 * - "pinned": a full snapshot keeps the snapshots open; the payload streams the pinned pages and the inspection
 *   worker checks them at the same instant; no copy is written.
 */
export type ReadMode = "copy" | "in-place" | "pinned";

/** What the instant left: copies in staging, the deltas read in place, or the snapshots kept open (pinned) and their inspection. */
export type Taken =
  | { kind: "copy" }
  | { kind: "in-place"; deltas: Map<string, Delta>; inspected: InspectResult }
  | { kind: "pinned"; views: InPlaceViews; live: Awaited<ReturnType<typeof inspectPinned>>; release(): void };

/** What reading at the instant needs of the read plan. */
export interface InstantRead {
  mode: ReadMode;
  /** this host's page-index key */
  key: Buffer;
  /** the parent's page index of each database that has a usable one, and its id */
  parents: Map<string, PageIndex>;
  parentId: string | null;
  /** this host's block sums of the parent's databases */
  bases: Map<string, DeltaBase>;
  /** this snapshot's block sums: where each database's are written */
  sums: Pick<SnapshotSums, "partial">;
  /** where the deltas go */
  dir: string;
  inspect: Omit<InspectInput, "dbs">;
}

/**
 * Of a full snapshot read in place, the share of the keyed page hashes made on the thread that streams the
 * payload; the inspection worker makes the rest. Measured on the 1194 MiB bench database (commit message).
 */
const FULL_MAIN_SHARE = 0.35;
/** Of a full snapshot read in place, the last page of the share hashed on the thread that streams the payload. */
const mainShare = (pageCount: number, pageSize: number) => splitPage(pageCount, pageSize, FULL_MAIN_SHARE);

/**
 * Reads every database of `jobs` at one instant as `r.mode` says. With `fingerprint`, the databases' files' identity
 * (databasesIdentity: the unchanged check's part of them) is read at the instant itself, when every write lock is
 * held (`dbState`, else null). A "pinned" result must be released (releasePinned) whatever happens next.
 * @throws what openInstant throws (11: a write lock stayed busy), and the in-place read's errors naming the database
 */
export async function readInstant(r: InstantRead, jobs: CopyJob[], waitMs: number, fingerprint: boolean): Promise<{ cut: Cut; taken: Taken; dbState: string | null }> {
  const inst = await openInstant(jobs, waitMs);
  let taken: Taken = { kind: "copy" };
  let dbState: string | null = null;
  try {
    if (fingerprint && inst.allLocked) dbState = databasesIdentity(jobs);
    // a full snapshot kept in place: the inspection worker's connections join the instant before the locks go
    if (r.mode === "pinned" && inst.pinnable) {
      const views = inst.views();
      const dbs = [...views].map(([name, v]) => ({ name, file: v.src, pages: v.snap.pinned(), indexKey: r.key, indexAfter: mainShare(v.snap.pageCount, v.snap.pageSize), sumsFile: r.sums.partial(name) }));
      const live = await inspectPinned({ ...r.inspect, dbs }, new Map([...views].map(([n, v]) => [n, v.db])));
      taken = { kind: "pinned", views, live, release: inst.keep() };
    }
    inst.releaseLocks();
    // an incremental's changed pages, read while every read transaction still holds the instant
    if (r.mode === "in-place" && inst.readable) taken = { kind: "in-place", ...(await deltasInPlace(inst.views(), { parents: r.parents, bases: r.bases, key: r.key, parentId: r.parentId!, dir: r.dir, inspect: r.inspect })) };
    if (taken.kind === "copy") await inst.copy();
  } catch (e) {
    await releasePinned(taken).catch(() => undefined);
    throw e;
  } finally {
    inst.close();
  }
  return { cut: inst.cut(), taken, dbState };
}

/** Closes the snapshots a "pinned" read kept open, once its inspection has settled (the worker reads their descriptors). */
export async function releasePinned(t: Taken): Promise<void> {
  if (t.kind !== "pinned") return;
  await t.live.settled();
  t.release();
}

/** The pinned pages of database `name`, whose first share is hashed as the payload streams them (the worker hashes the rest). */
function pinnedHead(views: InPlaceViews, name: string): HeadHashed {
  const v = views.get(name)!;
  const named = namedSource(v.snap, `database ${name}: reading ${v.src}`);
  return new HeadHashed(named, mainShare(named.pageCount, named.pageSize));
}

/** What the instant took, staged for the payload: the deltas, the pinned pages (their head hashed as they stream), and the inspection under way. */
export interface Staged {
  /** an incremental's delta of each database that has one */
  deltas: Map<string, Delta>;
  /** the pinned pages of each database of a "pinned" read, whose first share is hashed as the payload streams them */
  heads: Map<string, HeadHashed>;
  /** the inspection (a rejection is the caller's to await: settleInspection) */
  inspection: Promise<InspectResult>;
}

/**
 * Stages what the instant took, whatever the mode: the in-place read's deltas and inspection as they are; a pinned
 * read's pages (hashed heads) with its inspection started; the copies (`copies`, in database order) staged beside their
 * inspection (stageCopies).
 * @throws what writing a delta throws (the inspection goes on; its rejection is caught)
 */
export function stageTaken(r: InstantRead, taken: Taken, copies: { name: string; file: string }[], scan: boolean): Staged {
  if (taken.kind === "in-place") return { deltas: taken.deltas, heads: new Map(), inspection: Promise.resolve(taken.inspected) };
  if (taken.kind === "pinned") {
    const heads = new Map(copies.map((c) => [c.name, pinnedHead(taken.views, c.name)]));
    const inspection = taken.live.start();
    inspection.catch(() => undefined); // awaited by settleInspection; no unhandled rejection meanwhile
    return { deltas: new Map(), heads, inspection };
  }
  return { ...stageCopies(r, copies, scan), heads: new Map() };
}

/**
 * The inspection of what the instant took, settled: awaited, a pinned read released once it has (the WAL can then be
 * checkpointed past the instant), and the page index the inspection made of each database without a delta sealed
 * under this host's key, its head hashed on this thread (`heads`) joined to the worker's digests (sealIndex).
 * @returns the inspection and the sealed indexes by database
 * @throws the inspection's failure
 */
export async function settleInspection(r: Pick<InstantRead, "key">, taken: Taken, staged: Staged): Promise<{ ins: InspectResult; sealed: Map<string, { stored: Buffer; root: string }> }> {
  const ins = await staged.inspection;
  await releasePinned(taken);
  const sealed = new Map<string, { stored: Buffer; root: string }>();
  for (const d of ins.dbs) if (d.index && !staged.deltas.has(d.name)) sealed.set(d.name, sealIndex(d.index, r.key, staged.heads.get(d.name)));
  return { ins, sealed };
}

/**
 * The copies the instant wrote, staged: their inspection begun in a worker (integrity_check, counts, the secret scan,
 * and for a copy without a parent page index its page index and block sums in the same read), and meanwhile, here,
 * the delta of each copy with one (`scan`: its changed pages scanned for secrets), in `copies` order.
 * @returns the inspection (a rejection is the caller's to await) and the deltas by database
 * @throws what writing a delta throws (the inspection goes on; its rejection is caught)
 */
function stageCopies(r: InstantRead, copies: { name: string; file: string }[], scan: boolean): { inspection: Promise<InspectResult>; deltas: Map<string, Delta> } {
  const inspection = inspectInWorker({
    ...r.inspect,
    dbs: copies.map((c) => (r.parents.has(c.name) ? { name: c.name, file: c.file, scan: false } : { name: c.name, file: c.file, indexKey: r.key, sumsFile: r.sums.partial(c.name) })),
  });
  inspection.catch(() => undefined); // awaited by the caller; no unhandled rejection meanwhile
  // an incremental's page index decides what goes in, so it is made here, beside the inspection worker's integrity_check
  const deltas = new Map<string, Delta>();
  for (const c of copies) {
    const parent = r.parents.get(c.name);
    if (parent) deltas.set(c.name, writeDeltaOf(c.file, c.name, parent, r.bases.get(c.name) ?? null, join(r.dir, `${c.name}.delta`), { scan, seal: { key: r.key, parentId: r.parentId! } }));
  }
  return { inspection, deltas };
}
