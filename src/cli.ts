/**
 * The command table. Each action parses its flags, calls one command module
 * (imported lazily) and renders the returned value; it holds no logic.
 * Returns the exit code; only main.ts exits.
 */
import { Argument, Command, Option } from "commander";
import { TOOL_VERSION } from "./version.js";
import { Exit, usageError, type ExitCode } from "./errors.js";
import { bashCompletion, environmentText, exitCodesText, fishCompletion, HELP_TOPICS, manPage, walk, withExamples, withSuggestions, zshCompletion } from "./ui/help.js";
import type { Progress } from "./progress.js";

/** Adds a command's 1-3 examples to its --help and the man page; exit codes and environment are `agentbak help TOPIC`. */
const help = withExamples;
/** The drill specs shipped in drills/ (completion offers them after --spec; test/e2e/cli-help.test.ts checks the folder holds these) */
const SHIPPED_SPECS = ["checks-only", "integrity-only", "recovery", "reference-agent"];

const cfgOpt = () => new Option("-c, --config <file>", "config file (default: AGENTBAK_CONFIG, else ./agentbak.json)");
const targetCfgOpt = () => new Option("-c, --config <file>", "the agent's config (default: AGENTBAK_CONFIG, else the one the restore ran with)");
const repoOpt = () => new Option("--repo <path>", "repository (overrides AGENTBAK_REPOSITORY and config)");
const jsonOpt = () => new Option("--json", "machine-readable result on stdout");

/**
 * Writes a command's result: one JSON document on stdout with --json (an
 * object result always carries a `warnings` list), else the human rendering.
 */
async function show<R>(o: { json?: boolean }, r: R, human: (r: R) => void): Promise<void> {
  const ui = await import("./ui/output.js");
  if (o.json) ui.emitJson(r && typeof r === "object" && !Array.isArray(r) && !("warnings" in r) ? { ...r, warnings: [] } : r);
  else human(r);
}

const render = () => import("./ui/render.js");

/** Collects a repeatable option's values. */
const collect = (v: string, prev: string[]) => [...prev, v];

/**
 * Runs `fn` with a progress sink: a line on a TTY, JSON lines on stderr with
 * `--progress` off one, else none (ui/output.ts). The line is cleared when
 * `fn` ends, before its result or error is printed.
 */
async function withProgress<R>(o: { progress?: boolean }, fn: (progress: Progress, clear: () => void) => Promise<R>): Promise<R> {
  const ui = await import("./ui/output.js");
  const p = await ui.progressReporter(o.progress);
  let finished = false;
  try {
    // clear(): off the terminal line before a prompt (the next stage draws it again)
    const r = await fn(p.progress, () => p.stop(false));
    finished = true;
    return r;
  } finally {
    p.stop(finished);
  }
}
const progressOpt = () => new Option("--progress", "off a terminal: progress as JSON lines on stderr (stage, bytes, total); a terminal shows a progress line anyway");

/**
 * Builds the program: one function per command group, added in the order
 * `agentbak --help` lists them; `result` receives the exit code of the action that ran.
 */
export function buildProgram(result: { code: ExitCode }): Command {
  const program = new Command("agentbak")
    .description("Verified, policy-checked backups and recovery drills for autonomous AI agents")
    .version(TOOL_VERSION)
    .option("--no-color", "no colour in output (also NO_COLOR; FORCE_COLOR forces it)")
    .showHelpAfterError("(run with --help for usage)")
    .exitOverride()
    .hook("preAction", async () => (await import("./ui/output.js")).configureColor(program.opts().color === false));
  help(program, ["agentbak init --agent-id billing-agent --tenant acme --yes", "agentbak backup", "agentbak verify latest --identity ~/.config/agentbak/age-identity.txt"]).addHelpText(
    "after",
    "Exit codes: agentbak help exit-codes. Environment: agentbak help environment.\nMan page: agentbak man | man -l -. Completion: agentbak completion bash|zsh|fish.\n",
  );
  addSetupCommands(program, result);
  addBackupCommands(program, result);
  addRestoreCommands(program, result);
  addDrillCommands(program, result);
  addRepositoryCommands(program, result);
  addAgentInterface(program, result);
  program
    .command("config-schema")
    .description("print the JSON Schema of agentbak.json")
    .action(async () => {
      const { configSchema } = await import("./commands/schema.js");
      await show({ json: true }, configSchema(), () => undefined);
    });
  addHelpCommands(program);

  return program;
}

