// Help through the real binary: --help shows options and examples without the
// exit-status block; `help exit-codes`/`help environment`; the man page renders
// with man(1); the completion scripts complete in real shells.
import { describe, expect, it } from "vitest";
import { execa } from "execa";
import { mkdtempSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BIN, ROOT, run } from "../helpers.js";

/** A folder on PATH with an `agentbak` that runs this checkout's binary, as `npm link` would give. */
function pathWithAgentbak(): string {
  const dir = mkdtempSync(join(tmpdir(), "agentbak-path-"));
  writeFileSync(join(dir, "agentbak"), `#!/bin/sh\nexec node ${BIN} "$@"\n`, { mode: 0o755 });
  return `${dir}:${process.env.PATH}`;
}
const has = async (bin: string) => (await execa("sh", ["-c", `command -v ${bin}`], { reject: false })).exitCode === 0;

describe("help", () => {
  it("a command's --help shows its options and examples, and no exit-status or environment block", async () => {
    const r = await run(["restore", "--help"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("--target <dir>");
    expect(r.stdout).toMatch(/Examples:\n {2}agentbak restore latest --target/);
    expect(r.stdout).not.toMatch(/EXIT STATUS|Exit status|ENVIRONMENT|AGENTBAK_HOME/);
    // -c says where the config comes from without it (the walk sets AGENTBAK_CONFIG; help said ./agentbak.json)
    for (const c of ["status", "serve"]) expect((await run([c, "--help"])).stdout.replace(/\s+/g, " ")).toMatch(/-c, --config <file(\.\.\.)?> [a-z ]*\(default: AGENTBAK_CONFIG, else \.\/agentbak\.json\)/);
    const top = await run(["--help"]);
    expect(top.stdout).toContain("Exit codes: agentbak help exit-codes. Environment: agentbak help environment.");
  });

  it("help exit-codes and help environment print the tables; help COMMAND is that command's --help; an unknown topic exits 2", async () => {
    const e = await run(["help", "exit-codes"]);
    expect(e.code).toBe(0);
    expect(e.stdout).toMatch(/^ {2}13 {3}verification_failed +verification failed: signature/m);
    expect(e.stdout).toMatch(/^ {2}130 {2}interrupted/m);
    const v = await run(["help", "environment"]);
    expect(v.stdout).toMatch(/^ {2}AGENTBAK_HOME +keys, allowed_signers/m);
    const h = await run(["help", "token", "create"]);
    expect(h.stdout).toBe((await run(["token", "create", "--help"])).stdout);
    const bad = await run(["help", "frobnicate"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toBe('agentbak: help: no command or topic "frobnicate" (topics: exit-codes, environment; commands: agentbak --help)');
  });

  it("man -l renders the man page: every command has a section, the exit table is there, groff warns of nothing", async () => {
    const page = (await run(["man"])).stdout;
    const file = join(mkdtempSync(join(tmpdir(), "agentbak-man-")), "agentbak.1");
    writeFileSync(file, page);
    const m = await execa("man", ["-l", file], { env: { MANWIDTH: "80", MANPAGER: "cat", PAGER: "cat" } });
    expect(m.stdout).toMatch(/^AGENTBAK\(1\) +User Commands +AGENTBAK\(1\)$/m);
    for (const c of ["agentbak backup", "agentbak token create", "agentbak drill [snapshot]", "agentbak completion <shell>"]) expect(m.stdout).toContain(`   ${c}`);
    expect(m.stdout).toMatch(/^EXIT STATUS\n {7}0 +ok: success$/m);
    const g = await execa("groff", ["-man", "-Tutf8", "-ww", "-z", file], { all: true });
    expect(g.all).toBe("");
  });
});

describe("completion", () => {
  /** What bash offers for the words typed (the last one being completed). */
  const bashComplete = async (words: string[], cwd?: string) => {
    const script = `source <(agentbak completion bash); COMP_WORDS=(${words.map((w) => `'${w}'`).join(" ")}); COMP_CWORD=${words.length - 1}; _agentbak; echo "\${COMPREPLY[@]}"`;
    const r = await execa("bash", ["-c", script], { env: { PATH: pathWithAgentbak() }, cwd });
    return r.stdout.trim().split(/\s+/).filter(Boolean);
  };

  it("bash completes commands, subcommands, options and option choices", async () => {
    expect(await bashComplete(["agentbak", "ba"])).toEqual(["backup"]);
    expect(await bashComplete(["agentbak", "token", "c"])).toEqual(["create"]);
    expect(await bashComplete(["agentbak", "restore", "latest", "--ta"])).toEqual(["--target"]);
    // an option's value is skipped when finding the command: --config's file is not taken for a command
    expect(await bashComplete(["agentbak", "--no-color", "drill", "-c", "backup", "latest", "--no-cr"])).toEqual(["--no-credential-warnings"]);
    expect(await bashComplete(["agentbak", "restore", "latest", "--integrity", ""])).toEqual(["full", "quick", "digest", "attested"]);
    expect(await bashComplete(["agentbak", "completion", ""])).toEqual(["bash", "zsh", "fish", "--help"]);
  });

  it("bash offers the shipped drill specs (what drills/ holds) and file names after --spec", async () => {
    const shipped = readdirSync(join(ROOT, "drills")).filter((f) => f.endsWith(".json")).map((f) => f.slice(0, -5));
    const here = mkdtempSync(join(tmpdir(), "agentbak-spec-"));
    writeFileSync(join(here, "my-spec.json"), "{}");
    expect((await bashComplete(["agentbak", "drill", "latest", "--spec", ""], here)).sort()).toEqual([...shipped, "my-spec.json"].sort());
    expect(await bashComplete(["agentbak", "schedule", "--spec", "che"], here)).toEqual(["checks-only"]);
  });

  it("zsh loads the script through bashcompinit and registers _agentbak for agentbak", async () => {
    if (!(await has("zsh"))) return void console.warn("zsh completion skipped: zsh is not installed");
    const r = await execa("zsh", ["-c", "autoload -U compinit && compinit -u; source <(agentbak completion zsh); echo ${_comps[agentbak]}"], { env: { PATH: pathWithAgentbak(), HOME: mkdtempSync(join(tmpdir(), "agentbak-zsh-")) }, reject: false });
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe("_bash_complete -o default -F _agentbak");
  });

  it("fish completes commands and options", async () => {
    if (!(await has("fish"))) return void console.warn("fish completion skipped: fish is not installed");
    const env = { PATH: pathWithAgentbak(), HOME: mkdtempSync(join(tmpdir(), "agentbak-fish-")) };
    const c = (line: string) => execa("fish", ["-c", `agentbak completion fish | source; complete -C '${line}'`], { env }).then((r) => r.stdout.split("\n").map((l) => l.split("\t")[0]));
    expect(await c("agentbak ba")).toEqual(["backup"]);
    expect(await c("agentbak token cr")).toEqual(["create"]);
    expect((await c("agentbak restore --integrity=")).sort()).toEqual(["--integrity=attested", "--integrity=digest", "--integrity=full", "--integrity=quick"]);
  });
});
