// runDrill in process on a real signed bundle (no worker): the restored agent checked (integrity, invariants, credentials), a failed
// check failing the drill without throwing, the temp folder always removed; what can not run (reconciliation without a config, another
// runtime without approval) refused before anything is restored.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runBackup } from "../../../src/capture/backup.js";
import { loadConfig } from "../../../src/config/load.js";
import { keygen, loadIdentities, loadSigningKey } from "../../../src/crypto/keys.js";
import { loadTrust } from "../../../src/crypto/trust.js";
import { runDrill, type DrillOptions } from "../../../src/drill/runner.js";
import { loadSpec } from "../../../src/drill/spec.js";
import { Repository } from "../../../src/repository/repository.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-runner-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const home = join(tmp, "home");
const keys = keygen(home, "ops");
const dir = join(tmp, "agent");
let base: Omit<DrillOptions, "spec">;
let config: ReturnType<typeof loadConfig>;
beforeAll(async () => {
  mkdirSync(join(dir, "drill"), { recursive: true });
  const db = new Database(join(dir, "state.sqlite"));
  db.exec("CREATE TABLE ledger (amount INTEGER); INSERT INTO ledger VALUES (5), (-3); PRAGMA user_version = 7");
  db.close();
  writeFileSync(join(dir, "api.key"), "k\n");
  writeFileSync(join(dir, "agentbak.json"), JSON.stringify({ agent: { id: "a", tenant: "t" }, repository: "repo", recipients: [keys.recipient], databases: [{ name: "state", path: "state.sqlite" }], credentials: [{ name: "api", ref: "file:api.key" }, { name: "gone", ref: "file:gone.key" }], runtime: { agentVersion: "1.2.0" } }));
  writeFileSync(join(dir, "drill/count.sql"), "-- check: the ledger has rows\nSELECT 1 WHERE (SELECT count(*) FROM ledger) = 0\n");
  writeFileSync(join(dir, "drill/positive.sql"), "-- check: amounts are positive\nSELECT amount FROM ledger WHERE amount <= 0\n");
  const { repo } = await Repository.init(join(dir, "repo"), { home });
  config = loadConfig(join(dir, "agentbak.json"));
  const trust = loadTrust(home);
  const r = await runBackup(config, { repo, trust, home, signingKey: loadSigningKey(join(home, "signing-key")), principal: "ops" });
  const s = (await repo.list(trust)).find((x) => x.snapshot_id === r.snapshot_id)!;
  const opened = await repo.open(s, trust);
  base = { bundle: { path: opened.path, links: opened.links }, trust, identities: () => loadIdentities(join(home, "age-identity.txt")), credentials: { root: dir, warn: true }, config: config.config };
});
const spec = (name: string, s: Record<string, unknown>) => {
  const p = join(dir, "drill", `${name}.json`);
  writeFileSync(p, JSON.stringify({ name, ...s }));
  return loadSpec(p);
};
/** this process's drill temp folders */
const temps = () => readdirSync(tmpdir()).filter((f) => f.startsWith(`agentbak-drill-${process.pid}-`) || f === `agentbak-drill-${process.pid}`);

describe("runDrill", () => {
  it("restores into a temp folder, checks it, and passes when every error check holds; the folder is removed", async () => {
    const r = await runDrill({ ...base, spec: spec("count", { invariants: ["count.sql"] }) });
    expect(r).toMatchObject({ ok: true, spec: "count", tenant: "t", agent_id: "a", integrity: { state: "ok" }, schema: { manifest: 7, restored: { state: 7 } }, scenarios: [], test_task_id: null });
    expect(r.checks.map((c) => [c.name, c.ok])).toEqual(expect.arrayContaining([["components", true], ["integrity:state", true], ["schema_version:state", true], ["invariant:count", true]]));
    // a credential that resolves here is present; one that does not is a warning and an unresolved difference
    expect(r.credentials).toEqual([{ name: "api", ref: "file:api.key", status: "present" }, { name: "gone", ref: "file:gone.key", status: expect.not.stringMatching(/^present$/) }]);
    expect(r.warnings.join("\n")).toContain("credential:gone");
    expect(r.unresolved.join("\n")).toContain("credential gone (file:gone.key)");
    expect(r.rpo_seconds).toBeGreaterThanOrEqual(0);
    expect(temps()).toEqual([]);
  });

  it("a failing invariant fails the drill (never a throw), with the offending rows", async () => {
    const r = await runDrill({ ...base, spec: spec("positive", { invariants: ["*.sql"] }) });
    expect(r.ok).toBe(false);
    const failed = r.checks.find((c) => c.name === "invariant:positive");
    expect(failed).toMatchObject({ ok: false, severity: "error", detail: "1 offending row(s)", sample: [{ amount: -3 }] });
    expect(r.checks.find((c) => c.name === "invariant:count")).toMatchObject({ ok: true });
    expect(temps()).toEqual([]);
  });

  it("a spec asking for reconciliation without a config's reconcile section is exit 2, before anything is restored", async () => {
    const s = spec("rec", { invariants: [], worker: { command: ["true"] }, reconcile: true });
    await expect(runDrill({ ...base, config: undefined, spec: s })).rejects.toMatchObject({ code: 2, message: `drill spec ${s.path} asks for reconciliation, but no config with a reconcile section was given (pass -c)` });
  });

  it("a snapshot of another runtime than the config's is refused (exit 14) unless allowed", async () => {
    const other = { ...config.config, runtime: { ...config.config.runtime, agentVersion: "2.0.0" } };
    const s = spec("rt", { invariants: [] });
    await expect(runDrill({ ...base, config: other, spec: s })).rejects.toMatchObject({ code: 14, message: expect.stringContaining("--allow-runtime-change") });
    expect(temps()).toEqual([]);
    const r = await runDrill({ ...base, config: other, spec: s, allowRuntimeChange: true });
    expect(r.runtime_differences).toEqual([expect.objectContaining({ compatible: false })]);
    expect(existsSync(base.bundle.path)).toBe(true);
  });
});
