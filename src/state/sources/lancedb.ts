/**
 * LanceDB as a state source: every table of the folder read at one pinned
 * table version through the library and streamed as an Arrow IPC stream
 * (row count and vector dimension recorded); restored by writing the tables
 * into an empty folder and counting them there.
 */
import { createHash } from "node:crypto";
import { createReadStream, createWriteStream, existsSync, lstatSync, readdirSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { AgentbakError, Exit, verifyError } from "../../errors.js";
import { readFileRegular } from "../../fsutil.js";
import { loadOptional } from "../../optional.js";
import { sourceError, type SourceDriver, type SourceFile } from "./common.js";

interface Libs {
  lancedb: typeof import("@lancedb/lancedb");
  arrow: typeof import("apache-arrow");
}
let libs: Libs | undefined;
/**
 * LanceDB and the Arrow it uses, loaded on first use: optional dependencies
 * (src/optional.ts), not needed by agents without a LanceDB source. Arrow is
 * the copy LanceDB itself requires, resolved from LanceDB's folder: LanceDB
 * hands out RecordBatches of that CommonJS build and mixing in another copy
 * breaks instanceof; a LanceDB installed beside agentbak has its Arrow there.
 * @throws AgentbakError(2) naming the install command when LanceDB is not installed.
 */
async function load(): Promise<Libs> {
  return (libs ??= await loadOptional("a lancedb source", ["@lancedb/lancedb"], async () => {
    const lancedb = await import("@lancedb/lancedb");
    return { lancedb, arrow: createRequire(import.meta.resolve("@lancedb/lancedb"))("apache-arrow") as Libs["arrow"] };
  }));
}
/** Arrow, once load() has run. */
const A = () => libs!.arrow;
type Schema = import("apache-arrow").Schema;

/** The dimension of a schema's vector column: the fixed-size list named "vector", else the first fixed-size list. */
function vectorDimension(schema: Schema): number | undefined {
  const lists = schema.fields.filter((f) => A().DataType.isFixedSizeList(f.type));
  const f = lists.find((x) => x.name === "vector") ?? lists[0];
  return f ? (f.type as import("apache-arrow").FixedSizeList).listSize : undefined;
}

/** A table's name from its captured file, `sources/<name>/<table>.arrows`. */
const tableOf = (f: SourceFile) => f.path.slice(f.path.lastIndexOf("/") + 1, -".arrows".length);

async function openStream(file: string) {
  const reader = await A().RecordBatchReader.from(createReadStream(file));
  await reader.open();
  return reader;
}

/**
 * A table version's fingerprint: its name, version, the sha256 of that version's manifest file, and its files'
 * identities and times (filesOf) (Lance never rewrites one: a version's files are fixed; a table dropped and made again reaches the same number with another
 * manifest, which holds its own time and fragments). Both of Lance's manifest names are tried (`<version>.manifest`,
 * and `<u64 max - version>.manifest` of its V2 naming). null when neither is there (another layout): captured in full.
 */
function tableFingerprint(folder: string, name: string, version: number): string | null {
  const dir = join(folder, `${name}.lance`, "_versions");
  for (const file of [`${version}.manifest`, `${(2n ** 64n - 1n - BigInt(version)).toString()}.manifest`]) {
    const bytes = readFileRegularOrNull(join(dir, file));
    if (bytes)
      return createHash("sha256")
        .update(`agentbak lancedb fingerprint 2\0${name}\0${version}\0`)
        .update(createHash("sha256").update(bytes).digest())
        .update(filesOf(join(folder, `${name}.lance`)))
        .digest("hex");
  }
  return null;
}

/**
 * Every file under a folder (a table's, or the whole source's: fingerprint) as its path, mode, inode, size, mtime and ctime: Lance never rewrites a file, but a program
 * writing one in place under the same manifest (its mtime put back) still moves its ctime, and is then read again.
 * Files Lance adds or its cleanup removes read as a change too (a read, never a false "unchanged").
 */
function filesOf(table: string): string {
  const out: string[] = [];
  for (const rel of (readdirSync(table, { recursive: true }) as string[]).sort()) {
    const st = lstatSync(join(table, rel), { bigint: true, throwIfNoEntry: false });
    // gone between the listing and its stat (a writer's temp file renamed into place): the folder changed while it
    // was read; named, so this listing equals no earlier one (a read, never a false "unchanged")
    if (!st) out.push(`${rel} vanished`);
    else if (!st.isDirectory()) out.push([rel, st.mode, st.ino, st.size, st.mtimeNs, st.ctimeNs].join(" "));
  }
  return out.join("\n");
}

function readFileRegularOrNull(path: string): Buffer | null {
  try {
    return readFileRegular(path);
  } catch {
    return null;
  }
}

export const lancedbDriver: SourceDriver = {
  async capture(spec, folder, dir, prior) {
    try {
      if (!existsSync(folder)) throw new AgentbakError(Exit.notFound, `${folder} not found`);
      const db = await (await load()).lancedb.connect(folder);
      const names = (await db.tableNames()).sort();
      const at = new Date();
      const files = [];
      const unknown: string[] = [];
      for (const name of names) {
        const t = await db.openTable(name);
        // pinned: rows a writer adds from now on belong to a later version and are not read
        const version = await t.version();
        await t.checkout(version);
        const path = `sources/${spec.name}/${name}.arrows`;
        const fingerprint = tableFingerprint(folder, name, version) ?? undefined;
        if (!fingerprint) unknown.push(name);
        // the very version the stored stream holds: not read again
        if (fingerprint && prior?.get(path) === fingerprint) {
          t.close();
          files.push({ path, file: "", records: {}, table_version: version, fingerprint, unchanged: true });
          continue;
        }
        const schema = await t.schema();
        const file = join(dir, `${spec.name}.${name}.arrows`);
        const writer = new (A().RecordBatchStreamWriter)();
        const done = pipeline(writer.toNodeStream(), createWriteStream(file, { flags: "wx", mode: 0o600 }));
        let rows = 0;
        for await (const b of t.query()) {
          writer.write(b);
          rows += b.numRows;
        }
        if (rows === 0) writer.write(new (A().Table)(schema));
        writer.finish();
        await done;
        t.close();
        const dimension = vectorDimension(schema);
        files.push({ path, file, records: { [name]: rows }, table_version: version, ...(dimension ? { dimension } : {}), ...(fingerprint ? { fingerprint } : {}) });
      }
      db.close();
      return { snapshotAt: at, serverVersion: null, files, ...(unknown.length ? { noFingerprint: `no version manifest found for table(s) ${unknown.join(", ")}: read in full` } : {}) };
    } catch (e) {
      throw sourceError(spec.name, e);
    }
  },

  /**
   * Read from the folder's files alone, without loading LanceDB (its native module was most of a nothing-changed
   * check's time): every file under the folder as its path, mode, inode, size, mtime and ctime (filesOf). That holds
   * whatever LanceDB would read there: a table is the files of its `<name>.lance` folder and its version is the newest
   * manifest under `_versions`, the folder's catalog (`__manifest`) is a table too, and Lance never rewrites a file: a
   * commit adds a manifest, a write adds data files, cleanup removes files; a program writing one in place still moves
   * its ctime. So an equal listing is an equal state; a listing that differs (even only by a hint file) costs a
   * capture, which compares each table's version manifest (tableFingerprint) and reuses what it stored.
   */
  async fingerprint(_spec, folder) {
    try {
      if (!existsSync(folder) || !statSync(folder).isDirectory()) return null;
      return createHash("sha256").update("agentbak lancedb folder 2\0").update(filesOf(folder)).digest("hex");
    } catch {
      return null; // the capture says why
    }
  },

  async check(name, files) {
    await load();
    for (const f of files) {
      let rows = 0;
      let dim: number | undefined;
      try {
        const reader = await openStream(f.file);
        dim = vectorDimension(reader.schema);
        for await (const b of reader) rows += b.numRows;
      } catch (e) {
        throw verifyError(`source ${name}: ${f.path} is not an Arrow stream: ${(e as Error).message}`);
      }
      const want = f.records[tableOf(f)];
      if (rows !== want) throw verifyError(`source ${name}: table ${tableOf(f)} holds ${rows} rows, manifest says ${want}`);
      if (dim !== f.dimension) throw verifyError(`source ${name}: table ${tableOf(f)} has vector dimension ${dim ?? "none"}, manifest says ${f.dimension ?? "none"}`);
    }
    return `${files.length} table(s) readable; row counts and vector dimensions match`;
  },

  async occupant(folder) {
    // what it holds (the caller names the folder): "the folder holds 2 entries"
    const n = existsSync(folder) ? readdirSync(folder).length : 0;
    return n ? `the folder holds ${n} ${n === 1 ? "entry" : "entries"}` : null;
  },

  async restore(name, files, folder) {
    const records: Record<string, number> = {};
    const dimensions: Record<string, number> = {};
    try {
      const db = await (await load()).lancedb.connect(folder);
      for (const f of files) {
        const table = tableOf(f);
        const reader = await openStream(f.file);
        const t = await db.createEmptyTable(table, reader.schema);
        for await (const b of reader) if (b.numRows) await t.add(new (A().Table)(b));
        records[table] = await t.countRows();
        const dim = vectorDimension(await t.schema());
        if (dim !== undefined) dimensions[table] = dim;
        t.close();
        if (records[table] !== f.records[table]) throw verifyError(`table ${table} has ${records[table]} rows after the restore, manifest says ${f.records[table]}`);
      }
      db.close();
    } catch (e) {
      throw sourceError(name, e);
    }
    return { records, skipped: [], dimensions, detail: `${files.length} table(s) restored; row counts match the manifest` };
  },

  async throwaway(dir) {
    // an embedded store: the drill's own folder is the throwaway target
    return { target: join(dir, "lancedb"), stop: async () => undefined };
  },
};

/**
 * The vectors of a captured table's Arrow stream (`file`, as capture staged it): each row's id and its `column`
 * vector, for recall parity's exact search over the captured image; rows whose vector is null are counted.
 * @throws Error naming a missing column, or a column that is not a fixed-size list
 */
export async function arrowVectors(file: string, column: string, id: string): Promise<{ ids: (string | number)[]; vectors: Float32Array[]; dimension: number; nulls: number }> {
  await load();
  const reader = await openStream(file);
  const f = reader.schema.fields.find((x) => x.name === column);
  if (!f) throw new Error(`no column ${column}`);
  if (!A().DataType.isFixedSizeList(f.type)) throw new Error(`column ${column} is not a vector (fixed-size list)`);
  if (!reader.schema.fields.some((x) => x.name === id)) throw new Error(`no id column ${id}`);
  const dimension = (f.type as import("apache-arrow").FixedSizeList).listSize;
  const ids: (string | number)[] = [];
  const vectors: Float32Array[] = [];
  let nulls = 0;
  for await (const b of reader) {
    const vc = b.getChild(column)!;
    const ic = b.getChild(id)!;
    for (let r = 0; r < b.numRows; r++) {
      const v = vc.get(r) as { toArray(): ArrayLike<number> } | null;
      if (v === null) {
        nulls++;
        continue;
      }
      const key = ic.get(r) as unknown;
      ids.push(typeof key === "bigint" ? Number(key) : typeof key === "number" ? key : String(key));
      vectors.push(Float32Array.from(v.toArray()));
    }
  }
  return { ids, vectors, dimension, nulls };
}

/** A restored LanceDB table asked through LanceDB's own query path (recall parity's drill side). */
export interface LanceTable {
  /** the vector of the row whose `id` column is `key`, or null when no such row (or it has none) */
  vectorOf(key: string | number): Promise<Float32Array | null>;
  /** LanceDB's `vectorSearch(v).distanceType(metric).limit(k)`: ids and vectors, nearest first */
  search(v: Float32Array, k: number, metric: "l2" | "cosine"): Promise<{ id: string | number; vector: Float32Array | null }[]>;
  /** rows whose vector column is null */
  nulls(): Promise<number>;
  close(): void;
}

/** Opens `table` of the LanceDB folder `folder` for recall queries. @throws Error (LanceDB's) when it is not there */
export async function openLanceTable(folder: string, table: string, column: string, id: string): Promise<LanceTable> {
  const db = await (await load()).lancedb.connect(folder);
  const t = await db.openTable(table).catch((e) => {
    db.close();
    throw e;
  });
  const lit = (k: string | number) => (typeof k === "number" ? String(k) : `'${k.replace(/'/g, "''")}'`);
  const row = (r: Record<string, unknown>) => {
    const k = r[id];
    const v = r[column] as { toArray?(): ArrayLike<number> } | ArrayLike<number> | null | undefined;
    return { id: typeof k === "bigint" ? Number(k) : typeof k === "number" ? k : String(k), vector: v ? Float32Array.from("toArray" in v && v.toArray ? v.toArray() : (v as ArrayLike<number>)) : null };
  };
  return {
    async vectorOf(key) {
      const rows = (await t.query().where(`\`${id}\` = ${lit(key)}`).select([id, column]).limit(1).toArray()) as Record<string, unknown>[];
      return rows[0] ? row(rows[0]).vector : null;
    },
    async search(v, k, metric) {
      const rows = (await t.vectorSearch(Array.from(v)).column(column).distanceType(metric).limit(k).toArray()) as Record<string, unknown>[];
      return rows.map(row);
    },
    nulls: () => t.countRows(`\`${column}\` IS NULL`),
    close() {
      t.close();
      db.close();
    },
  };
}