/** Help beyond --help, generated from this table: help TOPIC, man, completion. */
function addHelpCommands(program: Command): void {
  program.helpCommand(false);
  const out = async (text: string) => (await import("./ui/output.js")).out(text);
  help(
    program
      .command("help")
      .description(`help on a command, or a topic: ${Object.entries(HELP_TOPICS).map(([t, d]) => `${t} (${d})`).join(", ")}`)
      .argument("[topic...]", "a command (e.g. token create), exit-codes or environment"),
    ["agentbak help exit-codes", "agentbak help environment", "agentbak help restore"],
  ).action(async (topic: string[]) => {
    const t = topic.join(" ");
    if (t === "exit-codes") return out(exitCodesText());
    if (t === "environment") return out(environmentText());
    if (!t) return void program.outputHelp();
    const c = walk(program).find((x) => x.path === t);
    if (!c) throw usageError(`help: no command or topic "${t}" (topics: ${Object.keys(HELP_TOPICS).join(", ")}; commands: agentbak --help)`);
    c.cmd.outputHelp();
  });
  help(program.command("man").description("print the man page, agentbak(1), in roff"), ["agentbak man | man -l -", "agentbak man > ~/.local/share/man/man1/agentbak.1"]).action(() =>
    out(manPage(program, TOOL_VERSION)),
  );
  help(
    program
      .command("completion")
      .description("print a shell completion script (commands, options, choices)")
      .addArgument(new Argument("<shell>", "bash, zsh or fish").choices(["bash", "zsh", "fish"])),
    ["source <(agentbak completion bash)   # in ~/.bashrc", "agentbak completion fish > ~/.config/fish/completions/agentbak.fish"],
  ).action((shell: string) => out({ bash: bashCompletion, zsh: zshCompletion, fish: fishCompletion }[shell as "bash"](program)));
}

/** Setting up a host and an agent: keygen, init, key check. */
function addSetupCommands(program: Command, result: { code: ExitCode }): void {
  help(
    program
      .command("keygen")
      .description("generate an age identity and an Ed25519 signing key, and trust the signer")
      .option("--out <dir>", "folder for the key files (default AGENTBAK_HOME)")
      .option("--principal <name>", "principal for allowed_signers", "agentbak")
      .addOption(jsonOpt()),
    ["agentbak keygen --out ./keys --principal ops@acme"],
  ).action(async (o) => {
    const { keygen } = await import("./commands/keygen.js");
    await show(o, await keygen(o), (await render()).keygen);
  });

  help(
    program
      .command("init")
      .description("write agentbak.json (unless it exists), create the repository it names (idempotent), and generate keys if none")
      .option("--dir <dir>", "folder for agentbak.json (default: AGENTBAK_CONFIG's, else .)")
      .addOption(cfgOpt())
      .option("--agent-id <id>", "agent id")
      .option("--tenant <t>", "tenant")
      .option("--repo <path>", "repository: a folder (relative to the config) or s3://BUCKET/PREFIX (default ./backups)")
      .option("--database <name=path...>", "SQLite database(s) to back up")
      .option("--workspace <path>", "git workspace of the agent")
      .option("--leases <location>", "keep the repository's leases here (s3://BUCKET/PREFIX, unversioned): for a versioned bucket on Ceph RGW, whose conditional writes are not honoured")
      .option("-y, --yes", "accept defaults; never prompt")
      .addOption(jsonOpt()),
    [
      "agentbak init --agent-id billing-agent --tenant acme --database state=state/agent.sqlite --workspace workspace --yes",
      "agentbak init -c /srv/agents/billing/agentbak.json   # create the repository a hand-written config names",
      "agentbak init --repo s3://backups-locked/fleet --leases s3://backups-leases/fleet   # a versioned (Object Lock) bucket on Ceph",
    ],
  ).action(async (o) => {
    const { init } = await import("./commands/init.js");
    const { askChoices, askOne, askText } = await import("./ui/output.js");
    await show(o, await init({ ...o, ask: { askChoices, askOne, askText } }), (await render()).init);
  });

  const key = program.command("key").description("this host's keys");
  help(
    key
      .command("check")
      .description("list the identities, recipients and signers this host has, and whether a restore is possible from here (exit 0 yes; 12 a key or signer missing, 13 the latest snapshot does not verify)")
      .addOption(cfgOpt())
      .addOption(repoOpt())
      .option("--identity <file>", "age identity file (default AGENTBAK_IDENTITY, AGENTBAK_IDENTITY_FILE, AGENTBAK_HOME/age-identity.txt)")
      .option("--agent <id>", "agent (default: the config's)")
      .option("--tenant <t>", "tenant (default: the config's)")
      .addOption(jsonOpt()),
    ["agentbak key check", "AGENTBAK_HOME=/mnt/keys agentbak key check --repo s3://backups/fleet --tenant acme --agent billing-agent"],
  ).action(async (o) => {
    const { keyCheck } = await import("./commands/key.js");
    const r = await keyCheck(o);
    await show(o, r, (await render()).keyCheck);
    result.code = r.problems[0]?.code ?? (r.warnings.length ? Exit.warnings : Exit.ok);
  });
}

