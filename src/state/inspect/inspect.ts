/**
 * Inspection of snapshot copies: the integrity check (sqlite/indexdigest.ts), row counts, schema version,
 * cursors, open operations, timer columns and the secret scan. The copies are
 * immutable once made, so this runs in a worker thread while the payload is
 * being written; nothing is published unless it passes. Its own wing, above
 * sqlite/, secrets/ and pages/: it takes the page index and block sums in the
 * same read as the scan, so inside sqlite/ it would make the two call each other.
 */
import { Worker } from "node:worker_threads";
import { statSync } from "node:fs";
import { AgentbakError, Exit } from "../../errors.js";
import { join } from "node:path";
import { ROOT } from "../../version.js";
import { namedSource, pinnedSource, type PinnedPages } from "../sqlite/livesnap.js";
import { BtreeCensus, type CensusPart } from "../sqlite/btree.js";
import { BlockSummer, blockSeed, hashTail, PageHasher, type PageIndex, type SumsRef, type TailPart } from "../pages/index.js";
import { readPages, withPages } from "../sqlite/pagefile.js";
import { nameSuspicious, PageScanner, scanFilePages } from "../secrets/pagescan.js";
import type { SecretFinding } from "../secrets/scan.js";
import { integrityCheck, openDefensive, tableCounts, userVersion, type DB } from "../sqlite/open.js";
import { backupIntegrityCheck, type IntegrityMethod } from "../sqlite/indexdigest.js";
import { vec0Recall, type RecallRecord, type RecallSpec } from "../sqlite/neighbours.js";
import { describeOtherFormat, otherFormat, type TimerFormat } from "../sqlite/timestamps.js";

export interface InspectInput {
  /**
   * `indexKey`: compute the page index here (full backups), in the same read as the scan;
   * `sumsFile`: and write the block sums (state/pages/blocks.ts) there.
   * `scan: false`: leave this database's secret scan to the caller (incrementals scan changed pages only).
   * `integrity: false`: no integrity check (an incremental the integrity policy does not check); reported as "skipped".
   * `indexAfter`: the page index here holds only the pages after this one; the caller hashes the first ones (a
   * full snapshot read in place: its payload's thread hashes them as it streams them, sharing the work).
   * `pages`: the pages of a pinned live snapshot (a full snapshot read in place), read instead of `file`, which is
   * then the live database the connections pinned at the same instant read.
   */
  dbs: { name: string; file: string; pages?: PinnedPages; indexKey?: Uint8Array; indexAfter?: number; sumsFile?: string; scan?: boolean; integrity?: boolean }[];
  cursors: Record<string, { database: string; sql: string }>;
  openOperations?: { database: string; sql: string };
  /** the config's timer columns: each is checked to hold timestamps of its declared format */
  timers?: { database: string; table: string; column: string; format: TimerFormat }[];
  scan: "refuse" | "warn" | "off";
  /** the config's recall probe sets of vec0 tables (a lancedb source's are the capture's) */
  recall?: RecallSpec[];
}

export interface InspectResult {
  /** `integrity`: ["ok"], ["skipped"] or what failed; `integrityMethod`: the check that ran (sqlite/indexdigest.ts) */
  dbs: { name: string; schemaVersion: number; records: Record<string, number>; virtualTables: string[]; integrity: string[]; integrityMethod?: IntegrityMethod; index?: PageIndex; sumsWritten?: boolean }[];
  cursors: Record<string, string | number | null>;
  openOperations: { id: string | number | null; idempotency_key: string; kind?: string | null }[];
  /** timer columns a restore with this config would not move as declared (values of another format, a missing column) */
  timerWarnings: string[];
  findings: SecretFinding[];
  /** each vec0 probe set's exact neighbours at the snapshot instant */
  recall: RecallRecord[];
}

function scalar(v: unknown): string | number | null {
  if (v === null || v === undefined) return null;
  if (typeof v === "number" && Number.isSafeInteger(v) && v >= 0) return v;
  if (typeof v === "bigint") return v.toString();
  return String(v);
}

/**
 * The rows the open-operations query returns, as a manifest records them
 * (read at backup, and again in a restored state by reconcile and activate).
 * @throws the SQLite error when the query fails.
 */
export function openOperationRows(db: DB, sql: string): InspectResult["openOperations"] {
  return (db.prepare(sql).all() as Record<string, unknown>[]).map((r) => ({ id: scalar(r.id), idempotency_key: String(r.idempotency_key ?? ""), ...("kind" in r ? { kind: r.kind === null ? null : String(r.kind) } : {}) }));
}

