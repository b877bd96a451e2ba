/**
 * The command table. Each action parses its flags, calls one command module
 * (imported lazily) and renders the returned value; it holds no logic.
 * Returns the exit code; only main.ts exits.
 */
import { Command, Option } from "commander";
import { TOOL_VERSION } from "./version.js";
import { Exit, type ExitCode } from "./errors.js";

const EXIT_STATUS = `
EXIT STATUS
  0    success
  1    failure (unexpected or internal)
  2    usage error: bad flags, bad config, prompt needed without a TTY
  3    completed with warnings
  10   repository, snapshot or file not found
  11   repository locked by another process
  12   no usable key: no identity matches, or signing key missing
  13   verification failed: signature, digest, format, integrity
  14   refused by policy: untrusted/revoked signer, expired, rollback, tenant,
       schema or version incompatible, not approved, secret found
  15   drill ran and a check failed
  130  interrupted`;

const ENVIRONMENT = `
ENVIRONMENT
  AGENTBAK_CONFIG, AGENTBAK_REPOSITORY, AGENTBAK_IDENTITY_FILE, AGENTBAK_IDENTITY,
  AGENTBAK_SIGNING_KEY_FILE, AGENTBAK_HOME (default ~/.config/agentbak).
  Flags beat environment beats config.`;

function help(cmd: Command, examples: string[]): Command {
  return cmd.addHelpText("after", `\nEXAMPLES\n${examples.map((e) => "  " + e).join("\n")}\n${EXIT_STATUS}\n${ENVIRONMENT}\n`);
}

const cfgOpt = () => new Option("-c, --config <file>", "config file (default ./agentbak.json)");
const repoOpt = () => new Option("--repo <path>", "repository (overrides AGENTBAK_REPOSITORY and config)");
const jsonOpt = () => new Option("--json", "machine-readable result on stdout");

/** Writes a command's result: one JSON document on stdout with --json, else the human rendering. */
async function show<R>(o: { json?: boolean }, r: R, human: (r: R) => void): Promise<void> {
  const ui = await import("./ui/output.js");
  if (o.json) ui.emitJson(r);
  else human(r);
}

const render = () => import("./ui/render.js");

/** Runs `fn` with a spinner on a TTY (none otherwise), passing it the spinner's text setter. */
async function withProgress<R>(text: string, fn: (progress: (t: string) => void) => Promise<R>): Promise<R> {
  const ui = await import("./ui/output.js");
  const p = ui.progress(text);
  try {
    return await fn((t) => p.update(t));
  } finally {
    p.stop();
  }
}

