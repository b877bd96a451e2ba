// Helpers for the state-source tests: real servers started (and always stopped) through the product's own
// throwaway-server code, and config edits.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import type { TestAgent } from "./helpers.js";

export interface Server {
  target: string;
  stop(): Promise<void>;
}

/** Starts an empty postgres or redis server on 127.0.0.1 under `dir` (as `nobody` when the tests run as root). */
export async function server(kind: "postgres" | "redis", dir: string): Promise<Server> {
  const { driverFor } = await import("../dist/state/sources/index.js");
  return driverFor(kind).throwaway(join(dir, "servers"));
}

/** Rewrites the agent's config. */
export function patchConfig(a: TestAgent, patch: (c: any) => void): void {
  const c = JSON.parse(readFileSync(a.config, "utf8"));
  patch(c);
  writeFileSync(a.config, JSON.stringify(c, null, 2));
}

/** A drill spec in the agent's temp folder with one invariant pack (name -> SQL with headers). */
export function drillSpec(a: TestAgent, name: string, checks: Record<string, string>): string {
  const dir = join(a.tmp, `${name}-invariants`);
  mkdirSync(dir, { recursive: true });
  for (const [n, sql] of Object.entries(checks)) writeFileSync(join(dir, `${n}.sql`), sql);
  const p = join(a.tmp, `${name}.json`);
  writeFileSync(p, JSON.stringify({ name, invariants: [join(dir, "*.sql")] }));
  return p;
}

/** Runs one query on a fresh connection to `url` (closed after); @returns its rows. */
export async function sql<T = any>(url: string, q: string, params: unknown[] = []): Promise<T[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query(q, params)).rows as T[];
  } finally {
    await c.end();
  }
}
