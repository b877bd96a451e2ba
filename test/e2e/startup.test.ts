// Start-up (issue 35): the real binary loads only what a command needs. A
// module-loader hook records every module node loads, and for each file of the
// packed CLI (dist/packed) the sources esbuild put in it (its "// path"
// markers), so a heavy module pulled in eagerly again fails here whatever the
// machine's load (the times themselves are in `npm run bench -- --only startup`).
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import Database from "better-sqlite3";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { json, makeAgent, STORE, type TestAgent } from "../helpers.js";
import { patchConfig, server, sql } from "../sourcekit.js";

let a: TestAgent;
let hook: string;
beforeAll(async () => {
  a = await makeAgent();
  // the hook: each module's URL, and the sources of each packed file, one line each, into $LOADED
  writeFileSync(
    join(a.tmp, "hooks.mjs"),
    `import { appendFileSync } from "node:fs";
export async function load(url, context, next) {
  const r = await next(url, context);
  const text = r.source ? String(r.source) : "";
  const inside = [...text.matchAll(/^\\/\\/ ((?:dist|node_modules)\\/\\S+)$/gm)].map((m) => m[1]);
  appendFileSync(process.env.LOADED, [url, ...inside].join("\\n") + "\\n");
  return r;
}
`,
  );
  hook = join(a.tmp, "register.mjs");
  // and, at exit, Node's own modules loaded (process.moduleLoadList: "NativeModule internal/deps/undici/undici", ...)
  writeFileSync(
    hook,
    `import { register } from "node:module"; import { appendFileSync } from "node:fs"; register(${JSON.stringify(`file://${join(a.tmp, "hooks.mjs")}`)});
process.on("exit", () => appendFileSync(process.env.LOADED, process.moduleLoadList.join("\\n") + "\\n"));\n`,
  );
}, 120_000);
afterAll(() => a?.cleanup());

/** Runs agentbak under the hook. @returns its result and what it loaded (URLs and bundled sources). */
async function loaded(args: string[], name: string, env: Record<string, string> = {}) {
  const file = join(a.tmp, `loaded-${name}.txt`);
  writeFileSync(file, "");
  const r = await a.run(args, { LOADED: file, ...env }, { nodeArgs: ["--import", hook] });
  return { r, modules: readFileSync(file, "utf8").split("\n").filter(Boolean) };
}
const matching = (modules: string[], re: RegExp) => modules.filter((m) => re.test(m));

describe.skipIf(STORE !== "local")("what a command loads", () => {
  it("--version: the entry and its few base modules; no commander, command table, config, schema or repository code", async () => {
    const { r, modules } = await loaded(["--version"], "version");
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe(JSON.parse(readFileSync(join(import.meta.dirname, "../../package.json"), "utf8")).version);
    expect(matching(modules, /dist\/main\.js$/)).not.toEqual([]); // the hook saw the packed entry
    expect(matching(modules, /^dist\/(cli\.js|commands\/|config\/|repository\/|capture\/|bundle\/)|node_modules\/(zod|commander)\//)).toEqual([]);
  });

  it("snapshots: the repository listing without the bundle reader (tar, age, worker threads) or the page engine", async () => {
    expect((await a.run(["backup"])).code).toBe(0);
    const { r, modules } = await loaded(["snapshots", "--json"], "snapshots");
    expect(r.code, r.stderr).toBe(0);
    expect(json(r)).not.toEqual([]);
    expect(matching(modules, /^dist\/repository\/repository\.js$/)).not.toEqual([]);
    expect(matching(modules, /^dist\/bundle\/header\.js$/)).not.toEqual([]);
    expect(matching(modules, /node_modules\/(tar-stream|streamx|execa|better-sqlite3)\/|^dist\/bundle\/(reader|plaintext|writer)\.js$|^dist\/state\/pages\/|^node:worker_threads$/)).toEqual([]);
  });

  it("restore of a database-only agent (no sources, credentials, open operations or workspace): no execa, source drivers, credential checker, reconcile probes or workspace code", async () => {
    // an agent of one SQLite database, as the bench's ledger and blobs shapes (the test agent has all four of the others)
    const dir = join(a.tmp, "db-only");
    mkdirSync(join(dir, "state"), { recursive: true });
    const db = new Database(join(dir, "state/ledger.sqlite"));
    db.exec("CREATE TABLE ledger (id INTEGER PRIMARY KEY, memo TEXT); CREATE INDEX ledger_memo ON ledger (memo)");
    const insert = db.prepare("INSERT INTO ledger (memo) VALUES (?)");
    db.transaction(() => {
      for (let i = 0; i < 5000; i++) insert.run(`entry ${i}`);
    })();
    db.close();
    const config = join(dir, "agentbak.json");
    writeFileSync(config, JSON.stringify({ agent: { id: "db-only", tenant: "t1" }, repository: a.repo, recipients: [a.recipient], databases: [{ name: "ledger", path: "state/ledger.sqlite" }], files: [], credentials: [] }));
    const env = { AGENTBAK_CONFIG: config };
    const backup = await a.run(["backup", "--json"], env);
    expect(backup.code, backup.stderr).toBe(0);
    const target = join(a.tmp, "db-only-restored");
    const { r, modules } = await loaded(["restore", "latest", "--target", target, "--yes", "--json"], "restore", env);
    expect(r.code, r.stderr).toBe(0);
    expect(json(r).restored).toBe(true);
    const restored = new Database(join(target, "state/ledger.sqlite"), { readonly: true });
    expect(restored.prepare("SELECT count(*) AS n, max(memo) AS last FROM ledger").get()).toEqual({ n: 5000, last: "entry 999" });
    restored.close();
    // the hook saw restore's own modules (each once: esbuild names a module again where its node: imports are hoisted apart)
    expect(new Set(matching(modules, /^dist\/bundle\/(reader|plaintext|extract)\.js$/)).size).toBe(3);
    expect(matching(modules, /node_modules\/(execa|cross-spawn|signal-exit)\/|^dist\/state\/(sources\/(index|common|postgres|redis|lancedb)|secrets\/credentials|workspace\/workspace)\.js$|^dist\/reconcile\/|^dist\/contained\.js$/)).toEqual([]);
  });

  it("backup --skip-if-unchanged with nothing changed: the fingerprint's modules, none of the capture's (SQLite, execa, the bundle writer, the inspection)", async () => {
    const first = json(await a.run(["backup", "--skip-if-unchanged", "--json"]));
    expect(first.status).toBe("committed");
    const { r, modules } = await loaded(["backup", "--skip-if-unchanged", "--json"], "unchanged");
    expect(r.code, r.stderr).toBe(0);
    expect(json(r)).toMatchObject({ status: "unchanged", snapshot_id: first.snapshot_id });
    expect(matching(modules, /^dist\/capture\/unchanged\.js$/)).not.toEqual([]);
    expect(matching(modules, /node_modules\/(better-sqlite3|execa|tar-stream|zstd-napi)\/|^dist\/capture\/(take|instant|databases)\.js$|^dist\/bundle\/(writer|reader)\.js$|^dist\/state\/inspect\/|^node:worker_threads$/)).toEqual([]);
    // and a change still takes a snapshot, through the modules loaded then
    writeFileSync(join(a.dir, "workspace/notes.txt"), "changed after the unchanged run\n");
    const changed = await loaded(["backup", "--skip-if-unchanged", "--json"], "changed");
    expect(json(changed.r).status).toBe("committed");
    expect(matching(changed.modules, /^dist\/capture\/take\.js$/)).not.toEqual([]);
  });

  it("backup --skip-if-unchanged with a LanceDB source and nothing changed: LanceDB (native) and Arrow are not loaded; a new row is still seen", async () => {
    const lancedb = await import("@lancedb/lancedb");
    const folder = join(a.dir, "memory/lance");
    const db = await lancedb.connect(folder);
    await db.createTable("memories", Array.from({ length: 200 }, (_, i) => ({ id: i, text: `memory ${i}`, vector: [i % 7, i % 5] })));
    db.close();
    patchConfig(a, (c) => (c.sources = [{ name: "mem", kind: "lancedb", path: "memory/lance" }]));
    const first = json(await a.run(["backup", "--skip-if-unchanged", "--json"]));
    expect(first.status).toBe("committed");
    const { r, modules } = await loaded(["backup", "--skip-if-unchanged", "--json"], "lance-unchanged");
    expect(r.code, r.stderr).toBe(0);
    expect(json(r)).toMatchObject({ status: "unchanged", snapshot_id: first.snapshot_id });
    expect(matching(modules, /^dist\/state\/sources\/lancedb\.js$/)).not.toEqual([]); // the driver's fingerprint ran
    expect(matching(modules, /node_modules\/(@lancedb|apache-arrow)\/|node_modules\/pg\//)).toEqual([]);
    // a row added through LanceDB (a new version: a new manifest and data file) is a change: captured, with LanceDB loaded
    const db2 = await lancedb.connect(folder);
    await (await db2.openTable("memories")).add([{ id: 999, text: "a new memory", vector: [1, 1] }]);
    db2.close();
    const changed = await loaded(["backup", "--skip-if-unchanged", "--json"], "lance-changed");
    expect(changed.r.code, changed.r.stderr).toBe(0);
    expect(json(changed.r).status).toBe("committed");
    expect(matching(changed.modules, /node_modules\/@lancedb\/lancedb\//)).not.toEqual([]);
  }, 180_000);

  it("backup --skip-if-unchanged with a PostgreSQL source and nothing changed: pg loads for the fingerprint, Node's fetch (undici, pg's Cloudflare probe) does not", async () => {
    const live = await server("postgres", a.tmp);
    try {
      await sql(live.target, "CREATE TABLE notes (id bigserial PRIMARY KEY, body text NOT NULL) WITH (autovacuum_enabled = false); INSERT INTO notes (body) VALUES ('one')");
      await sql(live.target, "VACUUM ANALYZE"); // no autovacuum takes a transaction id between the backups
      patchConfig(a, (c) => (c.sources = [{ name: "conversations", kind: "postgres", url: "env:AGENT_PG_URL" }]));
      const env = { AGENT_PG_URL: live.target };
      const first = json(await a.run(["backup", "--skip-if-unchanged", "--json"], env));
      expect(first.status).toBe("committed");
      const { r, modules } = await loaded(["backup", "--skip-if-unchanged", "--json"], "pg-unchanged", env);
      expect(r.code, r.stderr).toBe(0);
      expect(json(r)).toMatchObject({ status: "unchanged", snapshot_id: first.snapshot_id });
      expect(matching(modules, /node_modules\/pg\//)).not.toEqual([]); // the fingerprint loaded pg (and connected)
      expect(matching(modules, /^NativeModule /)).not.toEqual([]); // the exit hook saw Node's list
      expect(matching(modules, /undici/)).toEqual([]);
      expect(modules.filter((m) => m.includes("navigator"))).toEqual([]);
      await sql(live.target, "INSERT INTO notes (body) VALUES ('two')");
      expect(json(await a.run(["backup", "--skip-if-unchanged", "--json"], env)).status).toBe("committed");
    } finally {
      await live.stop();
    }
  }, 180_000);
});
