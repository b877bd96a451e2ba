/**
 * The signed records inside a restored target (restore/state.ts): a restore
 * record is trusted only when signed by a trusted key and unchanged since; a
 * reconcile record only when it belongs to this very restore record and holds
 * one result per open operation; anything else is exit 13 naming the file and
 * what to do, a folder with no record is 10.
 */
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { generateSigningKey, publicKeyLine } from "../../../src/crypto/sshsig.js";
import { parseAllowedSigners, type Trust } from "../../../src/crypto/trust.js";
import { AgentbakError } from "../../../src/errors.js";
import type { OpenOperation, OperationResult } from "../../../src/reconcile/operations.js";
import {
  isSuspended, MARKER_DIR, openTarget, operationStatus, restoredFolder, readReconcileRecord, readTargetRecord, recordDigest, summarize, SUSPENDED, writeReconcileRecord, writeTargetRecord,
  type TargetRecord,
} from "../../../src/restore/state.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-rstate-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const key = generateSigningKey("ops");
const stranger = generateSigningKey("someone");
const trust: Trust = { signers: parseAllowedSigners(`ops ${publicKeyLine(key.publicKey)}\n`), revoked: [] };

const ops: OpenOperation[] = [
  { id: 1, idempotency_key: "pay-1", kind: "payment", strategy: "retry-safe" },
  { id: 2, idempotency_key: "mail-2", kind: "email", strategy: "escalate" },
];
const record: Omit<TargetRecord, "kind"> = {
  agent_id: "billing-agent", tenant: "acme", snapshot_id: "20260301T100000000Z-0a1b2c3d", sequence: 3, generation: 4,
  repository: "/srv/repo", restored_at: "2026-03-01T10:00:00Z", open_operations: ops, databases: [{ name: "main", path: "state/agent.db" }], config: null,
};
let n = 0;
function target(k = key, r = record): string {
  const t = join(dir, `t${n++}`);
  mkdirSync(join(t, MARKER_DIR), { recursive: true });
  writeTargetRecord(t, r, k);
  return t;
}
function result(op: OpenOperation, resolution: OperationResult["resolution"]): OperationResult {
  return { ...op, outcome: resolution === "completed" ? "completed" : "not_found", receipt: null, resolution, resolved: resolution === "completed" || resolution === "retry", attempts: 1, applied: null, detail: "", at: "2026-03-01T11:00:00Z" };
}
function code(f: () => unknown): [number, string] {
  try { f(); } catch (e) { expect(e).toBeInstanceOf(AgentbakError); return [(e as AgentbakError).code, (e as Error).message]; }
  throw new Error("did not throw");
}

describe("restore record", () => {
  it("written signed and read back; its digest is over the record without the signature", () => {
    const t = target();
    const opened = openTarget(t, trust);
    expect(opened.record).toMatchObject({ kind: "restore-record", ...record });
    expect(opened.digest).toBe(recordDigest({ kind: "restore-record", ...record }));
    const onDisk = JSON.parse(readFileSync(join(t, MARKER_DIR, "restore.json"), "utf8"));
    expect(onDisk.signature).toMatch(/^-----BEGIN SSH SIGNATURE-----/);
    expect(recordDigest(onDisk)).toBe(opened.digest);
  });

  it("a folder agentbak did not restore is 10; a record that is not restore's is 13 (damaged)", () => {
    const empty = join(dir, "empty");
    mkdirSync(empty);
    expect(code(() => readTargetRecord(empty))).toEqual([10, `${empty} holds no agentbak restore record (.agentbak/restore.json)`]);
    for (const body of ["not json", "[]", JSON.stringify({ agent_id: "a", tenant: "t", snapshot_id: "s", generation: 1.5, open_operations: [] })]) {
      const t = target();
      writeFileSync(join(t, MARKER_DIR, "restore.json"), body);
      const [c, m] = code(() => readTargetRecord(t));
      expect(c).toBe(13);
      expect(m).toContain("is damaged (not the record restore wrote)");
    }
  });

  it("unsigned, edited after signing, or signed by a key not trusted: 13 naming the file and the remedy", () => {
    const unsigned = target(null as never);
    expect(code(() => openTarget(unsigned, trust))).toEqual([13, expect.stringContaining("restore.json is not signed")]);
    const edited = target();
    const p = join(edited, MARKER_DIR, "restore.json");
    writeFileSync(p, readFileSync(p, "utf8").replace('"generation": 4', '"generation": 5'));
    expect(readTargetRecord(edited).generation).toBe(5); // the shape alone still reads (the fence check)
    const [c, m] = code(() => openTarget(edited, trust));
    expect(c).toBe(13);
    expect(m).toMatch(/restore\.json was changed after agentbak signed it .*; restore the snapshot again into a new folder \(with a signing key\)$/);
    const foreign = target(stranger);
    expect(code(() => openTarget(foreign, trust))).toEqual([13, expect.stringMatching(/restore\.json is not trusted: signer key SHA256:\S+ is not in allowed_signers/)]);
  });

  it("a signed record of another kind is not a restore record", () => {
    const t = target(key, { ...record, kind: "reconcile-record" } as never);
    expect(code(() => openTarget(t, trust))).toEqual([13, expect.stringContaining("is a signed reconcile-record, not a restore record")]);
  });

  it("SUSPENDED in the marker folder suspends", () => {
    const t = target();
    expect(isSuspended(t)).toBe(false);
    writeFileSync(join(t, MARKER_DIR, SUSPENDED), "");
    expect(isSuspended(t)).toBe(true);
  });
});