/** Taking and inspecting snapshots: backup, snapshots, verify. */
function addBackupCommands(program: Command, result: { code: ExitCode }): void {
  help(
    program
      .command("backup")
      .description("snapshot the agent's state into a signed, encrypted bundle")
      .addOption(cfgOpt())
      .addOption(repoOpt())
      .option("--idempotency-key <key>", "the same key again returns the first receipt")
      .option("--label <label>", "free-form label")
      .option("--wait <duration>", "wait this long for the repository lock (e.g. 30s)")
      .option("--incremental", "store only the SQLite pages changed since the latest snapshot (default: config incremental.enabled)")
      .option("--no-incremental", "force a full snapshot")
      .option("--skip-if-unchanged", "write no snapshot when nothing changed since this host's last one (databases, workspace, files, PostgreSQL and LanceDB sources, config); the receipt names that one")
      .option("--no-stat-cache", "with --skip-if-unchanged: read every file's content instead of trusting the stat cache (device, inode, size, mtime, ctime)")
      .addOption(progressOpt())
      .addOption(jsonOpt()),
    ["agentbak backup", "agentbak backup --incremental --skip-if-unchanged", "agentbak backup --idempotency-key \"$CI_JOB_ID\" --json"],
  ).action(async (o) => {
    const { backup } = await import("./commands/backup.js");
    const r = await withProgress(o, (progress) => backup({ ...o, progress }));
    await show(o, r, (await render()).backup);
    const ui = await import("./ui/output.js");
    for (const w of r.warnings) ui.warn(w);
    if (r.warnings.length) result.code = Exit.warnings;
  });

  help(
    program
      .command("snapshots")
      .description("list bundles; only those whose signature verifies are restorable")
      .addOption(cfgOpt())
      .addOption(repoOpt())
      .option("--all", "every agent of the repository (of --tenant's, with it), whatever the config's agent; read from each agent's catalog record")
      .option("--fresh", "with --all: check every agent's catalog record against its snapshots folder, not only the records changed since this host last checked them")
      .option("--agent <id>", "only this agent (default: the config's)")
      .option("--tenant <t>", "only this tenant (default: the config's)")
      .option("--label <label>", "only snapshots with this label")
      .option("--latest <n>", "only the N newest of each agent")
      .option("--wide", "every column (tenant, sequence, parent, creation time) and nothing cut; the default fits 80 columns")
      .addOption(jsonOpt()),
    ["agentbak snapshots", "agentbak snapshots --all --latest 1 --repo s3://backups/fleet", "agentbak snapshots --latest 3 --label nightly --wide", "agentbak snapshots --repo /srv/backups --tenant acme --agent billing-agent --json > list.json"],
  ).action(async (o) => {
    const { snapshots } = await import("./commands/snapshots.js");
    const r = await snapshots(o);
    const { snapshots: list } = await render();
    await show(o, r.entries, (entries) => list(entries, o.wide));
    const ui = await import("./ui/output.js");
    for (const w of r.warnings) ui.warn(w);
    if (r.warnings.length) result.code = Exit.warnings;
  });

  help(
    program
      .command("status")
      .description("is the agent fine? newest snapshot against the RPO, chain, last drill, requests, unresolved operations, spool, bytes")
      .addOption(cfgOpt())
      .addOption(repoOpt())
      .option("--all", "every agent in the repository")
      .option("--fresh", "with --all: check every agent's catalog record against its snapshots folder, not only the records changed since this host last checked them")
      .option("--agent <id>", "agent (default: the config's)")
      .option("--tenant <t>", "tenant (default: the config's)")
      .addOption(jsonOpt()),
    ["agentbak status", "agentbak status --all --repo /srv/backups", "agentbak status --json || alert   # 3: stale or drill overdue, 15: the last drill failed"],
  ).action(async (o) => {
    const { status } = await import("./commands/status.js");
    const r = await status(o);
    await show(o, r, (await import("./ui/status.js")).statusScreen);
    result.code = r.exit_status;
  });

  help(
    program
      .command("verify")
      .description("verify a bundle: signature, manifest, payload digest; with an identity, every component")
      .argument("<snapshot>", "snapshot id, latest, or a bundle file")
      .addOption(cfgOpt())
      .addOption(repoOpt())
      .option("--identity <file>", "age identity file: decrypt and check every component")
      .option("--agent <id>", "agent (default: the config's)")
      .option("--tenant <t>", "tenant (default: the config's)")
      .addOption(progressOpt())
      .addOption(jsonOpt()),
    ["agentbak verify latest", "agentbak verify 20261129T12 --identity key.txt   # a unique id prefix", "agentbak verify ./20261129T120000000Z-1a2b3c4d.agentbak --identity key.txt --json"],
  ).action(async (ref, o) => {
    const { verify } = await import("./commands/verify.js");
    await show(o, await withProgress(o, (progress) => verify(ref, { ...o, progress })), (await render()).verify);
  });
}

