/**
 * State sources beyond SQLite files (PostgreSQL, Redis, LanceDB) behind one
 * interface (common.ts): the pipeline calls `driverFor(kind)`; it never names a kind.
 */
import { isAbsolute, resolve } from "node:path";
import { resolveReference, targetIsFolder, type PriorFingerprints, type SourceCapture, type SourceDriver, type SourceKind, type SourceSpec } from "./common.js";
import { lancedbDriver } from "./lancedb.js";
import { postgresDriver } from "./postgres.js";
import { redisDriver } from "./redis.js";

export * from "./common.js";

const DRIVERS: Record<SourceKind, SourceDriver> = { postgres: postgresDriver, redis: redisDriver, lancedb: lancedbDriver };

/** The driver of a source kind. */
export const driverFor = (kind: SourceKind): SourceDriver => DRIVERS[kind];

/**
 * Captures a configured state source into `dir` with its driver, at its own single instant: a folder source's `path`
 * is resolved against the config's folder `root`, a server's `url` is a credential reference resolved only now.
 */
/** A source's fingerprint now (SourceDriver.fingerprint), or null when its kind has none or it can not be read. */
export async function sourceFingerprint(s: SourceSpec & { path?: string; url?: string }, root: string): Promise<string | null> {
  const driver = driverFor(s.kind);
  if (!driver.fingerprint) return null;
  const target = targetIsFolder(s.kind) ? (isAbsolute(s.path!) ? s.path! : resolve(root, s.path!)) : resolveReference(s.url!, root);
  return driver.fingerprint(s, target);
}

export function captureSource(s: SourceSpec & { path?: string; url?: string }, root: string, dir: string, prior?: PriorFingerprints): Promise<SourceCapture> {
  const target = targetIsFolder(s.kind) ? (isAbsolute(s.path!) ? s.path! : resolve(root, s.path!)) : resolveReference(s.url!, root);
  return driverFor(s.kind).capture(s, target, dir, prior);
}
