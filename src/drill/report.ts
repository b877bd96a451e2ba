/**
 * The drill report: one signed, hash-chained JSON Lines entry per drill
 * (crypto/chainlog), answering the restore acceptance checklist. It lives in
 * the repository beside the agent's snapshots, or in a file of the operator's
 * choosing (`--report FILE`).
 */
import { basename, dirname, resolve } from "node:path";
import { nextLine, verifyChainText, type ChainVerifyResult } from "../crypto/chainlog.js";
import { NS, type SigningKey } from "../crypto/sshsig.js";
import type { Trust } from "../crypto/trust.js";
import { notFound } from "../errors.js";
import { LocalStore } from "../storage/local.js";
import type { DrillResult } from "./runner.js";
import { readFileRegular } from "../fsutil.js";

/** A drill's result and where its signed report entry went (both null when no report was written: --no-report). */
export interface ReportedDrill extends DrillResult {
  report_file: string | null;
  report_index: number | null;
}

/** The report entry for a drill result: what an operator needs to accept a restore, never state contents. */
export function reportBody(r: DrillResult): Record<string, unknown> {
  return {
    at: new Date().toISOString(),
    spec: r.spec,
    result: r.ok ? "pass" : "fail",
    snapshot_id: r.snapshot_id,
    agent_id: r.agent_id,
    tenant: r.tenant,
    sequence: r.sequence,
    manifest_sha256: r.manifest_sha256,
    runtime: r.runtime,
    schema: { ...r.schema, migrations: r.checks.filter((c) => c.name === "migration").map((c) => ({ scenario: c.scenario, ok: c.ok, detail: c.detail })) },
    integrity: r.integrity,
    credentials: r.credentials,
    cursors: r.cursors,
    test_task_id: r.test_task_id,
    receipts: r.receipts,
    recovery_seconds: r.recovery_seconds,
    total_seconds: r.total_seconds,
    scenarios: r.scenarios,
    failed_checks: r.checks.filter((c) => !c.ok).map((c) => ({ scenario: c.scenario, phase: c.phase, check: c.name, severity: c.severity, detail: c.detail })),
    unresolved: r.unresolved,
    unresolved_owners: r.unresolved_owners,
    open_operations: r.open_operations,
    runtime_differences: r.runtime_differences,
    upgrade: r.upgrade,
    nemeses: r.nemeses,
    rpo_seconds: r.rpo_seconds,
    rto_seconds: r.rto_seconds,
    objectives: r.objectives,
    ...(r.recall?.length ? { recall: r.recall } : {}),
    ...(r.network ? { network: r.network } : {}),
  };
}

/** Appends a signed entry to a report file of the operator's choosing. */
export async function appendReportFile(path: string, body: Record<string, unknown>, key: SigningKey): Promise<Record<string, unknown>> {
  const abs = resolve(path);
  let text = "";
  try {
    text = readFileRegular(abs, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
  }
  const { line, entry } = nextLine(text, body, key, NS.report);
  await new LocalStore(dirname(abs), { create: true }).append(basename(abs), line);
  return entry;
}

/**
 * Verifies a report's chain and signatures.
 * @throws AgentbakError(10) when the file is missing, (13) naming the first bad entry.
 */
export function verifyReportText(text: string, trust: Trust): ChainVerifyResult {
  return verifyChainText(text, trust, NS.report, "report entry");
}

/** Reads a report file. @throws AgentbakError(10) when it is missing. */
export function readReportFile(path: string): string {
  try {
    return readFileRegular(path, "utf8");
  } catch (e) {
    throw notFound(`report ${path}: ${(e as NodeJS.ErrnoException).code}`);
  }
}
