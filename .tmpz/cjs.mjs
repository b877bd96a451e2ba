import { build } from "esbuild";
const noLocales = { name: "no-locales", setup(b) { b.onResolve({ filter: /zod\/v4\/locales\/index\.js$/ }, (a) => ({ path: a.path, namespace: "nl" })); b.onLoad({ filter: /.*/, namespace: "nl" }, () => ({ contents: "export {}", loader: "js" })); } };
await build({
  entryPoints: { main: "dist/main.js" }, outdir: ".tmpz/cjs", bundle: true, format: "cjs", platform: "node", target: "node20", logLevel: "warning",
  external: ["better-sqlite3", "zstd-napi", "@lancedb/lancedb", "apache-arrow", "node-pty", "@aws-sdk/*", "@smithy/*", "pg", "ioredis"],
  define: { "import.meta.url": "__agentbakUrl" },
  banner: { js: "var __agentbakUrl = require('node:url').pathToFileURL(__filename).href;" },
  outExtension: { ".js": ".cjs" },
  plugins: process.env.NL ? [noLocales] : [],
});
