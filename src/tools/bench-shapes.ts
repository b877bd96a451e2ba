/**
 * The agent shapes `npm run bench` measures, generated deterministically
 * (seeded) and cached between runs in a folder keyed by shape and size:
 *
 *   reference  the reference agent's database (fixtures/agent/generate.js) at --size-mb
 *   ledger     ~300 MiB of many small rows (id, account, ts, amount, memo ~40 B), indexed on account and ts
 *   blobs      ~300 MiB of 64 KiB - 1 MiB BLOB rows, half incompressible, half compressible
 *   mixed      500 MB of `files` (three adapter-like binaries, ~2000 prompt and policy files), a 200 MB
 *              LanceDB table, a ~100 MB PostgreSQL table (a throwaway server, loaded by SQL each run)
 *              and a small SQLite database
 *
 * Every size is multiplied by --scale. A shape is generated once into
 * `<cache>/<shape>-<bytes>-v1/` and copied (reflinked where the filesystem
 * can) into the run's folder, since a run changes its databases.
 */
import { execa } from "execa";
import { createCipheriv, createHash } from "node:crypto";
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";

export type ShapeName = "reference" | "ledger" | "blobs" | "mixed";
export const SHAPES: ShapeName[] = ["reference", "ledger", "blobs", "mixed"];

/** A shape ready to be backed up: its agent folder, and what the baselines and the row changes need. */
export interface Shape {
  name: ShapeName;
  /** the agent folder (agentbak.json, databases, files), a private copy for this run */
  dir: string;
  /** bytes of state the shape holds (databases, files, the LanceDB folder, the PostgreSQL table) */
  stateBytes: number;
  /** what the state is, in one line */
  description: string;
  /** environment the agent's commands need (the PostgreSQL source's URL) */
  env: Record<string, string>;
  /** a shell script that writes the consistent plain copy a stock pipeline (or restic) backs up into $1 */
  prepare: string;
  /** the paths (relative to `dir`) a stock pipeline or restic reads directly, beside the copy */
  plainPaths: string[];
  /** extra `agentbak restore` arguments for one restore, given a fresh empty PostgreSQL database name */
  restoreArgs(db: string): Promise<string[]>;
  /** the stock restore's extra step (loading the dump into a server), given the unpacked folder */
  stockRestoreExtra(db: string, unpacked: string): Promise<string>;
  /** changes 1% of the rows of every database-like part (SQLite, PostgreSQL, LanceDB) */
  changeOnePercent(): Promise<void>;
  /** a sub-task's worth of new rows in the SQLite database (the second snapshot's change) */
  touchFew(n: number): Promise<void>;
  stop(): Promise<void>;
}

const MiB = 2 ** 20;

/** Deterministic pseudo-random bytes: AES-128-CTR's keystream under a key from `seed` (GB/s, unlike a JS generator). */
export function randomStream(seed: string): (n: number) => Buffer {
  const key = createHash("sha256").update(`agentbak bench ${seed}`).digest().subarray(0, 16);
  const c = createCipheriv("aes-128-ctr", key, Buffer.alloc(16));
  return (n) => c.update(Buffer.alloc(n));
}

/** A small seeded generator of floats in [0, 1) (mulberry32). */
export function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

const WORDS = ("the agent plans a task and calls a tool then reads the result writes a summary checks the invoice customer account balance refund " +
  "policy ledger entry payment due date reminder email draft approve reject escalate schedule meeting calendar conflict resolve retry later " +
  "budget token usage model response memory recall fact rule preference context window transcript step observation action thought answer").split(" ");
const sentence = (r: () => number, n: number) => Array.from({ length: n }, () => WORDS[Math.floor(r() * WORDS.length)]).join(" ");

/** The config every shape starts from: one agent, one recipient, no workspace. */
function baseConfig(recipient: string, databases: { name: string; path: string }[]): Record<string, unknown> {
  return { agent: { id: "bench-agent", tenant: "bench" }, repository: "./backups", recipients: [recipient], databases, files: [], credentials: [], runtime: { agentVersion: "1.0.0" } };
}

type Database = import("better-sqlite3").Database;
const openDb = async (path: string): Promise<Database> => new (await import("better-sqlite3")).default(path);

