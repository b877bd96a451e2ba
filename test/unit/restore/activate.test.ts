/**
 * Activation and fencing (restore/activate.ts) on a real restored target (a
 * signed restore record, a SUSPENDED marker, a real SQLite state) and a real
 * repository: activation refuses (14, with a signed refusal in the audit log)
 * while the restore is superseded, an open operation is unresolved by the
 * reconciliation or still open in the restored database, the original
 * runtime answers alive, or the operator does not confirm; it lifts the
 * marker and signs the activation record otherwise. fenceCheck accepts only
 * the current generation.
 */
import Database from "better-sqlite3";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { activate, fenceCheck, type ActivateOptions } from "../../../src/restore/activate.js";
import { MARKER_DIR, openTarget, SUSPENDED, summarize, writeReconcileRecord, writeTargetRecord, type Target } from "../../../src/restore/state.js";
import { Repository } from "../../../src/repository/repository.js";
import { generateSigningKey, publicKeyLine } from "../../../src/crypto/sshsig.js";
import { parseAllowedSigners, type Trust } from "../../../src/crypto/trust.js";
import type { LoadedConfig } from "../../../src/config/load.js";
import type { OpenOperation, OperationResult } from "../../../src/reconcile/operations.js";
import { AgentbakError } from "../../../src/errors.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-activate-"));
const savedHome = process.env.AGENTBAK_HOME;
process.env.AGENTBAK_HOME = join(dir, "home"); // fenceCheck reads this host's trusted state there
afterAll(() => { rmSync(dir, { recursive: true, force: true }); if (savedHome === undefined) delete process.env.AGENTBAK_HOME; else process.env.AGENTBAK_HOME = savedHome; });
const a = { tenant: "acme", agent: "billing-agent" };
const key = generateSigningKey("ops");
const trust: Trust = { signers: parseAllowedSigners(`ops ${publicKeyLine(key.publicKey)}\n`), revoked: [] };
const OPS: OpenOperation[] = [
  { id: 1, idempotency_key: "pay-1", kind: "payment", strategy: "retry-safe" },
  { id: 2, idempotency_key: "mail-2", kind: "email", strategy: "observe" },
];
let n = 0;

/** A restored, suspended target of `a` at the repository's current generation, its state listing both operations open. */
async function restored(): Promise<{ t: Target; repo: Repository; lc: LoadedConfig }> {
  const { repo } = await Repository.init(join(dir, `repo${n++}`));
  const { generation } = await repo.reserveGeneration(a, 0, {}, { trust, key });
  const target = join(dir, `target${n++}`);
  mkdirSync(join(target, "state"), { recursive: true });
  const db = new Database(join(target, "state", "agent.db"));
  db.exec("CREATE TABLE ops (id INTEGER PRIMARY KEY, key TEXT, kind TEXT, done INTEGER); INSERT INTO ops VALUES (1, 'pay-1', 'payment', 0), (2, 'mail-2', 'email', 0)");
  db.close();
  mkdirSync(join(target, MARKER_DIR));
  writeTargetRecord(target, {
    agent_id: a.agent, tenant: a.tenant, snapshot_id: "20260301T100000000Z-0a1b2c3d", sequence: 1, generation, repository: repo.location,
    restored_at: new Date().toISOString(), open_operations: OPS, databases: [{ name: "main", path: "state/agent.db" }], config: null,
  }, key);
  writeFileSync(join(target, MARKER_DIR, SUSPENDED), "");
  const lc = {
    path: join(target, "agentbak.json"), dir: target, resolve: (p: string) => resolve(target, p),
    config: { openOperations: { database: "main", sql: "SELECT id, key AS idempotency_key, kind FROM ops WHERE done = 0", strategies: {}, defaultStrategy: "observe" }, runtime: {}, credentials: [] },
  } as unknown as LoadedConfig;
  return { t: openTarget(target, trust), repo, lc };
}
const opts = (o: Partial<ActivateOptions> = {}): ActivateOptions => ({ signingKey: key, confirm: async () => true, ...o });
const reconciled = (t: Target, res: OperationResult["resolution"][]) => {
  const results = OPS.map((op, i) => ({ ...op, outcome: "completed" as const, receipt: "r", resolution: res[i]!, resolved: res[i] === "completed" || res[i] === "retry", attempts: 1, applied: null, detail: "probe", at: "2026-03-01T11:00:00Z" }));
  writeReconcileRecord(t, { snapshot_id: t.record.snapshot_id, generation: t.record.generation, reconciled_at: "2026-03-01T11:00:00Z", operations: results, summary: summarize(OPS, results) }, key);
};
const closeOps = (t: Target) => { const d = new Database(join(t.dir, "state", "agent.db")); d.exec("UPDATE ops SET done = 1"); d.close(); };
async function failure(p: Promise<unknown>): Promise<AgentbakError> {
  const e = await p.then(() => null, (x: unknown) => x);
  expect(e).toBeInstanceOf(AgentbakError);
  return e as AgentbakError;
}
const events = async (repo: Repository) => (await repo.auditLog(a)).trim().split("\n").filter(Boolean).map((l) => JSON.parse(l).event);

