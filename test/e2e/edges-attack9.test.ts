// The ninth attack on issue 32's surfaces (docs/security-edges.md, "Ninth attack"): cases no earlier round
// wrote, tried through the real binary. Each case fails without its fix.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, type TestAgent } from "../helpers.js";

let a: TestAgent;
beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
  const b = await a.run(["backup", "--json"]);
  expect(b.code, b.stderr).toBe(0);
}, 120_000);
afterAll(() => a?.cleanup());

describe("[E2] a --tenant or --agent no agent can have is an error, never an empty answer", () => {
  it("[E2] snapshots, snapshots --all, status and copy refuse an id outside the pattern (2), naming the flag with ESC and bidi shown escaped (was: snapshots 0 with an empty listing; copy initialised the destination)", async () => {
    // the agent's own tenant, one letter changed in case: it has a snapshot, and the listing said it had none
    const own = await a.run(["snapshots", "--json"]);
    expect(json(own).snapshots ?? json(own)).not.toHaveLength(0);
    for (const args of [
      ["snapshots", "--tenant", "Acme"],
      ["snapshots", "--all", "--tenant", "\u001b[31macme\u202e"],
      ["snapshots", "--agent", "../billing-agent"],
      ["status", "--agent", "Billing-Agent", "--tenant", "acme"],
    ]) {
      const r = await a.run(args);
      expect(r.code, `${args.join(" ")}: ${r.stdout}`).toBe(2);
      expect(r.stderr).toMatch(/^agentbak: --(tenant|agent): not an id: ".*" \(lowercase letters/);
      expect(r.stderr.trim().split("\n")).toHaveLength(1);
      expect(r.stderr).not.toMatch(/[\u001b\u202e]/);
      expect(r.stdout).toBe("");
    }
    const esc = await a.run(["snapshots", "--all", "--tenant", "\u001b[31macme\u202e"]);
    expect(esc.stderr).toContain('"\\u001b[31macme\\u202e"');
    // copy: refused before the destination is made
    const to = join(a.tmp, "copy-bad-tenant");
    const c = await a.run(["copy", "--from", a.repo, "--to", to, "--tenant", "Acme"]);
    expect(c.code, c.stdout).toBe(2);
    expect(c.stderr).toMatch(/--tenant: not an id: "Acme"/);
    expect(existsSync(to)).toBe(false);
  }, 120_000);
});