/** A ledger: (id, account, ts, amount, memo ~40 B) rows; indexes on account and ts made after the load (sorted builds). */
async function generateLedger(dir: string, bytes: number, recipient: string): Promise<void> {
  mkdirSync(join(dir, "state"), { recursive: true });
  const db = await openDb(join(dir, "state", "ledger.sqlite"));
  db.pragma("journal_mode = WAL");
  db.pragma("cache_size = -200000");
  db.exec("CREATE TABLE ledger (id INTEGER PRIMARY KEY, account TEXT NOT NULL, ts INTEGER NOT NULL, amount INTEGER NOT NULL, memo TEXT NOT NULL)");
  const ins = db.prepare("INSERT INTO ledger (id, account, ts, amount, memo) VALUES (?, ?, ?, ?, ?)");
  const r = rng(7);
  // ~102 bytes a row with both indexes (measured on the generated file)
  const rows = Math.max(1000, Math.round(bytes / 102));
  const t0 = Date.UTC(2026, 0, 1) / 1000;
  for (let i = 1; i <= rows; ) {
    db.transaction(() => {
      for (let k = 0; k < 50_000 && i <= rows; k++, i++)
        ins.run(i, `acct-${String(Math.floor(r() * 200_000)).padStart(6, "0")}`, t0 + i * 3 + Math.floor(r() * 3), Math.floor(r() * 1_000_000) - 500_000, sentence(r, 6).slice(0, 40));
    })();
  }
  db.exec("CREATE INDEX ledger_account ON ledger (account); CREATE INDEX ledger_ts ON ledger (ts);");
  db.pragma("wal_checkpoint(TRUNCATE)");
  db.close();
  writeConfig(dir, baseConfig(recipient, [{ name: "ledger", path: "state/ledger.sqlite" }]));
}

/** BLOB rows of 64 KiB - 1 MiB: even rows incompressible (keystream), odd rows compressible (text). */
async function generateBlobs(dir: string, bytes: number, recipient: string): Promise<void> {
  mkdirSync(join(dir, "state"), { recursive: true });
  const db = await openDb(join(dir, "state", "blobs.sqlite"));
  db.pragma("journal_mode = WAL");
  db.exec("CREATE TABLE blobs (id INTEGER PRIMARY KEY, name TEXT NOT NULL, kind TEXT NOT NULL, data BLOB NOT NULL)");
  const ins = db.prepare("INSERT INTO blobs (id, name, kind, data) VALUES (?, ?, ?, ?)");
  const r = rng(11);
  const noise = randomStream("blobs");
  let total = 0;
  for (let i = 1; total < bytes; i++) {
    const size = 64 * 1024 + Math.floor(r() * (960 * 1024));
    const data = i % 2 ? Buffer.from(sentence(r, size / 5).slice(0, size)) : noise(size);
    ins.run(i, `artifact-${i}`, i % 2 ? "transcript" : "embedding-cache", data);
    total += size;
  }
  db.pragma("wal_checkpoint(TRUNCATE)");
  db.close();
  writeConfig(dir, baseConfig(recipient, [{ name: "blobs", path: "state/blobs.sqlite" }]));
}

/** The reference agent's database alone (as the bench always measured it: no workspace, no files). */
async function generateReference(dir: string, bytes: number, recipient: string, root: string): Promise<void> {
  const gen = await import(join(root, "fixtures", "agent", "generate.js"));
  gen.generateAgent(dir, { recipient, sizeMb: Math.max(1, Math.round(bytes / MiB)) });
  const cfg = JSON.parse(readFileSync(join(dir, "agentbak.json"), "utf8"));
  delete cfg.workspace;
  cfg.files = [];
  cfg.credentials = [];
  writeConfig(dir, cfg);
  rmSync(join(dir, "workspace"), { recursive: true, force: true });
}

/**
 * Adapter-like binaries (bf16 weights: random mantissas, exponents in a
 * narrow band, so zstd finds a little to take), then prompt and policy files.
 */
