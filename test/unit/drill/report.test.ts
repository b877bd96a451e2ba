// The drill report: a signed chain file an operator chooses; its entry carries what accepting a restore needs, and only that.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { appendFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { appendReportFile, readReportFile, reportBody, verifyReportText } from "../../../src/drill/report.js";
import { keygen } from "../../../src/crypto/keys.js";
import { parsePrivateKey, type SigningKey } from "../../../src/crypto/sshsig.js";
import { parseAllowedSigners, type Trust } from "../../../src/crypto/trust.js";
import { AgentbakError } from "../../../src/errors.js";

let dir: string;
let key: SigningKey;
let trust: Trust;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "agentbak-report-"));
  const k = keygen(join(dir, "k"), "ops");
  key = parsePrivateKey(readFileSync(join(k.dir, "signing-key"), "utf8"));
  trust = { signers: parseAllowedSigners(readFileSync(join(k.dir, "allowed_signers"), "utf8")), revoked: [] };
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const result = {
  ok: false, spec: "reference-agent", snapshot_id: "s1", agent_id: "billing-agent", tenant: "acme", sequence: 4, manifest_sha256: "m",
  schema: { manifest: 3, restored: { state: 3 } }, integrity: { state: "ok" }, credentials: [], cursors: [], test_task_id: null, receipts: {},
  recovery_seconds: 1, total_seconds: 2, scenarios: [], unresolved: [], unresolved_owners: [], open_operations: [], runtime_differences: [],
  checks: [
    { scenario: "restore", phase: "checks", name: "integrity", ok: true, severity: "error", detail: "ok", seconds: 0 },
    { scenario: "upgrade", phase: "worker", name: "migration", ok: false, severity: "error", detail: "v3 -> v4 failed", seconds: 0 },
  ],
  state_rows: [{ secret: "never in a report" }],
} as any;

describe("drill report", () => {
  it("the entry says pass or fail, lists failed checks and migrations, and carries nothing it was not told to", () => {
    const b = reportBody(result);
    expect(b.result).toBe("fail");
    expect(b.failed_checks).toEqual([{ scenario: "upgrade", phase: "worker", check: "migration", severity: "error", detail: "v3 -> v4 failed" }]);
    expect((b.schema as any).migrations).toEqual([{ scenario: "upgrade", ok: false, detail: "v3 -> v4 failed" }]);
    expect(JSON.stringify(b)).not.toContain("never in a report");
    expect(reportBody({ ...result, ok: true }).result).toBe("pass");
  });

  it("appended entries verify as a signed chain; an edited file does not (13); a missing file is 10", async () => {
    const f = join(dir, "sub", "report.jsonl");
    await appendReportFile(f, reportBody(result), key);
    const e = await appendReportFile(f, reportBody({ ...result, ok: true }), key);
    expect(e.index).toBe(1);
    expect(verifyReportText(readReportFile(f), trust)).toMatchObject({ ok: true, entries: 2 });
    appendFileSync(f, readFileSync(f, "utf8").split("\n")[0]!.replace('"fail"', '"pass"') + "\n");
    expect(() => verifyReportText(readReportFile(f), trust)).toThrow(/^report entry 2 \(line 3\): index is 0/);
    let err: unknown;
    try { readReportFile(join(dir, "none.jsonl")); } catch (x) { err = x; }
    expect((err as AgentbakError).code).toBe(10);
  });
});