describe("activate", () => {
  it("refuses while operations were never reconciled (14, signed refusal); the marker stays", async () => {
    const { t, repo, lc } = await restored();
    const e = await failure(activate(t, opts({ lc })));
    expect(e.code).toBe(14);
    expect(e.message).toBe(`2 open operation(s) unresolved: pay-1 (never reconciled); mail-2 (never reconciled); run agentbak reconcile --target ${t.dir}, or pass --accept-unresolved --reason TEXT`);
    expect(existsSync(join(t.dir, MARKER_DIR, SUSPENDED))).toBe(true);
    expect(await events(repo)).toEqual(["activate-refused"]);
    expect((await repo.verifyAudit(a, trust, null)).entries).toBe(1);
  });

  it("reconciled and closed in the restored state: activates, writes the record, lifts the marker, signs the receipt; again: already active", async () => {
    const { t, repo, lc } = await restored();
    reconciled(t, ["completed", "retry"]);
    closeOps(t);
    const r = await activate(t, opts({ lc }));
    expect(r).toMatchObject({ activated: true, already_active: false, unresolved: [], receipt_signed: true, warnings: [], reconciliation: { operations: 2, completed: 1, retry: 1, unresolved: 0 } });
    expect(existsSync(join(t.dir, MARKER_DIR, SUSPENDED))).toBe(false);
    expect(JSON.parse(readFileSync(join(t.dir, MARKER_DIR, "activation.json"), "utf8"))).toMatchObject({ kind: "activation-record", generation: t.record.generation, accepted_unresolved: 0, isolated: false });
    expect(await events(repo)).toEqual(["activate"]);
    const again = await activate(t, opts({ lc }));
    expect([again.activated, again.already_active]).toEqual([false, true]);
  });

  it("reconciled as completed but still open in the restored database: unresolved; without a config it can not be re-read: unresolved", async () => {
    const { t, lc } = await restored();
    reconciled(t, ["completed", "completed"]);
    const e = await failure(activate(t, opts({ lc })));
    expect(e.message).toContain("pay-1 (still open in the restored database: openOperations.sql lists id 1)");
    closeOps(t);
    const none = await failure(activate(t, opts()));
    expect(none.message).toContain("(the restored database was not re-read: no openOperations query in the config)");
  });

  it("escalated operations may be accepted with a reason (a warning says so); an empty reason is 2", async () => {
    const { t, lc } = await restored();
    reconciled(t, ["completed", "escalated"]);
    closeOps(t);
    expect((await failure(activate(t, opts({ lc, acceptUnresolved: "  " })))).code).toBe(2);
    const r = await activate(t, opts({ lc, acceptUnresolved: "the mail was checked by hand" }));
    expect(r.activated).toBe(true);
    expect(r.unresolved.map((u) => [u.idempotency_key, u.why])).toEqual([["mail-2", "escalated: probe"]]);
    expect(r.warnings).toEqual(["activated with 1 open operation(s) accepted unresolved (reason: the mail was checked by hand); the agent may repeat or miss them"]);
  });

  it("a superseded restore is refused (14) whatever else holds", async () => {
    const { t, repo, lc } = await restored();
    reconciled(t, ["completed", "completed"]);
    closeOps(t);
    await repo.reserveGeneration(a, 0, {}, { trust, key }); // a later restore elsewhere
    const e = await failure(activate(t, opts({ lc })));
    expect(e.message).toBe(`generation ${t.record.generation} of billing-agent is superseded by generation ${t.record.generation + 1}; this restore must not be activated`);
  });

  it("the original runtime alive refuses unless --isolated (then a warning); not confirmed refuses; no key warns unsigned", async () => {
    const { t, lc } = await restored();
    reconciled(t, ["completed", "completed"]);
    closeOps(t);
    writeFileSync(join(t.dir, "runtime.pid"), String(process.pid));
    (lc.config.runtime as Record<string, unknown>).liveness = { pidFile: "runtime.pid", timeoutSeconds: 2 };
    const alive = await failure(activate(t, opts({ lc })));
    expect(alive.message).toMatch(/^the original runtime may still run \(pidFile: alive, pid \d+ .*\); stop it, or pass --isolated/);
    expect((await failure(activate(t, opts({ lc, isolated: true, confirm: async () => false })))).message).toBe("activation not confirmed");
    const r = await activate(t, opts({ lc, isolated: true, signingKey: null }));
    expect(r.activated).toBe(true);
    expect(r.warnings).toEqual(["activated while the original runtime answers pidFile: alive (--isolated)", "no signing key: the activation record is recorded unsigned"]);
  });
});

describe("fenceCheck", () => {
  it("the current generation passes; an older one is superseded, a higher one never issued (14); no repository is 2", async () => {
    const { t, repo } = await restored();
    const g = t.record.generation;
    expect(await fenceCheck(t.dir, g, trust)).toEqual({ agent_id: "billing-agent", generation: g, current: g, ok: true, warnings: [] });
    expect((await failure(fenceCheck(t.dir, g + 1, trust))).message).toBe(`fenced: generation ${g + 1} of billing-agent is unknown: never issued (current generation is ${g})`);
    await repo.reserveGeneration(a, 0, {}, { trust, key });
    const old = await failure(fenceCheck(t.dir, g, trust));
    expect([old.code, old.message]).toEqual([14, `fenced: generation ${g} of billing-agent is superseded (current generation is ${g + 1})`]);
    const bare = join(dir, `bare${n++}`);
    mkdirSync(join(bare, MARKER_DIR), { recursive: true });
    writeTargetRecord(bare, { ...t.record, repository: "" }, key);
    expect((await failure(fenceCheck(bare, g, trust))).code).toBe(2);
  });
});
