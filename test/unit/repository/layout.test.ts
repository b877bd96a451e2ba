// Repository keys: one folder per tenant and agent, ids outside the pattern never become keys, v1 keys still parse.
import { describe, expect, it } from "vitest";
import { isAgentRef, keys, ownerOf, parseSnapshotKey, snapshotFolders, snapshotsDir } from "../../../src/repository/layout.js";
import { AgentbakError } from "../../../src/errors.js";

const a = { tenant: "acme", agent: "billing-agent" };
const ID = "20260301T100000000Z-0a1b2c3d";

describe("repository layout", () => {
  it("names an agent's snapshots folder in v2, and its v1 folder after it", () => {
    expect(snapshotsDir(a)).toBe("tenants/acme/agents/billing-agent/snapshots");
    expect(snapshotFolders(a)).toEqual(["tenants/acme/agents/billing-agent/snapshots", "agents/billing-agent"]);
    expect(keys.lease(a, "restore")).toBe("tenants/acme/agents/billing-agent/locks/restore/");
    expect(keys.pageIndex(snapshotsDir(a), ID, "main")).toBe(`tenants/acme/agents/billing-agent/snapshots/${ID}.main.pageindex`);
  });

  it("idempotency keys are hashed, so a caller's key never shapes a path", () => {
    const k = keys.idempotency(a, "backup", "../../etc/passwd");
    expect(k).toMatch(/^tenants\/acme\/agents\/billing-agent\/idempotency\/backup-[0-9a-f]{64}\.json$/);
    expect(keys.idempotency(a, "backup", "x")).not.toBe(keys.idempotency(a, "restore", "x"));
  });

  it("an id outside the pattern (a/b, ../x, capitals, empty) is refused with exit 2 and never becomes a key", () => {
    for (const bad of [{ tenant: "a/b", agent: "x" }, { tenant: "acme", agent: "../x" }, { tenant: "Acme", agent: "x" }, { tenant: "acme", agent: "" }]) {
      expect(isAgentRef(bad)).toBe(false);
      let err: unknown;
      try { keys.sequence(bad); } catch (e) { err = e; }
      expect(err, JSON.stringify(bad)).toBeInstanceOf(AgentbakError);
      expect((err as AgentbakError).code).toBe(2);
    }
    expect(isAgentRef(a)).toBe(true);
  });

  it("parses snapshot keys of both layouts and the owner of their folders; anything else is null", () => {
    expect(parseSnapshotKey(`${snapshotsDir(a)}/${ID}.commit`)).toEqual({ dir: snapshotsDir(a), id: ID, ext: "commit" });
    expect(parseSnapshotKey(`agents/billing-agent/${ID}.main.pageindex`)).toEqual({ dir: "agents/billing-agent", id: ID, ext: "main.pageindex" });
    expect(parseSnapshotKey(`${snapshotsDir(a)}/20260301T1000Z-0a1b2c3d.agentbak`)).toBeNull();
    expect(parseSnapshotKey(`tenants/acme/agents/billing-agent/${ID}.agentbak`)).toBeNull();
    expect(ownerOf(snapshotsDir(a))).toEqual({ tenant: "acme", agent: "billing-agent" });
    expect(ownerOf("agents/billing-agent")).toEqual({ tenant: null, agent: "billing-agent" });
  });
});
