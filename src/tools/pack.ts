/**
 * `npm run build`, second step: packs the tsc output into a few files with
 * esbuild (the CLI's entry, the inspection worker, and one chunk per lazily
 * loaded command), so a command loads one module graph of a few files instead
 * of ~400 (Node 20 has no compile cache; resolving and reading the files was
 * a third of `snapshots`' time). Native and rarely used heavy packages stay
 * outside and load from node_modules when a command needs them. So the
 * bundled packages are the build's input, dev dependencies: an installed
 * agentbak has only the external ones (package.json's dependencies).
 */
import { build, type Plugin } from "esbuild";
import { rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(fileURLToPath(import.meta.url), "../../..");

/**
 * zod's `locales` namespace (error messages in 40-odd languages, 1.6 MB of
 * source) is re-exported whole by `zod` and so bundled into every command
 * that validates a config; agentbak never reads it (English is zod's default,
 * set from its own import of locales/en.js). Resolved to an empty module, the
 * commands start faster: measured in the commit that added this.
 */
const zodWithoutLocales: Plugin = {
  name: "zod-without-locales",
  setup(b) {
    b.onResolve({ filter: /^\.\.\/locales\/index\.js$/ }, (a) => (a.importer.includes(`${"/node_modules/zod/"}`) ? { path: "zod-locales", namespace: "empty" } : undefined));
    b.onLoad({ filter: /.*/, namespace: "empty" }, () => ({ contents: "export {};", loader: "js" }));
  },
};
/**
 * Classic zod stays in node_modules: the agent interface (its schemas go to
 * @hono/zod-openapi and the MCP SDK, which take classic schemas) and those
 * packages load it from there when `serve` or `mcp` starts. Bundled, classic
 * zod shares zod's core with the CLI's zod/mini schemas, and esbuild put all
 * of core (303 KB) in the chunk every command loads; without it the chunk
 * holds only what zod/mini uses: measured in the commit that added this.
 * The CLI's own `zod/mini` imports are bundled.
 */
const classicZodOutside: Plugin = {
  name: "classic-zod-outside",
  setup(b) {
    b.onResolve({ filter: /^zod(\/.*)?$/ }, (a) => (a.path === "zod" || a.importer.includes(`${"/node_modules/"}`) && !a.importer.includes(`${"/node_modules/zod/"}`) ? { path: a.path, external: true } : undefined));
  },
};
const out = join(root, "dist", "packed");
rmSync(out, { recursive: true, force: true });
const { metafile } = await build({
  entryPoints: { main: join(root, "dist", "main.js"), "inspect-worker": join(root, "dist", "state", "inspect", "worker.js"), "payload-worker": join(root, "dist", "bundle", "payload-worker.js"), "digest-worker": join(root, "dist", "bundle", "digest-worker.js") },
  outdir: out,
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  target: "node20",
  logLevel: "warning",
  // native addons, and packages only a source or S3 repository loads (large, and loaded lazily anyway)
  external: ["better-sqlite3", "zstd-napi", "@lancedb/lancedb", "apache-arrow", "sqlite-vec", "node-pty", "@aws-sdk/*", "@smithy/*", "pg", "ioredis"],
  plugins: [zodWithoutLocales, classicZodOutside],
  // CommonJS packages inside an ES module bundle call require() for Node's own modules
  banner: { js: "import { createRequire as __agentbakRequire } from 'node:module'; const require = __agentbakRequire(import.meta.url);" },
  metafile: true,
});
// what each packed file imports from outside it: test/e2e/dependencies.test.ts holds package.json's
// dependencies to exactly the packages left external (the bundled ones are the build's input, dev dependencies)
writeFileSync(join(root, "dist", "packed-meta.json"), JSON.stringify(metafile));
