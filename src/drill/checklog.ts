/**
 * The drill's check log: every check in the order it was made (pass, or a
 * failure at error, warning or info severity, with sample rows for a failed
 * invariant and the time since the check before), and the differences a
 * person must resolve, each with its owner. The drill's verdict is read from it.
 */
import type { InvariantResult } from "./invariants.js";

/**
 * One check in a drill; `scenario` is "restore", a crash point, a recovery
 * scenario or "objectives", `phase` when in it ("checks" after the restore;
 * "setup", "after_crash", "after_recovery", "after_restart" in a crash
 * scenario), so scenario + phase + name is unique.
 * A failed "info" check is recorded but neither fails the drill nor warns.
 */
export interface DrillCheck {
  scenario: string;
  phase: string;
  name: string;
  ok: boolean;
  severity: "error" | "warning" | "info";
  detail: string;
  /** time since the check before it (or the drill's start) */
  seconds: number;
  sample?: unknown[];
}

/** A check as a step makes it: the log adds its time, and the phase "checks" (a restore check) when none is given. */
export type NewCheck = Omit<DrillCheck, "seconds" | "phase"> & { phase?: string };

/** A difference a person must resolve, and who owns it. */
export interface UnresolvedDifference {
  difference: string;
  owner: string;
}

/** Blob columns of a sample row as their size: a report never carries state contents in bulk. */
function blobSafe(rows: unknown[]): unknown[] {
  return rows.map((r) =>
    r && typeof r === "object" ? Object.fromEntries(Object.entries(r).map(([k, v]) => [k, Buffer.isBuffer(v) ? `<blob ${v.length} bytes>` : v])) : r,
  );
}

/** One drill's checks and unresolved differences, in the order made; steps and scenarios record into it, the result reads it. */
export class CheckLog {
  readonly checks: DrillCheck[] = [];
  /** the unresolved differences, one line each, in the order found */
  readonly unresolved: string[] = [];
  readonly unresolvedOwners: UnresolvedDifference[] = [];
  private mark: number;

  /**
   * @param start when the drill started (ms): the first check's time counts from it
   * @param owners who owns an unresolved difference, by category (a check's scenario, credential, open_operation, ...) or "default"
   */
  constructor(
    start: number,
    private readonly owners: Record<string, string>,
  ) {
    this.mark = start;
  }

  /** Records a check and the time since the one before. */
  add(c: NewCheck): void {
    const now = Date.now();
    this.checks.push({ ...c, phase: c.phase ?? "checks", seconds: (now - this.mark) / 1000 });
    this.mark = now;
  }

  /**
   * Records each invariant's outcome (up to five offending rows as its sample).
   * @returns whether every error-severity invariant holds
   */
  invariants(scenario: string, rs: InvariantResult[], phase?: string): boolean {
    for (const r of rs)
      this.add({
        scenario,
        phase,
        name: `invariant:${r.name}`,
        ok: r.ok,
        severity: r.severity,
        detail: r.error ? `error: ${r.error}` : r.ok ? "no offending rows" : `${r.rows} offending row(s)`,
        ...(r.ok ? {} : { sample: blobSafe(r.sample) }),
      });
    return rs.every((r) => r.ok || r.severity === "warning");
  }

  /** Records a difference a person must resolve; its owner is the first of `categories` the owners name, else theirs by default. */
  unresolve(text: string, ...categories: string[]): void {
    this.unresolved.push(text);
    this.unresolvedOwners.push({ difference: text, owner: [...categories, "default"].map((c) => this.owners[c]).find(Boolean) ?? "unassigned" });
  }

  /** Whether every error-severity check of a scenario holds. */
  passed(scenario: string): boolean {
    return this.checks.filter((c) => c.scenario === scenario).every((c) => c.ok || c.severity !== "error");
  }

  /**
   * Closes the log: each failed error check becomes an unresolved difference (owned by its scenario's owner, or the checks' owner).
   * @returns ok when no error check failed, and the failed warning checks, one line each
   */
  verdict(): { ok: boolean; warnings: string[] } {
    const failed = this.checks.filter((c) => !c.ok && c.severity === "error");
    const warnings = this.checks.filter((c) => !c.ok && c.severity === "warning").map((c) => `${c.scenario}: ${c.name}: ${c.detail}`);
    for (const f of failed) this.unresolve(`${f.scenario}: ${f.name}: ${f.detail}`, f.scenario, "check");
    return { ok: failed.length === 0, warnings };
  }
}
