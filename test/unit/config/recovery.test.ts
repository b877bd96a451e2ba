// The recovery protocol's config keys: a probe's URL carries no credential, identifiers are plain, durations parse, liveness names a check, and strategyFor only takes the config's own keys.
import { describe, expect, it } from "vitest";
import { compatible, cut, liveness, objectives, openOperations, PROBE_ENV_NAME, reconcile, STRICTNESS, timers } from "../../../src/config/recovery.js";
import { strategyFor } from "../../../src/facts.js";
import * as z from "../../../src/zod.js";

const issues = (schema: z.ZodMiniType, v: unknown) => {
  const r = schema.safeParse(v);
  return r.success ? "ok" : r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ");
};
const completed = { database: "state", sql: "UPDATE outbox SET state='sent' WHERE key = :idempotency_key" };

describe("reconcile", () => {
  it("fills the defaults: receipt field, timeout 10 s, 3 attempts, no headers", () => {
    expect(reconcile.parse({ probe: { http: { url: "https://pay.example/v1/{idempotency_key}" } }, onCompleted: completed })).toEqual({
      probe: { http: { url: "https://pay.example/v1/{idempotency_key}", headers: {} } },
      receiptFields: ["receipt"],
      onCompleted: completed,
      timeoutSeconds: 10,
      attempts: 3,
    });
  });

  it("refuses credentials in a probe URL (user:password@ or a {credential:} placeholder) and a URL that is not http(s)", () => {
    expect(issues(reconcile, { probe: { http: { url: "https://u:p@pay.example/x" } }, onCompleted: completed })).toMatch(/no user:password@ in the URL/);
    expect(issues(reconcile, { probe: { http: { url: "https://pay.example/x?k={credential:api}" } }, onCompleted: completed })).toMatch(/credentials belong in headers/);
    expect(issues(reconcile, { probe: { http: { url: "ftp://pay.example/x" } }, onCompleted: completed })).toMatch(/an http\(s\) URL/);
    // a @ after the host (in the path) is not a credential
    expect(issues(reconcile, { probe: { http: { url: "https://pay.example/users/@me" } }, onCompleted: completed })).toBe("ok");
  });

  it("bounds timeout and attempts, wants an empty-free command, and dotted receipt field names", () => {
    const base = { probe: { command: ["./probe"] }, onCompleted: completed };
    expect(issues(reconcile, base)).toBe("ok");
    expect(issues(reconcile, { ...base, timeoutSeconds: 301 })).not.toBe("ok");
    expect(issues(reconcile, { ...base, attempts: 0 })).not.toBe("ok");
    expect(issues(reconcile, { ...base, attempts: 11 })).not.toBe("ok");
    expect(issues(reconcile, { ...base, probe: { command: [] } })).not.toBe("ok");
    expect(issues(reconcile, { ...base, probe: { command: [""] } })).not.toBe("ok");
    expect(issues(reconcile, { ...base, receiptFields: ["data.id", "ok_2"] })).toBe("ok");
    expect(issues(reconcile, { ...base, receiptFields: ["data..id"] })).toMatch(/a field name, or a dotted path/);
    expect(issues(reconcile, { ...base, receiptFields: [] })).not.toBe("ok");
    expect(issues(reconcile, { ...base, extra: 1 })).not.toBe("ok");
  });
});

describe("PROBE_ENV_NAME", () => {
  it("is a plain variable name, never AGENTBAK_*", () => {
    expect(PROBE_ENV_NAME.test("API_TOKEN")).toBe(true);
    expect(PROBE_ENV_NAME.test("AGENTBAK_GENERATION")).toBe(false);
    expect(PROBE_ENV_NAME.test("1X")).toBe(false);
    expect(PROBE_ENV_NAME.test("A-B")).toBe(false);
  });
});

describe("timers, cut, objectives, liveness, compatible", () => {
  it("timers need plain SQL identifiers and default to epoch_ms", () => {
    expect(timers.parse([{ database: "s", table: "leases", column: "until_ms", mode: "shift" }])).toEqual([{ database: "s", table: "leases", column: "until_ms", mode: "shift", format: "epoch_ms" }]);
    expect(issues(timers, [{ database: "s", table: "leases; DROP TABLE x", column: "c", mode: "shift" }])).toMatch(/a plain SQL identifier/);
    expect(issues(timers, [{ database: "s", table: "t", column: "c", mode: "later" }])).not.toBe("ok");
    expect(timers.parse(undefined)).toEqual([]);
  });

  it("cut waits 10 s by default, at most an hour", () => {
    expect(cut.parse(undefined)).toEqual({ waitSeconds: 10 });
    expect(issues(cut, { waitSeconds: 3601 })).not.toBe("ok");
    expect(issues(cut, { waitSeconds: 0 })).not.toBe("ok");
  });

  it("drillEvery is a positive duration people write", () => {
    expect(issues(objectives, { rpoMinutes: 15, drillEvery: "7d" })).toBe("ok");
    expect(issues(objectives, { drillEvery: "weekly" })).toMatch(/a duration such as 12h, 7d or 2w/);
    expect(issues(objectives, { drillEvery: "0d" })).not.toBe("ok");
    expect(issues(objectives, { rtoSeconds: -1 })).not.toBe("ok");
  });

  it("liveness names a pidFile, an http URL or a command", () => {
    expect(issues(liveness, {})).toMatch(/name a pidFile, an http URL or a command/);
    expect(liveness.parse({ pidFile: "agent.pid" })).toEqual({ pidFile: "agent.pid", timeoutSeconds: 3 });
    expect(issues(liveness, { http: "https://u:p@agent.local/health" })).toMatch(/no user:password@/);
  });

  it("compatible lists are strict", () => {
    expect(issues(compatible, { agentVersion: ["1.*"], models: { chat: ["gpt-*"] } })).toBe("ok");
    expect(issues(compatible, { agentVersions: ["1.*"] })).not.toBe("ok");
  });
});

describe("strategyFor", () => {
  const ops = openOperations.parse({ database: "s", sql: "SELECT 1", strategies: { payment: "escalate", email: "retry-safe" } })!;

  it("a kind's own strategy, else the default (observe when nothing is configured)", () => {
    expect(strategyFor("payment", ops)).toBe("escalate");
    expect(strategyFor("email", ops)).toBe("retry-safe");
    expect(strategyFor("sms", ops)).toBe("observe");
    expect(strategyFor(null, ops)).toBe("observe");
    expect(strategyFor("payment", undefined)).toBe("observe");
    expect(strategyFor("sms", openOperations.parse({ database: "s", sql: "x", defaultStrategy: "escalate" }))).toBe("escalate");
  });

  it("an agent's kind named like an Object property is not one of the config's keys", () => {
    for (const k of ["constructor", "__proto__", "toString", "hasOwnProperty"]) expect(strategyFor(k, ops)).toBe("observe");
  });

  it("strictness orders retry-safe < observe < escalate", () => {
    expect(STRICTNESS["retry-safe"]).toBeLessThan(STRICTNESS.observe);
    expect(STRICTNESS.observe).toBeLessThan(STRICTNESS.escalate);
  });
});
