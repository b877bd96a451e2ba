// Keys an operator will not lose: init/keygen say to copy the identity off the
// host; `key check` says whether a restore is possible from here; the "Host
// lost" procedure of docs/keys.md, run as written on a fresh home with only the
// identity and allowed_signers copied, restores the agent.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import Database from "better-sqlite3";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BIN, json, makeAgent, ROOT, run, type TestAgent } from "../helpers.js";

let a: TestAgent;
beforeAll(async () => {
  a = await makeAgent();
  const b = await a.run(["backup"]);
  expect(b.code, b.stderr).toBe(0);
});
afterAll(() => a?.cleanup());

/** The shell block under the host-lost marker in docs/keys.md. */
function hostLostBlock(): string {
  const doc = readFileSync(join(ROOT, "docs", "keys.md"), "utf8");
  const m = /<!-- host-lost:[^>]*-->\n```sh[^\n]*\n([\s\S]*?)```/.exec(doc);
  if (!m) throw new Error("docs/keys.md has no host-lost block");
  return m[1]!;
}

describe("keygen and init", () => {
  it("keygen says once to copy the identity off the host, and how", async () => {
    const home = mkdtempSync(join(tmpdir(), "agentbak-keygen-"));
    const r = await run(["keygen", "--out", join(home, "keys")]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(`warning: copy the identity off this host now: without ${join(home, "keys")}/age-identity.txt no snapshot can be decrypted`);
    expect(r.stderr).toMatch(/scp 'THIS-HOST:.*\{age-identity\.txt,allowed_signers\}'/);
    expect(r.stderr.match(/copy the identity off/g)).toHaveLength(1);
  });

  it("init says it when it made the keys, and not when they were there", async () => {
    const dir = mkdtempSync(join(tmpdir(), "agentbak-init-"));
    const env = { AGENTBAK_HOME: join(dir, "home") };
    const first = await run(["init", "--agent-id", "a1", "--tenant", "t", "--yes"], { cwd: dir, env });
    expect(first.code, first.stderr).toBe(0);
    expect(first.stderr).toContain("copy the identity off this host now");
    const again = await run(["init", "--yes"], { cwd: dir, env });
    expect(again.code, again.stderr).toBe(0);
    expect(again.stderr).not.toContain("copy the identity off");
  });
});

describe("key check", () => {
  it("on the agent's host: a restore is possible (0), naming the recipient and the signer", async () => {
    const r = await a.run(["key", "check", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const k = json(r);
    expect(k.restore_possible).toBe(true);
    expect(k.identities.recipients).toEqual([a.recipient]);
    expect(k.recipients).toEqual([{ recipient: a.recipient, identity_here: true }]);
    expect(k.allowed_signers.signers).toHaveLength(1);
    expect(k.signing_key.trusted_here).toBe(true);
    expect(k.latest.status).toBe("ok");
    // never a secret
    expect(r.stdout + r.stderr).not.toMatch(/AGE-SECRET-KEY-/);
    const human = await a.run(["key", "check"]);
    expect(human.stderr).toMatch(/✓ a restore is possible from here$/);
  });

  it("without the identity: 12, naming the file", async () => {
    const r = await a.run(["key", "check"], { AGENTBAK_IDENTITY_FILE: join(a.tmp, "nowhere.txt") });
    expect(r.code).toBe(12);
    expect(r.stderr).toContain(`✗ no restore from here: no usable identity: cannot read ${join(a.tmp, "nowhere.txt")} (ENOENT)`);
  });

  it("with an identity for other recipients: 12", async () => {
    const other = mkdtempSync(join(tmpdir(), "agentbak-other-"));
    expect((await run(["keygen", "--out", other])).code).toBe(0);
    const r = await a.run(["key", "check", "--identity", join(other, "age-identity.txt")]);
    expect(r.code).toBe(12);
    expect(r.stderr).toMatch(/no identity here opens the config's recipients/);
  });

  it("in a home without allowed_signers: 12, and the latest snapshot does not verify", async () => {
    const home = mkdtempSync(join(tmpdir(), "agentbak-bare-"));
    copyFileSync(a.identity, join(home, "age-identity.txt"));
    const r = await run(["key", "check", "--repo", a.repo, "--tenant", "acme", "--agent", "billing-agent", "--json"], { env: { AGENTBAK_HOME: home } });
    expect(r.code).toBe(12);
    const k = json(r);
    expect(k.restore_possible).toBe(false);
    expect(k.problems.map((p: any) => p.code)).toEqual([12, 13]);
  });
});

it("docs/keys.md's host-lost procedure, run as written on a fresh home with only the identity and allowed_signers, restores the agent", async () => {
  const machine = mkdtempSync(join(tmpdir(), "agentbak-newhost-"));
  const saved = join(machine, "saved-keys");
  mkdirSync(saved);
  copyFileSync(a.identity, join(saved, "age-identity.txt"));
  copyFileSync(join(a.home, "allowed_signers"), join(saved, "allowed_signers"));
  const bin = join(machine, "bin");
  mkdirSync(bin);
  writeFileSync(join(bin, "agentbak"), `#!/bin/sh\nexec node ${BIN} "$@"\n`, { mode: 0o755 });
  const target = join(machine, "restored");
  const r = await execa("bash", ["--norc", "--noprofile", "-euo", "pipefail", "-c", hostLostBlock()], {
    stdin: "ignore",
    cwd: machine,
    extendEnv: false,
    env: { PATH: `${bin}:${process.env.PATH}`, HOME: join(machine, "home"), TMPDIR: join(a.tmp, "tmp"), NO_COLOR: "1", SAVED_KEYS: saved, REPO: a.repo, TENANT: "acme", AGENT: "billing-agent", TARGET: target },
    reject: false,
    all: true,
  });
  const all = String(r.all);
  // the restore's exit is the block's: 3 only for the agent's credentials, which are not on the new host
  expect([0, 3], all).toContain(r.exitCode);
  for (const w of all.slice(all.indexOf("✓ restored ")).split("\n").filter((l) => l.startsWith("warning:"))) expect(w).toMatch(/^warning: credential \w+ \(.*\) is missing here$/);
  expect(all).toContain("✓ a restore is possible from here");
  expect(all).toContain(`✓ restored `);
  // the restore record is signed by the new host's key: activate takes the target
  const act = await run(["activate", "--target", target, "--accept-unresolved", "--reason", "host-lost test", "--yes"], { env: { HOME: join(machine, "home"), AGENTBAK_HOME: join(machine, "home", ".config", "agentbak"), TMPDIR: join(a.tmp, "tmp") } });
  // 3: the open operation accepted unresolved is a warning; an unsigned record would be refused
  expect(act.code, act.stderr).toBe(3);
  expect(act.stderr).toMatch(/^✓ activated billing-agent at generation 1$/m);
  // the restored database holds what the agent's did
  const rows = (p: string) => new Database(p, { readonly: true }).prepare("SELECT count(*) AS n FROM sqlite_master").get();
  const dbs = JSON.parse(readFileSync(a.config, "utf8")).databases as Record<string, string> | { name: string; path: string }[];
  const first = Array.isArray(dbs) ? dbs[0]!.path : Object.values(dbs)[0]!;
  expect(rows(join(target, first))).toEqual(rows(join(a.dir, first)));
});
