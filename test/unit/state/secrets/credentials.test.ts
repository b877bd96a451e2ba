/**
 * Credential references (state/secrets/credentials.ts): checked as present,
 * missing or unchecked without ever reading a value into a message; read only
 * from env: and file:, every failure exit 2 naming the reference, never a value.
 */
import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { checkCredentials, readCredential } from "../../../../src/state/secrets/credentials.js";
import { AgentbakError } from "../../../../src/errors.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-cred-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const SECRET = "sk-live-do-not-print-0123456789";
writeFileSync(join(dir, "token"), `${SECRET}\n`);
writeFileSync(join(dir, "locked"), SECRET);
chmodSync(join(dir, "locked"), 0o000);
mkdirSync(join(dir, "folder"));
const env = { API_TOKEN: SECRET, EMPTY: "" };
const root = process.getuid?.() === 0; // root reads a mode-000 file

describe("checkCredentials", () => {
  it("env: set and non-empty; file: a readable regular file, relative to the root; other schemes unchecked", async () => {
    const r = await checkCredentials(
      [
        { name: "a", ref: "env:API_TOKEN" },
        { name: "b", ref: "env:EMPTY" },
        { name: "c", ref: "env:UNSET_VAR" },
        { name: "d", ref: "file:token" },
        { name: "e", ref: `file:${join(dir, "token")}` },
        { name: "f", ref: "file:folder" },
        { name: "g", ref: "file:nope" },
        { name: "h", ref: "vault:secret/data/x" },
      ],
      dir, {}, env,
    );
    expect(r.map((x) => [x.name, x.status])).toEqual([["a", "present"], ["b", "missing"], ["c", "missing"], ["d", "present"], ["e", "present"], ["f", "missing"], ["g", "missing"], ["h", "unchecked"]]);
    expect(r[7]!.detail).toBe('no check configured for scheme "vault" (restore.credentialCheck)');
    expect(JSON.stringify(r)).not.toContain(SECRET);
  });

  it("a configured checker gets the reference as its last argument; exit 0 is present", async () => {
    const log = join(dir, "checked");
    const checker = ["sh", "-c", `printf '%s\\n' "$0" >> ${log}; test "$0" = vault:ok`];
    const r = await checkCredentials([{ name: "x", ref: "vault:ok" }, { name: "y", ref: "vault:gone" }], dir, { vault: checker }, env);
    expect(r.map((x) => [x.status, x.detail])).toEqual([["present", "check command exited 0"], ["missing", "check command exited 1"]]);
  });

  it.skipIf(root)("a file that can not be read is missing", async () => {
    const [r] = await checkCredentials([{ name: "l", ref: "file:locked" }], dir, {}, env);
    expect(r!.status).toBe("missing");
  });
});

describe("readCredential", () => {
  const fails = (f: () => unknown): AgentbakError => {
    try { f(); } catch (e) { expect(e).toBeInstanceOf(AgentbakError); return e as AgentbakError; }
    throw new Error("did not throw");
  };

  it("reads env: and file: (one trailing newline dropped)", () => {
    expect(readCredential("a", "env:API_TOKEN", dir, env)).toBe(SECRET);
    expect(readCredential("d", "file:token", dir, env)).toBe(SECRET);
    writeFileSync(join(dir, "two"), "a\n\n");
    expect(readCredential("d", "file:two", dir, env)).toBe("a\n");
  });

  it("unset, unreadable, a folder, a device, or another scheme: exit 2 naming the reference and never a value", () => {
    symlinkSync("/dev/null", join(dir, "devnull"));
    const cases: [string, string][] = [
      ["env:EMPTY", "credential n (env:EMPTY): environment variable EMPTY is not set"],
      ["file:nope", `credential n (file:nope): ${join(dir, "nope")} is not readable (ENOENT)`],
      ["file:folder", `credential n (file:folder): ${join(dir, "folder")} is not readable (EISDIR)`],
      ["file:devnull", `credential n (file:devnull): ${join(dir, "devnull")} is not readable (ENOTREG)`],
      ["vault:x", "credential n (vault:x): a vault: reference can not be read by agentbak; use env: or file:, or a command probe that reads it itself"],
    ];
    for (const [ref, msg] of cases) {
      const e = fails(() => readCredential("n", ref, dir, env));
      expect(e.code).toBe(2);
      expect(e.message).toBe(msg);
      expect(e.message).not.toContain(SECRET);
    }
  });
});
