/**
 * Help a newcomer reads, generated from the one command table (cli.ts, as
 * commander holds it) and the one exit-code table (errors.ts): each command's
 * examples, `agentbak help exit-codes` and `help environment`, the man page
 * (roff) and shell completion for bash, zsh and fish. Pure functions of the
 * table: nothing here writes.
 */
import type { Command, Option } from "commander";
import { EXIT_MEANINGS, EXIT_NAMES, type ExitCode } from "../errors.js";

/** The environment agentbak reads, and what for (the operator's variables; test and drill-worker ones are left out). */
export const ENVIRONMENT: [name: string, meaning: string][] = [
  ["AGENTBAK_CONFIG", "the config file (default ./agentbak.json)"],
  ["AGENTBAK_REPOSITORY", "the repository: a folder or s3://BUCKET/PREFIX; lets read-only commands run without a config"],
  ["AGENTBAK_IDENTITY_FILE", "the age identity file that decrypts snapshots (verify --identity, restore, drill, compact)"],
  ["AGENTBAK_IDENTITY", "the age identity itself, for CI secret variables; never logged"],
  ["AGENTBAK_SIGNING_KEY_FILE", "the Ed25519 key that signs snapshots and reports (default AGENTBAK_HOME/signing-key)"],
  ["AGENTBAK_HOME", "keys, allowed_signers, this host's trusted state, caches, spools, tokens (default ~/.config/agentbak)"],
  ["AGENTBAK_S3_ENDPOINT", "an S3-compatible endpoint (MinIO, Ceph RGW, ...); path-style addressing then"],
  ["AGENTBAK_S3_PATH_STYLE", "0 or 1: bucket in the path (default 1 with an endpoint)"],
  ["AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_PROFILE", "S3 credentials and region, as the AWS SDK reads them"],
  ["AGENTBAK_HOST_ID", "this host's name in leases (default the hostname; hosts sharing a repository need distinct names)"],
  ["AGENTBAK_LEASE_SECONDS", "how long a repository lease lasts without renewal (default 60)"],
  ["AGENTBAK_DEBUG", "1: print where an error came from (its stack), for a bug report"],
  ["AGENTBAK_STORE_COUNTS", "a file: at exit, append one JSON line per repository store with its requests by operation and bytes written"],
  ["NO_COLOR, FORCE_COLOR", "colour off, on; --no-color beats both"],
];

/** The topics of `agentbak help TOPIC` besides command names. */
export const HELP_TOPICS = { "exit-codes": "what each exit status means", environment: "the environment variables agentbak reads" } as const;

const examplesOf = new WeakMap<Command, string[]>();
const suggestionsOf = new WeakMap<Option, string[]>();

/** Names completion offers for an option that takes a file or a name (a shipped drill spec), besides file names. @returns o */
export function withSuggestions(o: Option, names: string[]): Option {
  suggestionsOf.set(o, names);
  return o;
}

/** Adds 1-3 examples to `cmd`'s --help (and to the man page). @returns cmd */
export function withExamples(cmd: Command, examples: string[]): Command {
  examplesOf.set(cmd, examples);
  return cmd.addHelpText("after", `\nExamples:\n${examples.map((e) => `  ${e}`).join("\n")}\n`);
}

/** Two columns, the second wrapped at `width` and indented. */
function columns(rows: [string, string][], cap = 24, width = 80): string {
  const left = Math.min(cap, Math.max(...rows.map(([k]) => k.length)) + 2);
  return rows
    .map(([k, v]) => {
      const lines: string[] = [];
      let line = "";
      for (const w of v.split(" ")) {
        if (line && left + 2 + line.length + 1 + w.length > width) (lines.push(line), (line = w));
        else line = line ? `${line} ${w}` : w;
      }
      lines.push(line);
      const head = k.length + 2 > left ? [`  ${k}`, ""] : [`  ${k.padEnd(left)}`];
      const first = head.length === 2 ? `${head[0]}\n${" ".repeat(left + 2)}` : head[0];
      return `${first}${lines.join(`\n${" ".repeat(left + 2)}`)}`;
    })
    .join("\n");
}