/** Bringing an agent back: restore, reconcile, activate, fence check. */
function addRestoreCommands(program: Command, result: { code: ExitCode }): void {
  help(
    program
      .command("restore")
      .description("verify, check policy and restore a snapshot into an empty folder; the agent starts suspended")
      .argument("<snapshot>", "snapshot id, latest, or a bundle file")
      .requiredOption("--target <dir>", "empty or absent folder to restore into")
      .addOption(cfgOpt())
      .addOption(repoOpt())
      .option("--identity <file>", "age identity file")
      .option("--dry-run", "print the plan; write nothing")
      .option("-y, --yes", "approve without a prompt")
      .option("--allow-rollback", "allow restoring an older sequence than seen here (still needs approval)")
      .option("--allow-other-agent", "allow a bundle of another agent or tenant than the config's")
      .option("--allow-runtime-change", "allow a snapshot made under another agent version, image or model than the config's (still needs approval)")
      .option("--agent <id>", "expected agent id (default: the config's)")
      .option("--tenant <t>", "expected tenant (default: the config's)")
      .option("--request-id <id>", "the same id again returns the first result")
      .option("--before <timestamp>", "only a snapshot created before this time (with latest: the newest such)")
      .option("--source <name=url>", "restore state source NAME into this (empty) server instead of its recorded reference (repeatable)", collect, [])
      .option("--allow-nonempty-source <name>", "restore redis source NAME into a keyspace holding other keys (never over them; repeatable)", collect, [])
      .option("--allow-embedding-change", "allow vectors from another embedding model than the config's (still needs approval)")
      .option("--wait <duration>", "wait this long for another restore of the same agent to finish (e.g. 30s)")
      .addOption(new Option("--integrity <policy>", "check each database: attested (full, except where the signed manifest attests integrity_check passed at backup on these exact bytes), full (integrity_check + row counts, always), quick (quick_check + row counts), digest (its signed sha256 only)").choices(["full", "quick", "digest", "attested"]).default("attested"))
      .addOption(progressOpt())
      .addOption(jsonOpt()),
    ["agentbak restore latest --target /srv/agents/billing-restored --dry-run", "agentbak restore latest --target ./restored --source conversations=\"$SCRATCH_PG_URL\" --yes", "agentbak restore 20261129T120000000Z-1a2b3c4d --target ./restored --yes --request-id INC-1234 --json"],
  ).action(async (ref, o) => {
    const ui = await import("./ui/output.js");
    const { renderPlan } = await import("./ui/plan.js");
    const { restore } = await import("./commands/restore.js");
    const r = await withProgress(o, (progress, clear) =>
      restore(ref, {
        ...o,
        progress,
        confirm: async (plan) => {
          clear();
          renderPlan(plan);
          return ui.confirm("Restore this snapshot?", "--yes");
        },
      }),
    );
    await show(o, r, (await render()).restore);
    // a dry run exits as the restore would: 3 when it would complete with warnings
    if (r.warnings.length && (r.restored || o.dryRun)) result.code = Exit.warnings;
    if (r.plan.policy.refusals.length) result.code = Exit.policy; // a dry run that policy refuses
  });

  help(
    program
      .command("reconcile")
      .description("ask the provider about each open operation of a restored agent by idempotency key, and record the outcomes")
      .requiredOption("--target <dir>", "a folder agentbak restored (still suspended)")
      .addOption(targetCfgOpt())
      .addOption(repoOpt())
      .addOption(jsonOpt()),
    ["agentbak reconcile --target ./restored", "agentbak reconcile --target ./restored -c /srv/agents/billing/agentbak.json --json"],
  ).action(async (o) => {
    const { reconcile } = await import("./commands/reconcile.js");
    const r = await reconcile(o);
    await show(o, r, (await render()).reconcile);
    const ui = await import("./ui/output.js");
    for (const w of r.warnings) ui.warn(w);
    if (r.summary.unresolved || r.warnings.length) result.code = Exit.warnings;
  });

  help(
    program
      .command("activate")
      .description("lift the suspension of a restored agent once its open operations are reconciled and the original runtime is stopped")
      .requiredOption("--target <dir>", "a folder agentbak restored")
      .addOption(targetCfgOpt())
      .addOption(repoOpt())
      .option("--accept-unresolved", "activate although open operations are unresolved (needs --reason)")
      .option("--reason <text>", "why the unresolved operations are accepted (signed into the audit log)")
      .option("--isolated", "the original runtime answers alive, but can no longer reach the outside world")
      .option("-y, --yes", "confirm that the original runtime is stopped")
      .addOption(jsonOpt()),
    ["agentbak activate --target ./restored --yes", 'agentbak activate --target ./restored --accept-unresolved --reason "INC-1234: payment checked by hand" --yes'],
  ).action(async (o) => {
    const ui = await import("./ui/output.js");
    const { activate } = await import("./commands/activate.js");
    const r = await activate({
      ...o,
      confirm: async (c) => {
        for (const u of c.unresolved) ui.warn(`open operation ${u.id} (key ${u.idempotency_key}) unresolved: ${u.why}; activating accepts it as it is`);
        return ui.confirm(`Is the original ${c.record.agent_id} runtime stopped?`, "--yes");
      },
    });
    await show(o, r, (await render()).activate);
    for (const w of r.warnings) ui.warn(w);
    if (r.warnings.length) result.code = Exit.warnings;
  });

  const fence = program.command("fence").description("fencing generations of restored agents");
  help(
    fence
      .command("check")
      .description("exit 0 when GENERATION is the agent's current one (across the repositories copy linked, and this host's trusted state); 14 when superseded; 3 when a linked repository could not be read")
      .requiredOption("--target <dir>", "a folder agentbak restored")
      .requiredOption("--generation <n>", "the generation a writer carries")
      .addOption(repoOpt())
      .addOption(jsonOpt()),
    ["agentbak fence check --target ./restored --generation \"$(cat ./restored/.agentbak/generation)\""],
  ).action(async (o) => {
    const { fence } = await import("./commands/activate.js");
    const r = await fence(o);
    await show(o, r, (await render()).fence);
    const ui = await import("./ui/output.js");
    for (const w of r.warnings) ui.warn(w);
    if (r.warnings.length) result.code = Exit.warnings;
  });
}

