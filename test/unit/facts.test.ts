/**
 * The facts the house shares (src/facts.ts), spelled once: the id patterns
 * keep the exact sources the OpenAPI document, the MCP tools and the
 * manifest check print; new ids match them and sort by time; the sidecar
 * pattern names exactly SQLite's three files beside a database.
 */
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { ID_PATTERN, newRequestId, newSnapshotId, redactUrls, REQUEST_ID, sidecarOf, SNAPSHOT_ID, SQLITE_SIDECAR, SQLITE_SIDECARS, STRATEGIES } from "../../src/facts.js";

const dates = fc.date({ min: new Date("2000-01-01T00:00:00Z"), max: new Date("2099-12-31T23:59:59.999Z"), noInvalidDate: true });

describe("snapshot and request ids", () => {
  it("keep the pattern sources the agent interface publishes", () => {
    expect(SNAPSHOT_ID.source).toBe(String.raw`^\d{8}T\d{9}Z-[0-9a-f]{8}$`);
    expect(REQUEST_ID.source).toBe(String.raw`^req-\d{8}T\d{9}Z-[0-9a-f]{8}$`);
  });

  it("are made from the creation time to the millisecond and match their patterns", () => {
    const at = new Date("2026-12-02T10:11:12.345Z");
    expect(newSnapshotId(at)).toMatch(/^20261202T101112345Z-[0-9a-f]{8}$/);
    expect(newRequestId(at)).toMatch(/^req-20261202T101112345Z-[0-9a-f]{8}$/);
    expect(SNAPSHOT_ID.test(newRequestId(at))).toBe(false);
    expect(REQUEST_ID.test(newSnapshotId(at))).toBe(false);
  });

  it("sort by creation time", () => {
    fc.assert(
      fc.property(dates, dates, (a, b) => {
        fc.pre(a.getTime() !== b.getTime());
        const [x, y] = [newSnapshotId(a), newSnapshotId(b)];
        expect(SNAPSHOT_ID.test(x) && SNAPSHOT_ID.test(y)).toBe(true);
        expect(x < y).toBe(a < b);
      }),
    );
  });
});

describe("SQLite sidecars", () => {
  it("are the write-ahead log, its index and the rollback journal, and nothing else", () => {
    expect([...SQLITE_SIDECARS]).toEqual(["wal", "shm", "journal"]);
    for (const s of ["state/agent.sqlite-wal", "agent.db-shm", "x-journal"]) expect(SQLITE_SIDECAR.test(s)).toBe(true);
    for (const s of ["state/agent.sqlite", "agent-walrus", "wal", "agent.wal", "agent-journal.txt"]) expect(SQLITE_SIDECAR.test(s)).toBe(false);
  });

  it("name their database back", () => {
    fc.assert(
      fc.property(fc.string({ minLength: 1 }), fc.constantFrom(...SQLITE_SIDECARS), (db, kind) => {
        const p = sidecarOf(db, kind);
        expect(p).toBe(`${db}-${kind}`);
        expect(SQLITE_SIDECAR.test(p)).toBe(true);
        expect(p.replace(SQLITE_SIDECAR, "")).toBe(db);
      }),
    );
  });
});

describe("agent ids and strategies", () => {
  it("accept lowercase ids up to 64 characters that start with a letter or digit", () => {
    for (const ok of ["billing-agent", "a", "acme.eu_1", "0x", "a".repeat(64)]) expect(ID_PATTERN.test(ok)).toBe(true);
    for (const bad of ["", "-a", ".a", "Billing", "a b", "a/b", "a".repeat(65)]) expect(ID_PATTERN.test(bad)).toBe(false);
  });

  it("are DESIGN's three reconcile strategies", () => {
    expect([...STRATEGIES]).toEqual(["observe", "retry-safe", "escalate"]);
  });
});

describe("[E9] redactUrls: the one redaction every echoed error goes through", () => {
  it("[E9] takes a password holding an unencoded /, ? or # whole, up to the @ its host follows (each leaked before)", () => {
    for (const pw of ["pa/ss", "pa?ss", "pa#ss", "p@ss", "a/b#c?d"]) expect(redactUrls(`connect postgres://u:${pw}@h:5432/db failed`)).toBe("connect postgres://u:***@h:5432/db failed");
  });

  it("[E9] takes ?password= in a query and libpq's password= (bare or quoted) in a key=value string (each leaked before)", () => {
    expect(redactUrls("postgres://u@h/db?sslmode=require&password=s3cret&x=1")).toBe("postgres://u@h/db?sslmode=require&password=***&x=1");
    expect(redactUrls("host=h user=u password=s3cret dbname=d")).toBe("host=h user=u password=*** dbname=d");
    expect(redactUrls("host=h PASSWORD = 'a b\\'c' dbname=d")).toBe("host=h PASSWORD = *** dbname=d");
  });

  it("[E9] takes a password holding a space (left open by the third attack)", () => {
    expect(redactUrls("connect postgres://u:p ss@h:5432/db failed")).toBe("connect postgres://u:***@h:5432/db failed");
    expect(redactUrls("postgres://u: a b c @h/db")).toBe("postgres://u:***@h/db");
  });

  it("[E9] a port followed by text holding an @ is no password", () => {
    for (const t of ["fetch http://host:8080 failed for bob@example.com", "http://127.0.0.1:8025\nmail bob@example.com"]) expect(redactUrls(t)).toBe(t);
  });

  it("[E9] leaves what is no password: a port and a path holding @, a path with : and @, a URL without one", () => {
    for (const t of ["http://127.0.0.1:8025/v1/deliveries/bob@example.com", "https://host/path:x@y", "postgres://agentbak@127.0.0.1/db", "no URL: a:b@c", "s3://bucket/prefix"]) expect(redactUrls(t)).toBe(t);
    expect(redactUrls("postgres://u:p@h/db?x=a@b")).toBe("postgres://u:***@h/db?x=a@b");
  });
});