/** `agentbak help exit-codes`. */
export const exitCodesText = (): string =>
  `Exit status (an unknown code means failure). With --json a failure also prints\n{"message_type": "exit_error", "code": NAME, "exit_status": N, "message": ...}.\n\n${columns(
    (Object.keys(EXIT_MEANINGS) as unknown as ExitCode[]).map((c): [string, string] => [`${String(c).padEnd(4)} ${EXIT_NAMES[c]}`, EXIT_MEANINGS[c]]),
    26,
  )}\n`;

/** `agentbak help environment`. */
export const environmentText = (): string => `Environment (flags beat environment beats config):\n\n${columns(ENVIRONMENT)}\n`;

/** Every command with its full name ("token create"), depth first, the program itself left out. */
export function walk(program: Command): { path: string; cmd: Command }[] {
  const all: { path: string; cmd: Command }[] = [];
  const visit = (c: Command, prefix: string) => {
    for (const s of c.commands) {
      const path = prefix ? `${prefix} ${s.name()}` : s.name();
      all.push({ path, cmd: s });
      visit(s, path);
    }
  };
  visit(program, "");
  return all;
}

/** An option's words as typed: --config, -c. */
const flagsOf = (o: Option): string[] => [o.long, o.short].filter((f): f is string => Boolean(f));
/** Options of `cmd` as completion offers them, --help included. */
const optionWords = (cmd: Command): string[] => [...cmd.options.flatMap(flagsOf), "--help"];
/** Options that take a value (the next word is the value, not a command). */
const valued = (cmd: Command): Option[] => cmd.options.filter((o) => o.required || o.optional);

/** roff text: backslashes and a leading dot or quote neutralised, hyphens of flags as minus signs. */
const roff = (s: string) => s.replace(/\\/g, "\\e").replace(/^([.'])/gm, "\\&$1").replace(/-/g, "\\-");

/** The man page, agentbak(1), in roff (man -l renders it). */
export function manPage(program: Command, version: string): string {
  const lines = [
    `.TH AGENTBAK 1 "" "agentbak ${version}" "User Commands"`,
    ".SH NAME",
    `agentbak \\- ${roff(program.description())}`,
    ".SH SYNOPSIS",
    ".B agentbak",
    ".I command",
    "[options]",
    ".SH DESCRIPTION",
    `${roff(program.description())}. Run \\fBagentbak\\fR \\fIcommand\\fR \\fB\\-\\-help\\fR for one command's options and examples.`,
    ".SH COMMANDS",
  ];
  for (const { path, cmd } of walk(program)) {
    if (cmd.commands.length && !cmd.options.length) continue; // a group (token, report): its commands follow
    const args = cmd.registeredArguments.map((a) => (a.required ? `<${a.name()}${a.variadic ? "..." : ""}>` : `[${a.name()}${a.variadic ? "..." : ""}]`)).join(" ");
    lines.push(`.SS "agentbak ${roff(path)}${args ? ` ${roff(args)}` : ""}"`, roff(cmd.description()));
    for (const o of cmd.options) lines.push(".TP", `.B ${roff(o.flags)}`, roff(o.description + (o.argChoices ? ` (${o.argChoices.join(", ")})` : "")));
    const ex = examplesOf.get(cmd);
    if (ex?.length) lines.push(".PP", "Examples:", ".RS", ".nf", ...ex.map(roff), ".fi", ".RE");
  }
  lines.push(".SH EXIT STATUS", ...(Object.keys(EXIT_MEANINGS) as unknown as ExitCode[]).flatMap((c) => [".TP", `.B ${c}`, `${EXIT_NAMES[c]}: ${roff(EXIT_MEANINGS[c])}`]));
  lines.push(".SH ENVIRONMENT", ...ENVIRONMENT.flatMap(([k, v]) => [".TP", `.B ${roff(k)}`, roff(v)]));
  lines.push(".SH SEE ALSO", "age(1), sqlite3(1), crontab(1), systemd.timer(5); docs/ in the agentbak package", "");
  return lines.join("\n");
}

/** sh single quotes. */
const sq = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/**
 * The bash completion script: `_agentbak` finds the command path among the
 * words typed so far (skipping options and their values), then offers that
 * command's subcommands and options, an option's choices after it, and file
 * names after any other option that takes a value.
 */
export function bashCompletion(program: Command): string {
  const cmds = walk(program);
  const paths = cmds.map((c) => c.path);
  const words = (c: Command) => [...c.commands.map((s) => s.name()), ...c.registeredArguments.flatMap((a) => a.argChoices ?? []), ...optionWords(c)].join(" ");
  const cases = [`    "") words=${sq(words(program))} ;;`, ...cmds.map(({ path, cmd }) => `    ${sq(path)}) words=${sq(words(cmd))} ;;`)];
  const valuedFlags = [...new Set([program, ...cmds.map((c) => c.cmd)].flatMap((c) => valued(c).flatMap(flagsOf)))];
  const byFlag = (values: (o: Option) => string[] | undefined) => [...new Map([program, ...cmds.map((c) => c.cmd)].flatMap((c) => c.options.filter(values).flatMap((o) => flagsOf(o).map((f) => [f, values(o)!.join(" ")] as const)))).entries()];
  const choices = byFlag((o) => o.argChoices);
  const suggested = byFlag((o) => suggestionsOf.get(o));
  return `# bash completion for agentbak, generated from its command table (agentbak completion bash)
_agentbak() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" prev="" path="" next w i words=""
  (( COMP_CWORD > 0 )) && prev="\${COMP_WORDS[COMP_CWORD-1]}"
  for (( i = 1; i < COMP_CWORD; i++ )); do
    w="\${COMP_WORDS[i]}"
    case "$w" in
      ${valuedFlags.length ? `${valuedFlags.join("|")}) (( i++ )); continue ;;` : ""}
      -*) continue ;;
    esac
    next="\${path:+$path }$w"
    case "$next" in
      ${paths.map(sq).join("|")}) path="$next" ;;
    esac
  done
  case "$prev" in
${choices.map(([f, c]) => `    ${f}) COMPREPLY=( $(compgen -W ${sq(c)} -- "$cur") ); return ;;`).join("\n")}
${suggested.map(([f, c]) => `    ${f}) COMPREPLY=( $(compgen -W ${sq(c)} -- "$cur") $(compgen -f -- "$cur") ); return ;;`).join("\n")}
    ${valuedFlags.length ? `${valuedFlags.join("|")}) COMPREPLY=(); return ;;` : ""}
  esac
  case "$path" in
${cases.join("\n")}
  esac
  COMPREPLY=( $(compgen -W "$words" -- "$cur") )
}
complete -o default -F _agentbak agentbak
`;
}

