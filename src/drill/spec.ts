/**
 * Drill specs (drills/*.json): strict schema and loading. Relative paths and
 * globs resolve against the spec file's folder.
 */
import { existsSync, readdirSync } from "node:fs";
import { dirname, isAbsolute, join, resolve } from "node:path";
import * as z from "../zod.js";
import { formatIssues, notFound, usageError } from "../errors.js";
import { readFileRegular } from "../fsutil.js";
import { refuseProtoKey } from "../facts.js";
import { ROOT } from "../version.js";
import { STORE_NEMESES } from "./faultproxy.js";

/** The specs shipped in the package's drills/ folder, by name. */
const SHIPPED = join(ROOT, "drills");
/** The spec a drill runs without --spec: the restore checks alone (integrity, row counts, chain, credentials). */
export const BUILTIN_SPEC = "integrity-only";

/** The names of the shipped specs (drills/NAME.json). */
export const shippedSpecs = (): string[] =>
  readdirSync(SHIPPED)
    .filter((f) => f.endsWith(".json"))
    .map((f) => f.slice(0, -5))
    .sort();

/**
 * Where a --spec value points: a file that exists (relative to the current
 * folder), else a shipped spec by name (`checks-only`, resolved against the
 * package, not the current folder); none given, the built-in checks.
 * @throws AgentbakError(10) naming the shipped specs when it is neither.
 */
export function specPath(spec: string | undefined): string {
  const name = spec ?? BUILTIN_SPEC;
  if (spec !== undefined && existsSync(resolve(spec))) return resolve(spec);
  if (/^[A-Za-z0-9_-]+(\.json)?$/.test(name)) {
    const shipped = join(SHIPPED, name.endsWith(".json") ? name : `${name}.json`);
    if (existsSync(shipped)) return shipped;
  }
  throw notFound(`drill spec ${name}: no such file, and no shipped spec of that name (shipped: ${shippedSpecs().join(", ")})`);
}

export const CRASH_POINTS = ["after_commit_before_delivery", "after_send_before_receipt", "after_receipt_before_complete", "during_migration", "old_backup_new_worker"] as const;
export type CrashPoint = (typeof CRASH_POINTS)[number];
/** faults a crash scenario can be replayed under (nemesis.ts) */
export const WORKER_NEMESES = ["clock_ahead_1h", "clock_behind_1h", "lost_write"] as const;
/** faults the drill's restore is repeated under (key `restore` of nemeses) */
export const RESTORE_NEMESES = ["enospc", "eio", ...STORE_NEMESES] as const;

const workerSchema = z.strictObject({
  command: z.array(z.string()).check(z.minLength(1)),
  env: z._default(z.record(z.string(), z.string()), {}),
  timeoutSeconds: z._default(z.int().check(z.positive()), 30),
});

