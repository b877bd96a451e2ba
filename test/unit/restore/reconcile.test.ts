/**
 * `reconcile` at a restored target (restore/reconcile.ts), on a real target,
 * repository and SQLite state, with a real command probe: each open operation
 * is asked about, its outcome written into the restored state, a signed
 * record bound to the restore record, and a signed receipt; a second run asks
 * only about what is still unresolved. It refuses without a reconcile
 * section or recorded databases (2), on an active or superseded target (14).
 */
import Database from "better-sqlite3";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { reconcileTarget } from "../../../src/restore/reconcile.js";
import { MARKER_DIR, openTarget, readReconcileRecord, SUSPENDED, writeTargetRecord, type Target, type TargetRecord } from "../../../src/restore/state.js";
import { Repository } from "../../../src/repository/repository.js";
import { reconcile as reconcileSchema } from "../../../src/config/recovery.js";
import { generateSigningKey, publicKeyLine } from "../../../src/crypto/sshsig.js";
import { parseAllowedSigners, type Trust } from "../../../src/crypto/trust.js";
import type { LoadedConfig } from "../../../src/config/load.js";
import { AgentbakError } from "../../../src/errors.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-reconcile-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const a = { tenant: "acme", agent: "billing-agent" };
const key = generateSigningKey("ops");
const trust: Trust = { signers: parseAllowedSigners(`ops ${publicKeyLine(key.publicKey)}\n`), revoked: [] };
let n = 0;

/** A suspended restored target with two open operations, a repository at its generation, and a config whose probe is `answer` (a shell script reading the question on stdin). */
async function restored(answer: string, patch: Partial<TargetRecord> = {}): Promise<{ t: Target; repo: Repository; lc: LoadedConfig; db: string }> {
  const { repo } = await Repository.init(join(dir, `repo${n++}`));
  const { generation } = await repo.reserveGeneration(a, 0, {}, { trust, key });
  const target = join(dir, `target${n++}`);
  mkdirSync(join(target, "state"), { recursive: true });
  const db = join(target, "state", "agent.db");
  const d = new Database(db);
  d.exec("CREATE TABLE ops (id INTEGER PRIMARY KEY, key TEXT, state TEXT, receipt TEXT); INSERT INTO ops VALUES (1, 'pay-1', 'open', NULL), (2, 'mail-2', 'open', NULL)");
  d.close();
  mkdirSync(join(target, MARKER_DIR));
  writeTargetRecord(target, {
    agent_id: a.agent, tenant: a.tenant, snapshot_id: "20260301T100000000Z-0a1b2c3d", sequence: 1, generation, repository: repo.location, restored_at: new Date().toISOString(),
    open_operations: [{ id: 1, idempotency_key: "pay-1", kind: "payment", strategy: "retry-safe" }, { id: 2, idempotency_key: "mail-2", kind: "email", strategy: "observe" }],
    databases: [{ name: "main", path: "state/agent.db" }], config: null, ...patch,
  }, key);
  writeFileSync(join(target, MARKER_DIR, SUSPENDED), "");
  const lc = {
    path: join(target, "agentbak.json"), dir: target, resolve: (p: string) => resolve(target, p),
    config: {
      credentials: [],
      openOperations: { database: "main", sql: "SELECT id, key AS idempotency_key FROM ops WHERE state = 'open'", strategies: {}, defaultStrategy: "observe" },
      reconcile: reconcileSchema.parse({
        probe: { command: ["sh", "-c", answer] },
        onCompleted: { database: "main", sql: "UPDATE ops SET state = 'done', receipt = :receipt WHERE id = :id" },
        onRetry: { database: "main", sql: "UPDATE ops SET state = 'queued' WHERE id = :id" },
        attempts: 1, timeoutSeconds: 5,
      }),
    },
  } as unknown as LoadedConfig;
  return { t: openTarget(target, trust), repo, lc, db };
}
const rows = (db: string) => { const d = new Database(db, { readonly: true }); try { return d.prepare("SELECT key, state, receipt FROM ops ORDER BY id").all(); } finally { d.close(); } };
async function failure(p: Promise<unknown>): Promise<AgentbakError> {
  const e = await p.then(() => null, (x: unknown) => x);
  expect(e).toBeInstanceOf(AgentbakError);
  return e as AgentbakError;
}
// the probe gets {"id", "idempotency_key", "kind"} on stdin; pay-1 completed with a receipt, anything else not found
const PROBE = `read q; case "$q" in *pay-1*) echo '{"state":"completed","receipt":"rcpt-77"}';; *) echo '{"state":"not_found"}';; esac`;

