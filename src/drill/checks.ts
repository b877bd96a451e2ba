/**
 * The drill's restore checks, each recorded in the check log: the bundle's
 * own extraction checks (components, chain, integrity, workspace), state
 * sources restored into empty servers, vector dimensions, foreign keys and
 * schema versions, cursors, credentials, runtime differences, open operations
 * left unreconciled, and the recovery objectives. Invariants run between
 * them (runner.ts); nothing here throws for a failed check.
 */
import type { LinkSource } from "../bundle/chain.js";
import type { ChunkSource } from "../bundle/chunked.js";
import { extractAndCheck, type Extracted, type ExtractedSource } from "../bundle/extract.js";
import type { Manifest } from "../bundle/manifest.js";
import type { VerifiedBundle } from "../bundle/reader.js";
import { describeDifference, type RuntimeDifference } from "../bundle/runtime.js";
import { restoreSources } from "../bundle/sources.js";
import type { AgeIdentity } from "../crypto/age.js";
import type { Trust } from "../crypto/trust.js";
import { PayloadMismatch } from "../errors.js";
import { checkCredentials } from "../state/secrets/credentials.js";
import { driverFor, type Throwaway } from "../state/sources/index.js";
import { foreignKeyCheck, openDefensive, userVersion, vec0Dimensions } from "../state/sqlite/open.js";
import type { CheckLog } from "./checklog.js";
import type { SourceQuery } from "./invariants.js";
import type { Progress } from "../progress.js";

type Db = { name: string; path: string };

/**
 * Extracts and checks the bundle into `root` (reading the identities as it
 * starts), recording each of its checks.
 * @returns what landed where, or null when extraction failed (recorded as the check "extract")
 * @throws AgentbakError(12) when no identity decrypts it, PayloadMismatch (13) when its payload is not the signed one:
 *   the drill can not run
 */
export async function extractInto(v: VerifiedBundle, identities: () => AgeIdentity[], root: string, trust: Trust, from: { links: LinkSource; chunks?: ChunkSource | null }, log: CheckLog, progress?: Progress): Promise<Extracted | null> {
  let x: Extracted;
  try {
    x = await extractAndCheck(v, identities(), root, trust, from, undefined, progress);
  } catch (e) {
    const err = e as { code?: number; message: string };
    // no key, or a bundle whose own payload is not the signed one (checked as it is decrypted): the drill can not run
    if (err.code === 12 || e instanceof PayloadMismatch) throw e;
    log.add({ scenario: "restore", name: "extract", ok: false, severity: "error", detail: err.message });
    return null;
  }
  for (const c of x.checks) log.add({ scenario: "restore", name: c.name, ok: c.ok, severity: "error", detail: c.detail });
  return x;
}

/**
 * Restores each source into an empty server (a `--source` one, or a
 * throwaway one started here and pushed onto `servers`, which the caller
 * always stops; `targets` gets where each went) and records what it found: the restore, and the dimension of
 * its vectors when the bundle records an embedding model.
 * @returns a query into each restored source that has a query language (postgres), for invariants naming it
 */
