/**
 * The host file (src/fleet/hostfile.ts): strict validation naming every bad
 * key, globs and paths resolved against the file's folder, the last entry
 * naming a config decides its settings, nothing of an agent config read but
 * its tenant and agent id, and what a thousand entries cost to keep.
 */
import { afterAll, describe, expect, it } from "vitest";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { agentIdentities, hostFileJsonSchema, loadHostFile } from "../../../src/fleet/hostfile.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-hostfile-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

let n = 0;
/** A fleet folder: agent configs at the given relative paths (each only its `agent` key), and a host file. */
function fleet(configs: Record<string, { id: string; tenant: string } | string>, host: unknown): string {
  const dir = join(tmp, `f${n++}`);
  for (const [rel, agent] of Object.entries(configs)) {
    mkdirSync(join(dir, rel, ".."), { recursive: true });
    writeFileSync(join(dir, rel), typeof agent === "string" ? agent : JSON.stringify({ agent, repository: "./backups" }));
  }
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "agentbak-host.json"), typeof host === "string" ? host : JSON.stringify(host));
  return join(dir, "agentbak-host.json");
}
const refused = (path: string, code: number, message: RegExp) => expect(() => loadHostFile(path)).toThrow(expect.objectContaining({ code, message: expect.stringMatching(message) }));

