/**
 * PostgreSQL as a state source: the configured schemas dumped by pg_dump from
 * one exported REPEATABLE READ snapshot (row counts read in that same
 * snapshot), restored by pg_restore into an empty database in one
 * transaction that also checks the counts, and throwaway servers for drills.
 * Every identifier is quoted (a table may be named `100%`, `say "hi"` or
 * `x$agentbak$y`), and a table another session holds locked stops the
 * capture after the source's lock timeout instead of holding the agent's
 * lock (and its quiesced runtime) for as long as that session likes.
 */
import { execa } from "execa";
import { createHash } from "node:crypto";
import { once } from "node:events";
import { existsSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
// type only: the client is loaded when a PostgreSQL source is used
import type pg from "pg";
import { AgentbakError, Exit, lockedError, verifyError } from "../../errors.js";
import { stopOnInterrupt } from "../../cleanup.js";
import { freePort, serverCommand, serverDir, sourceError, startServer, stopServer, type SourceDriver, type SourceFile } from "./common.js";

/**
 * A PostgreSQL program: the newest /usr/lib/postgresql/N/bin (Debian's layout;
 * pg_dump must be at least as new as the server), else the PATH.
 */
export function pgBin(name: string): string {
  const base = "/usr/lib/postgresql";
  const versions = existsSync(base) ? readdirSync(base).filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a)) : [];
  for (const v of versions) if (existsSync(join(base, v, "bin", name))) return join(base, v, "bin", name);
  return name;
}

/** libpq environment for a connection URL, so the URL (and its password) never appears on a command line. */
function libpqEnv(url: string): Record<string, string> {
  const u = new URL(url);
  const env: Record<string, string> = {};
  const set = (k: string, v: string | null | undefined) => v && (env[k] = v);
  set("PGHOST", u.searchParams.get("host") ?? decodeURIComponent(u.hostname));
  set("PGPORT", u.port);
  set("PGUSER", decodeURIComponent(u.username));
  set("PGPASSWORD", decodeURIComponent(u.password));
  set("PGDATABASE", decodeURIComponent(u.pathname.slice(1)));
  set("PGSSLMODE", u.searchParams.get("sslmode"));
  return env;
}

const ident = (s: string) => `"${s.replace(/"/g, '""')}"`;
/** A string literal (standard_conforming_strings: backslashes are plain characters). */
const literal = (s: string) => `'${s.replace(/'/g, "''")}'`;
/** How long a capture waits for a table another session holds locked, when the source does not say. */
export const DEFAULT_LOCK_TIMEOUT_SECONDS = 10;
/** PostgreSQL's SQLSTATE for a lock not granted within lock_timeout. */
const LOCK_NOT_AVAILABLE = "55P03";
const USER_TABLES = `SELECT n.nspname AS schema, c.relname AS table FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE c.relkind IN ('r', 'p') AND n.nspname = ANY($1) ORDER BY 1, 2`;

const USER_SEQUENCES = `SELECT n.nspname AS schema, c.relname AS seq FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE c.relkind = 'S' AND n.nspname = ANY($1) ORDER BY 1, 2`;

let pgModule: typeof pg | undefined;
/**
 * pg, loaded on first use. pg 8 probes for Cloudflare Workers as it loads: with no global `navigator` (Node 20 has
 * none) it builds a `new Response()`, which loads Node's fetch (undici): 27 ms of CPU, half of pg's loading and a
 * tenth of a nothing-changed backup of the bench's mixed agent. A navigator naming Node for the import's duration
 * answers the probe; it is removed after (a runtime that has one keeps its own).
 */
async function loadPg(): Promise<typeof pg> {
  if (pgModule) return pgModule;
  const g = globalThis as { navigator?: unknown };
  if (g.navigator !== undefined) return (pgModule = (await import("pg")).default);
  g.navigator = { userAgent: "Node.js" };
  try {
    return (pgModule = (await import("pg")).default);
  } finally {
    delete g.navigator;
  }
}

async function connect(url: string): Promise<pg.Client> {
  const pgm = await loadPg();
  const c = new pgm.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  // a server that goes away while the client waits between queries (for pg_dump) emits an error with no query to
  // reject: unheard, it ends the process with a stack; the query or dump that fails next says what happened
  c.on("error", () => undefined);
  await c.connect();
  return c;
}

/**
 * Row counts of every table in `schemas`, keyed `schema.table`, in the client's current transaction.
 * @throws AgentbakError(11) naming the table when its lock was not granted within the session's lock_timeout.
 */