/** Proving recoverability and checking the signed logs: drill, report verify, audit verify. */
function addDrillCommands(program: Command, result: { code: ExitCode }): void {
  help(
    program
      .command("drill")
      .description("prove a bundle recovers: restore into a temp folder, check, replay crash points against the worker")
      .argument("[snapshot]", "snapshot id (or a unique prefix), latest, random, or a bundle file (not with --fleet)")
      .addOption(withSuggestions(new Option("--spec <name|file>", `drill spec: a file, or a shipped spec by name (${SHIPPED_SPECS.join(", ")}); default: the built-in restore checks`), SHIPPED_SPECS))
      .addOption(cfgOpt())
      .addOption(repoOpt())
      .option("--identity <file>", "age identity file")
      .option("--report <file>", "append-only report file (default: the agent's report in the repository)")
      .option("--no-report", "do not append a report entry")
      .option("--junit <file>", "write JUnit XML")
      .option("--within <duration>", "with random: pick among snapshots this recent", "7d")
      .option("--no-credential-warnings", "a credential reference that does not resolve here is recorded, not a warning (cron, timers)")
      .option("--allow-runtime-change", "drill a snapshot made under another agent version, image or model than the config's")
      .option("--agent <id>", "agent (default: the config's)")
      .option("--tenant <t>", "tenant (default: the config's)")
      .option("--source <name=url>", "restore state source NAME into this empty server instead of a throwaway one the drill starts (repeatable)", collect, [])
      .option("--allow-embedding-change", "drill a snapshot whose vectors come from another embedding model than the config's")
      .option("--require-sealed", "refuse (2) to run the agent's worker unless it can be sealed in its own network namespace")
      .option("--upgrade-to <command>", "the agent's next version (its worker command, split on spaces): it migrates the restored state, then every crash point runs under it")
      .option("--fleet", "drill a seeded random sample of the repository's agents (or --host FILE's), each at a random recovery point, and report the fleet figure")
      .option("--sample <k>", "with --fleet: how many agents to drill")
      .option("--seed <seed>", "with --fleet: the seed of the sample (default: a fresh one, reported)")
      .option("--window <duration>", "with --fleet: draw recovery points this far back", "7d")
      .option("--until <time>", "with --fleet: the window ends here (ISO 8601; default now): a report entry's seed, window and end replay its picks")
      .option("--host <file>", "with --fleet: the agents of this host file, each with its config")
      .addOption(progressOpt())
      .addOption(jsonOpt()),
    ["agentbak drill latest   # the built-in checks: integrity, row counts, chain, credentials", "agentbak drill latest --spec checks-only", "agentbak drill random --within 7d --spec reference-agent --junit drill.xml --json", "agentbak drill --fleet --sample 20 --seed 42 --repo /srv/backups --junit fleet.xml"],
  ).action(async (ref, o) => {
    const { drill, drillFleet } = await import("./commands/drill.js");
    if (o.fleet) {
      if (ref) throw usageError(`drill --fleet chooses its snapshots: drop ${JSON.stringify(ref.slice(0, 80))}`);
      if (!o.sample) throw usageError("drill --fleet: how many agents? pass --sample K");
      const f = await withProgress(o, (progress) => drillFleet({ ...o, progress }));
      await show(o, f, (await import("./ui/drill.js")).renderFleet);
      result.code = f.passed < f.drilled ? Exit.drillFailed : Exit.ok;
      return;
    }
    for (const flag of ["sample", "seed", "host", "until"] as const) if (o[flag] !== undefined) throw usageError(`--${flag} goes with --fleet`);
    if (!ref) throw usageError("drill what? pass a snapshot (an id, latest, random, or a bundle file), or --fleet --sample K");
    const r = await withProgress(o, (progress) => drill(ref, { ...o, progress }));
    await show(o, r, (await import("./ui/drill.js")).renderDrill);
    result.code = !r.ok ? Exit.drillFailed : r.warnings.length ? Exit.warnings : Exit.ok;
  });

  const report = program.command("report").description("drill reports");
  help(
    report
      .command("verify")
      .description("check a drill report's hash chain and signatures (in the repository: and that it reaches its signed head record); names the first bad entry or the cut")
      .argument("[file]", "report file (JSON Lines); default: the agent's report in the repository")
      .addOption(cfgOpt())
      .addOption(repoOpt())
      .option("--agent <id>", "agent (default: the config's)")
      .option("--tenant <t>", "tenant (default: the config's)")
      .addOption(jsonOpt()),
    ["agentbak report verify", "agentbak report verify ./drill-report.jsonl --json"],
  ).action(async (file, o) => {
    const { reportVerify } = await import("./commands/report.js");
    const r = await reportVerify(file, o);
    await show(o, r, (await render()).reportVerify);
    const ui = await import("./ui/output.js");
    for (const w of r.warnings) ui.warn(w);
    if (r.warnings.length) result.code = Exit.warnings;
  });

  const audit = program.command("audit").description("the agent's audit log in the repository");
  help(
    audit
      .command("verify")
      .description(
        "check the audit log: every entry chained, of this agent and signed by a trusted key (unsigned ones are not genuine), reaching its signed head record and as far as this host verified before; names the first bad entry or the cut",
      )
      .addOption(cfgOpt())
      .addOption(repoOpt())
      .option("--agent <id>", "agent (default: the config's)")
      .option("--tenant <t>", "tenant (default: the config's, or the agent's only tenant)")
      .addOption(jsonOpt()),
    ["agentbak audit verify", "agentbak audit verify --repo s3://backups/fleet --tenant acme --agent billing-agent --json"],
  ).action(async (o) => {
    const { auditVerify } = await import("./commands/audit.js");
    const r = await auditVerify(o);
    await show(o, r, (await render()).reportVerify);
    const ui = await import("./ui/output.js");
    for (const w of r.warnings) ui.warn(w);
    if (r.warnings.length) result.code = Exit.warnings;
  });
}