/** Runs every inspection synchronously. @throws AgentbakError(2) for bad cursor/open-operation SQL. */
export function inspectSnapshot(input: InspectInput, pinned?: Map<string, DB>, censuses?: Map<string, BtreeCensus>): InspectResult {
  const files = new Map(input.dbs.map((d) => [d.name, d.file]));
  // `pinned`: connections held in the read transaction of the snapshot (an in-place incremental); used, never closed
  const connect = (name: string, file: string): { db: DB; close(): void } => {
    const p = pinned?.get(name);
    if (p) return { db: p, close: () => undefined };
    const db = openDefensive(file);
    return { db, close: () => db.close() };
  };
  const open = (name: string, where: string) => {
    const f = files.get(name);
    if (!f) throw new AgentbakError(Exit.usage, `${where}: no database named "${name}"`);
    return connect(name, f);
  };
  const out: InspectResult = { dbs: [], cursors: {}, openOperations: [], timerWarnings: [], findings: [], recall: [] };
  for (const d of input.dbs) {
    // one read of the file for the page index and the page-level secret scan
    const scan = input.scan !== "off" && d.scan !== false;
    let index: PageIndex | undefined;
    let sumsWritten = false;
    let suspicious: number[] | null = [];
    let census = censuses?.get(d.name);
    const from = d.pages ? namedSource(pinnedSource(d.pages), `database ${d.name}: reading ${d.file}`) : d.file;
    if (d.indexKey)
      withPages(from, (src) => {
        const scanner = scan ? new PageScanner(src) : null;
        const hasher = new PageHasher(src.pageSize);
        const after = d.indexAfter ?? 0;
        const summer = d.sumsFile ? new BlockSummer(src.pageSize, blockSeed(Buffer.from(d.indexKey!)), d.sumsFile) : null;
        const counter = (census = new BtreeCensus(src.pageSize, src.pageCount));
        try {
          readPages(src, (run, first) => {
            const skip = Math.min(run.length / src.pageSize, Math.max(0, after - first + 1));
            if (skip * src.pageSize < run.length) hasher.update(skip ? run.subarray(skip * src.pageSize) : run);
            summer?.update(run);
            counter.pages(run, first);
            if (scanner?.header.utf8) scanner.pages(run, first);
          });
        } finally {
          sumsWritten = summer?.close() ?? false;
        }
        index = hasher.index();
        suspicious = scanner ? (scanner.header.utf8 ? scanner.suspicious : null) : [];
      });
    else if (scan) suspicious = scanFilePages(from);
    const { db, close } = connect(d.name, d.file);
    try {
      const checked = d.integrity === false ? { result: ["skipped"], method: undefined } : backupIntegrityCheck(db);
      const integrity = checked.result;
      const sound = integrity[0] === "ok" || integrity[0] === "skipped";
      const counted = sound ? tableCounts(db, census) : { counts: {}, skipped: [] };
      out.dbs.push({ name: d.name, schemaVersion: userVersion(db), records: counted.counts, virtualTables: counted.skipped, integrity, integrityMethod: checked.method, index, sumsWritten });
      if (scan && sound) out.findings.push(...nameSuspicious(db, d.name, suspicious));
    } finally {
      close();
    }
  }
  for (const [name, c] of Object.entries(input.cursors)) {
    const { db, close } = open(c.database, `cursors.${name}`);
    try {
      const row = db.prepare(c.sql).raw().get() as unknown[] | undefined;
      out.cursors[name] = scalar(row?.[0]);
    } catch (e) {
      throw new AgentbakError(Exit.usage, `cursors.${name}: ${(e as Error).message}`);
    } finally {
      close();
    }
  }
  if (input.openOperations) {
    const { db, close } = open(input.openOperations.database, "openOperations");
    try {
      out.openOperations.push(...openOperationRows(db, input.openOperations.sql));
    } catch (e) {
      throw new AgentbakError(Exit.usage, `openOperations: ${(e as Error).message}`);
    } finally {
      close();
    }
  }
  (input.recall ?? []).forEach((r, i) => {
    const { db, close } = open(r.store, `recall[${i}]`);
    try {
      out.recall.push(vec0Recall(db, r));
    } catch (e) {
      throw new AgentbakError(Exit.usage, `recall[${i}] (${r.store}.${r.table}): ${(e as Error).message}`);
    } finally {
      close();
    }
  });
  // a timer is applied at restore from the config there: what is wrong with it now is a warning, not a lost backup
  (input.timers ?? []).forEach((t, i) => {
    const { db, close } = open(t.database, `timers[${i}]`);
    try {
      const other = otherFormat(db, t);
      if (other) out.timerWarnings.push(describeOtherFormat(i, t, other));
    } catch (e) {
      out.timerWarnings.push(`timers[${i}] (${t.database}.${t.table}.${t.column}): ${(e as Error).message}; a restore with this config refuses (exit 2)`);
    } finally {
      close();
    }
  });
  return out;
}

