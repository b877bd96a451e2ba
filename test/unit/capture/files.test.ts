/**
 * The files list (src/capture/files.ts), made once per backup from the `files` patterns over a real folder: a glob
 * never takes a configured database, its sidecars, the repository or .git; a literal path naming one, a folder, or
 * a link leaving the config folder is a config error (2); credential files are listed (the capture records them as
 * left out) but never read for the unchanged fingerprint.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { listFiles, listReadable, readableFiles } from "../../../src/capture/files.js";
import { loadConfig } from "../../../src/config/load.js";
import { AgentbakError } from "../../../src/errors.js";

let dir: string;
const put = (rel: string, text = rel) => {
  mkdirSync(join(dir, rel, ".."), { recursive: true });
  writeFileSync(join(dir, rel), text);
};
const config = (files: string[], extra: object = {}) => {
  writeFileSync(join(dir, "agentbak.json"), JSON.stringify({ repository: "backups", agent: { id: "a1", tenant: "t1" }, recipients: ["age1qyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqs3290gq"], databases: [{ name: "main", path: "state/agent.db" }], files, ...extra }));
  return loadConfig(join(dir, "agentbak.json"));
};
const refused = (f: () => unknown): AgentbakError => {
  try {
    f();
  } catch (e) {
    if (e instanceof AgentbakError) return e;
    throw e;
  }
  throw new Error("not refused");
};

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "agentbak-files-"));
  put("state/agent.db");
  put("state/agent.db-wal");
  put("state/notes.txt");
  put("prompts/b.md");
  put("prompts/a.md");
  put("prompts/.git/HEAD");
  put("backups/x");
  put("secret.key");
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe("listFiles", () => {
  it("lists each pattern's files in pattern order, sorted within a glob, leaving out databases, sidecars, .git and the repository", () => {
    const lc = config(["prompts/**", "state/*", "secret.key", "**/x"]);
    expect(listFiles(lc, join(dir, "backups")).map((l) => [l.pattern, l.file.slice(dir.length + 1)])).toEqual([
      ["prompts/**", "prompts/a.md"],
      ["prompts/**", "prompts/b.md"],
      ["state/*", "state/notes.txt"],
      ["secret.key", "secret.key"],
    ]);
  });

  it("refuses a literal path naming a database, a folder, a missing file or a link out of the config folder", () => {
    expect(refused(() => listFiles(config(["state/agent.db"]), null))).toMatchObject({ code: 2, message: "files: state/agent.db names a configured database; it is captured otherwise or never" });
    expect(refused(() => listFiles(config(["state/agent.db-wal"]), null)).message).toContain("a SQLite sidecar of a configured database");
    expect(refused(() => listFiles(config(["prompts"]), null))).toMatchObject({ code: 2, message: "files: prompts is a folder; name its files, or a glob such as prompts/**" });
    expect(refused(() => listFiles(config(["gone.md"]), null)).code).toBe(10);
    const outside = mkdtempSync(join(tmpdir(), "agentbak-outside-"));
    writeFileSync(join(outside, "o.md"), "o");
    symlinkSync(join(outside, "o.md"), join(dir, "link.md"));
    expect(refused(() => listFiles(config(["*.md"]), null))).toMatchObject({ code: 2, message: expect.stringContaining("link.md is a symbolic link to") });
    rmSync(outside, { recursive: true, force: true });
  });
});

describe("listFiles: real paths from one lstat per file and one realpath per folder", () => {
  it("a file reached through a linked folder is judged where it really is: inside, listed with its real path; outside, refused", () => {
    put("real/p.md");
    symlinkSync(join(dir, "real"), join(dir, "via"));
    symlinkSync(join(dir, "real/p.md"), join(dir, "filelink.md"));
    const listed = listFiles(config(["via/*", "filelink.md"]), null);
    expect(listed.map((l) => [l.file.slice(dir.length + 1), l.real!.slice(dir.length + 1)])).toEqual([
      ["via/p.md", "real/p.md"],
      ["filelink.md", "real/p.md"],
    ]);
    const outside = mkdtempSync(join(tmpdir(), "agentbak-outside-"));
    writeFileSync(join(outside, "o.md"), "o");
    symlinkSync(outside, join(dir, "out"));
    expect(refused(() => listFiles(config(["out/*"]), null))).toMatchObject({ code: 2, message: expect.stringContaining(`out/o.md is a symbolic link to ${join(outside, "o.md")}`) });
    rmSync(outside, { recursive: true, force: true });
  });
  it("a credential's file reached through a linked folder is still not read by the unchanged check", () => {
    symlinkSync(dir, join(dir, "prompts", "up"));
    const lc = config(["prompts/up/secret.key", "prompts/*.md"], { credentials: [{ name: "signer", ref: "file:secret.key" }] });
    expect(readableFiles(lc, listFiles(lc, null)).map((f) => f.slice(dir.length + 1))).toEqual(["prompts/a.md", "prompts/b.md"]);
  });
});

describe("readableFiles", () => {
  it("drops a credential's file from what the unchanged check reads", () => {
    const lc = config(["secret.key", "prompts/*.md"], { credentials: [{ name: "signer", ref: "file:secret.key" }] });
    expect(readableFiles(lc, listFiles(lc, null)).map((f) => f.slice(dir.length + 1))).toEqual(["prompts/a.md", "prompts/b.md"]);
  });
  it("listReadable: the list, credential's file included, and of it what the fingerprint reads", () => {
    const lc = config(["secret.key", "prompts/*.md"], { credentials: [{ name: "signer", ref: "file:secret.key" }] });
    const { listed, readable } = listReadable(lc, null);
    expect(listed.map((l) => l.file.slice(dir.length + 1))).toEqual(["secret.key", "prompts/a.md", "prompts/b.md"]);
    expect(readable.map((f) => f.slice(dir.length + 1))).toEqual(["prompts/a.md", "prompts/b.md"]);
  });
});
