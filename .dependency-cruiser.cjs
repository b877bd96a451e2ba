/**
 * The layers of src/, held by a lint that runs with the tests (npm test):
 *
 *   base (errors, facts, fsutil, cleanup, contained, crashpoint, version, zod)
 *   crypto, storage, state          -> base only (and config for schema checks: none)
 *   config                          -> base, crypto, storage
 *   chunks (content-defined chunks) -> base, crypto, storage
 *   bundle                          -> base, crypto, state, config
 *   repository                      -> base, storage, crypto, bundle, config, chunks
 *   reconcile                       -> base, state, config (probes and outcome SQL, shared by restore and drill)
 *   capture, restore, drill         -> the layers above; never each other
 *   agentapi (MCP and HTTP)         -> the stages and below; only commands import it
 *   commands                        -> anything below; ui never imports commands
 *   cli -> commands, ui; main -> cli
 */
const BASE = "^src/(errors|facts|fsutil|cleanup|contained|crashpoint|version|zod)\\.ts$";
const layer = (name, allowed) => ({
  name: `${name}-imports-only-${allowed.join("-") || "base"}`,
  severity: "error",
  comment: `src/${name} may import only base modules${allowed.length ? " and " + allowed.join(", ") : ""}`,
  from: { path: `^src/${name}/` },
  to: { path: "^src/", pathNot: [BASE, `^src/${name}/`, ...allowed.map((a) => `^src/${a}/`)] },
});

module.exports = {
  forbidden: [
    {
      name: "base-imports-no-layer",
      severity: "error",
      comment: "base modules (errors, facts, fsutil, cleanup, contained, crashpoint, version, zod) import no layer",
      from: { path: BASE },
      to: { path: "^src/", pathNot: BASE },
    },
    layer("crypto", []),
    layer("storage", []),
    layer("state", []),
    layer("config", ["crypto", "storage"]),
    layer("chunks", ["crypto", "storage"]),
    layer("bundle", ["crypto", "state", "config"]),
    layer("repository", ["storage", "crypto", "state", "bundle", "config", "chunks"]),
    layer("reconcile", ["state", "config"]),
    layer("capture", ["storage", "crypto", "state", "bundle", "config", "repository", "chunks"]),
    layer("restore", ["storage", "crypto", "state", "bundle", "config", "repository", "reconcile", "chunks"]),
    layer("drill", ["storage", "crypto", "state", "bundle", "config", "repository", "reconcile", "chunks"]),
    layer("agentapi", ["storage", "crypto", "state", "bundle", "config", "repository", "reconcile", "capture", "restore", "chunks"]),
    {
      name: "only-commands-import-agentapi",
      severity: "error",
      comment: "the agent interface is an outer layer like commands: stages never import it",
      from: { path: "^src/", pathNot: "^src/(commands|agentapi)/" },
      to: { path: "^src/agentapi/" },
    },
    layer("ui", ["crypto", "state", "bundle", "config", "repository", "reconcile", "capture", "restore", "drill"]),
    {
      name: "only-cli-imports-commands",
      severity: "error",
      from: { path: "^src/", pathNot: "^src/(cli\\.ts|commands/)" },
      to: { path: "^src/commands/" },
    },
    {
      name: "only-main-imports-cli",
      severity: "error",
      from: { path: "^src/", pathNot: "^src/main\\.ts$" },
      to: { path: "^src/cli\\.ts$" },
    },
    { name: "no-circular", severity: "error", from: {}, to: { circular: true, dependencyTypesNot: ["type-only"] } },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    exclude: { path: "^src/tools/" },
  },
};