describe("the host file", () => {
  it("resolves globs and paths against its folder; the last entry naming a config decides; enabled: false removes", () => {
    const path = fleet(
      {
        "agents/billing/agentbak.json": { id: "billing", tenant: "acme" },
        "agents/support/agentbak.json": { id: "support", tenant: "acme" },
        "agents/scratch/agentbak.json": { id: "scratch", tenant: "acme" },
        "../elsewhere/agentbak.json": { id: "other", tenant: "globex" },
      },
      {
        maxConcurrent: 8,
        listen: "127.0.0.1:8400",
        hostId: "host-a",
        defaults: { schedule: { every: "15m", jitter: "2m" }, objectives: { rpoMinutes: 30 } },
        agents: [
          { config: "agents/*/agentbak.json" },
          { config: "agents/billing/agentbak.json", schedule: { every: "5m" }, objectives: { rpoMinutes: 10, rtoSeconds: 120 }, tokens: { maxTier: "restore-request" } },
          { config: "agents/scratch/agentbak.json", enabled: false },
          { config: "../elsewhere/agentbak.json" },
        ],
      },
    );
    const h = loadHostFile(path);
    const dir = join(path, "..");
    expect(h).toMatchObject({ path, hostId: "host-a", listen: "127.0.0.1:8400", maxConcurrent: 8, warnings: [] });
    expect(h.agents).toEqual([
      { config: join(dir, "../elsewhere/agentbak.json"), everyMs: 900_000, jitterMs: 120_000, objectives: { rpoMinutes: 30 }, maxTier: "checkpoint" },
      { config: join(dir, "agents/billing/agentbak.json"), everyMs: 300_000, jitterMs: 0, objectives: { rpoMinutes: 10, rtoSeconds: 120 }, maxTier: "restore-request" },
      { config: join(dir, "agents/support/agentbak.json"), everyMs: 900_000, jitterMs: 120_000, objectives: { rpoMinutes: 30 }, maxTier: "checkpoint" },
    ]);
    expect(agentIdentities(h.agents).map((a) => `${a.tenant}/${a.agent}`)).toEqual(["globex/other", "acme/billing", "acme/support"]);
  });

  it("defaults: maxConcurrent 4, tokens up to checkpoint, no objectives (the config's own apply), no listen or host id", () => {
    const h = loadHostFile(fleet({ "a.json": { id: "a", tenant: "t" } }, { agents: [{ config: "a.json", schedule: { every: "1h" } }] }));
    expect(h).toMatchObject({ maxConcurrent: 4, listen: null, hostId: null });
    expect(h.agents).toEqual([{ config: expect.stringMatching(/a\.json$/), everyMs: 3_600_000, jitterMs: 0, objectives: null, maxTier: "checkpoint" }]);
  });

  it("is strict: every bad key is named with its path (2)", () => {
    const one = { "a.json": { id: "a", tenant: "t" } };
    refused(fleet(one, { agents: [{ config: "a.json", shedule: { every: "1h" } }] }), 2, /agents\.0: unknown key\(s\) "shedule"/);
    refused(fleet(one, { agents: [{ config: "a.json", schedule: { every: "5m", jitter: "5m" } }] }), 2, /agents\.0\.schedule\.jitter: below schedule\.every \(5m\)/);
    refused(fleet(one, { agents: [{ config: "a.json", schedule: { every: "5 minutes" } }] }), 2, /agents\.0\.schedule\.every: a duration like 30s/);
    refused(fleet(one, { agents: [{ config: "a.json", schedule: { every: "5s" } }] }), 2, /agents\.0\.schedule\.every: at least 10s/);
    refused(fleet(one, { agents: [{ config: "a.json" }] }), 2, /defaults\.schedule: needed: an agent entry without a schedule takes this one/);
    refused(fleet(one, { maxConcurrent: 0, defaults: { schedule: { every: "1h" } }, agents: [{ config: "a.json" }] }), 2, /maxConcurrent: /);
    refused(fleet(one, { defaults: { schedule: { every: "1h" } }, agents: [{ config: "a.json", tokens: { maxTier: "admin" } }] }), 2, /agents\.0\.tokens\.maxTier: /);
    refused(fleet(one, { defaults: { schedule: { every: "1h" } }, agents: [] }), 2, /agents: /);
    refused(fleet(one, { defaults: { schedule: { every: "1h" } }, agents: [{ config: "a.json" }], hostId: "a b" }), 2, /hostId: letters, digits/);
    refused(fleet(one, "{not json"), 2, /host file .*agentbak-host\.json: /);
  });

  it("a missing host file or named config is 10; a directory named as a config is 2; a glob that matches nothing is a warning", () => {
    refused(join(tmp, "no-such-host.json"), 10, /host file .*no-such-host\.json: not found/);
    const path = fleet({ "a.json": { id: "a", tenant: "t" } }, { defaults: { schedule: { every: "1h" } }, agents: [{ config: "a.json" }, { config: "missing.json" }] });
    refused(path, 10, /agents\.1\.config: .*missing\.json: not found/);
    const dirAsConfig = fleet({ "sub/x.json": { id: "a", tenant: "t" } }, { defaults: { schedule: { every: "1h" } }, agents: [{ config: "sub" }] });
    refused(dirAsConfig, 2, /agents\.0\.config: .*sub is not a regular file/);
    const h = loadHostFile(fleet({ "a.json": { id: "a", tenant: "t" } }, { defaults: { schedule: { every: "1h" } }, agents: [{ config: "a.json" }, { config: "fleet/*/agentbak.json" }] }));
    expect(h.warnings).toEqual([expect.stringMatching(/agents\.1\.config: fleet\/\*\/agentbak\.json matches no file/)]);
  });

  it("two configs of one agent, or a config without a valid agent, are refused (2) naming the files", () => {
    const dup = loadHostFile(fleet({ "a.json": { id: "a", tenant: "t" }, "b.json": { id: "a", tenant: "t" } }, { defaults: { schedule: { every: "1h" } }, agents: [{ config: "*.json" }] }));
    expect(() => agentIdentities(dup.agents)).toThrow(expect.objectContaining({ code: 2, message: expect.stringMatching(/configs .*a\.json and .*b\.json both back up agent t\/a/) }));
    const bad = loadHostFile(fleet({ "c.json": { id: "../x", tenant: "t" } }, { defaults: { schedule: { every: "1h" } }, agents: [{ config: "c.json" }] }));
    expect(() => agentIdentities(bad.agents)).toThrow(expect.objectContaining({ code: 2, message: expect.stringMatching(/config .*c\.json: agent\.id and agent\.tenant/) }));
    const junk = loadHostFile(fleet({ "d.json": "{" }, { defaults: { schedule: { every: "1h" } }, agents: [{ config: "d.json" }] }));
    expect(() => agentIdentities(junk.agents)).toThrow(expect.objectContaining({ code: 2, message: expect.stringMatching(/config .*d\.json: /) }));
  });

  it("a thousand agents by one glob: resolved in well under a second, a few hundred bytes of heap each", () => {
    const configs: Record<string, { id: string; tenant: string }> = {};
    for (let i = 0; i < 1000; i++) configs[`agents/a${i}/agentbak.json`] = { id: `agent-${i}`, tenant: "fleet" };
    const path = fleet(configs, { defaults: { schedule: { every: "15m", jitter: "1m" } }, agents: [{ config: "agents/*/agentbak.json" }] });
    const gc = (globalThis as { gc?: () => void }).gc;
    gc?.();
    const before = process.memoryUsage().heapUsed;
    const t0 = performance.now();
    const h = loadHostFile(path);
    const ids = agentIdentities(h.agents);
    const ms = performance.now() - t0;
    gc?.();
    const perAgent = (process.memoryUsage().heapUsed - before) / 1000;
    expect(ids).toHaveLength(1000);
    expect(ms).toBeLessThan(1000);
    if (gc) expect(perAgent).toBeLessThan(2048);
  });

  it("exports a JSON Schema for editors", () => {
    const s = hostFileJsonSchema() as { properties: Record<string, unknown>; required: string[] };
    expect(Object.keys(s.properties)).toEqual(expect.arrayContaining(["agents", "defaults", "maxConcurrent", "listen", "hostId"]));
    expect(s.required).toEqual(["agents"]);
  });
});