/**
 * Idle inspection workers, kept for this process's next backup: a server's
 * next checkpoint skips the thread's start-up (loading SQLite and the
 * modules). Unreferenced while idle, so they never keep a process alive.
 */
const idle: Worker[] = [];

/**
 * What the worker thread (worker.ts) is asked to do. `pin`: open its
 * own read transaction on each live database first and answer `pinned` before
 * inspecting (the caller holds the write locks meanwhile, so it is the
 * caller's instant).
 */
export type WorkerRequest =
  | { kind: "inspect"; input: InspectInput; pin?: boolean }
  | { kind: "tail"; pages: PinnedPages; from: number; sums?: SumsRef }
  | { kind: "check"; file: string; check: IntegrityPragma };
export type IntegrityPragma = "integrity_check" | "quick_check";

/**
 * Work on databases smaller than this runs on the calling thread: starting a
 * worker (a V8 isolate, the worker's modules and SQLite) costs a small agent's
 * CLI backup more than the work it would move (a 12 MiB agent's CLI
 * incremental: median 0.65 s on the calling thread, 0.69 s with a worker,
 * 15 runs each).
 */
const IN_THREAD_MAX = 32 << 20;

const bytesOf = (input: InspectInput) => input.dbs.reduce((n, d) => n + (d.pages ? d.pages.pageCount * d.pages.pageSize : statSync(d.file).size), 0);
const inThread = (input: InspectInput) => bytesOf(input) < IN_THREAD_MAX && !idle.length;

/** Runs inspectSnapshot in a worker thread (on this one for small databases). */
export function inspectInWorker(input: InspectInput): Promise<InspectResult> {
  return inThread(input) ? Promise.resolve().then(() => inspectSnapshot(input)) : inWorker<InspectResult>({ kind: "inspect", input });
}

/**
 * Starts a worker thread for a coming inspection of `bytes` of databases and
 * keeps it idle for it, so its start (an isolate, the modules, SQLite's
 * library: 100-200 ms) runs beside the caller's own work. The promise resolves once the
 * worker has loaded: a caller about to take write locks waits for it, so they
 * are not held while it loads (inspectPinned); one that only hands it work
 * need not (requests wait in the worker's queue). Nothing for a small agent.
 */
export function warmInspection(bytes: number): Promise<void> {
  if (bytes < IN_THREAD_MAX || idle.length) return Promise.resolve();
  const w = startWorker();
  w.unref();
  idle.push(w);
  return new Promise((resolve, reject) => {
    const off = () => w.off("message", onMessage).off("error", onError).off("exit", onExit);
    const onMessage = (m: object) => "loaded" in m && (off(), resolve());
    const onError = (e: Error) => (off(), reject(e));
    const onExit = (code: number) => (off(), reject(new AgentbakError(Exit.failure, `snapshot inspection worker exited ${code}`)));
    w.on("message", onMessage).on("error", onError).on("exit", onExit);
  });
}

/**
 * The inspection of pinned live snapshots (`input.dbs[].pages`), at the
 * instant `views` hold. Call it while the write locks are still held: a
 * worker thread opens its own read transactions now, the same instant, and
 * this resolves once it has (a failure to open one names the database, as
 * snapshotDatabases would). Small databases are inspected on this thread
 * through the views' own connections, when start() is called. start() begins
 * (or returns) the inspection; the snapshots must stay open until settled()
 * resolves (the worker reads their descriptors).
 */
