// Terminal behaviour through a real pty (node-pty): Ctrl-C at a spinner and at
// a prompt, a terminal of 0 columns, a backup started in the background of an
// interactive job-control shell, and colour (NO_COLOR, --no-color, FORCE_COLOR).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { existsSync, mkdirSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { BIN, json, makeAgent, run, type TestAgent } from "../helpers.js";
import { COLOR, plain, Term } from "../pty.js";

let a: TestAgent;
beforeAll(async () => {
  // big enough that a backup runs for a while on two shared cores
  a = await makeAgent({ sizeMb: 48 });
}, 180_000);
afterAll(() => a?.cleanup(), 60_000);

const listed = async () => json(await a.run(["snapshots", "--json"])) as unknown[];

describe("Ctrl-C", () => {
  it("during a backup's spinner interrupts (130), publishes nothing and leaves no staging behind", async () => {
    const t = Term.agentbak(["backup"], { cwd: a.dir, env: a.env });
    await t.waitFor(/snapshotting databases|checking snapshot/);
    t.write("\x03");
    const e = await t.exit(60_000);
    expect(e.code, plain(t.output)).toBe(130);
    expect(plain(t.output)).toMatch(/agentbak: interrupted/);
    expect(await listed()).toEqual([]);
    expect(a.leftovers()).toEqual([]);
    // the lock went with it: the next backup runs
    expect((await a.run(["backup"])).code).toBe(0);
    expect(await listed()).toHaveLength(1);
  });

  it("at a prompt prints interrupted and exits 130, writing nothing", async () => {
    const d = join(a.tmp, "prompt");
    mkdirSync(d);
    const home = join(a.tmp, "prompt-home");
    const t = Term.agentbak(["init"], { cwd: d, env: { AGENTBAK_HOME: home } });
    await t.waitFor(/Agent id/);
    t.write("\x03");
    const e = await t.exit();
    expect(e.code, plain(t.output)).toBe(130);
    expect(plain(t.output)).toMatch(/agentbak: interrupted/);
    expect(plain(t.output)).not.toMatch(/internal error|ExitPromptError/);
    expect(readdirSync(d)).toEqual([]);
    expect(existsSync(home)).toBe(false);
  });

  it("at restore's confirmation exits 130 and creates no target", async () => {
    const target = join(a.tmp, "restore-target");
    const t = Term.agentbak(["restore", "latest", "--target", target], { cwd: a.dir, env: a.env });
    await t.waitFor(/Restore this snapshot\?/);
    t.write("\x03");
    expect((await t.exit()).code, plain(t.output)).toBe(130);
    expect(existsSync(target)).toBe(false);
  });
});

describe("terminal size", () => {
  it("a terminal of 0 columns gets no spinner loop: the backup finishes, prints little, and SIGTERM still works", async () => {
    // `stty cols 0` is what `ssh -tt`, `script` and expect wrappers leave behind
    const t = new Term("sh", ["-c", `stty cols 0 rows 0; exec "${process.execPath}" "${BIN}" backup`], { cwd: a.dir, env: a.env });
    const e = await t.exit(120_000);
    expect(e.code, plain(t.output).slice(-500)).toBe(0);
    expect(t.output.length).toBeLessThan(20_000);
    expect(plain(t.output)).toMatch(/backed up billing-agent/);

    const term = new Term("sh", ["-c", `stty cols 0 rows 0; exec "${process.execPath}" "${BIN}" backup`], { cwd: a.dir, env: a.env });
    // once its staging folder exists the backup is under way
    for (const end = Date.now() + 30_000; !a.leftovers().length && Date.now() < end; ) await new Promise((r) => setTimeout(r, 10));
    term.kill("SIGTERM");
    const stopped = await term.exit(15_000);
    expect(stopped.code, plain(term.output).slice(-500)).toBe(130);
  });
});

describe("job control", () => {
  it("`agentbak backup &` from an interactive shell is not stopped (SIGTTOU) and completes", async () => {
    const before = (await listed()).length;
    const sh = new Term("bash", ["--norc", "--noprofile", "-i"], { cwd: a.dir, env: { ...a.env, PS1: "$ " } });
    await sh.waitFor(/\$ /);
    sh.write(`"${process.execPath}" "${BIN}" backup & wait $!; echo "rc=$?"; jobs -l; echo "waited-$((40+2))"\n`);
    await sh.waitFor(/waited-42/, 120_000); // not in the echo of the typed line
    const out = plain(sh.output);
    sh.write("kill -9 %1 2>/dev/null; exit\n"); // a stopped job (the bug) would keep the shell open
    await sh.exit();
    expect(out).not.toMatch(/Stopped/);
    expect(out).toMatch(/rc=0/);
    expect(await listed()).toHaveLength(before + 1);
  });
});

describe("colour", () => {
  it("is on for a terminal, off with NO_COLOR and with --no-color (a global option)", async () => {
    const colored = Term.agentbak(["verify", "latest"], { cwd: a.dir, env: a.env });
    expect((await colored.exit()).code).toBe(0);
    expect(colored.output).toMatch(COLOR);

    const noColor = Term.agentbak(["verify", "latest"], { cwd: a.dir, env: { ...a.env, NO_COLOR: "1" } });
    expect((await noColor.exit()).code).toBe(0);
    expect(plain(noColor.output)).toMatch(/verified/);
    expect(noColor.output).not.toMatch(COLOR);

    for (const args of [["verify", "latest", "--no-color"], ["--no-color", "verify", "latest"]]) {
      const flag = Term.agentbak(args, { cwd: a.dir, env: a.env });
      expect((await flag.exit()).code, plain(flag.output)).toBe(0);
      expect(plain(flag.output)).toMatch(/verified/);
      expect(flag.output).not.toMatch(COLOR);
    }
  });

  it("FORCE_COLOR colours output that is not a terminal; --no-color beats it", async () => {
    const forced = await run(["verify", "latest"], { cwd: a.dir, env: { ...a.env, NO_COLOR: undefined, FORCE_COLOR: "1" } });
    expect(forced.code).toBe(0);
    expect(forced.stderr).toMatch(COLOR);
    const off = await run(["verify", "latest", "--no-color"], { cwd: a.dir, env: { ...a.env, NO_COLOR: undefined, FORCE_COLOR: "1" } });
    expect(off.code).toBe(0);
    expect(off.stderr + off.stdout).not.toMatch(COLOR);
  });
});