/** Looking after repositories: forget, compact, schedule, copy. */
function addRepositoryCommands(program: Command, result: { code: ExitCode }): void {
  help(
    program
      .command("forget")
      .description("apply retention rules; never removes what a kept chain needs or the newest drilled snapshot")
      .addOption(cfgOpt())
      .addOption(repoOpt())
      .option("--agent <id>", "agent (default: the config's)")
      .option("--tenant <t>", "tenant (default: the config's, or the agent's only tenant)")
      .option("--keep-last <n>", "keep the N newest")
      .option("--keep-hourly <n>", "keep the newest of each of the last N hours with a snapshot")
      .option("--keep-daily <n>", "... days")
      .option("--keep-weekly <n>", "... ISO weeks")
      .option("--keep-monthly <n>", "... months")
      .option("--keep-yearly <n>", "... years")
      .option("--keep-within <duration>", "keep everything within this of the newest snapshot (e.g. 2d)")
      .option("--dry-run", "show what would be kept and removed")
      .option("--prune", "also remove leftovers: uncommitted bundles and page indexes, temp files, incomplete uploads, and chunks no kept snapshot lists")
      .option("--prune-grace <duration>", "with --prune: an unlisted chunk younger than this is kept (a backup elsewhere may be about to commit it)", "24h")
      .option("--wait <duration>", "wait for the agent lock")
      .addOption(jsonOpt()),
    ["agentbak forget --keep-last 10 --keep-daily 30 --dry-run", "agentbak forget --prune --json"],
  ).action(async (o) => {
    const { forget } = await import("./commands/forget.js");
    const r = await forget(o);
    if (r.warnings.length) result.code = Exit.warnings;
    await show(o, r, (await render()).forget);
  });

  help(
    program
      .command("export")
      .description("write one snapshot as a self-contained bundle file (format 4): chunks inlined, an incremental's databases rebuilt whole, signed anew by this host's key; opens with tar, ssh-keygen, age and zstd, and restores without the repository")
      .argument("<snapshot>", "snapshot id (or a unique prefix), latest, or a bundle file")
      .option("-o, --out <file>", "the file to write (must not exist; default ./<snapshot-id>.agentbak)")
      .addOption(cfgOpt())
      .addOption(repoOpt())
      .option("--identity <file>", "age identity file (the snapshot is decrypted and encrypted again to its recipients)")
      .option("--agent <id>", "agent (default: the config's)")
      .option("--tenant <t>", "tenant (default: the config's)")
      .addOption(progressOpt())
      .addOption(jsonOpt()),
    ["agentbak export latest -o billing-agent.agentbak --identity key.txt"],
  ).action(async (ref, o) => {
    const { exportSnapshot } = await import("./commands/export.js");
    await show(o, await withProgress(o, (progress) => exportSnapshot(ref, { ...o, progress })), (await render()).exportBundle);
  });

  help(
    program
      .command("compact")
      .description("rewrite an incremental snapshot as a full one so older links can be forgotten")
      .argument("<snapshot>", "snapshot id (or a unique prefix) or latest")
      .addOption(cfgOpt())
      .addOption(repoOpt())
      .option("--identity <file>", "age identity file (the chain must be decrypted)")
      .option("--agent <id>", "agent (default: the config's)")
      .option("--tenant <t>", "tenant (default: the config's)")
      .addOption(progressOpt())
      .addOption(jsonOpt()),
    ["agentbak compact latest --identity key.txt"],
  ).action(async (ref, o) => {
    const { compact } = await import("./commands/compact.js");
    await show(o, await withProgress(o, (progress) => compact(ref, { ...o, progress })), (await render()).compact);
  });

  help(
    program
      .command("schedule")
      .description("print crontab lines (pipe to crontab -) or systemd units for this config (installs nothing)")
      .requiredOption("--every <duration>", "backup interval (15m, 1h, 6h, 1d, 7d)")
      .addOption(new Option("--format <format>", "cron: crontab lines; systemd: agentbak-JOB-AGENT.service and .timer units").choices(["cron", "systemd"]).default("cron"))
      .option("--drill-every <duration>", "also drill a random recent snapshot this often")
      .option("--forget-every <duration>", "apply the config's retention rules this often", "1d")
      .addOption(withSuggestions(new Option("--spec <name|file>", "drill spec for scheduled drills: a file or a shipped spec's name (default: the built-in restore checks)"), SHIPPED_SPECS))
      .option("--user <name>", "user the systemd services run as (default: the current user)")
      .option("--credentials-file <file>", "KEY=value file the jobs read their credentials from, e.g. S3 keys; printed by path only (default AGENTBAK_HOME/agentbak.env)")
      .addOption(cfgOpt())
      .addOption(jsonOpt()),
    ["(crontab -l; agentbak schedule --every 1h --drill-every 1d -c /srv/agents/billing/agentbak.json) | crontab -", "agentbak schedule --every 15m --format systemd --user agentbak --credentials-file /etc/agentbak/billing.env"],
  ).action(async (o) => {
    const { schedule } = await import("./commands/schedule.js");
    const r = schedule(o);
    await show(o, r, (await render()).schedule);
    if (r.warnings.length) result.code = Exit.warnings;
  });

  help(
    program
      .command("copy")
      .description("replicate signed bundles between repositories (folders or s3://), verifying each on arrival; carries each agent's generation record and links the two for fencing")
      .argument("[snapshot...]", "snapshot ids (default: every verified snapshot)")
      .requiredOption("--from <repo>", "source repository")
      .requiredOption("--to <repo>", "destination repository (created if missing)")
      .option("--agent <id>", "only this agent")
      .option("--tenant <t>", "only this tenant")
      .addOption(progressOpt())
      .addOption(jsonOpt()),
    ["agentbak copy --from ./backups --to s3://backups-eu/agents", "agentbak copy --from s3://a/x --to s3://b/x 20261129T120000000Z-1a2b3c4d"],
  ).action(async (ids, o) => {
    const { copy } = await import("./commands/copy.js");
    const r = await withProgress(o, (progress) => copy({ ...o, snapshots: ids, progress }));
    await show(o, r, (await render()).copy);
    const ui = await import("./ui/output.js");
    for (const w of r.warnings) ui.warn(w);
    if (r.warnings.length) result.code = Exit.warnings;
  });
}