async function countRows(c: pg.Client, schemas: string[], lockTimeout?: string): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  /** `sql` on `what` (a table or sequence, quoted) under the session's lock_timeout. @throws AgentbakError(11) naming it when its lock was not granted */
  const underLock = async (what: string, sql: string) => {
    try {
      return await c.query(sql);
    } catch (e) {
      if ((e as { code?: string }).code === LOCK_NOT_AVAILABLE) throw lockedError(`${what} is locked by another session: not granted within ${lockTimeout} (lockTimeoutSeconds)`);
      throw e;
    }
  };
  for (const t of (await c.query<{ schema: string; table: string }>(USER_TABLES, [schemas])).rows) {
    const rel = `${ident(t.schema)}.${ident(t.table)}`;
    out[`${t.schema}.${t.table}`] = Number((await underLock(`table ${rel}`, `SELECT count(*) AS n FROM ${rel}`)).rows[0].n);
  }
  // pg_dump bounds only its LOCK TABLE of tables, then reads each sequence with no lock timeout: a sequence another
  // session holds (ALTER SEQUENCE ... RENAME in an open transaction) would keep it waiting for ever. Read here under
  // the capture's lock_timeout, each stays share-locked by this transaction until pg_dump has read it.
  for (const q of (await c.query<{ schema: string; seq: string }>(USER_SEQUENCES, [schemas])).rows) {
    const rel = `${ident(q.schema)}.${ident(q.seq)}`;
    await underLock(`sequence ${rel}`, `SELECT last_value FROM ${rel}`);
  }
  return out;
}

/** The schemas a dump's record keys (`schema.table`) name. */
const schemasOf = (f: SourceFile) => [...new Set(Object.keys(f.records).map((k) => k.slice(0, k.indexOf("."))))];

/**
 * SQL that raises (rolling the restore back) unless each table holds its
 * recorded number of rows. Names go in as quoted identifiers and as RAISE
 * parameters (never into its format string, where % is a placeholder), in a
 * body quoted with a dollar tag none of them contains.
 */
function countCheck(records: Record<string, number>): string {
  const lines = Object.entries(records).map(([k, n]) => {
    const i = k.indexOf(".");
    const rel = `${ident(k.slice(0, i))}.${ident(k.slice(i + 1))}`;
    return `  SELECT count(*) INTO c FROM ${rel}; IF c <> ${n} THEN RAISE EXCEPTION 'agentbak: table % has % rows, manifest says %', ${literal(k)}, c, ${n}; END IF;`;
  });
  const body = `DECLARE c bigint; BEGIN\n${lines.join("\n")}\nEND`;
  let tag = "$agentbak$";
  while (body.includes(tag)) tag = `${tag.slice(0, -1)}_$`;
  return `SET standard_conforming_strings = on;\nDO ${tag} ${body} ${tag};\n`;
}

/** A capture's lock timeout in milliseconds (PostgreSQL's unit for a bare number). @param seconds the source's lockTimeoutSeconds */
const lockTimeoutMs = (seconds = DEFAULT_LOCK_TIMEOUT_SECONDS) => Math.max(1, Math.round(seconds * 1000));

/**
 * pg_dump's failure, in one line. Its own wait for a table lock
 * (--lock-wait-timeout, which it enforces as a statement timeout on its
 * LOCK TABLE) names the table, exit 11.
 */
function dumpError(r: { exitCode?: number; signal?: string; stderr: unknown }, lockTimeout: string): AgentbakError {
  const text = String(r.stderr).trim();
  const rel = text.match(/timeout[\s\S]*Query was: LOCK TABLE ([\s\S]+?) IN ACCESS SHARE MODE/)?.[1];
  if (rel) return lockedError(`table ${rel} is locked by another session: pg_dump's lock not granted within ${lockTimeout} (lockTimeoutSeconds)`);
  return new AgentbakError(Exit.failure, `pg_dump exited ${r.exitCode ?? r.signal}: ${text.split("\n")[0]}`);
}

/**
 * What a dump of `schemas` would hold, as one digest, read in the capture's own transaction (docs/chunk-store.md):
 * its snapshot (xmin:xmax:in-progress ids; two equal snapshots see exactly the same committed transactions, so the
 * same rows and the same catalog, whatever the tables' sizes: no table is read), the last value and is_called of every
 * sequence in the schemas, read from the sequence (nextval changes it outside any transaction; setval on an UNLOGGED one
 * takes no transaction id), the database's oid, the server's version and start time (a
 * restarted or another server is never taken for this one), and the schemas. Any transaction in the whole cluster that
 * took an id changes it: a false "changed" costs a dump, never a false "unchanged". Read under a savepoint, so a
 * server without pg_current_snapshot (before 13) or a role that may not read it leaves the dump as it was.
 * @returns the digest, or why it could not be read
 */