/** zsh: the bash function through zsh's bashcompinit (same table, same behaviour). */
export const zshCompletion = (program: Command): string =>
  `#compdef agentbak\n# zsh completion for agentbak, generated from its command table (agentbak completion zsh)\nautoload -U +X bashcompinit && bashcompinit\n${bashCompletion(program).split("\n").slice(1).join("\n")}`;

/** fish: one `complete` line per command and option, conditioned on the command path typed so far. */
export function fishCompletion(program: Command): string {
  const q = (s: string) => `'${s.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`;
  const lines = ["# fish completion for agentbak, generated from its command table (agentbak completion fish)", "complete -c agentbak -f"];
  const opt = (cond: string, o: Option) =>
    `complete -c agentbak -n ${q(cond)}${o.long ? ` -l ${o.long.slice(2)}` : ""}${o.short ? ` -s ${o.short.slice(1)}` : ""}${o.required || o.optional ? (o.argChoices ? ` -x -a ${q(o.argChoices.join(" "))}` : ` -r -F${suggestionsOf.has(o) ? ` -a ${q(suggestionsOf.get(o)!.join(" "))}` : ""}`) : ""} -d ${q(o.description)}`;
  for (const s of program.commands) lines.push(`complete -c agentbak -n '__fish_use_subcommand' -a ${q(s.name())} -d ${q(s.description())}`);
  for (const o of program.options) lines.push(opt("__fish_use_subcommand", o));
  for (const { path, cmd } of walk(program)) {
    const seen = path.split(" ").map((w) => `__fish_seen_subcommand_from ${w}`).join("; and ");
    for (const s of cmd.commands) lines.push(`complete -c agentbak -n ${q(`${seen}; and not __fish_seen_subcommand_from ${cmd.commands.map((c) => c.name()).join(" ")}`)} -a ${q(s.name())} -d ${q(s.description())}`);
    for (const o of cmd.options) lines.push(opt(seen, o));
  }
  return lines.join("\n") + "\n";
}
