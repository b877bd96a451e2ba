// Exit codes and error phrasing: the table DESIGN.md documents, errno kept apart from verification, context added without losing the code.
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import * as z from "zod";
import { AgentbakError, Exit, EXIT_NAMES, formatIssues, hasCause, ioErrno, ioError, placeError, usageError, wrap } from "../../src/errors.js";

const sys = (code: string, syscall = "open", path = "/x") => Object.assign(new Error(`${code}: ${syscall} '${path}'`), { code, syscall, path, errno: -1 });

describe("exit codes", () => {
  it("are exactly the codes in docs/exit-codes.md, each with a stable name", () => {
    const design = readFileSync(resolve(import.meta.dirname, "..", "..", "docs", "exit-codes.md"), "utf8");
    const documented = [...design.matchAll(/^\| (\d+) \| /gm)].map((m) => Number(m[1]));
    expect(Object.values(Exit).sort((a, b) => a - b)).toEqual([...new Set(documented)].sort((a, b) => a - b));
    expect(Object.keys(EXIT_NAMES).map(Number).sort((a, b) => a - b)).toEqual(Object.values(Exit).sort((a, b) => a - b));
  });
});

describe("wrap", () => {
  it("keeps an AgentbakError's code and chains the cause", () => {
    const inner = usageError("bad flag");
    const w = wrap(inner, "restore db state");
    expect([w.code, w.message]).toEqual([2, "restore db state: bad flag"]);
    expect(hasCause(w, AgentbakError)).toBe(true);
  });
  it("ENOENT is not found (10); other system errors are failures (1); a path already in the context is not repeated", () => {
    expect([wrap(sys("ENOENT", "open", "/a/b"), "read config").code, wrap(sys("ENOENT", "open", "/a/b"), "read config").message]).toEqual([10, "read config: ENOENT /a/b"]);
    expect(wrap(sys("ENOENT", "open", "/a/b"), "read /a/b").message).toBe("read /a/b: does not exist (ENOENT)");
    expect([wrap(sys("EACCES"), "x").code, wrap(new Error("boom"), "x").message]).toEqual([1, "x: boom"]);
  });
});

describe("storage failures", () => {
  it("ioErrno reads a system error's code or a tool's wording, and nothing else", () => {
    expect([sys("ENOSPC"), new Error("database or disk is full"), new Error("fatal: Read-only file system"), new Error("disk I/O error"), new Error("signature does not match")].map(ioErrno)).toEqual(["ENOSPC", "ENOSPC", "EROFS", "EIO", null]);
  });
  it("ioError names the path and the errno, exit 1", () => {
    const e = ioError(new Error("disk I/O error"), "/repo/x.agentbak");
    expect([e.code, e.message]).toEqual([1, "/repo/x.agentbak: EIO (disk I/O error)"]);
  });
  it("placeError: a place that can not be used is a usage error (2) saying why; a failing disk stays 1", () => {
    const e = placeError(sys("ENOTDIR", "mkdir", "/etc/passwd/x"), "--target");
    expect([e.code, e.message]).toEqual([2, "--target: can not mkdir /etc/passwd/x (a part of the path is not a folder, ENOTDIR)"]);
    expect(placeError(sys("ENOSPC", "write"), "--target").code).toBe(1);
  });
});

describe("formatIssues", () => {
  it("one `path: message` per issue, unknown keys named, the root said so", () => {
    const r = z.strictObject({ a: z.strictObject({ b: z.number() }) }).safeParse({ a: { b: "x", c: 1 }, d: 2 });
    expect(formatIssues(r.error!.issues)).toMatch(/^a\.b: .*; a: unknown key\(s\) "c"; \(root\): unknown key\(s\) "d"$/);
  });
});