function generateFiles(dir: string, bytes: number): void {
  const noise = randomStream("adapters");
  const adapters = [0.4, 0.3, 0.2].map((f) => Math.round((bytes * f) / 2) * 2);
  mkdirSync(join(dir, "files", "adapters"), { recursive: true });
  adapters.forEach((size, i) => {
    const fd = openSync(join(dir, "files", "adapters", `adapter-${i}.safetensors`), "w");
    for (let done = 0; done < size; ) {
      const b = noise(Math.min(8 * MiB, size - done));
      for (let j = 1; j < b.length; j += 2) b[j] = 0x3c | (b[j]! & 0x83);
      writeSync(fd, b);
      done += b.length;
    }
    closeSync(fd);
  });
  const r = rng(13);
  let small = bytes - adapters.reduce((a, b) => a + b, 0);
  for (let i = 0; small > 0; i++) {
    const sub = i % 10 === 0 ? "policy" : `prompts/${String(i % 37).padStart(2, "0")}`;
    mkdirSync(join(dir, "files", sub), { recursive: true });
    const size = 4096 + Math.floor(r() * 40_000);
    const text = i % 10 === 0 ? JSON.stringify({ rule: i, when: sentence(r, 20), then: sentence(r, size / 6) }, null, 2) : `# prompt ${i}\n\n${sentence(r, size / 5)}\n`;
    writeFileSync(join(dir, "files", sub, `${i % 10 === 0 ? "rule" : "prompt"}-${i}.${i % 10 === 0 ? "json" : "md"}`), text);
    small -= text.length;
  }
}

const LANCE_DIM = 384;

/** A LanceDB table of memories: id, text, a 384-dimension float32 vector (~1.6 KB a row). */
async function generateLance(dir: string, bytes: number): Promise<void> {
  const lancedb = await import("@lancedb/lancedb");
  const db = await lancedb.connect(join(dir, "memory", "lance"));
  const rows = Math.max(256, Math.round(bytes / (LANCE_DIM * 4 + 64)));
  const r = rng(17);
  const batch = (from: number, n: number) =>
    Array.from({ length: n }, (_, k) => ({ id: from + k, kind: ["fact", "rule", "preference"][(from + k) % 3]!, text: sentence(r, 8), vector: Array.from({ length: LANCE_DIM }, () => r() * 2 - 1) }));
  const t = await db.createTable("memories", batch(0, Math.min(4096, rows)));
  for (let i = 4096; i < rows; i += 4096) await t.add(batch(i, Math.min(4096, rows - i)));
  t.close();
  db.close();
}

/** The mixed agent: files, a LanceDB table and a small SQLite database (PostgreSQL is loaded per run: see startPostgres). */
async function generateMixed(dir: string, bytes: number, recipient: string, root: string): Promise<void> {
  const gen = await import(join(root, "fixtures", "agent", "generate.js"));
  mkdirSync(join(dir, "state"), { recursive: true });
  gen.generateDatabase(join(dir, "state", "agent.sqlite"), { sizeMb: Math.max(2, Math.round((16 * bytes) / (800 * MiB))) });
  generateFiles(dir, Math.round(bytes * 0.625));
  await generateLance(dir, Math.round(bytes * 0.25));
  writeConfig(dir, {
    ...baseConfig(recipient, [{ name: "state", path: "state/agent.sqlite" }]),
    files: ["files/**"],
    sources: [
      { name: "ledgerdb", kind: "postgres", url: "env:BENCH_PG_URL" },
      { name: "memory", kind: "lancedb", path: "memory/lance" },
    ],
  });
}

function writeConfig(dir: string, cfg: Record<string, unknown>): void {
  writeFileSync(join(dir, "agentbak.json"), JSON.stringify(cfg, null, 2) + "\n");
}

/** Target bytes of each shape at scale 1 (the reference: --size-mb). */
export const SHAPE_BYTES = { ledger: 300 * MiB, blobs: 300 * MiB, mixed: 800 * 1e6 } as const;

