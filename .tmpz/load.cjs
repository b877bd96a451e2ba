const vm = require("node:vm"), fs = require("node:fs"), path = require("node:path"), Module = require("node:module");
const file = path.join(__dirname, "cjs", "main.cjs");
const cacheFile = file + ".v8cache";
const src = fs.readFileSync(file, "utf8");
let cachedData; try { cachedData = fs.readFileSync(cacheFile); } catch {}
const script = new vm.Script(Module.wrap(src), { filename: file, cachedData, importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER });
if (process.env.SHOWCACHE) console.error("rejected", script.cachedDataRejected, "had", !!cachedData);
const fn = script.runInThisContext();
const m = { exports: {} };
fn.call(m.exports, m.exports, Module.createRequire(file), m, file, path.dirname(file));
if (process.env.MAKECACHE) process.on("exit", () => fs.writeFileSync(cacheFile, script.createCachedData()));