/** The agent interface's renderings (ui/agentapi.ts), loaded when an action runs. */
const agentUi = () => import("./ui/agentapi.js");

/** The agent interface's commands: mcp, serve, token, approve, deny, requests, flush. */
function addAgentInterface(program: Command, result: { code: ExitCode }): void {
  addAgentServers(program);
  addAgentRequests(program, result);
}

/** Serving agents and their tokens: mcp, serve, token create/list/revoke. */
function addAgentServers(program: Command): void {
  help(
    program
      .command("mcp")
      .description("MCP server on stdio for the config's agent: create_backup, get_backup, list_snapshots, verify_snapshot, plan_restore, request_restore, get_restore_request")
      .addOption(cfgOpt())
      .addOption(new Option("--tier <tier>", "read (default), checkpoint (+ create_backup), restore-request (+ request_restore); beats agentInterface.tier"))
      .option("--listen <host:port>", "serve MCP over Streamable HTTP at http://HOST:PORT/mcp instead (bearer tokens; see agentbak serve)"),
    ["agentbak mcp --tier checkpoint -c /srv/agents/billing/agentbak.json", "agentbak mcp --listen 127.0.0.1:8377 --tier checkpoint"],
  ).action(async (o) => {
    const { mcp } = await import("./commands/mcp.js");
    const u = await agentUi();
    await mcp({ ...o, log: u.log, onListening: u.listening });
  });

  help(
    program
      .command("serve")
      .description("HTTP API for agents (bearer tokens per tenant, agent and tier): /v1/backups, /v1/snapshots, /v1/restores, /v1/openapi.json, MCP at /mcp, the status page at /, /metrics and /healthz; SIGTERM finishes the requests in flight and exits 0")
      .option("-c, --config <file...>", "config of each agent served (default: AGENTBAK_CONFIG, else ./agentbak.json)")
      .option("--host <file>", "a host file (agentbak-host.json): back up each of its agents on its schedule from this process, and serve them all (docs/fleet.md)")
      .option("--listen <host:port>", "address (default the host file's or agentInterface.listen, else 127.0.0.1:8377; port 0 picks a free one)")
      .option("--ui", "the status page (GET /) without a token, for a browser on this host; loopback addresses only")
      .addOption(new Option("--tier <tier>", "the highest tier any token gets here (default: each token's own)")),
    [
      "agentbak serve",
      "agentbak serve -c /srv/agents/billing/agentbak.json -c /srv/agents/support/agentbak.json --listen 127.0.0.1:8377",
      "agentbak serve --ui   # then open http://127.0.0.1:8377/ on this host",
      "agentbak serve --host /etc/agentbak/agentbak-host.json",
    ],
  ).action(async (o) => {
    const { serve } = await import("./commands/serve.js");
    const u = await agentUi();
    const [{ statusPage }, { statusMetrics }] = [await import("./ui/statuspage.js"), await import("./ui/status.js")];
    await serve({ ...o, log: u.log, onListening: u.listening, render: { page: statusPage, metrics: statusMetrics } });
  });

  const token = program.command("token").description("bearer tokens of the agent interface (stored hashed in AGENTBAK_HOME/tokens)");
  help(
    token
      .command("create")
      .description("create a token for one agent at one tier; it is printed once")
      .requiredOption("--tenant <t>", "tenant")
      .requiredOption("--agent <id>", "agent id")
      .requiredOption("--tier <tier>", "read, checkpoint or restore-request")
      .addOption(jsonOpt()),
    ["agentbak token create --tenant acme --agent billing-agent --tier checkpoint"],
  ).action(async (o) => {
    const { tokenCreate } = await import("./commands/token.js");
    await show(o, tokenCreate(o), (await agentUi()).tokenCreated);
  });
  help(token.command("list").description("list tokens (never the tokens themselves)").addOption(jsonOpt()), ["agentbak token list --json"]).action(async (o) => {
    const { tokenList } = await import("./commands/token.js");
    await show(o, tokenList(), (await agentUi()).tokenList);
  });
  help(token.command("revoke").description("revoke a token; it is refused from the next request on").argument("<id>", "token id (tok_...)").addOption(jsonOpt()), [
    "agentbak token revoke tok_0123456789abcdef",
  ]).action(async (id, o) => {
    const { tokenRevoke } = await import("./commands/token.js");
    await show(o, tokenRevoke(id), (await agentUi()).tokenRevoked);
  });
}

