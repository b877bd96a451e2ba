/**
 * The layers of src/, held by a lint that runs with the tests (npm test). Each
 * rule is a layer and what it may import; there is no list of files let through.
 *
 *   base (errors, facts, fsutil, cleanup, contained, crashpoint, duration, home, optional, progress, version, zod, limit) -> nothing of ours
 *   crypto, storage, state          -> base only
 *   config                          -> base, crypto, storage
 *   chunks (content-defined chunks) -> base, crypto, storage
 *   bundle                          -> base, crypto, state (never config: DESIGN)
 *   repository                      -> base, storage, crypto, state, bundle, config, chunks
 *   reconcile                       -> base, state, config (probes and outcome SQL, shared by restore and drill)
 *   fleet                           -> base, config (the host file, the scheduler, the fleet statistic: pure parts)
 *   capture, restore, drill         -> the layers above (drill: and fleet); never each other
 *   status (what status, the page and /metrics show) -> the layers above and restore, drill (reads only)
 *   agentapi (MCP and HTTP)         -> the stages, status and below; only commands (and ui, for result types) import it
 *   commands                        -> anything below; never ui or a terminal library (cli.ts passes prompts in)
 *   ui                              -> the stages' and agentapi's result types; never commands; the only
 *                                      importer of @inquirer/prompts, chalk and ora (the only terminal writer)
 *   cli.ts                          -> commands, ui; main.ts -> cli.ts, ui (and bundle: verify's early worker)
 *
 * Inside state/, wings with one job each, calls in one direction:
 *   sqlite/ (SQLite files and connections) <- secrets/, pages/ <- inspect/;
 *   secrets/ <- workspace/; sources/ alone; the root files (discover, watermark)
 *   read sqlite/ at most. The page engine (pages/) is seen from outside through
 *   pages/index.ts only, and inside it delta.ts, snapshot.ts -> blocks.ts, pageindex.ts.
 */
const BASE = "^src/(errors|facts|fsutil|cleanup|contained|crashpoint|duration|home|optional|progress|version|zod|limit)\\.ts$";
const layer = (name, allowed) => ({
  name: `${name}-imports-only-${allowed.join("-") || "base"}`,
  severity: "error",
  comment: `src/${name} may import only base modules${allowed.length ? " and " + allowed.join(", ") : ""}`,
  from: { path: `^src/${name}/` },
  to: { path: "^src/", pathNot: [BASE, `^src/${name}/`, ...allowed.map((a) => `^src/${a}/`)] },
});
/** A wing of state/: it may import only the wings named (and base, by the state layer). */
const wing = (name, allowed) => ({
  name: `state-${name}-imports-only-${allowed.join("-") || "itself"}`,
  severity: "error",
  comment: `src/state/${name}/ may import only ${allowed.length ? allowed.map((a) => `state/${a}/`).join(", ") : "itself"} of state/`,
  from: { path: `^src/state/${name}/` },
  to: { path: "^src/state/", pathNot: [`^src/state/${name}/`, ...allowed.map((a) => `^src/state/${a}/`)] },
});
const ALL_BELOW_COMMANDS = ["storage", "crypto", "chunks", "state", "bundle", "config", "repository", "reconcile", "fleet", "capture", "restore", "drill", "status", "agentapi"];

