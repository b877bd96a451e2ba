// package.json's dependencies are exactly what an installed agentbak loads
// from node_modules: the packages the packed CLI (dist/packed, made by
// src/tools/pack.ts, which writes dist/packed-meta.json) leaves external or
// loads with createRequire, and those the reference agent imports
// (fixtures/agent, run by the shipped drills). What esbuild bundled is the
// build's input, a dev dependency: as a dependency it was installed for
// nothing (the MCP SDK, Hono, tar-stream's bare-* packages: ~35 MB of a global
// install, issue 34 point 8). A package left external but not a dependency
// would be missing from an install (test/e2e/install.test.ts runs a few
// commands of one; this covers every import of the packed CLI).
import { readdirSync, readFileSync } from "node:fs";
import { isBuiltin } from "node:module";
import { join } from "node:path";
import { expect, it } from "vitest";
import { ROOT } from "../helpers.js";

type Meta = { outputs: Record<string, { imports: { path: string; external?: boolean }[] }> };
const read = (f: string) => readFileSync(join(ROOT, f), "utf8");
/** the package a specifier names: `zod/v4-mini` is zod, `@aws-sdk/client-s3/x` is @aws-sdk/client-s3 */
const packageOf = (spec: string) => spec.split("/").slice(0, spec.startsWith("@") ? 2 : 1).join("/");

/** Packages the shipped code loads from node_modules (Node's own modules aside). */
function loaded(): Set<string> {
  const specs: string[] = [];
  const meta = JSON.parse(read("dist/packed-meta.json")) as Meta;
  for (const o of Object.values(meta.outputs)) specs.push(...o.imports.filter((i) => i.external).map((i) => i.path));
  for (const f of readdirSync(join(ROOT, "dist/packed")).filter((f) => f.endsWith(".js"))) {
    const text = read(`dist/packed/${f}`);
    specs.push(...[...text.matchAll(/createRequire\(import\.meta\.url\)\("([^"]+)"\)/g)].map((m) => m[1]!));
    // a require made once (`var require2 = createRequire(import.meta.url)`; the pack's banner's own is __agentbakRequire),
    // then called or asked to resolve: `require2("@aws-sdk/client-s3")`, `require2.resolve("@aws-sdk/lib-storage")`
    for (const [, name] of text.matchAll(/\b(?:var|const|let) (\w+) = createRequire\(import\.meta\.url\)/g))
      specs.push(...[...text.matchAll(new RegExp(`\\b${name}(?:\\.resolve)?\\("([^"]+)"\\)`, "g"))].map((m) => m[1]!));
  }
  for (const f of readdirSync(join(ROOT, "fixtures/agent")).filter((f) => f.endsWith(".js")))
    specs.push(...[...read(`fixtures/agent/${f}`).matchAll(/^import .* from "([^".][^"]*)";$/gm)].map((m) => m[1]!));
  return new Set(specs.filter((s) => !isBuiltin(s)).map(packageOf));
}

it("dependencies are the packages the packed CLI and the reference agent load from node_modules, optional peers aside (the bundled ones are dev dependencies)", () => {
  const pkg = JSON.parse(read("package.json")) as Record<string, Record<string, string>>;
  const found = loaded();
  expect(found).toContain("better-sqlite3"); // the reading itself works
  expect(found).toContain("zstd-napi"); // createRequire'd
  const peers = Object.keys(pkg.peerDependencies!);
  expect(peers.filter((p) => !found.has(p))).toEqual([]);
  expect([...found].filter((p) => !peers.includes(p)).sort()).toEqual(Object.keys(pkg.dependencies!).sort());
});
