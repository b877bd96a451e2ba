// The config schema: defaults, strict keys, and the cross-key rules (names unique, references to databases that exist).
import { describe, expect, it } from "vitest";
import { ConfigSchema, configuredEmbeddings } from "../../../src/config/schema.js";
import { strategyFor } from "../../../src/facts.js";

const base = {
  agent: { id: "a", tenant: "t" },
  repository: "/var/backups/agentbak",
  recipients: ["age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"],
  databases: [{ name: "state", path: "state/agent.sqlite" }],
};
const issues = (c: unknown) => {
  const r = ConfigSchema.safeParse(c);
  return r.success ? [] : r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`);
};

describe("config schema", () => {
  it("fills defaults: secret scan refuses everywhere, retention expires at 365 days, incrementals off, timers none", () => {
    const c = ConfigSchema.parse(base);
    expect(c.secretScan).toMatchObject({ databases: "refuse", workspace: "refuse", files: "refuse" });
    expect(c.retention).toEqual({ expireDays: 365 });
    expect(c.incremental).toEqual({ enabled: false, fullEvery: 10, integrityEvery: 5 });
    expect(c.hooks).toEqual({ pre: [], post: [], timeoutSeconds: 30 });
    expect(c.timers).toEqual([]);
    expect(c.restore.staleAfterHours).toBe(24);
  });

  it("an unknown key, anywhere, is an issue at its path", () => {
    expect(issues({ ...base, retentoin: {} })).toEqual([expect.stringMatching(/Unrecognized key.*retentoin/)]);
    expect(issues({ ...base, incremental: { enabled: true, fullevery: 3 } })).toEqual([expect.stringMatching(/^incremental: Unrecognized key.*fullevery/)]);
  });

  it("database and source names share one namespace and must be unique", () => {
    expect(issues({ ...base, databases: [...base.databases, { name: "state", path: "b.sqlite" }] })).toEqual(['databases.1.name: database name "state" is used twice']);
    expect(issues({ ...base, sources: [{ name: "state", kind: "redis", url: "env:R" }] })).toEqual(['sources.0.name: name "state" is used twice (databases and sources share one namespace)']);
  });

  it("a source needs its connection key and takes no key of another kind", () => {
    expect(issues({ ...base, sources: [{ name: "pg", kind: "postgres" }] })).toEqual(['sources.0.url: a postgres source needs "url"']);
    expect(issues({ ...base, sources: [{ name: "r", kind: "redis", url: "env:R", schemas: ["public"] }] })).toEqual(["sources.0.schemas: not a key of a redis source"]);
  });

  it("timers, cursors and open operations must name a database that exists", () => {
    expect(issues({ ...base, timers: [{ database: "nope", table: "leases", column: "until", mode: "shift", format: "epoch_ms" }] })).toEqual(['timers.0.database: no database named "nope"']);
    expect(issues({ ...base, openOperations: { database: "nope", sql: "SELECT 1" } })).toEqual(['openOperations.database: no database named "nope"']);
  });

  it("a command probe's environment takes only variable names, and credentials it names must be declared", () => {
    const ops = { database: "state", sql: "SELECT 1" };
    const onCompleted = { database: "state", sql: "UPDATE outbox SET done = 1" };
    const r = issues({ ...base, openOperations: ops, reconcile: { probe: { command: ["probe"], env: { AGENTBAK_HOME: "/x", TOKEN: "{credential:api}" } }, onCompleted } });
    expect(r).toEqual([
      "reconcile.probe.env.AGENTBAK_HOME: not an environment variable name (letters, digits, _), or an AGENTBAK_* name (agentbak's own)",
      'reconcile.probe.env.TOKEN: no credential named "api"',
    ]);
  });

  it("reconcile needs openOperations, and a retry-safe strategy needs onRetry", () => {
    const probe = { command: ["true"] };
    const onCompleted = { database: "state", sql: "UPDATE outbox SET done = 1" };
    expect(issues({ ...base, reconcile: { probe, onCompleted } })).toContain("reconcile: reconcile needs openOperations (the query that finds them)");
    const ops = { database: "state", sql: "SELECT 1", defaultStrategy: "retry-safe" };
    expect(issues({ ...base, openOperations: ops, reconcile: { probe, onCompleted } })).toContain("reconcile.onRetry: a retry-safe strategy needs onRetry (the SQL that queues the resend)");
  });

  it("strategyFor: the kind's strategy, else the default, else observe", () => {
    const ops = { database: "state", sql: "x", strategies: { email: "escalate" as const }, defaultStrategy: "retry-safe" as const };
    expect([strategyFor("email", ops), strategyFor("sms", ops), strategyFor(null, ops), strategyFor("email", undefined)]).toEqual(["escalate", "retry-safe", "retry-safe", "observe"]);
  });

  it("configuredEmbeddings maps every database and source name to its model, or undefined", () => {
    const c = ConfigSchema.parse({ ...base, sources: [{ name: "vec", kind: "lancedb", path: "vec", embedding: { model: "m", dimension: 3 } }] });
    expect([...configuredEmbeddings(c)]).toEqual([["state", undefined], ["vec", { model: "m", dimension: 3 }]]);
  });
});
