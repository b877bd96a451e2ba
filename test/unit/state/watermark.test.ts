// This host's own record of each agent (rollback protection): it only rises, a v1 file is a floor, damage is never guessed past.
import { afterAll, describe, expect, it } from "vitest";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { tmpdir } from "node:os";
import { hostWatermark, raiseAuditSeen, raiseBackupWatermark, raiseCommittedIn, raiseTrustedState, readAuditSeen, readCommittedIn, readTrustedState } from "../../../src/state/watermark.js";
import { homePaths } from "../../../src/home.js";
import { AgentbakError } from "../../../src/errors.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-watermark-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const a = { tenant: "acme", agent: "billing-agent" };
const home = () => mkdtempSync(join(tmp, "h-"));
const put = (p: string, text: string) => {
  mkdirSync(dirname(p), { recursive: true });
  writeFileSync(p, text);
};
const H = "a".repeat(64);

describe("trusted state", () => {
  it("is zeros when none was recorded, and only rises", () => {
    const h = home();
    expect(readTrustedState(h, a)).toEqual({ highest_sequence: 0, generation: 0 });
    raiseTrustedState(h, a, { highest_sequence: 7, generation: 2 });
    raiseTrustedState(h, a, { highest_sequence: 3, generation: 5 });
    expect(readTrustedState(h, a)).toEqual({ highest_sequence: 7, generation: 5 });
    expect(readTrustedState(h, { tenant: "globex", agent: "billing-agent" })).toEqual({ highest_sequence: 0, generation: 0 });
  });

  it("agentbak 0.1's per-agent file is a floor for every tenant", () => {
    const h = home();
    put(homePaths(h).trustedStateV1(a.agent), JSON.stringify({ highest_sequence: 9, generation: 1 }));
    raiseTrustedState(h, a, { highest_sequence: 4, generation: 3 });
    expect(readTrustedState(h, a)).toEqual({ highest_sequence: 9, generation: 3 });
  });

  it("a damaged file is an error naming it (1), never read as zero", () => {
    for (const [text, why] of [["{", "is not JSON"], ["[1]", "is not a JSON object"], ['{"highest_sequence": -1}', "holds highest_sequence = -1, not a count"], ['{"generation": "2"}', 'holds generation = "2", not a count']]) {
      const h = home();
      const p = homePaths(h).trustedState(a.tenant, a.agent);
      put(p, text);
      let err: unknown;
      try { readTrustedState(h, a); } catch (e) { err = e; }
      expect(err, text).toBeInstanceOf(AgentbakError);
      expect((err as AgentbakError).code).toBe(1);
      expect((err as Error).message).toContain(`trusted state ${p} ${why}`);
    }
  });
});

describe("backup watermark and audit checkpoints", () => {
  it("the host watermark is the higher of restored and backed-up sequences; writers keep each other's fields", () => {
    const h = home();
    raiseBackupWatermark(h, a, 12);
    raiseBackupWatermark(h, a, 5);
    expect(hostWatermark(h, a)).toBe(12);
    raiseTrustedState(h, a, { highest_sequence: 20, generation: 1 });
    expect(hostWatermark(h, a)).toBe(20);
    raiseAuditSeen(h, a, "s3://b/p", { entries: 3, head_sha256: H });
    const raw = JSON.parse(readFileSync(homePaths(h).trustedState(a.tenant, a.agent), "utf8"));
    expect(raw).toEqual({ highest_sequence: 20, generation: 1, highest_backup_sequence: 12, audit_seen: { "s3://b/p": { entries: 3, head_sha256: H } } });
  });

  it("audit checkpoints are per repository and never go back", () => {
    const h = home();
    expect(readAuditSeen(h, a, "/repo")).toBeNull();
    raiseAuditSeen(h, a, "/repo", { entries: 5, head_sha256: H });
    raiseAuditSeen(h, a, "/repo", { entries: 2, head_sha256: "b".repeat(64) });
    expect(readAuditSeen(h, a, "/repo")).toEqual({ entries: 5, head_sha256: H });
    expect(readAuditSeen(h, a, "/other")).toBeNull();
    put(homePaths(h).trustedState(a.tenant, a.agent), JSON.stringify({ audit_seen: { "/repo": { entries: 1, head_sha256: "short" } } }));
    expect(() => readAuditSeen(h, a, "/repo")).toThrow(/holds audit_seen that is not a map/);
  });
});

describe("committed_in: the sequence this host committed per repository id", () => {
  it("is kept per repository id, only rises, and keeps the other fields", () => {
    const h = home();
    expect(readCommittedIn(h, a, "r1")).toBe(0);
    raiseBackupWatermark(h, a, 4);
    raiseCommittedIn(h, a, "r1", 4);
    raiseCommittedIn(h, a, "r1", 2);
    raiseCommittedIn(h, a, "r2", 1);
    expect(readCommittedIn(h, a, "r1")).toBe(4);
    expect(readCommittedIn(h, a, "r2")).toBe(1);
    expect(readCommittedIn(h, { tenant: "globex", agent: "billing-agent" }, "r1")).toBe(0);
    expect(hostWatermark(h, a)).toBe(4);
  });

  it("a damaged map is named, never read as nothing committed", () => {
    for (const bad of [[1], { r1: "4" }, { r1: 0 }, { r1: 1.5 }]) {
      const h = home();
      put(homePaths(h).trustedState(a.tenant, a.agent), JSON.stringify({ highest_sequence: 1, committed_in: bad }));
      expect(() => readCommittedIn(h, a, "r1")).toThrow(/holds committed_in that is not a map of repository ids to sequences/);
    }
  });
});