export const DrillSpecSchema = z.strictObject({
  $schema: z.optional(z.string()),
  name: z.string().check(z.minLength(1)),
  /** globs of invariant .sql files; empty: the restore checks (integrity, row counts, chain, credentials) alone */
  invariants: z.array(z.string()),
  worker: z.optional(workerSchema),
  /**
   * the newer worker for during_migration and old_backup_new_worker (default: worker with upgrade env); with
   * `version` (or `drill --upgrade-to`) the upgrade drill runs too: its start migrates the restored state, then every crash point under it
   */
  upgrade: z.optional(
    z.strictObject({
      command: z.optional(z.array(z.string()).check(z.minLength(1))),
      env: z._default(z.record(z.string(), z.string()), {}),
      schemaVersion: z.optional(z.int()),
      version: z.optional(z.string().check(z.minLength(1))),
    }),
  ),
  inject: z.optional(z.strictObject({ database: z.string(), sql: z.string().check(z.minLength(1)), taskId: z.string().check(z.minLength(1)), completedSql: z.string().check(z.minLength(1)) })),
  crashPoints: z._default(z.array(z.enum(CRASH_POINTS)), []),
  /** per crash scenario (a crash point of crashPoints, or sink_kill), the nemeses it is replayed under: one matrix cell each */
  nemeses: z._default(z.partialRecord(z.enum([...CRASH_POINTS, "sink_kill", "restore"]), z.array(z.enum([...WORKER_NEMESES, ...RESTORE_NEMESES]))), {}),
  sinkKill: z._default(z.boolean(), false),
  restarts: z._default(z.int().check(z.minimum(1)).check(z.maximum(10)), 3),
  /** reconcile the snapshot's open operations against the sink (seeded already delivered, then never arrived), then run the worker */
  reconcile: z._default(z.boolean(), false),
  /** reconciliation while the sink's lookups fail: each must leave the operations unresolved and cause no duplicate */
  reconcileFaults: z._default(z.array(z.enum(["5xx", "timeout", "lost_answer"])), []),
  /** the pre-restore and the restored generation run at once; the sink rejects the lower */
  splitBrain: z._default(z.boolean(), false),
  /** who owns an unresolved difference: by category (open_operation, open_operation:<kind>, credential, check, a scenario) or default; beats the config's owners */
  owners: z._default(z.record(z.string(), z.string().check(z.minLength(1))), {}),
  /** the sealed worker (seal.ts): `maxEgressBlocked` fails the drill (15) when its worker tried more connections than that */
  seal: z.optional(z.strictObject({ maxEgressBlocked: z.optional(z.int().check(z.minimum(0))) })),
  /** recall parity (recall.ts): the restored vector stores must answer the probes backup recorded; `stores`: which (`name.table`), default all */
  recall: z.optional(z.strictObject({ threshold: z._default(z.number().check(z.minimum(0)).check(z.maximum(1)), 0.99), stores: z.optional(z.array(z.string()).check(z.minLength(1))) })),
});

export type DrillSpec = z.infer<typeof DrillSpecSchema>;

export interface LoadedSpec {
  spec: DrillSpec;
  path: string;
  dir: string;
  resolve(p: string): string;
}

/** Loads a spec named as --spec takes it (see specPath). @throws AgentbakError(2) naming the file and bad keys; (10) when missing. */
export function loadSpec(path: string | undefined): LoadedSpec {
  const abs = specPath(path);
  let raw: unknown;
  try {
    raw = JSON.parse(readFileRegular(abs, "utf8"), refuseProtoKey);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (err.code === "ENOENT") throw notFound(`drill spec ${abs}: not found`);
    throw usageError(`drill spec ${abs}: ${err.message}`);
  }
  const r = DrillSpecSchema.safeParse(raw);
  if (!r.success) throw usageError(`drill spec ${abs}: ${formatIssues(r.error.issues)}`);
  if ((r.data.crashPoints.length || r.data.sinkKill || r.data.splitBrain) && (!r.data.worker || !r.data.inject)) throw usageError(`drill spec ${abs}: crashPoints, sinkKill and splitBrain need worker and inject`);
  if (r.data.upgrade?.version !== undefined && (!r.data.worker || !r.data.inject)) throw usageError(`drill spec ${abs}: upgrade.version (the upgrade drill) needs worker and inject`);
  for (const [sc, list = []] of Object.entries(r.data.nemeses)) {
    const wrong = list.find((n) => (sc === "restore") !== (RESTORE_NEMESES as readonly string[]).includes(n));
    if (wrong) throw usageError(`drill spec ${abs}: nemeses.${sc}: ${wrong} is a fault of ${sc === "restore" ? "a worker (key it by a crash scenario)" : "the restore (key it by restore)"}`);
    if (sc === "restore") continue;
    if (sc === "sink_kill" ? !r.data.sinkKill : !r.data.crashPoints.includes(sc as CrashPoint)) throw usageError(`drill spec ${abs}: nemeses.${sc}: not a scenario of this spec (crashPoints${r.data.sinkKill ? ", sink_kill" : ""})`);
    if (sc === "old_backup_new_worker" && list.includes("lost_write")) throw usageError(`drill spec ${abs}: nemeses.old_backup_new_worker: lost_write needs a crash, and this scenario has none`);
  }
  if ((r.data.reconcile || r.data.reconcileFaults.length) && !r.data.worker) throw usageError(`drill spec ${abs}: reconcile and reconcileFaults need worker (it runs after reconciliation)`);
  const dir = dirname(abs);
  return { spec: r.data, path: abs, dir, resolve: (p) => (isAbsolute(p) ? p : resolve(dir, p)) };
}
