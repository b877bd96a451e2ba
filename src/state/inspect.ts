/**
 * Inspection of snapshot copies: integrity_check, row counts, schema version,
 * cursors, open operations and the secret scan. The copies are immutable once
 * made, so this runs in a worker thread while the payload is being written;
 * nothing is published unless it passes.
 */
import { Worker } from "node:worker_threads";
import { AgentbakError, Exit } from "../errors.js";
import { statSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "../version.js";
import { PageHasher, readPages, type PageIndex } from "./pages.js";
import { PageScanner, scanFilePages } from "./pagescan.js";
import { scanDatabase, type SecretFinding } from "./secrets.js";
import { integrityCheck, openDefensive, tableCounts, userVersion, type DB } from "./sqlite.js";

export interface InspectInput {
  /**
   * `indexKey`: compute the page index here (full backups), in the same read as the scan.
   * `scan: false`: leave this database's secret scan to the caller (incrementals scan changed pages only).
   */
  dbs: { name: string; file: string; indexKey?: Uint8Array; scan?: boolean }[];
  cursors: Record<string, { database: string; sql: string }>;
  openOperations?: { database: string; sql: string };
  scan: "refuse" | "warn" | "off";
}

export interface InspectResult {
  dbs: { name: string; schemaVersion: number; records: Record<string, number>; virtualTables: string[]; integrity: string[]; index?: PageIndex }[];
  cursors: Record<string, string | number | null>;
  openOperations: { id: string | number | null; idempotency_key: string; kind?: string | null }[];
  findings: SecretFinding[];
}

function scalar(v: unknown): string | number | null {
  if (v === null || v === undefined) return null;
  if (typeof v === "number" && Number.isSafeInteger(v) && v >= 0) return v;
  if (typeof v === "bigint") return v.toString();
  return String(v);
}

/**
 * Findings for the pages the page scan found suspicious: rows are read through
 * SQL only to name where a value is (or for databases not in UTF-8, `null`).
 */
function nameSuspicious(db: DB, name: string, suspicious: number[] | null): SecretFinding[] {
  if (suspicious !== null && !suspicious.length) return [];
  const named = scanDatabase(db, name);
  return named.length ? named : (suspicious ?? []).slice(0, 20).map((p) => ({ where: `database ${name}: page ${p}`, kind: "token format" }));
}

/** The secret scan of an incremental: only the pages that changed (1-based) can hold a new secret. */
export function scanChangedPages(file: string, name: string, pages: number[]): SecretFinding[] {
  const suspicious = scanFilePages(file, statSync(file).size, pages);
  if (suspicious !== null && !suspicious.length) return [];
  const db = openDefensive(file);
  try {
    return nameSuspicious(db, name, suspicious);
  } finally {
    db.close();
  }
}

/** Runs every inspection synchronously. @throws AgentbakError(2) for bad cursor/open-operation SQL. */
export function inspectSnapshot(input: InspectInput): InspectResult {
  const files = new Map(input.dbs.map((d) => [d.name, d.file]));
  const open = (name: string, where: string) => {
    const f = files.get(name);
    if (!f) throw new AgentbakError(Exit.usage, `${where}: no database named "${name}"`);
    return openDefensive(f);
  };
  const out: InspectResult = { dbs: [], cursors: {}, openOperations: [], findings: [] };
  for (const d of input.dbs) {
    // one read of the file for the page index and the page-level secret scan
    const scan = input.scan !== "off" && d.scan !== false;
    let index: PageIndex | undefined;
    let suspicious: number[] | null = [];
    if (d.indexKey) {
      const scanner = scan ? new PageScanner(d.file, statSync(d.file).size) : null;
      try {
        let hasher: PageHasher | undefined;
        readPages(d.file, (run, first, pageSize) => {
          hasher ??= new PageHasher(Buffer.from(d.indexKey!), pageSize);
          hasher.update(run);
          if (scanner?.header.utf8) scanner.pages(run, first);
        });
        index = hasher?.index();
        suspicious = scanner ? (scanner.header.utf8 ? scanner.suspicious : null) : [];
      } finally {
        scanner?.close();
      }
    } else if (scan) suspicious = scanFilePages(d.file, statSync(d.file).size);
    const db = openDefensive(d.file);
    try {
      const integrity = integrityCheck(db);
      const counted = integrity[0] === "ok" ? tableCounts(db) : { counts: {}, skipped: [] };
      out.dbs.push({ name: d.name, schemaVersion: userVersion(db), records: counted.counts, virtualTables: counted.skipped, integrity, index });
      if (scan && integrity[0] === "ok") out.findings.push(...nameSuspicious(db, d.name, suspicious));
    } finally {
      db.close();
    }
  }
  for (const [name, c] of Object.entries(input.cursors)) {
    const db = open(c.database, `cursors.${name}`);
    try {
      const row = db.prepare(c.sql).raw().get() as unknown[] | undefined;
      out.cursors[name] = scalar(row?.[0]);
    } catch (e) {
      throw new AgentbakError(Exit.usage, `cursors.${name}: ${(e as Error).message}`);
    } finally {
      db.close();
    }
  }
  if (input.openOperations) {
    const db = open(input.openOperations.database, "openOperations");
    try {
      for (const r of db.prepare(input.openOperations.sql).all() as Record<string, unknown>[])
        out.openOperations.push({ id: scalar(r.id), idempotency_key: String(r.idempotency_key ?? ""), ...("kind" in r ? { kind: r.kind === null ? null : String(r.kind) } : {}) });
    } catch (e) {
      throw new AgentbakError(Exit.usage, `openOperations: ${(e as Error).message}`);
    } finally {
      db.close();
    }
  }
  return out;
}

/**
 * Idle inspection workers, kept for this process's next backup: a server's
 * next checkpoint skips the thread's start-up (loading SQLite and the
 * modules). Unreferenced while idle, so they never keep a process alive.
 */
const idle: Worker[] = [];

/** Runs inspectSnapshot in a worker thread. */
export function inspectInWorker(input: InspectInput): Promise<InspectResult> {
  // a small heap: the scan makes many short-lived page strings, and a lazy collector would let them pile up
  const w = idle.pop() ?? new Worker(join(ROOT, "dist", "packed", "inspect-worker.js"), { resourceLimits: { maxOldGenerationSizeMb: 64, maxYoungGenerationSizeMb: 8 } });
  w.ref();
  return new Promise((resolve, reject) => {
    const settle = (keep: boolean) => {
      w.off("message", onMessage).off("error", onError).off("exit", onExit);
      if (!keep) return;
      w.unref();
      idle.push(w);
    };
    const onMessage = (m: { ok: true; result: InspectResult } | { ok: false; code: number; message: string }) => {
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
    w.postMessage(input);
  });
}