module.exports = {
  forbidden: [
    {
      name: "base-imports-no-layer",
      severity: "error",
      comment: "base modules (errors, facts, fsutil, cleanup, contained, crashpoint, duration, home, optional, progress, version, zod, limit) import no layer",
      from: { path: BASE },
      to: { path: "^src/", pathNot: BASE },
    },
    layer("crypto", []),
    layer("storage", []),
    layer("state", []),
    layer("config", ["crypto", "storage"]),
    layer("chunks", ["crypto", "storage"]),
    layer("bundle", ["crypto", "state"]),
    layer("repository", ["storage", "crypto", "state", "bundle", "config", "chunks"]),
    layer("reconcile", ["state", "config"]),
    layer("fleet", ["config"]),
    layer("capture", ["storage", "crypto", "state", "bundle", "config", "repository", "chunks"]),
    layer("restore", ["storage", "crypto", "state", "bundle", "config", "repository", "reconcile", "chunks"]),
    layer("drill", ["storage", "crypto", "state", "bundle", "config", "repository", "reconcile", "fleet", "chunks"]),
    layer("status", ["storage", "crypto", "state", "bundle", "config", "repository", "reconcile", "restore", "drill", "fleet", "chunks"]),
    layer("agentapi", ["storage", "crypto", "state", "bundle", "config", "repository", "reconcile", "capture", "restore", "status", "chunks"]),
    layer("commands", ALL_BELOW_COMMANDS),
    layer("ui", ["crypto", "state", "bundle", "config", "repository", "reconcile", "capture", "restore", "drill", "status", "agentapi"]),
    {
      name: "cli-imports-only-commands-ui",
      severity: "error",
      comment: "the command table: each action imports its command and renders through ui/",
      from: { path: "^src/cli\\.ts$" },
      to: { path: "^src/", pathNot: [BASE, "^src/commands/", "^src/ui/"] },
    },
    {
      name: "main-imports-only-cli-ui-bundle",
      severity: "error",
      comment: "the entry point: the command table, ui/ to escape what it prints, and bundle/ to start verify's digest worker before the command loads",
      from: { path: "^src/main\\.ts$" },
      to: { path: "^src/", pathNot: [BASE, "^src/cli\\.ts$", "^src/ui/", "^src/bundle/"] },
    },
    {
      name: "only-commands-and-ui-import-agentapi",
      severity: "error",
      comment: "the agent interface is an outer layer like commands: stages never import it",
      from: { path: "^src/", pathNot: "^src/(commands|agentapi|ui)/" },
      to: { path: "^src/agentapi/" },
    },
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
    {
      name: "only-ui-imports-terminal-libraries",
      severity: "error",
      comment: "only ui/ writes to the terminal (prompts, spinners, colour): a command takes its prompts from cli.ts and returns a value",
      from: { path: "^src/", pathNot: "^src/ui/" },
      to: { path: "node_modules/(@inquirer/[^/]+|chalk|ora)/" },
    },
    wing("sqlite", []),
    wing("secrets", ["sqlite"]),
    wing("pages", ["sqlite"]),
    wing("inspect", ["sqlite", "secrets", "pages"]),
    wing("workspace", ["secrets"]),
    wing("sources", []),
    {
      name: "state-root-files-import-only-sqlite",
      severity: "error",
      comment: "state/'s root files (discover, watermark) belong to no wing: they read sqlite/ at most, and no wing imports them",
      from: { path: "^src/state/[^/]+\\.ts$" },
      to: { path: "^src/state/", pathNot: "^src/state/sqlite/" },
    },
    {
      name: "no-wing-imports-state-root-files",
      severity: "error",
      from: { path: "^src/state/[^/]+/" },
      to: { path: "^src/state/[^/]+\\.ts$" },
    },
    {
      name: "pages-seen-through-its-front",
      severity: "error",
      comment: "the page engine's front is state/pages/index.ts; the rest of the house never imports its insides",
      from: { path: "^src/", pathNot: "^src/state/pages/" },
      to: { path: "^src/state/pages/", pathNot: "^src/state/pages/index\\.ts$" },
    },
    {
      name: "pages-one-direction",
      severity: "error",
      comment: "inside the page engine: pageindex.ts and blocks.ts import no other file of it (delta.ts imports both), and none imports its front",
      from: { path: "^src/state/pages/(pageindex|blocks)\\.ts$" },
      to: { path: "^src/state/pages/" },
    },
    {
      name: "pages-insides-never-import-the-front",
      severity: "error",
      from: { path: "^src/state/pages/(?!index\\.ts$)" },
      to: { path: "^src/state/pages/index\\.ts$" },
    },
    { name: "no-circular", severity: "error", from: {}, to: { circular: true } },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    exclude: { path: "^src/tools/" },
  },
};