export async function drillSources(m: Manifest, extracted: ExtractedSource[], given: Map<string, string>, serversDir: string, servers: Throwaway[], log: CheckLog, targets = new Map<string, string>()): Promise<Map<string, SourceQuery>> {
  const queries = new Map<string, SourceQuery>();
  try {
    for (const x of extracted) {
      const url = given.get(x.name);
      if (url) targets.set(x.name, url);
      else {
        const t = await driverFor(x.kind).throwaway(serversDir);
        servers.push(t);
        targets.set(x.name, t.target);
      }
    }
    for (const r of await restoreSources(m, extracted, targets)) {
      log.add({ scenario: "restore", name: `source-restore:${r.name}`, ok: true, severity: "error", detail: r.detail + (r.skipped.length ? ` (expired: ${r.skipped.slice(0, 10).join(", ")})` : "") });
      const query = driverFor(r.kind).query;
      if (query) queries.set(r.name, (sql) => query(targets.get(r.name)!, sql));
      for (const c of m.components.filter((c) => c.name === r.name && c.embedding)) {
        const table = Object.keys(c.records ?? {})[0] ?? "";
        const got = r.dimensions[table];
        const want = c.embedding!.dimension;
        log.add({ scenario: "restore", name: `vector_dimension:${r.name}.${table}`, ok: got === want, severity: "error", detail: `stored vectors have dimension ${got ?? "none"}; ${c.embedding!.model} is recorded with ${want}` });
      }
    }
  } catch (e) {
    const err = e as { code?: number; message: string };
    log.add({ scenario: "restore", name: "sources", ok: false, severity: "error", detail: err.message });
  }
  return queries;
}

/** For SQLite databases recorded with an embedding model: every sqlite-vec vector column has its dimension. */
export function vectorDimensions(m: Manifest, dbs: Db[], log: CheckLog): void {
  for (const d of dbs) {
    const want = m.components.find((c) => c.name === d.name && c.embedding)?.embedding;
    if (!want) continue;
    const db = openDefensive(d.path);
    try {
      const cols = vec0Dimensions(db);
      if (!cols.length) log.add({ scenario: "restore", name: `vector_dimension:${d.name}`, ok: false, severity: "warning", detail: "no sqlite-vec vec0 table found to check" });
      for (const c of cols) {
        const ok = c.dimension === want.dimension && c.badChunks === 0;
        const why = c.badChunks !== 0 ? (c.badChunks < 0 ? "; its vector chunks could not be read" : `; ${c.badChunks} chunk(s) hold vectors of another width`) : "";
        log.add({ scenario: "restore", name: `vector_dimension:${d.name}.${c.table}`, ok, severity: "error", detail: `${c.table}.${c.column} declares dimension ${c.dimension}; ${want.model} is recorded with ${want.dimension}${why}` });
      }
    } finally {
      db.close();
    }
  }
}

/**
 * Each database's foreign keys and user_version against the manifest's.
 * @returns by database: whether integrity_check passed (it ran once, in extraction) and the restored user_version
 */
export function databaseChecks(x: Extracted, log: CheckLog): { integrity: Record<string, string>; restored: Record<string, number> } {
  const integrity: Record<string, string> = {};
  const restored: Record<string, number> = {};
  for (const d of x.databases) {
    const db = openDefensive(d.path);
    try {
      const safely = (f: () => string[]) => {
        try {
          return f();
        } catch (e) {
          return [(e as Error).message];
        }
      };
      // integrity_check ran once, in staging (extractAndCheck's `full`, reported as integrity:<name>): a database that
      // failed it stopped the drill above, so it is not run a second time here (2-3 s per GiB)
      const ic = x.checks.find((c) => c.name === `integrity:${d.name}`);
      const fk = safely(() => foreignKeyCheck(db));
      const uv = userVersion(db);
      integrity[d.name] = ic?.ok ? "ok" : "not checked";
      restored[d.name] = uv;
      log.add({ scenario: "restore", name: `foreign_key_check:${d.name}`, ok: fk.length === 0, severity: "error", detail: fk.length ? fk.slice(0, 5).join("; ") : "ok" });
      log.add({ scenario: "restore", name: `schema_version:${d.name}`, ok: uv === d.schemaVersion, severity: "error", detail: `user_version ${uv}, manifest ${d.schemaVersion}` });
    } finally {
      db.close();
    }
  }
  return { integrity, restored };
}

