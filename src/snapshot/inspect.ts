/**
 * Inspection of snapshot copies: integrity_check, row counts, schema version,
 * cursors, open operations and the secret scan. The copies are immutable once
 * made, so this runs in a worker thread while the payload is being written;
 * nothing is published unless it passes.
 */
import { Worker } from "node:worker_threads";
import { AgentbakError, Exit } from "../errors.js";
import { bytesLookSecret, scanDatabase, type SecretFinding } from "./secrets.js";
import { integrityCheck, openDefensive, tableCounts, userVersion } from "./sqlite.js";

export interface InspectInput {
  /** `delta`: the page delta of an incremental; only its pages can hold new secrets */
  dbs: { name: string; file: string; delta?: string }[];
  cursors: Record<string, { database: string; sql: string }>;
  openOperations?: { database: string; sql: string };
  scan: "refuse" | "warn" | "off";
}

export interface InspectResult {
  dbs: { name: string; schemaVersion: number; records: Record<string, number>; integrity: string[] }[];
  cursors: Record<string, string | number | null>;
  openOperations: { id: string | number | null; idempotency_key: string }[];
  findings: SecretFinding[];
}

function scalar(v: unknown): string | number | null {
  if (v === null || v === undefined) return null;
  if (typeof v === "number" && Number.isSafeInteger(v) && v >= 0) return v;
  if (typeof v === "bigint") return v.toString();
  return String(v);
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
    const db = openDefensive(d.file);
    try {
      const integrity = integrityCheck(db);
      out.dbs.push({ name: d.name, schemaVersion: userVersion(db), records: integrity[0] === "ok" ? tableCounts(db) : {}, integrity });
      if (input.scan !== "off" && integrity[0] === "ok" && (!d.delta || bytesLookSecret(d.delta))) out.findings.push(...scanDatabase(db, d.name));
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
        out.openOperations.push({ id: scalar(r.id), idempotency_key: String(r.idempotency_key ?? "") });
    } catch (e) {
      throw new AgentbakError(Exit.usage, `openOperations: ${(e as Error).message}`);
    } finally {
      db.close();
    }
  }
  return out;
}

/** Runs inspectSnapshot in a worker thread. */
export function inspectInWorker(input: InspectInput): Promise<InspectResult> {
  return new Promise((resolve, reject) => {
    const w = new Worker(new URL("./inspect-worker.js", import.meta.url), { workerData: input });
    w.once("message", (m: { ok: true; result: InspectResult } | { ok: false; code: number; message: string }) => {
      if (m.ok) resolve(m.result);
      else reject(new AgentbakError(m.code as 1, m.message));
    });
    w.once("error", reject);
    w.once("exit", (code) => {
      if (code !== 0) reject(new AgentbakError(Exit.failure, `snapshot inspection worker exited ${code}`));
    });
  });
}
