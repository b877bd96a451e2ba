// What a capture keeps out (credential files, secretScan.exclude names) and how a scan policy acts on findings (refuse: exit 14 naming where, never what).
import { afterAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { captureScope, credentialFiles, restoreTarget, restoreTargets } from "../../../src/capture/scope.js";
import { applyScanPolicy } from "../../../src/capture/take.js";
import { loadConfig } from "../../../src/config/load.js";
import { AgentbakError } from "../../../src/errors.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-scope-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const lc = (extra: Record<string, unknown> = {}) => {
  const p = join(tmp, "agentbak.json");
  writeFileSync(p, JSON.stringify({ agent: { id: "a", tenant: "t" }, repository: "../repo", recipients: ["age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"], ...extra }));
  return loadConfig(p);
};

describe("restoreTarget", () => {
  it("a path inside the config's folder keeps its place (with /); one outside, or the folder itself, falls back", () => {
    const c = lc();
    expect(restoreTarget(c, "state/agent.sqlite", "db/state.sqlite")).toBe("state/agent.sqlite");
    expect(restoreTarget(c, join(tmp, "x", "y.db"), "db/x.sqlite")).toBe("x/y.db");
    expect(restoreTarget(c, "../elsewhere/a.db", "db/a.sqlite")).toBe("db/a.sqlite");
    expect(restoreTarget(c, "/etc/a.db", "db/a.sqlite")).toBe("db/a.sqlite");
    expect(restoreTarget(c, ".", "workspace")).toBe("workspace");
  });

  it("restoreTargets: every database's, source's and the workspace's, once, as the scope carries them", () => {
    const c = lc({
      databases: [{ name: "main", path: "state/agent.sqlite" }, { name: "far", path: "../far.db" }],
      sources: [{ name: "memory", kind: "lancedb", path: "memory/lance" }, { name: "cache", kind: "redis", url: "env:REDIS_URL" }],
      workspace: { path: "ws" },
    });
    const t = restoreTargets(c);
    expect([...t.databases]).toEqual([["main", "state/agent.sqlite"], ["far", "db/far.sqlite"]]);
    expect([...t.sources]).toEqual([["memory", "memory/lance"], ["cache", null]]);
    expect(t.workspace).toBe("ws");
    expect(restoreTargets(lc()).workspace).toBeNull();
    expect(captureScope(c, join(tmp, "staging"), tmp, []).targets).toEqual(t);
  });
});

describe("captureScope", () => {
  it("leaves out a credential's file (by absolute path, naming the credential) and names matching secretScan.exclude", () => {
    const c = lc({ credentials: [{ name: "api", ref: "file:secrets/api.txt" }, { name: "env", ref: "env:TOKEN" }] });
    expect([...credentialFiles(c).keys()]).toEqual([join(tmp, "secrets/api.txt")]);
    const s = captureScope(c, join(tmp, "staging"), tmp, []);
    expect(s.leaveOut(join(tmp, "secrets/api.txt"), "secrets/api.txt")).toEqual({ reason: "credential", detail: "api (file:secrets/api.txt)" });
    expect(s.leaveOut(join(tmp, "conf/.env"), "conf/.env")).toEqual({ reason: "exclude", detail: 'secretScan.exclude ".env"' });
    expect(s.leaveOut(join(tmp, "keys/id_ed25519"), "keys/id_ed25519")).toEqual({ reason: "exclude", detail: 'secretScan.exclude "id_*"' });
    expect(s.leaveOut(join(tmp, "notes.md"), "notes.md")).toBeNull();
    expect(s).toMatchObject({ notCaptured: [], findings: { workspace: [], files: [] } });
  });

  it("an empty exclude list keeps .env in", () => {
    const s = captureScope(lc({ secretScan: { exclude: [] } }), tmp, tmp, []);
    expect(s.leaveOut(join(tmp, ".env"), ".env")).toBeNull();
  });
});

describe("applyScanPolicy", () => {
  const finding = (i: number) => ({ where: `files: notes/${i}.md line 3`, kind: "github token" });

  it("off and no findings do nothing; warn adds one warning per finding", () => {
    const w: string[] = [];
    applyScanPolicy("off", [finding(1)], w);
    applyScanPolicy("refuse", [], w);
    expect(w).toEqual([]);
    applyScanPolicy("warn", [finding(1), finding(2)], w);
    expect(w).toEqual(["possible secret (github token) in files: notes/1.md line 3", "possible secret (github token) in files: notes/2.md line 3"]);
  });

  it("refuse throws exit 14 naming up to ten places and how many more", () => {
    const w: string[] = [];
    let err: AgentbakError | undefined;
    try {
      applyScanPolicy("refuse", Array.from({ length: 12 }, (_, i) => finding(i)), w);
    } catch (e) {
      err = e as AgentbakError;
    }
    expect(err?.code).toBe(14);
    expect(err?.message).toBe(`refusing to back up: possible secret (github token) in ${Array.from({ length: 10 }, (_, i) => `files: notes/${i}.md line 3`).join(", ")} and 2 more`);
    expect(w).toEqual([]);
  });
});