export async function inspectPinned(input: InspectInput, views: Map<string, DB>): Promise<{ start(): Promise<InspectResult>; settled(): Promise<void> }> {
  if (inThread(input)) {
    let started: Promise<InspectResult> | null = null;
    return { start: () => (started ??= Promise.resolve().then(() => inspectSnapshot(input, views))), settled: () => (started ?? Promise.resolve()).then(noop, noop) };
  }
  let pinned!: () => void;
  const joined = new Promise<void>((r) => (pinned = r));
  const result = inWorker<InspectResult>({ kind: "inspect", input, pin: true }, () => pinned());
  result.catch(noop); // returned by start(); a failure before the pin is thrown below
  await Promise.race([joined, result]);
  return { start: () => result, settled: () => result.then(noop, noop) };
}

const noop = () => undefined;

/**
 * hashTail of a pinned live snapshot's pages (the census and digests — all,
 * or given the parent's sums those of the changed pages, handed to `onPart`
 * as they come — of the pages after `from`), computed in a worker thread (on this one for
 * small databases; valid while the snapshot is held).
 */
export function hashTailInWorker(pages: PinnedPages, from: number, sums?: SumsRef, onPart?: (p: TailPart) => void): Promise<TailResult> {
  return pages.pageCount * pages.pageSize < IN_THREAD_MAX && !idle.length
    ? Promise.resolve().then(() => hashTail(pinnedSource(pages), from, sums, onPart))
    : inWorker<TailResult>({ kind: "tail", pages, from, sums }, undefined, onPart && ((p: TailPart) => onPart({ changed: p.changed, hashes: Buffer.from(p.hashes.buffer, p.hashes.byteOffset, p.hashes.byteLength) })));
}
export type TailResult = { hashes: Uint8Array; census: CensusPart };

/**
 * integrity_check (or quick_check) of a database file we did not write,
 * opened defensively: on a worker thread for a large one, so the caller's
 * own reads (row counts, the workspace's rebuild) run beside SQLite's
 * longest single-threaded pass; on this thread for a small one. One check
 * at a time, on one worker: a restore of many databases holds one extra thread.
 */
let checkLane: Promise<unknown> | null = null;
export function integrityCheckInWorker(file: string, check: IntegrityPragma): Promise<string[]> {
  if (statSync(file).size < IN_THREAD_MAX && !idle.length)
    return Promise.resolve().then(() => {
      const db = openDefensive(file);
      try {
        return integrityCheck(db, check);
      } finally {
        db.close();
      }
    });
  // posted now when no check is running: the caller goes on with synchronous work (the row counts) meanwhile
  const go = () => inWorker<string[]>({ kind: "check", file, check });
  const run = checkLane ? checkLane.then(go) : go();
  const lane: Promise<unknown> = run.catch(noop).then(() => void (checkLane === lane && (checkLane = null)));
  checkLane = lane;
  return run;
}

/**
 * A new inspection worker. One that fails or stops while idle leaves the idle
 * list (a dead worker handed a request would never answer); the request that
 * holds a worker hears its failure through its own listeners.
 */
function startWorker(): Worker {
  // a small heap: the scan makes many short-lived page strings, and a lazy collector would let them pile up
  const w = new Worker(join(ROOT, "dist", "packed", "inspect-worker.js"), { resourceLimits: { maxOldGenerationSizeMb: 64, maxYoungGenerationSizeMb: 8 } });
  const gone = () => void (idle.includes(w) && idle.splice(idle.indexOf(w), 1));
  return w.on("error", gone).on("exit", gone);
}

function inWorker<T>(req: WorkerRequest, onPinned?: () => void, onPart?: (p: TailPart) => void): Promise<T> {
  const w = idle.pop() ?? startWorker();
  w.ref();
  return new Promise((resolve, reject) => {
    const settle = (keep: boolean) => {
      w.off("message", onMessage).off("error", onError).off("exit", onExit);
      if (!keep) return;
      w.unref();
      idle.push(w);
    };
    const onMessage = (m: { ok: true; result: T } | { ok: false; code: number; message: string } | { pinned: true } | { loaded: true } | { part: TailPart }) => {
      if ("loaded" in m) return; // its start-up is done (warmInspection)
      if ("pinned" in m) return onPinned?.();
      if ("part" in m) return onPart?.(m.part);
      settle(true);
      if (m.ok) resolve(m.result);
      else reject(new AgentbakError(m.code as 1, m.message));
    };
    const onError = (e: Error) => {
      settle(false);
      void w.terminate();
      reject(e);
    };
    const onExit = (code: number) => {
      settle(false);
      reject(new AgentbakError(Exit.failure, `snapshot inspection worker exited ${code}`));
    };
    w.on("message", onMessage).on("error", onError).on("exit", onExit);
    w.postMessage(req);
  });
}
