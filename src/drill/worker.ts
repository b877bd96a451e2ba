/**
 * The drill's workbench for one scenario: a writable copy of the restored
 * root, the injected test task, and the agent's own worker started against
 * the test sink with the worker contract's environment (DESIGN.md, Drill).
 */
import { execa, type ResultPromise } from "execa";
import Database from "better-sqlite3";
import { chmodSync, cpSync, readdirSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { openDefensive } from "../state/sqlite/open.js";
import { stopOnInterrupt } from "../cleanup.js";
import type { CheckLog } from "./checklog.js";
import type { Invariant } from "./invariants.js";
import type { Seal } from "./seal.js";
import type { LoadedSpec } from "./spec.js";

/** What a scenario needs from the drill that runs it. */
export interface Bench {
  spec: LoadedSpec;
  /** the read-only restored root, and a temp folder for the scenarios' copies */
  restored: string;
  tmp: string;
  dbs: { name: string; path: string }[];
  invariants: Invariant[];
  log: CheckLog;
  /** the workers run sealed in their own network namespace (seal.ts); absent: unsealed */
  seal?: Seal;
  /** how many times a worker (or its upgrade) was started: the report speaks of the network only when one ran */
  workers: { started: number };
}

/** One scenario's outcome, as the report lists it. */
export interface ScenarioResult {
  scenario: string;
  ok: boolean;
  died_at_point: boolean;
  restarts: number;
  effects: number;
  receipt: string | null;
  seconds: number;
}

/** A fault a nemesis puts on a crash scenario's worker (nemesis.ts). */
export interface WorkerFault {
  name: string;
  /**
   * Sets the fault up for one scenario's copy.
   * @returns the environment of the run that dies at the crash point and of every restart, and what to do right
   * after the crash (its detail for the log, "error: ..." when it could not be done, null when nothing)
   */
  arm(copy: Copy): { crashEnv: Record<string, string>; restartEnv: Record<string, string>; afterCrash(): string | null };
}

/** Generations in a drill: the agent before the restore, and the restored one (sent as AGENTBAK_GENERATION). */
export const GENERATION = { stale: 1, restored: 2 } as const;

/** Every regular file under `dir` outside `.git`, with `mode` applied to its permission bits. */
function chmodFiles(dir: string, mode: (m: number) => number): void {
  for (const e of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    const p = join(e.parentPath, e.name);
    if (e.isFile() && !relative(dir, p).split("/").includes(".git")) chmodSync(p, mode(statSync(p).mode));
  }
}
export const makeReadOnly = (dir: string) => chmodFiles(dir, (m) => m & 0o555);

/** A writable copy of the restored root, and where each database is in it. */
export interface Copy {
  dir: string;
  dbs: Map<string, string>;
}

export function writableCopy(restored: string, dir: string, dbs: { name: string; path: string }[]): Copy {
  cpSync(restored, dir, { recursive: true });
  chmodFiles(dir, (m) => m | 0o200);
  return { dir, dbs: new Map(dbs.map((d) => [d.name, join(dir, relative(restored, d.path))])) };
}

type Inject = NonNullable<LoadedSpec["spec"]["inject"]>;

/** Runs the spec's inject SQL in the copy. @returns why it failed, or null. */
export function injectTask(inject: Inject, copy: Copy): string | null {
  const file = copy.dbs.get(inject.database);
  if (!file) return `no database named ${inject.database}`;
  const db = new Database(file);
  try {
    db.pragma("trusted_schema = OFF");
    const stmt = db.prepare(inject.sql);
    stmt.run(...(stmt.reader ? [] : inject.sql.includes(":taskId") ? [{ taskId: inject.taskId }] : []));
    return null;
  } catch (e) {
    return `inject SQL failed: ${(e as Error).message}`;
  } finally {
    db.close();
  }
}

/** Whether the spec's completedSql finds the injected task complete in the copy. */
export function taskCompleted(inject: Inject, copy: Copy): boolean {
  const db = openDefensive(copy.dbs.get(inject.database)!);
  try {
    return Boolean(db.prepare(inject.completedSql).get(inject.completedSql.includes(":taskId") ? { taskId: inject.taskId } : {}));
  } finally {
    db.close();
  }
}

/** Starts the worker, dying at `crashPoint` when given; `extraEnv` adds to its environment (a nemesis's LD_PRELOAD). */
export type StartWorker = (crashPoint: string | null, extraEnv?: Record<string, string>) => ResultPromise<{ reject: false; stdin: "ignore" }>;

/**
 * The argv of the spec's worker, or of its upgrade (`upgrade`: the upgrade's command when it has one, else the
 * worker's): each argument after the program that starts with "." resolved against the spec's folder.
 */
function workerCommand(s: LoadedSpec, upgrade: boolean): string[] {
  const { spec } = s;
  const given = upgrade && spec.upgrade?.command ? spec.upgrade.command : spec.worker!.command;
  return [given[0]!, ...given.slice(1).map((x) => (x.startsWith(".") ? s.resolve(x) : x))];
}

/**
 * Starts the spec's worker (or its upgrade) in the copy, `args` after its own; the environment holds nothing of the
 * drill host's but PATH.
 */
export function workerStarter(s: LoadedSpec, copy: Copy, o: { sinkUrl: string; upgrade?: boolean; generation?: number; workerId?: string; seal?: Seal; args?: string[]; workers: { started: number } }): StartWorker {
  const { spec } = s;
  const worker = spec.worker!;
  const resolved = [...workerCommand(s, o.upgrade ?? false), ...(o.args ?? [])];
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: copy.dir,
    AGENTBAK_DRILL: "1",
    AGENTBAK_RESTORE_DIR: copy.dir,
    AGENTBAK_SINK_URL: o.sinkUrl,
    AGENTBAK_GENERATION: String(o.generation ?? GENERATION.restored),
    ...(spec.inject ? { AGENTBAK_TASK_ID: spec.inject.taskId } : {}),
    WORKER_ID: o.workerId ?? "drill-worker",
    ...Object.fromEntries([...copy.dbs].map(([n, p]) => [`AGENTBAK_DB_${n.toUpperCase()}`, p])),
    ...worker.env,
    ...(o.upgrade ? spec.upgrade?.env ?? {} : {}),
  };
  return (crashPoint, extraEnv = {}) => {
    // a nemesis's variables (LD_PRELOAD, FAKETIME) reach the worker alone, never the seal's relay and tracer before it
    const set = Object.entries(extraEnv).map(([k, v]) => `${k}=${v}`);
    const own = set.length ? ["env", ...set, ...resolved] : resolved;
    const [cmd, ...args] = o.seal ? o.seal.wrap(own, o.sinkUrl) : own;
    o.workers.started++;
    return stopOnInterrupt(
      execa(cmd!, args, {
        cwd: copy.dir,
        env: { ...env, ...(crashPoint ? { AGENTBAK_CRASH_POINT: crashPoint } : {}) },
        extendEnv: false,
        reject: false,
        timeout: worker.timeoutSeconds * 1000,
        stdin: "ignore",
      }),
    );
  };
}

/** Starts the worker until it exits 0, at most `restarts` times. */
export async function runUntilDone(start: StartWorker, restarts: number, extraEnv?: Record<string, string>): Promise<{ finished: boolean; runs: number; last: string }> {
  let last = "";
  for (let i = 1; i <= restarts; i++) {
    const r = await start(null, extraEnv);
    last = `exit ${r.exitCode ?? r.signal}: ${String(r.stderr).trim().split("\n").at(-1)?.slice(0, 200) ?? ""}`;
    if (r.exitCode === 0) return { finished: true, runs: i, last };
  }
  return { finished: false, runs: restarts, last };
}
