// State sources: credential references resolve without ever showing a value; errors are one line with URLs and passwords taken out.
import { afterAll, describe, expect, it } from "vitest";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { resolveReference, sourceError, targetIsFolder } from "../../../../src/state/sources/common.js";
import { AgentbakError } from "../../../../src/errors.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-sources-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const SECRET = "s3cr3t-p@ss";

const thrown = (f: () => unknown): AgentbakError => {
  try { f(); } catch (e) { return e as AgentbakError; }
  throw new Error("did not throw");
};

describe("resolveReference", () => {
  it("reads env: and file: (relative to the agent's root, trimmed)", () => {
    mkdirSync(join(tmp, "secrets"), { recursive: true });
    writeFileSync(join(tmp, "secrets", "pg"), `postgres://u:${SECRET}@db/x\n`);
    expect(resolveReference("env:PG_URL", tmp, { PG_URL: ` redis://h:1 \n` })).toBe("redis://h:1");
    expect(resolveReference("file:secrets/pg", tmp, {})).toBe(`postgres://u:${SECRET}@db/x`);
    expect(resolveReference(`file:${join(tmp, "secrets", "pg")}`, "/nonexistent", {})).toBe(`postgres://u:${SECRET}@db/x`);
  });

  it("an unset variable, a missing file or another scheme is exit 2 naming the reference, never a value", () => {
    const unset = thrown(() => resolveReference("env:PG_URL", tmp, { OTHER: SECRET }));
    expect([unset.code, unset.message]).toEqual([2, "env:PG_URL: environment variable PG_URL is not set"]);
    const missing = thrown(() => resolveReference("file:nope", tmp, {}));
    expect([missing.code, missing.message]).toEqual([2, "file:nope: ENOENT"]);
    const literal = thrown(() => resolveReference(`postgres://u:${SECRET}@db/x`, tmp, {}));
    expect(literal.code).toBe(2);
    expect(literal.message).toMatch(/only env: and file: references/);
  });
});

describe("sourceError", () => {
  it("takes the connection URL and its password out, names the client's code, keeps one line", () => {
    const url = `postgres://agent:${encodeURIComponent(SECRET)}@db.internal:5432/app`;
    const e = Object.assign(new Error(`connect to ${url} failed, password ${SECRET} refused`), { code: "ECONNREFUSED" });
    const r = sourceError("orders", e, url, "checking its target");
    expect(r.code).toBe(1);
    expect(r.message).toBe("source orders: checking its target: connect to <url> failed, password *** refused (ECONNREFUSED)");
    const multi = sourceError("orders", new Error(`first line\nsecond ${SECRET}`), url);
    expect(multi.message).toBe("source orders: first line");
  });

  it("redacts a password in any URL the client echoes, and keeps an AgentbakError's exit code", () => {
    const r = sourceError("cache", new AgentbakError(2, "bad target redis://:hunter2@cache:6379/0"));
    expect(r.code).toBe(2);
    expect(r.message).toBe("source cache: bad target redis://:***@cache:6379/0");
    const agg = sourceError("x", Object.assign(new AggregateError([new Error("connect ECONNREFUSED ::1:5432")], ""), { code: "ECONNREFUSED" }));
    expect(agg.message).toBe("source x: connect ECONNREFUSED ::1:5432");
  });

  it("only lancedb restores into a folder", () => {
    expect(["lancedb", "postgres", "redis"].map((k) => targetIsFolder(k as any))).toEqual([true, false, false]);
  });
});
