/**
 * LanceDB as a state source: every table of the folder read at one pinned
 * table version through the library and streamed as an Arrow IPC stream
 * (row count and vector dimension recorded); restored by writing the tables
 * into an empty folder and counting them there.
 */
import { createReadStream, createWriteStream, existsSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { AgentbakError, Exit, verifyError } from "../../errors.js";
import { sourceError, type SourceDriver, type SourceFile } from "./common.js";

/** The library, loaded on first use: its native module is not needed by agents without a LanceDB source. */
const lib = () => import("@lancedb/lancedb");
// LanceDB hands out RecordBatches of the CommonJS build of apache-arrow; mixing in the ES module build breaks instanceof
let arrowLib: typeof import("apache-arrow") | undefined;
const A = () => (arrowLib ??= createRequire(import.meta.url)("apache-arrow") as typeof import("apache-arrow"));
type Schema = import("apache-arrow").Schema;

/** The dimension of a schema's vector column: the fixed-size list named "vector", else the first fixed-size list. */
export function vectorDimension(schema: Schema): number | undefined {
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

export const lancedbDriver: SourceDriver = {
  async capture(spec, folder, dir) {
    try {
      if (!existsSync(folder)) throw new AgentbakError(Exit.notFound, `${folder} not found`);
      const db = await (await lib()).connect(folder);
      const names = (await db.tableNames()).sort();
      const at = new Date();
      const files = [];
      for (const name of names) {
        const t = await db.openTable(name);
        // pinned: rows a writer adds from now on belong to a later version and are not read
        const version = await t.version();
        await t.checkout(version);
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
        files.push({ path: `sources/${spec.name}/${name}.arrows`, file, records: { [name]: rows }, table_version: version, ...(dimension ? { dimension } : {}) });
      }
      db.close();
      return { snapshotAt: at, serverVersion: null, files };
    } catch (e) {
      throw sourceError(spec.name, e);
    }
  },

  async check(name, files) {
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
      const db = await (await lib()).connect(folder);
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