/** What agents ask of operators: approve, deny, requests; and flush, which uploads what their checkpoints spooled. */
function addAgentRequests(program: Command, result: { code: ExitCode }): void {
  const agentOpts = (c: Command) => c.addOption(repoOpt()).option("--agent <id>", "agent (default: the config's)").option("--tenant <t>", "tenant (default: the config's)");

  help(
    agentOpts(
      program
        .command("approve")
        .description("approve an agent's restore request and run the restore, with all of restore's policy")
        .argument("<request>", "request id (req-...; see agentbak requests)")
        .addOption(cfgOpt())
        .option("--target <dir>", "empty or absent folder to restore into (default: the folder the request proposed)")
        .option("--identity <file>", "age identity file")
        .option("--allow-rollback", "allow restoring an older sequence than seen here")
        .option("-y, --yes", "approve without a prompt (required without a TTY)"),
    ).addOption(jsonOpt()),
    ["agentbak approve req-20261201T101500000Z-1a2b3c4d --target /srv/agents/billing-restored", "agentbak approve req-20261201T101500000Z-1a2b3c4d --yes --json"],
  ).action(async (id, o) => {
    const { approve } = await import("./commands/approve.js");
    const u = await agentUi();
    const { confirm } = await import("./ui/output.js");
    const r = await approve(id, { ...o, confirm: async (plan, req) => (u.approvalPrompt(plan, req), confirm(`Approve restore request ${req.request_id}?`, "--yes")) });
    await show(o, r, u.approved);
    if (r.restore.warnings.length) result.code = Exit.warnings;
  });

  help(
    agentOpts(
      program
        .command("deny")
        .description("deny an agent's restore request; the agent sees the reason")
        .argument("<request>", "request id (req-...)")
        .addOption(cfgOpt())
        .option("--reason <text>", "why (required; the agent is told)")
        .option("-y, --yes", "deny without a prompt (required without a TTY)"),
    ).addOption(jsonOpt()),
    ["agentbak deny req-20261201T101500000Z-1a2b3c4d --reason \"restore from last night's snapshot instead\" --yes"],
  ).action(async (id, o) => {
    const { deny } = await import("./commands/approve.js");
    const u = await agentUi();
    const { confirm } = await import("./ui/output.js");
    await show(o, await deny(id, { ...o, confirm: async (req) => (u.request(req), confirm(`Deny restore request ${req.request_id}?`, "--yes")) }), u.denied);
  });

  help(
    agentOpts(program.command("requests").description("an agent's restore requests that wait for a decision or failed (--all: every one)").addOption(cfgOpt()).option("--all", "include restored and denied ones")).addOption(jsonOpt()),
    ["agentbak requests", "agentbak requests --all --json"],
  ).action(async (o) => {
    const { requests } = await import("./commands/approve.js");
    await show(o, await requests(o), (await agentUi()).requests);
  });

  help(
    program
      .command("flush")
      .description("upload the bundles spooled while an object-storage repository was unreachable (the next backup does it too)")
      .addOption(cfgOpt())
      .addOption(repoOpt())
      .addOption(jsonOpt()),
    ["agentbak flush", "agentbak flush --repo s3://backups/fleet --json"],
  ).action(async (o) => {
    const { flush, markReported } = await import("./commands/flush.js");
    const r = await flush(o);
    await show(o, r, (await agentUi()).flushed);
    if (r.some((f) => f.quarantined.length || f.warnings.length)) result.code = Exit.warnings; // a damaged spooled bundle was set aside
    // only once the output named them: a flush killed before this leaves them for the next one to name
    for (const f of r) await markReported(f);
  });
}