async function dumpFingerprint(c: pg.Client, schemas: string[]): Promise<{ value: string } | { why: string }> {
  await c.query("SAVEPOINT agentbak_fingerprint");
  try {
    const head = (await c.query(`SELECT pg_current_snapshot()::text AS snap, d.oid::text AS db, current_setting('server_version_num') AS v, pg_postmaster_start_time()::text AS started
      FROM pg_database d WHERE d.datname = current_database()`)).rows[0];
    const names = (await c.query(`SELECT schemaname, sequencename FROM pg_sequences WHERE schemaname = ANY($1) ORDER BY 1, 2`, [schemas])).rows;
    // read from each sequence itself: pg_sequences shows no last_value once setval(..., false) ran, and on an
    // UNLOGGED sequence that setval takes no transaction id, so neither the snapshot nor that view would move
    const seqs = names.length
      ? (await c.query(names.map((q, i) => `SELECT ${i} AS i, last_value::text AS v, is_called FROM ${ident(q.schemaname)}.${ident(q.sequencename)}`).join(" UNION ALL ") + " ORDER BY 1")).rows
      : [];
    await c.query("RELEASE SAVEPOINT agentbak_fingerprint");
    const parts = ["agentbak pg fingerprint 2", head.snap, head.db, head.v, head.started, JSON.stringify(schemas), JSON.stringify(seqs.map((q) => [names[q.i].schemaname, names[q.i].sequencename, q.v, q.is_called]))];
    return { value: createHash("sha256").update(parts.join("\0")).digest("hex") };
  } catch (e) {
    await c.query("ROLLBACK TO SAVEPOINT agentbak_fingerprint");
    return { why: (e as Error).message.split("\n")[0]! };
  }
}

