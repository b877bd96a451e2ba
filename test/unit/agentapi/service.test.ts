/**
 * The agent interface's service (src/agentapi/service.ts), the parts decided
 * before any repository is touched: the input schemas (strict, so a misspelt
 * field is refused rather than dropped; text a person reads later free of
 * terminal controls), the tier order, and a caller whose agent this service
 * does not serve refused (14). Operations against a repository are
 * test/e2e/http.test.ts's and mcp.test.ts's.
 */
import { describe, expect, it } from "vitest";
import { AgentService, allows, INPUTS, lowerTier, NEEDS, TIERS, type AgentHandle, type Caller } from "../../../src/agentapi/service.js";
import { AgentbakError } from "../../../src/errors.js";

const caller = (o: Partial<Caller> = {}): Caller => ({ tenant: "acme", agent: "billing-agent", tier: "restore-request", by: "token tok_1", transport: "http", ...o });
const refusal = async (p: Promise<unknown>) => {
  const e = await p.then(() => null, (x: unknown) => x);
  expect(e).toBeInstanceOf(AgentbakError);
  return [(e as AgentbakError).code, (e as Error).message] as const;
};

describe("input schemas", () => {
  it("are strict: a field this interface does not know is refused, never dropped", () => {
    const r = INPUTS.request_restore.safeParse({ snapshot_id: "20261206T120000000Z-0123abcd", reason: "lost memory" });
    expect(r.success).toBe(false);
    expect(JSON.stringify(r.error?.issues)).toContain("snapshot_id");
    expect(INPUTS.list_snapshots.safeParse({ x: 1 }).success).toBe(false);
  });

  it("snapshot defaults to latest; ids and prefixes are taken; anything else is refused", () => {
    expect(INPUTS.verify_snapshot.parse({})).toEqual({ snapshot: "latest" });
    for (const ok of ["latest", "20261206T120000000Z-0123abcd", "20261206T12"]) expect(INPUTS.plan_restore.safeParse({ snapshot: ok }).success, ok).toBe(true);
    for (const bad of ["../x", "newest", "2026-12-06"]) expect(INPUTS.plan_restore.safeParse({ snapshot: bad }).success, bad).toBe(false);
    expect(INPUTS.get_backup.safeParse({ snapshot_id: "20261206T12" }).success).toBe(false);
    expect(INPUTS.get_restore_request.safeParse({ request_id: "req-20261206T120000000Z-0123abcd" }).success).toBe(true);
    expect(INPUTS.get_restore_request.safeParse({ request_id: "20261206T120000000Z-0123abcd" }).success).toBe(false);
  });

  it("a label, reason or target with an escape sequence, control or bidi character is refused; idempotency keys are printable ASCII", () => {
    for (const bad of ["done\x1b[2J", "line\nbreak", "rtl \u202e gnp.exe", "bell\x07"]) {
      expect(INPUTS.create_backup.safeParse({ label: bad }).success, JSON.stringify(bad)).toBe(false);
      expect(INPUTS.request_restore.safeParse({ reason: bad }).success, JSON.stringify(bad)).toBe(false);
      expect(INPUTS.request_restore.safeParse({ reason: "r", target: bad }).success, JSON.stringify(bad)).toBe(false);
    }
    expect(INPUTS.create_backup.safeParse({ label: "finished step 3 — café", incremental: true }).success).toBe(true);
    expect(INPUTS.create_backup.safeParse({ idempotency_key: "run-42/step-3" }).success).toBe(true);
    for (const bad of ["has space", "", "x".repeat(201), "é"]) expect(INPUTS.create_backup.safeParse({ idempotency_key: bad }).success, bad).toBe(false);
    expect(INPUTS.request_restore.safeParse({ reason: "" }).success).toBe(false);
  });
});

describe("tiers", () => {
  it("each tier includes those below it; lowerTier is the lower of two", () => {
    expect(TIERS).toEqual(["read", "checkpoint", "restore-request"]);
    expect(allows("restore-request", "read")).toBe(true);
    expect(allows("checkpoint", "checkpoint")).toBe(true);
    expect(allows("read", "checkpoint")).toBe(false);
    expect(allows("checkpoint", "restore-request")).toBe(false);
    expect(lowerTier("restore-request", "read")).toBe("read");
    expect(lowerTier("read", "restore-request")).toBe("read");
    expect(lowerTier("checkpoint", "checkpoint")).toBe("checkpoint");
  });

  it("only create_backup needs checkpoint and only request_restore needs restore-request; every read is read", () => {
    expect(Object.entries(NEEDS).filter(([, t]) => t !== "read")).toEqual([["create_backup", "checkpoint"], ["request_restore", "restore-request"]]);
    expect(Object.keys(NEEDS).sort()).toEqual(Object.keys(INPUTS).sort());
  });
});

describe("AgentService", () => {
  it("a caller whose agent is not served is refused (14) for every operation, before its input is looked at", async () => {
    const s = new AgentService([]);
    for (const op of Object.keys(INPUTS) as (keyof typeof INPUTS)[]) expect(await refusal(s.call(caller(), op, { bogus: true }))).toEqual([14, "this server does not serve agent acme/billing-agent"]);
    expect(await refusal(s.status({ tenant: "acme", agent: "billing-agent" }))).toEqual([14, "this server does not serve agent acme/billing-agent"]);
    expect(s.served).toEqual([]);
    await expect(s.unhealthy()).resolves.toBeNull();
  });

  it("two configs for one agent are refused (2)", () => {
    // the constructor reads only the agent a handle is for
    const handle = (tenant: string, id: string) => ({ lc: { config: { agent: { tenant, id } } } }) as unknown as AgentHandle;
    expect(new AgentService([handle("acme", "a"), handle("acme", "b")]).served).toEqual(["acme/a", "acme/b"]);
    let e: unknown;
    try {
      new AgentService([handle("acme", "a"), handle("acme", "a")]);
    } catch (x) {
      e = x;
    }
    expect([(e as AgentbakError).code, (e as Error).message]).toEqual([2, "two configs for agent acme/a"]);
  });
});