/** The shape's cached folder, generated on first use. @returns it, and whether it was generated now. */
export async function cachedShape(name: ShapeName, bytes: number, cache: string, root: string, log: (s: string) => void): Promise<{ dir: string; generated: boolean; seconds: number }> {
  const dir = join(cache, `${name}-${bytes}-v1`);
  if (existsSync(join(dir, ".ready"))) return { dir, generated: false, seconds: 0 };
  const tmp = `${dir}.partial-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  log(`generating the ${name} shape (${(bytes / MiB).toFixed(0)} MiB) into ${dir} ...`);
  const t0 = Date.now();
  // the recipient is replaced by the run's own when the shape is copied out
  const placeholder = "age1placeholder";
  if (name === "reference") await generateReference(tmp, bytes, placeholder, root);
  else if (name === "ledger") await generateLedger(tmp, bytes, placeholder);
  else if (name === "blobs") await generateBlobs(tmp, bytes, placeholder);
  else await generateMixed(tmp, bytes, placeholder, root);
  writeFileSync(join(tmp, ".ready"), new Date().toISOString() + "\n");
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  const seconds = (Date.now() - t0) / 1000;
  log(`generated ${name} in ${seconds.toFixed(1)} s`);
  return { dir, generated: true, seconds };
}

/** Bytes under a folder (du -sb). */
export async function duBytes(dir: string): Promise<number> {
  return Number(String((await execa("du", ["-sb", dir])).stdout).split(/\s/)[0]);
}

/** A throwaway PostgreSQL server with one table of ~`bytes` (deterministic rows, loaded by SQL). */
async function startPostgres(dir: string, bytes: number, root: string) {
  const { driverFor } = await import(join(root, "dist", "state", "sources", "index.js"));
  const server = (await driverFor("postgres").throwaway(join(dir, "pg"))) as { target: string; stop(): Promise<void> };
  const pg = (await import("pg")).default;
  const sql = async (text: string, db = "postgres") => {
    const c = new pg.Client({ connectionString: server.target.replace(/\/postgres$/, `/${db}`) });
    await c.connect();
    try {
      return await c.query(text);
    } finally {
      await c.end();
    }
  };
  // ~190 bytes a row in the table and its primary key
  const rows = Math.max(1000, Math.round(bytes / 190));
  await sql(`CREATE TABLE events (id bigint PRIMARY KEY, account text NOT NULL, ts timestamptz NOT NULL, amount integer NOT NULL, payload text NOT NULL);
    INSERT INTO events SELECT i, 'acct-' || lpad(((i * 7919) % 20000)::text, 5, '0'), timestamptz '2026-01-01 00:00:00+00' + i * interval '3 seconds',
      ((i * 104729) % 100000) - 50000, md5(i::text) || md5((i * 31)::text) || ' memo ' || (i % 977)
    FROM generate_series(1::bigint, ${rows}::bigint) i`);
  await sql("VACUUM ANALYZE events");
  const size = Number((await sql("SELECT pg_total_relation_size('events') AS n")).rows[0].n);
  return { server, sql, size };
}

/** Copies the cached shape into the run's folder and readies it (recipient, servers). */
export async function openShape(name: ShapeName, cached: string, work: string, recipient: string, scale: number, root: string): Promise<Shape> {
  const dir = join(work, `agent-${name}`);
  await execa("cp", ["-a", "--reflink=auto", cached, dir]);
  rmSync(join(dir, ".ready"), { force: true });
  const cfgPath = join(dir, "agentbak.json");
  const cfg = JSON.parse(readFileSync(cfgPath, "utf8"));
  cfg.recipients = [recipient];
  writeConfig(dir, cfg);
  const dbs = (cfg.databases as { name: string; path: string }[]).map((d) => ({ ...d, abs: join(dir, d.path) }));
  const copyDbs = dbs.map((d) => `sqlite3 '${d.abs}' ".backup '$1/${d.name}.sqlite'"`).join("\n");
  const stateBytes = await duBytes(dir);
  const touchFew = async (n: number) => {
    const db = await openDb(dbs[0]!.abs);
    db.exec("CREATE TABLE IF NOT EXISTS bench_notes (id INTEGER PRIMARY KEY, at TEXT, note TEXT)");
    const ins = db.prepare("INSERT INTO bench_notes (at, note) VALUES (?, ?)");
    db.transaction(() => {
      for (let i = 0; i < n; i++) ins.run(new Date().toISOString(), `step ${i}: checked the invoice and drafted a reply`);
    })();
    db.close();
  };
  const common = {
    name,
    dir,
    env: {} as Record<string, string>,
    prepare: copyDbs,
    plainPaths: [] as string[],
    restoreArgs: async () => [] as string[],
    stockRestoreExtra: async () => "",
    touchFew,
    stop: async () => undefined,
  };
  if (name === "reference")
    return { ...common, stateBytes, description: `reference agent database, ${(stateBytes / MiB).toFixed(0)} MiB`, changeOnePercent: async () => updateReference(dbs[0]!.abs) };
  if (name === "ledger")
    return { ...common, stateBytes, description: `ledger of small rows with two indexes, ${(stateBytes / MiB).toFixed(0)} MiB`, changeOnePercent: async () => updateEvery(dbs[0]!.abs, "UPDATE ledger SET amount = amount + 1, memo = substr('revised ' || memo, 1, 40)", "id") };
  if (name === "blobs")
    return { ...common, stateBytes, description: `BLOB rows of 64 KiB - 1 MiB, ${(stateBytes / MiB).toFixed(0)} MiB`, changeOnePercent: async () => rewriteBlobs(dbs[0]!.abs) };
  // mixed: PostgreSQL loaded now, in a server that lives as long as the shape
  const pgBytes = Math.round(100e6 * scale);
  const pg = await startPostgres(work, pgBytes, root);
  const { pgBin } = await import(join(root, "dist", "state", "sources", "postgres.js"));
  const url = pg.server.target;
  const dbUrl = (db: string) => url.replace(/\/postgres$/, `/${db}`);
  const fresh = async (db: string) => void (await pg.sql(`CREATE DATABASE ${db}`));
  const lance = async () => {
    const lancedb = await import("@lancedb/lancedb");
    const ldb = await lancedb.connect(join(dir, "memory", "lance"));
    const t = await ldb.openTable("memories");
    await t.update({ where: "id % 100 = 7", values: { kind: "revised" } });
    t.close();
    ldb.close();
  };
  return {
    ...common,
    stateBytes: stateBytes + pg.size,
    description: `files ${((await duBytes(join(dir, "files"))) / 1e6).toFixed(0)} MB, LanceDB ${((await duBytes(join(dir, "memory"))) / 1e6).toFixed(0)} MB, PostgreSQL table ${(pg.size / 1e6).toFixed(0)} MB, SQLite ${((await duBytes(join(dir, "state"))) / 1e6).toFixed(0)} MB`,
    env: { BENCH_PG_URL: url },
    prepare: `${copyDbs}\nPGHOST=127.0.0.1 PGPORT=${new URL(url).port} PGUSER=agentbak PGDATABASE=postgres '${pgBin("pg_dump")}' --format=custom --no-owner --no-privileges --file "$1/ledgerdb.pgdump"`,
    plainPaths: ["files", "memory"],
    restoreArgs: async (db) => (await fresh(db), ["--source", `ledgerdb=${dbUrl(db)}`]),
    stockRestoreExtra: async (db, unpacked) => (await fresh(db), `'${pgBin("pg_restore")}' --no-owner --no-privileges --dbname='${dbUrl(db)}' '${unpacked}/ledgerdb.pgdump'`),
    changeOnePercent: async () => {
      await updateReference(dbs[0]!.abs);
      await pg.sql("UPDATE events SET amount = amount + 1, payload = 'revised ' || payload WHERE id % 100 = 7");
      await lance();
    },
    stop: () => pg.server.stop(),
  };
}

/** 1% of the rows of every table of the reference database, as the bench always changed them (deterministic rows). */
async function updateReference(path: string): Promise<void> {
  const updates = [
    "UPDATE messages SET content = content || ' (revised)'",
    "UPDATE memories SET text = text || ' (revised)'",
    "UPDATE events SET data = '{\"revised\":true}'",
    "UPDATE tasks SET payload = json_set(payload, '$.revised', 1)",
    "UPDATE deliveries SET provider_receipt = provider_receipt || '-r'",
    "UPDATE task_attempts SET outcome = 'ok-revised'",
  ];
  const db = await openDb(path);
  for (const u of updates) db.prepare(`${u} WHERE (rowid * 2654435761) % 100 = 7`).run();
  db.close();
}

/** `update` applied to 1% of the rows, scattered (a multiplicative hash of the key picks them). */
async function updateEvery(path: string, update: string, key: string): Promise<void> {
  const db = await openDb(path);
  db.prepare(`${update} WHERE (${key} * 2654435761) % 100 = 7`).run();
  db.close();
}

/** 1% of the BLOB rows (at least one) get new content of the same size. */
async function rewriteBlobs(path: string): Promise<void> {
  const db = await openDb(path);
  const rows = db.prepare("SELECT id, length(data) AS n FROM blobs WHERE (id * 2654435761) % 100 = 7").all() as { id: number; n: number }[];
  if (!rows.length) rows.push(db.prepare("SELECT id, length(data) AS n FROM blobs ORDER BY id LIMIT 1").get() as { id: number; n: number });
  const noise = randomStream("blobs-revised");
  const upd = db.prepare("UPDATE blobs SET data = ? WHERE id = ?");
  db.transaction(() => rows.forEach((r) => upd.run(noise(r.n), r.id)))();
  db.close();
}
