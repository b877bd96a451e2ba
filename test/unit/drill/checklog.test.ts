/**
 * The drill's check log (src/drill/checklog.ts): how a check is recorded
 * (phase, time since the one before, blob-safe samples), who owns an
 * unresolved difference, and the verdict: only a failed error check fails
 * the drill, a failed warning warns, a failed info check does neither.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { CheckLog } from "../../../src/drill/checklog.js";

const T0 = Date.parse("2026-12-06T10:00:00.000Z");

beforeEach(() => {
  vi.useFakeTimers();
  vi.setSystemTime(T0);
});
afterEach(() => vi.useRealTimers());

describe("a check", () => {
  it("is a restore check ('checks') unless it names its phase, and carries the time since the check before it", () => {
    const log = new CheckLog(T0, {});
    vi.setSystemTime(T0 + 1500);
    log.add({ scenario: "restore", name: "components", ok: true, severity: "error", detail: "ok" });
    vi.setSystemTime(T0 + 1750);
    log.add({ scenario: "after_send_before_receipt", phase: "after_crash", name: "died at crash point", ok: true, severity: "error", detail: "killed" });
    expect(log.checks.map((c) => [c.phase, c.seconds])).toEqual([
      ["checks", 1.5],
      ["after_crash", 0.25],
    ]);
  });

  it("of an invariant keeps up to its sample of offending rows, a blob as its size, and none when it holds", () => {
    const log = new CheckLog(T0, {});
    const held = log.invariants(
      "restore",
      [
        { name: "no_orphans", severity: "error", ok: true, rows: 0, sample: [] },
        { name: "no_dupes", severity: "error", ok: false, rows: 2, sample: [{ id: 1, body: Buffer.alloc(40) }, { id: 2, body: "x" }] },
        { name: "broken", severity: "warning", ok: false, rows: 0, sample: [], error: "no such table: t" },
      ],
      "after_recovery",
    );
    expect(held).toBe(false);
    expect(log.checks.map((c) => [c.name, c.phase, c.severity, c.detail, c.sample])).toEqual([
      ["invariant:no_orphans", "after_recovery", "error", "no offending rows", undefined],
      ["invariant:no_dupes", "after_recovery", "error", "2 offending row(s)", [{ id: 1, body: "<blob 40 bytes>" }, { id: 2, body: "x" }]],
      ["invariant:broken", "after_recovery", "warning", "error: no such table: t", []],
    ]);
  });

  it("of invariants holds when only warnings fail", () => {
    const log = new CheckLog(T0, {});
    expect(log.invariants("restore", [{ name: "soft", severity: "warning", ok: false, rows: 1, sample: [{ a: 1 }] }])).toBe(true);
    expect(log.checks[0]!.phase).toBe("checks");
  });
});

describe("an unresolved difference", () => {
  it("is owned by the first of its categories the owners name, then the default owner, else nobody", () => {
    const named = new CheckLog(T0, { "open_operation:charge_card": "payments", open_operation: "billing", default: "owner" });
    named.unresolve("a", "open_operation:charge_card", "open_operation");
    named.unresolve("b", "open_operation:send_invoice", "open_operation");
    named.unresolve("c", "credential:llm", "credential");
    expect(named.unresolvedOwners).toEqual([
      { difference: "a", owner: "payments" },
      { difference: "b", owner: "billing" },
      { difference: "c", owner: "owner" },
    ]);
    expect(named.unresolved).toEqual(["a", "b", "c"]);
    const nobody = new CheckLog(T0, {});
    nobody.unresolve("d", "credential");
    expect(nobody.unresolvedOwners).toEqual([{ difference: "d", owner: "unassigned" }]);
  });
});

describe("the verdict", () => {
  it("fails on a failed error check only, lists failed warnings, and makes each failed error check an unresolved difference", () => {
    const log = new CheckLog(T0, { reconcile_a: "ops", check: "qa" });
    log.add({ scenario: "restore", name: "credential:llm", ok: false, severity: "warning", detail: "env:KEY: missing" });
    log.add({ scenario: "restore", name: "open operations", ok: false, severity: "info", detail: "3 open" });
    log.add({ scenario: "reconcile_a", name: "effects k1", ok: false, severity: "error", detail: "2 new effect(s)" });
    log.add({ scenario: "objectives", name: "rpo", ok: false, severity: "error", detail: "too old" });
    log.add({ scenario: "restore", name: "components", ok: true, severity: "error", detail: "ok" });
    expect(log.passed("restore")).toBe(true);
    expect(log.passed("reconcile_a")).toBe(false);
    expect(log.verdict()).toEqual({ ok: false, warnings: ["restore: credential:llm: env:KEY: missing"] });
    expect(log.unresolvedOwners).toEqual([
      { difference: "reconcile_a: effects k1: 2 new effect(s)", owner: "ops" },
      { difference: "objectives: rpo: too old", owner: "qa" },
    ]);
  });

  it("passes when every error check holds, whatever failed at warning or info", () => {
    const log = new CheckLog(T0, {});
    log.add({ scenario: "restore", name: "embedding", ok: false, severity: "warning", detail: "unknown model" });
    log.add({ scenario: "restore", name: "credential:mail", ok: false, severity: "info", detail: "file: missing" });
    expect(log.verdict()).toEqual({ ok: true, warnings: ["restore: embedding: unknown model"] });
    expect(log.unresolved).toEqual([]);
  });
});
