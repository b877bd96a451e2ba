/**
 * State sources beyond SQLite files (PostgreSQL, Redis, LanceDB) behind one
 * interface (common.ts): the pipeline calls `driverFor(kind)`; it never names a kind.
 */
import type { SourceDriver, SourceKind } from "./common.js";
import { lancedbDriver } from "./lancedb.js";
import { postgresDriver } from "./postgres.js";
import { redisDriver } from "./redis.js";

export * from "./common.js";

const DRIVERS: Record<SourceKind, SourceDriver> = { postgres: postgresDriver, redis: redisDriver, lancedb: lancedbDriver };

/** The driver of a source kind. */
export const driverFor = (kind: SourceKind): SourceDriver => DRIVERS[kind];
