import { build } from "esbuild";
const noLocales = { name: "no-locales", setup(b) { b.onResolve({ filter: /locales\/index\.js$/ }, (a) => ({ path: a.path, namespace: "nl" })); b.onLoad({ filter: /.*/, namespace: "nl" }, () => ({ contents: "export {}", loader: "js" })); } };
await build({ entryPoints: [".tmpz/zo.mjs"], bundle: true, format: "esm", platform: "node", outfile: "/tmp/zo-nl.out.mjs", plugins: [noLocales], logLevel: "warning" });
await build({ entryPoints: [".tmpz/zo.mjs"], bundle: true, format: "esm", platform: "node", outfile: "/tmp/zo-min.out.mjs", minify: true, logLevel: "warning" });