/** Builds the program; `result` receives the exit code of the action that ran. */
export function buildProgram(result: { code: ExitCode }): Command {
  const program = new Command("agentbak")
    .description("Verified, policy-checked backups and recovery drills for autonomous AI agents")
    .version(TOOL_VERSION)
    .showHelpAfterError("(run with --help for usage)")
    .exitOverride();
  help(program, ["agentbak init --agent-id billing-agent --tenant acme --yes", "agentbak backup", "agentbak verify latest --identity ~/.config/agentbak/age-identity.txt"]);

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
      .option("--dir <dir>", "folder for agentbak.json", ".")
      .addOption(cfgOpt())
      .option("--agent-id <id>", "agent id")
      .option("--tenant <t>", "tenant")
      .option("--repo <path>", "repository: a folder (relative to the config) or s3://BUCKET/PREFIX (default ./backups)")
      .option("--database <name=path...>", "SQLite database(s) to back up")
      .option("--workspace <path>", "git workspace of the agent")
      .option("-y, --yes", "accept defaults; never prompt")
      .addOption(jsonOpt()),
    ["agentbak init --agent-id billing-agent --tenant acme --database state=state/agent.sqlite --workspace workspace --yes", "agentbak init -c /srv/agents/billing/agentbak.json   # create the repository a hand-written config names"],
  ).action(async (o) => {
    const { init } = await import("./commands/init.js");
    await show(o, await init(o), (await render()).init);
  });

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
      .addOption(jsonOpt()),
    ["agentbak backup", "agentbak backup --incremental", "agentbak backup --idempotency-key \"$CI_JOB_ID\" --json"],
  ).action(async (o) => {
    const { backup } = await import("./commands/backup.js");
    const r = await withProgress("starting backup", (progress) => backup({ ...o, progress }));
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
      .option("--agent <id>", "only this agent (default: the config's)")
      .option("--tenant <t>", "only this tenant (default: the config's)")
      .addOption(jsonOpt()),
    ["agentbak snapshots", "agentbak snapshots --repo /srv/backups --tenant acme --agent billing-agent --json"],
  ).action(async (o) => {
    const { snapshots } = await import("./commands/snapshots.js");
    await show(o, await snapshots(o), (await render()).snapshots);
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
      .addOption(jsonOpt()),
    ["agentbak verify latest", "agentbak verify 20261129T12 --identity key.txt   # a unique id prefix", "agentbak verify ./20261129T120000000Z-1a2b3c4d.agentbak --identity key.txt --json"],
  ).action(async (ref, o) => {
    const { verify } = await import("./commands/verify.js");
    await show(o, await verify(ref, o), (await render()).verify);
  });

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
      .option("--agent <id>", "expected agent id (default: the config's)")
      .option("--tenant <t>", "expected tenant (default: the config's)")
      .option("--request-id <id>", "the same id again returns the first result")
      .option("--before <timestamp>", "only a snapshot created before this time (with latest: the newest such)")
      .option("--wait <duration>", "wait this long for another restore of the same agent to finish (e.g. 30s)")
      .addOption(jsonOpt()),
    ["agentbak restore latest --target /srv/agents/billing-restored --dry-run", "agentbak restore 20261129T120000000Z-1a2b3c4d --target ./restored --yes --request-id INC-1234 --json"],
  ).action(async (ref, o) => {
    const ui = await import("./ui/output.js");
    const { renderPlan } = await import("./ui/plan.js");
    const { restore } = await import("./commands/restore.js");
    const r = await restore(ref, {
      ...o,
      confirm: async (plan) => {
        renderPlan(plan);
        return ui.confirm("Restore this snapshot?", "--yes");
      },
    });
    await show(o, r, (await render()).restore);
    if (r.warnings.length && r.restored) result.code = Exit.warnings;
  });

  help(
    program
      .command("activate")
      .description("lift the suspension of a restored agent once the original runtime is stopped")
      .requiredOption("--target <dir>", "a folder agentbak restored")
      .addOption(repoOpt())
      .option("-y, --yes", "confirm that the original runtime is stopped and open operations are reconciled or accepted")
      .addOption(jsonOpt()),
    ["agentbak activate --target ./restored --yes"],
  ).action(async (o) => {
    const ui = await import("./ui/output.js");
    const { activate } = await import("./commands/activate.js");
    const r = await activate({
      ...o,
      confirm: async (rec) => {
        for (const op of rec.open_operations) ui.warn(`open operation ${op.id} (key ${op.idempotency_key}) was sent without a receipt`);
        return ui.confirm(`Is the original ${rec.agent_id} runtime stopped, and are its open operations reconciled or accepted?`, "--yes");
      },
    });
    await show(o, r, (await render()).activate);
  });

  const fence = program.command("fence").description("fencing generations of restored agents");
  help(
    fence
      .command("check")
      .description("exit 0 when GENERATION is the agent's current one; 14 when superseded")
      .requiredOption("--target <dir>", "a folder agentbak restored")
      .requiredOption("--generation <n>", "the generation a writer carries")
      .addOption(repoOpt())
      .addOption(jsonOpt()),
    ["agentbak fence check --target ./restored --generation \"$(cat ./restored/.agentbak/generation)\""],
  ).action(async (o) => {
    const { fence } = await import("./commands/activate.js");
    await show(o, await fence(o), (await render()).fence);
  });

  help(
    program
      .command("drill")
      .description("prove a bundle recovers: restore into a temp folder, check, replay crash points against the worker")
      .argument("<snapshot>", "snapshot id (or a unique prefix), latest, random, or a bundle file")
      .requiredOption("--spec <file>", "drill spec (drills/NAME.json)")
      .addOption(cfgOpt())
      .addOption(repoOpt())
      .option("--identity <file>", "age identity file")
      .option("--report <file>", "append-only report file (default: the agent's report in the repository)")
      .option("--no-report", "do not append a report entry")
      .option("--junit <file>", "write JUnit XML")
      .option("--within <duration>", "with random: pick among snapshots this recent", "7d")
      .option("--agent <id>", "agent (default: the config's)")
      .option("--tenant <t>", "tenant (default: the config's)")
      .addOption(jsonOpt()),
    ["agentbak drill latest --spec drills/reference-agent.json", "agentbak drill random --within 7d --spec drills/reference-agent.json --junit drill.xml --json"],
  ).action(async (ref, o) => {
    const { drill } = await import("./commands/drill.js");
    const r = await withProgress("drill", (progress) => drill(ref, { ...o, progress }));
    await show(o, r, (await import("./ui/drill.js")).renderDrill);
    result.code = !r.ok ? Exit.drillFailed : r.warnings ? Exit.warnings : Exit.ok;
  });

  const report = program.command("report").description("drill reports");
  help(
    report
      .command("verify")
      .description("check a drill report's hash chain and signatures; names the first bad entry")
      .argument("[file]", "report file (JSON Lines); default: the agent's report in the repository")
      .addOption(cfgOpt())
      .addOption(repoOpt())
      .option("--agent <id>", "agent (default: the config's)")
      .option("--tenant <t>", "tenant (default: the config's)")
      .addOption(jsonOpt()),
    ["agentbak report verify", "agentbak report verify ./drill-report.jsonl --json"],
  ).action(async (file, o) => {
    const { reportVerify } = await import("./commands/report.js");
    await show(o, await reportVerify(file, o), (await render()).reportVerify);
  });

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
      .option("--prune", "also remove leftovers: uncommitted bundles and page indexes, temp files, incomplete uploads")
      .option("--wait <duration>", "wait for the agent lock")
      .addOption(jsonOpt()),
    ["agentbak forget --keep-last 10 --keep-daily 30 --dry-run", "agentbak forget --prune --json"],
  ).action(async (o) => {
    const { forget } = await import("./commands/forget.js");
    const r = await forget(o);
    if (r.not_removed.length) result.code = Exit.warnings;
    await show(o, r, (await render()).forget);
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
      .addOption(jsonOpt()),
    ["agentbak compact latest --identity key.txt"],
  ).action(async (ref, o) => {
    const { compact } = await import("./commands/compact.js");
    await show(o, await compact(ref, o), (await render()).compact);
  });

  help(
    program
      .command("schedule")
      .description("print a crontab line and a systemd service + timer for this config (installs nothing)")
      .requiredOption("--every <duration>", "backup interval (15m, 1h, 6h, 1d)")
      .option("--drill-every <duration>", "also drill a random recent snapshot this often")
      .option("--spec <file>", "drill spec for scheduled drills (default drills/checks-only.json)")
      .addOption(cfgOpt())
      .addOption(jsonOpt()),
    ["agentbak schedule --every 1h --drill-every 1d -c /srv/agents/billing/agentbak.json"],
  ).action(async (o) => {
    const { schedule } = await import("./commands/schedule.js");
    await show(o, schedule(o), (await render()).schedule);
  });

  help(
    program
      .command("copy")
      .description("replicate signed bundles between repositories (folders or s3://), verifying each on arrival")
      .argument("[snapshot...]", "snapshot ids (default: every verified snapshot)")
      .requiredOption("--from <repo>", "source repository")
      .requiredOption("--to <repo>", "destination repository (created if missing)")
      .option("--agent <id>", "only this agent")
      .option("--tenant <t>", "only this tenant")
      .addOption(jsonOpt()),
    ["agentbak copy --from ./backups --to s3://backups-eu/agents", "agentbak copy --from s3://a/x --to s3://b/x 20261129T120000000Z-1a2b3c4d"],
  ).action(async (ids, o) => {
    const { copy } = await import("./commands/copy.js");
    await show(o, await copy({ ...o, snapshots: ids }), (await render()).copy);
  });

  program
    .command("config-schema")
    .description("print the JSON Schema of agentbak.json")
    .action(async () => {
      const { configJsonSchema } = await import("./config/schema.js");
      await show({ json: true }, configJsonSchema(), () => undefined);
    });

  return program;
}