/** Each cursor's query in the restored database against the value the manifest recorded. */
export function cursorChecks(m: Manifest, dbs: Map<string, string>, log: CheckLog): { name: string; manifest: unknown; restored: unknown; ok: boolean }[] {
  const out: { name: string; manifest: unknown; restored: unknown; ok: boolean }[] = [];
  for (const [name, q] of Object.entries(m.cursor_queries)) {
    const p = dbs.get(q.database);
    let restoredValue: unknown = null;
    let err: string | null = null;
    if (p) {
      const db = openDefensive(p);
      try {
        const row = db.prepare(q.sql).raw().get() as unknown[] | undefined;
        restoredValue = row?.[0] ?? null;
      } catch (e) {
        err = (e as Error).message;
      } finally {
        db.close();
      }
    } else err = `no database ${q.database}`;
    const same = err === null && String(restoredValue) === String(m.cursors[name]);
    out.push({ name, manifest: m.cursors[name], restored: restoredValue, ok: same });
    log.add({ scenario: "restore", name: `cursor:${name}`, ok: same, severity: "error", detail: err ?? `manifest ${m.cursors[name]}, restored ${restoredValue}` });
  }
  return out;
}

/** How the drill resolves credential references (DrillOptions.credentials). */
export interface CredentialResolution {
  root: string;
  checkers?: Record<string, string[]>;
  warn: boolean;
}

/**
 * Resolves each credential reference as a restore here would; one that does
 * not resolve is a warning (or info, `warn: false`) and an unresolved difference.
 */
export async function credentialChecks(m: Manifest, how: CredentialResolution, log: CheckLog): Promise<{ name: string; ref: string; status: string }[]> {
  const creds = await checkCredentials(m.credentials, how.root, how.checkers);
  for (const c of creds) {
    log.add({ scenario: "restore", name: `credential:${c.name}`, ok: c.status === "present", severity: how.warn ? "warning" : "info", detail: `${c.ref}: ${c.status} (${c.detail})` });
    if (c.status !== "present") log.unresolve(`credential ${c.name} (${c.ref}) is ${c.status} here`, `credential:${c.name}`, "credential");
  }
  return creds.map((c) => ({ name: c.name, ref: c.ref, status: c.status }));
}

/** Each way the snapshot's runtime differs from the config's, as a warning saying why it was let through. */
export function runtimeChecks(runtime: RuntimeDifference[], log: CheckLog): void {
  for (const d of runtime) log.add({ scenario: "restore", name: `runtime:${d.key}`, ok: true, severity: "warning", detail: `${describeDifference(d)} (${d.compatible ? "declared compatible" : "approved with --allow-runtime-change"})` });
}

/**
 * Open operations the drill does not reconcile: a spec that runs the worker
 * but does not reconcile leaves the question open (a warning); a checks-only
 * spec says so by its shape, and the report still lists them (info).
 */
export function unreconciledOperations(count: number, reconciled: boolean, worker: boolean, log: CheckLog): void {
  if (count && !reconciled)
    log.add({ scenario: "restore", name: "open operations", ok: false, severity: worker ? "warning" : "info", detail: `${count} open operation(s) in the snapshot, not reconciled in this drill: the report can not say what the agent might repeat (spec: "reconcile": true)` });
}

/** The recovery point and time objectives the config states, against what this drill measured. */
export function objectiveChecks(objectives: { rpoMinutes?: number; rtoSeconds?: number } | undefined, measured: { rpo_seconds: number; rto_seconds: number }, log: CheckLog): void {
  if (objectives?.rpoMinutes !== undefined)
    log.add({ scenario: "objectives", name: "rpo", ok: measured.rpo_seconds <= objectives.rpoMinutes * 60, severity: "error", detail: `snapshot was ${(measured.rpo_seconds / 60).toFixed(1)} minutes old at drill time; objective ${objectives.rpoMinutes} minutes` });
  if (objectives?.rtoSeconds !== undefined)
    log.add({ scenario: "objectives", name: "rto", ok: measured.rto_seconds <= objectives.rtoSeconds, severity: "error", detail: `recovered and reconciled in ${measured.rto_seconds} s; objective ${objectives.rtoSeconds} s` });
}
