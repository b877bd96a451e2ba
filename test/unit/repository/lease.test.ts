// Lease naming and length: the host's name in grants, and AGENTBAK_LEASE_SECONDS refused outside 2..86400;
// one process taking one lease twice at once (a server's two requests) on a real folder store: one holds it.
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { acquireLease, hostId, leaseMs } from "../../../src/repository/lease.js";
import { LocalStore } from "../../../src/storage/local.js";
import { AgentbakError } from "../../../src/errors.js";

const saved = { host: process.env.AGENTBAK_HOST_ID, secs: process.env.AGENTBAK_LEASE_SECONDS };
afterEach(() => {
  for (const [k, v] of [["AGENTBAK_HOST_ID", saved.host], ["AGENTBAK_LEASE_SECONDS", saved.secs]] as const) if (v === undefined) delete process.env[k]; else process.env[k] = v;
});

describe("lease", () => {
  it("hostId is AGENTBAK_HOST_ID, else the hostname (an empty value counts as unset)", () => {
    process.env.AGENTBAK_HOST_ID = "runner-7";
    expect(hostId()).toBe("runner-7");
    process.env.AGENTBAK_HOST_ID = "";
    expect(hostId()).toBe(hostname());
  });

  it("leaseMs: 60 s by default, whole seconds from 2 to 86400, anything else exit 2 naming the variable", () => {
    delete process.env.AGENTBAK_LEASE_SECONDS;
    expect(leaseMs()).toBe(60_000);
    for (const [v, ms] of [["2", 2000], ["86400", 86_400_000], ["", 60_000]] as const) {
      process.env.AGENTBAK_LEASE_SECONDS = v;
      expect(leaseMs()).toBe(ms);
    }
    for (const v of ["1", "86401", "1.5", "60s", "-5", "abc"]) {
      process.env.AGENTBAK_LEASE_SECONDS = v;
      let err: unknown;
      try { leaseMs(); } catch (e) { err = e; }
      expect(err, v).toBeInstanceOf(AgentbakError);
      expect((err as AgentbakError).code).toBe(2);
      expect((err as Error).message).toContain(`AGENTBAK_LEASE_SECONDS: not a whole number of seconds from 2 to 86400: ${v}`);
    }
  });
});

describe("one process, two acquirers at once", () => {
  const dir = mkdtempSync(join(tmpdir(), "agentbak-lease-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  /** a folder store with a bucket's round trip on deletes: the winner of a grant removes the grants before its predecessor's */
  class Slow extends LocalStore {
    override async delete(key: string): Promise<boolean> {
      await new Promise((r) => setTimeout(r, 20));
      return super.delete(key);
    }
  }

  it("exactly one holds the lease: a grant this process is still taking is not mistaken for one it leaked", async () => {
    const store = new Slow(dir);
    for (let round = 0; round < 10; round++) {
      const tries = await Promise.allSettled([0, 1, 2].map(() => acquireLease(store, "locks/agent/", { waitMs: 0, what: "agent lock" })));
      const held = tries.flatMap((t) => (t.status === "fulfilled" ? [t.value] : []));
      expect(held.map((h) => h.token), `round ${round}`).toHaveLength(1);
      for (const t of tries) if (t.status === "rejected") expect((t.reason as AgentbakError).code).toBe(11);
      await held[0]!.release();
    }
  });
});
