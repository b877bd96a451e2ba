/**
 * The help generators (src/ui/help.ts) print from the one exit-code table and
 * the one command table: every exit code, every command and every option
 * appears, and nothing is invented.
 */
import { describe, expect, it } from "vitest";
import { buildProgram } from "../../../src/cli.js";
import { Exit, EXIT_MEANINGS, EXIT_NAMES } from "../../../src/errors.js";
import { bashCompletion, environmentText, exitCodesText, fishCompletion, manPage, walk } from "../../../src/ui/help.js";

const program = buildProgram({ code: 0 });

describe("help generators", () => {
  it("exit-codes lists every code of errors.ts's Exit with its name and meaning, and no other", () => {
    const t = exitCodesText();
    const listed = [...t.matchAll(/^ {2}(\d+) +([a-z_]+) /gm)].map((m) => [Number(m[1]), m[2]]);
    expect(listed).toEqual(Object.values(Exit).map((c) => [c, EXIT_NAMES[c]]));
    for (const m of Object.values(EXIT_MEANINGS)) expect(t.replace(/\s+/g, " ")).toContain(m);
    for (const line of t.split("\n")) expect(line.length).toBeLessThanOrEqual(80);
  });

  it("environment names every variable DESIGN.md lists", () => {
    const t = environmentText();
    for (const v of ["AGENTBAK_CONFIG", "AGENTBAK_REPOSITORY", "AGENTBAK_IDENTITY_FILE", "AGENTBAK_IDENTITY ", "AGENTBAK_SIGNING_KEY_FILE", "AGENTBAK_HOME", "NO_COLOR"]) expect(t).toContain(v);
  });

  it("the man page has a section per command with each of its options, and the exit table", () => {
    const m = manPage(program, "9.9.9");
    expect(m).toMatch(/^\.TH AGENTBAK 1 "" "agentbak 9\.9\.9"/);
    const cmds = walk(program).filter((c) => !(c.cmd.commands.length && !c.cmd.options.length));
    expect(cmds.length).toBeGreaterThan(25);
    for (const { path, cmd } of cmds) {
      const at = m.indexOf(`.SS "agentbak ${path.replace(/-/g, "\\-")}`);
      expect(at, path).toBeGreaterThan(0);
      for (const o of cmd.options) expect(m.slice(at), `${path} ${o.flags}`).toContain(`.B ${o.flags.replace(/-/g, "\\-")}`);
    }
    for (const c of Object.values(Exit)) expect(m).toContain(`.TP\n.B ${c}\n${EXIT_NAMES[c]}:`);
    // no line starts a roff request by accident (a description beginning with a dot)
    for (const line of m.split("\n")) if (line.startsWith(".")) expect(line).toMatch(/^\.(TH|SH|SS|TP|B|I|PP|RS|RE|nf|fi) ?/);
  });

  it("bash completion has a case for every command path and offers its options", () => {
    const b = bashCompletion(program);
    for (const { path, cmd } of walk(program)) {
      const line = b.split("\n").find((l) => l.startsWith(`    '${path}') words=`));
      expect(line, path).toBeDefined();
      for (const o of cmd.options) expect(line, `${path} ${o.flags}`).toContain(o.long!);
    }
  });

  it("fish completion names every top-level command once under __fish_use_subcommand", () => {
    const f = fishCompletion(program);
    const top = [...f.matchAll(/-n '__fish_use_subcommand' -a '([^']+)'/g)].map((m) => m[1]);
    expect(top).toEqual(program.commands.map((c) => c.name()));
  });
});