describe("reconcile record", () => {
  const rec = (results: OperationResult[]) => ({ snapshot_id: record.snapshot_id, generation: record.generation, reconciled_at: "2026-03-01T11:00:00Z", operations: results, summary: summarize(ops, results) });

  it("none yet is null; one written for this restore reads back bound to it", () => {
    const t = openTarget(target(), trust);
    expect(readReconcileRecord(t)).toBeNull();
    writeReconcileRecord(t, rec([result(ops[0]!, "completed"), result(ops[1]!, "escalated")]), key);
    const r = readReconcileRecord(t)!;
    expect(r.restore_record_sha256).toBe(t.digest);
    expect(r.operations.map((o) => o.resolution)).toEqual(["completed", "escalated"]);
  });

  it("one made for another restore record (or another generation) is 13", () => {
    const a = openTarget(target(), trust);
    const b = openTarget(target(key, { ...record, restored_at: "2026-03-02T10:00:00Z" }), trust);
    writeReconcileRecord(a, rec([result(ops[0]!, "completed"), result(ops[1]!, "retry")]), key);
    writeFileSync(join(b.dir, MARKER_DIR, "reconcile.json"), readFileSync(join(a.dir, MARKER_DIR, "reconcile.json")));
    expect(code(() => readReconcileRecord(b))).toEqual([13, expect.stringContaining("belongs to another restore (not to generation 4 as restore.json records it)")]);
    // bound to this very record, signed, but naming another generation
    writeReconcileRecord(a, { ...rec([result(ops[0]!, "completed"), result(ops[1]!, "retry")]), generation: 5 }, key);
    expect(code(() => readReconcileRecord(a))).toEqual([13, expect.stringContaining("belongs to another restore")]);
  });

  it("results not one per open operation, in order, are 13; damage and a stranger's signature too", () => {
    const t = openTarget(target(), trust);
    writeReconcileRecord(t, rec([result(ops[1]!, "completed"), result(ops[0]!, "completed")]), key);
    expect(code(() => readReconcileRecord(t))).toEqual([13, expect.stringContaining("does not hold one result for each open operation")]);
    writeReconcileRecord(t, rec([result(ops[0]!, "completed")]), key);
    expect(code(() => readReconcileRecord(t))[0]).toBe(13);
    writeReconcileRecord(t, rec([result(ops[0]!, "completed"), result(ops[1]!, "completed")]), stranger);
    expect(code(() => readReconcileRecord(t))).toEqual([13, expect.stringMatching(/reconcile\.json is not trusted: .*; remove it and run agentbak reconcile --target .* again/)]);
    writeFileSync(join(t.dir, MARKER_DIR, "reconcile.json"), JSON.stringify({ operations: [{ id: 1 }] }));
    expect(code(() => readReconcileRecord(t))).toEqual([13, expect.stringContaining("reconcile.json is damaged")]);
  });
});

describe("summarize", () => {
  it("counts resolutions; an operation without a result, escalated or unknown is unresolved", () => {
    const three = [...ops, { id: 3, idempotency_key: "k3", kind: null, strategy: "observe" as const }];
    expect(summarize(three)).toEqual({ operations: 3, completed: 0, retry: 0, escalated: 0, unknown: 0, unresolved: 3 });
    expect(summarize(three, [result(three[0]!, "completed"), result(three[1]!, "unknown")])).toEqual({ operations: 3, completed: 1, retry: 0, escalated: 0, unknown: 1, unresolved: 2 });
    expect(summarize(three, [result(three[0]!, "retry"), result(three[1]!, "escalated"), result(three[2]!, "completed")])).toEqual({ operations: 3, completed: 1, retry: 1, escalated: 1, unknown: 0, unresolved: 1 });
    expect(operationStatus(three, [result(three[0]!, "retry")]).map((x) => x.result?.resolution ?? null)).toEqual(["retry", null, null]);
  });
});

describe("restoredFolder (what a restore record names, and what it is checked against)", () => {
  it("is the folder with every link on its path followed: absent under a linked parent, existing, or named with '..' and a trailing slash", () => {
    const root = realpathSync(mkdtempSync(join(dir, "folder-")));
    mkdirSync(join(root, "P"));
    symlinkSync(join(root, "P"), join(root, "L"));
    // a restore's target: absent, its parent reached through a link
    expect(restoredFolder(join(root, "L", "x"))).toBe(join(root, "P", "x"));
    // the folder once restored, reached through the link, or spelled another way: the same folder
    mkdirSync(join(root, "P", "x"));
    expect(restoredFolder(join(root, "L", "x"))).toBe(join(root, "P", "x"));
    expect(restoredFolder(`${join(root, "L")}/./y/../x/`)).toBe(join(root, "P", "x"));
    // a parent not made yet: the deepest folder that exists is followed, the rest kept (a missing folder is not resolved as text only)
    expect(restoredFolder(join(root, "L", "new", "x"))).toBe(join(root, "P", "new", "x"));
  });
});