describe("reconcileTarget", () => {
  it("asks about each operation, writes outcomes into the state, a bound signed record and a signed receipt", async () => {
    const { t, repo, lc, db } = await restored(PROBE);
    const r = await reconcileTarget(t, lc, undefined, key);
    expect(r.operations.map((o) => [o.idempotency_key, o.outcome, o.resolution, o.resolved, o.applied])).toEqual([
      ["pay-1", "completed", "completed", true, "onCompleted"],
      ["mail-2", "not_found", "escalated", false, null], // observe never resends: a person decides
    ]);
    expect(r).toMatchObject({ probed: 2, receipt_signed: true, summary: { operations: 2, completed: 1, escalated: 1, unresolved: 1 } });
    expect(rows(db)).toEqual([{ key: "pay-1", state: "done", receipt: "rcpt-77" }, { key: "mail-2", state: "open", receipt: null }]);
    expect(readReconcileRecord(t)!.restore_record_sha256).toBe(t.digest);
    const audit = (await repo.auditLog(a)).trim().split("\n").map((l) => JSON.parse(l));
    expect(audit.map((e) => e.event)).toEqual(["reconcile"]);
    expect((await repo.verifyAudit(a, trust, null)).entries).toBe(1);
  });

  it("a second run asks only about what is unresolved, and keeps the resolved results", async () => {
    const { t, lc } = await restored(PROBE);
    await reconcileTarget(t, lc, undefined, key);
    const again = await reconcileTarget(t, lc, undefined, key);
    expect(again.probed).toBe(1);
    expect(again.operations[0]).toMatchObject({ idempotency_key: "pay-1", resolution: "completed", receipt: "rcpt-77" });
  });

  it("a probe that fails leaves every operation unknown and the state untouched", async () => {
    const { t, lc, db } = await restored("exit 3");
    const r = await reconcileTarget(t, lc, undefined, key);
    expect(r.operations.map((o) => [o.resolution, o.resolved])).toEqual([["unknown", false], ["unknown", false]]);
    expect(r.operations[0]!.detail).toContain("probe command exited 3");
    expect(rows(db).map((x) => (x as { state: string }).state)).toEqual(["open", "open"]);
  });

  it("refuses: no reconcile section or no recorded databases (2), an active or superseded target (14); nothing is asked", async () => {
    const marker = join(dir, `asked${n++}`);
    const asked = `touch ${marker}; echo '{"state":"not_found"}'`;
    const { t, repo, lc } = await restored(asked);
    const bare = { ...lc, config: { ...lc.config, reconcile: undefined } } as unknown as LoadedConfig;
    expect((await failure(reconcileTarget(t, bare, undefined, key))).message).toBe(`config ${lc.path} has no reconcile section (the probe and the SQL that records outcomes)`);
    await repo.reserveGeneration(a, 0, {}, { trust, key });
    const sup = await failure(reconcileTarget(t, lc, undefined, key));
    expect([sup.code, sup.message]).toEqual([14, `generation ${t.record.generation} of billing-agent is superseded by generation ${t.record.generation + 1}; reconcile the current restore instead`]);
    rmSync(join(t.dir, MARKER_DIR, SUSPENDED));
    expect((await failure(reconcileTarget(t, lc, undefined, key))).message).toBe(`billing-agent at ${t.dir} is already active; reconciliation runs before activation`);
    const old = await restored(asked, { databases: undefined });
    expect((await failure(reconcileTarget(old.t, old.lc, undefined, key))).code).toBe(2);
    expect(rows(old.db)).toHaveLength(2);
    expect(existsSync(marker)).toBe(false);
  });
});
