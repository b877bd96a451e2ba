// Issue 32, trust at the edges: who is the authority. Fencing generations are the agent's, not one
// repository's (E5); an approval is one decision, and requests and decisions in the repository are
// signed (E6); the audit log verifies, and an edited, reordered, cut or forged entry is named (E7).
// Everything through the real binary, with real repositories, a second host's AGENTBAK_HOME and an
// MCP server for the agent's requests.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cpSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, type TestAgent } from "./helpers.js";

const AGENT_DIR = "tenants/acme/agents/billing-agent";

/** Another host: the same keys and signers as `a`, none of its trusted state. */
function secondHome(a: TestAgent, name: string): Record<string, string> {
  const home = join(a.tmp, name);
  mkdirSync(home);
  for (const f of ["age-identity.txt", "age-recipient.txt", "signing-key", "signing-key.pub", "allowed_signers"]) cpSync(join(a.home, f), join(home, f));
  return { AGENTBAK_HOME: home };
}

describe("[E5] fencing generations belong to the agent", () => {
  let a: TestAgent;
  let b: string;
  let host2: Record<string, string>;
  const t = (n: string) => join(a.tmp, n);
  const restore = async (target: string, env: Record<string, string> = {}, repo?: string) => {
    const r = await a.run(["restore", "latest", "--target", target, "--yes", "--json", ...(repo ? ["--repo", repo] : [])], env);
    expect([0, 3], r.stderr).toContain(r.code); // 3: a credential reference is absent on this host
    return json(r);
  };
  const fence = (target: string, generation: number, env: Record<string, string> = {}) => a.run(["fence", "check", "--target", target, "--generation", String(generation)], env);

  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
    expect((await a.run(["backup"])).code).toBe(0);
    b = t("repo-b");
    host2 = secondHome(a, "home-2");
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E5] after copy, restores from each repository get increasing generations, and fence check of the older one fails across repositories", async () => {
    expect((await restore(t("t1"))).generation).toBe(1);
    const c = await a.run(["copy", "--from", a.repo, "--to", b, "--json"]);
    expect(c.code, c.stderr).toBe(0);
    // another host, restoring from the copy: nothing of the first host's trusted state helps it
    expect((await restore(t("t2"), host2, b)).generation).toBe(2);
    const old = await fence(t("t1"), 1);
    expect(old.code).toBe(14);
    expect(old.stderr).toMatch(/generation 1 of billing-agent is superseded \(current generation is 2\)/);
    expect((await fence(t("t2"), 2, host2)).code).toBe(0);
    // and back: a restore from the original continues above the copy's, and the copy's restore is fenced
    expect((await restore(t("t3"))).generation).toBe(3);
    const second = await fence(t("t2"), 2, host2);
    expect(second.code).toBe(14);
    expect(second.stderr).toMatch(/generation 2 of billing-agent is superseded \(current generation is 3\)/);
    expect((await fence(t("t3"), 3, host2)).code).toBe(0);
  });

  it("[E5] a linked repository that can not be reached: restore continues above what it sees and names it (3); fence check names it (3)", async () => {
    renameSync(b, `${b}.away`);
    try {
      const r = await a.run(["restore", "latest", "--target", t("t4"), "--yes", "--json"], host2);
      expect(r.code, r.stderr).toBe(3);
      const out = json(r);
      expect(out.generation).toBe(4); // above the original's 3, though the copy (and this host) are unknown
      expect(out.warnings.join("\n")).toContain(`generation: ${b}, a repository linked with this one by copy, could not be read`);
      const f = await fence(t("t4"), 4, host2);
      expect(f.code).toBe(3);
      expect(f.stderr).toContain(`${b}, a repository linked with this one by copy, could not be read`);
    } finally {
      renameSync(`${b}.away`, b);
    }
    // back again: the copy's restore learns of 4 through the original, and continues above it
    expect((await fence(t("t3"), 3, host2)).code).toBe(14);
    expect((await restore(t("t5"), host2, b)).generation).toBe(5);
    expect((await fence(t("t4"), 4)).code).toBe(14);
  });

  it("[E5] a generation record that is not a count is refused (13) naming it; nothing is restored", async () => {
    const rec = join(a.repo, AGENT_DIR, "generation.json");
    const good = readFileSync(rec, "utf8");
    writeFileSync(rec, JSON.stringify({ generation: "9" }));
    try {
      const r = await a.run(["restore", "latest", "--target", t("t6"), "--yes"]);
      expect(r.code).toBe(13);
      expect(r.stderr).toMatch(/generation record tenants\/acme\/agents\/billing-agent\/generation\.json in .* holds generation "9", not a count/);
      expect(existsSync(t("t6"))).toBe(false);
      expect((await fence(t("t3"), 3)).code).toBe(13); // restored from this repository
      // read through a link, the damaged record is named, not trusted (3)
      const linked = await fence(t("t5"), 5);
      expect(linked.code).toBe(3);
      expect(linked.stderr).toMatch(/could not be read \(generation record .* holds generation "9", not a count/);
    } finally {
      writeFileSync(rec, good);
    }
  });
});