export const postgresDriver: SourceDriver = {
  async capture(spec, url, dir, prior) {
    const schemas = spec.schemas ?? ["public"];
    const ms = lockTimeoutMs(spec.lockTimeoutSeconds);
    const lockTimeout = `${ms / 1000} s`;
    let c: pg.Client | undefined;
    try {
      c = await connect(url);
      // one snapshot: exported, counted in, and handed to pg_dump while this transaction holds it
      await c.query("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY");
      await c.query(`SET LOCAL lock_timeout = ${ms}`);
      const head = (await c.query("SELECT pg_export_snapshot() AS snap, clock_timestamp() AS at, current_setting('server_version') AS v")).rows[0];
      const path = `sources/${spec.name}/dump.pgdump`;
      const fp = await dumpFingerprint(c, schemas);
      const fingerprint = "value" in fp ? fp.value : undefined;
      const at = { snapshotAt: new Date(head.at), serverVersion: String(head.v), ...("why" in fp ? { noFingerprint: `no fingerprint (${fp.why}): dumped in full` } : {}) };
      // the same snapshot as the stored dump's: it sees exactly what that dump holds, so it is not dumped (nor counted) again
      if (fingerprint && prior?.get(path) === fingerprint) {
        await c.query("COMMIT");
        return { ...at, files: [{ path, file: "", records: {}, fingerprint, unchanged: true }] };
      }
      const records = await countRows(c, schemas, lockTimeout);
      const file = join(dir, `${spec.name}.pgdump`);
      // --schema takes a pattern: quoted, a name is matched exactly (case, dots, stars and all)
      const patterns = schemas.map((s) => `--schema=${ident(s)}`);
      const r = await stopOnInterrupt(
        execa(pgBin("pg_dump"), ["--format=custom", "--no-owner", "--no-privileges", `--snapshot=${head.snap}`, `--lock-wait-timeout=${ms}`, ...patterns, "--file", file], {
          env: libpqEnv(url),
          reject: false,
          stdin: "ignore",
        }),
      );
      if (r.exitCode !== 0) throw dumpError(r, lockTimeout);
      await c.query("COMMIT");
      return { ...at, files: [{ path, file, records, ...(fingerprint ? { fingerprint } : {}) }] };
    } catch (e) {
      throw sourceError(spec.name, e, url);
    } finally {
      await c?.end().catch(() => undefined);
    }
  },

  async fingerprint(spec, url) {
    let c: pg.Client | undefined;
    try {
      c = await connect(url);
      await c.query("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY");
      const fp = await dumpFingerprint(c, spec.schemas ?? ["public"]);
      await c.query("COMMIT");
      return "value" in fp ? fp.value : null;
    } catch {
      return null; // the capture says why
    } finally {
      await c?.end().catch(() => undefined);
    }
  },

  async check(name, files) {
    const f = files[0]!;
    // pg_restore --list parses the archive's table of contents without a server
    const r = await execa(pgBin("pg_restore"), ["--list", f.file], { reject: false, stdin: "ignore" });
    if ((r as { code?: string }).code === "ENOENT") return "pg_restore not found here: archive not parsed (its sha256 matches)";
    if (r.exitCode !== 0) throw verifyError(`source ${name}: pg_restore can not read the dump: ${String(r.stderr).trim().split("\n")[0]}`);
    const data = String(r.stdout).split("\n").filter((l) => / TABLE DATA /.test(l)).length;
    const tables = Object.keys(f.records).length;
    if (data < tables) throw verifyError(`source ${name}: the dump holds data for ${data} tables, manifest lists ${tables}`);
    return `pg_dump archive readable; ${tables} tables`;
  },

  async occupant(url) {
    const c = await connect(url);
    try {
      const r = await c.query(`SELECT n.nspname || '.' || c.relname AS rel FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%' LIMIT 1`);
      return r.rows.length ? `the database holds ${r.rows[0].rel}` : null;
    } finally {
      await c.end();
    }
  },

  async restore(name, files, url, _elapsed) {
    const f = files[0]!;
    const env = libpqEnv(url);
    // pg_restore writes the SQL; psql runs it and the count check as one transaction: all or nothing
    // every database has schema public already: its CREATE SCHEMA entry is left out of the archive's table of contents
    const toc = await execa(pgBin("pg_restore"), ["--list", f.file], { reject: false, stdin: "ignore" });
    if (toc.exitCode !== 0) throw sourceError(name, new Error(`pg_restore --list exited ${toc.exitCode ?? toc.signal}: ${String(toc.stderr).trim().split("\n")[0]}`), url);
    const list = `${f.file}.list`;
    writeFileSync(list, String(toc.stdout).split("\n").filter((l) => !/^\d+; \d+ \d+ SCHEMA - public /.test(l)).join("\n") + "\n");
    const script = execa(pgBin("pg_restore"), ["--no-owner", "--no-privileges", `--use-list=${list}`, "--file=-", f.file], { stdin: "ignore", reject: false, buffer: { stdout: false } });
    const psql = execa(pgBin("psql"), ["--no-psqlrc", "--quiet", "--single-transaction", "-v", "ON_ERROR_STOP=1", "--file=-"], { env, reject: false, stdin: "pipe", stdout: "ignore" });
    script.stdout!.pipe(psql.stdin!, { end: false });
    const [s] = await Promise.all([script, once(script.stdout!, "end")]);
    psql.stdin!.end(s.exitCode === 0 ? countCheck(f.records) : "SELECT 1/0; -- pg_restore failed\n");
    const p = await psql;
    if (s.exitCode !== 0) throw sourceError(name, new Error(`pg_restore exited ${s.exitCode ?? s.signal}: ${String(s.stderr).trim().split("\n")[0]}`), url);
    if (p.exitCode !== 0) {
      const err = String(p.stderr).trim().split("\n").find((l) => l.includes("ERROR")) ?? String(p.stderr).trim().split("\n")[0];
      const e = new AgentbakError(err?.includes("agentbak: table") ? Exit.verify : Exit.failure, `restore rolled back: ${err}`);
      throw sourceError(name, e, url);
    }
    const c = await connect(url);
    try {
      const records = await countRows(c, schemasOf(f));
      return { records, skipped: [], dimensions: {}, detail: `${Object.keys(records).length} tables restored; row counts match the manifest` };
    } finally {
      await c.end();
    }
  },

  async query(url, sql) {
    const c = await connect(url);
    try {
      await c.query("BEGIN READ ONLY");
      return (await c.query(sql)).rows;
    } finally {
      await c.end();
    }
  },

  async throwaway(dir) {
    const sd = serverDir(dir, "pg");
    const data = join(sd.dir, "data");
    const init = serverCommand(pgBin("initdb"), ["-D", data, "-U", "agentbak", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"], sd);
    const r = await stopOnInterrupt(execa(init[0], init[1], { cwd: sd.dir, reject: false, stdin: "ignore" }));
    if (r.exitCode !== 0) throw new AgentbakError(Exit.failure, `throwaway postgres: initdb exited ${r.exitCode ?? r.signal}: ${String(r.stderr).trim().split("\n").slice(-1)[0]}`);
    const port = await freePort();
    const url = `postgres://agentbak@127.0.0.1:${port}/postgres`;
    const opts = ["-D", data, "-p", String(port), "-k", sd.dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "synchronous_commit=off"];
    const { child } = await startServer("postgres", serverCommand(pgBin("postgres"), opts, sd), sd.dir, async () => {
      const c = await connect(url);
      await c.end();
      return true;
    });
    return { target: url, stop: () => stopServer(child, sd.dir, "SIGINT") };
  },
};
