// The workspace stage on real git repositories: a capture that rebuilds the tree, what stays out of it, committed secrets and credential files
// found, and the last proven capture reused only for the very same state and settings (in this process and, through AGENTBAK_HOME/cache, the next).
import { afterAll, describe, expect, it, vi } from "vitest";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { captureScope } from "../../../src/capture/scope.js";
import { captureWs } from "../../../src/capture/workspace.js";
import { loadConfig } from "../../../src/config/load.js";
import { homePaths } from "../../../src/home.js";
import { treeDigest } from "../../../src/state/workspace/workspace.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-ws-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const git = (cwd: string, ...args: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false", ...args], { cwd, encoding: "utf8" });
let n = 0;
/** an agent folder with a committed workspace, its config, a home and a staging folder */
function agent(o: { uncommitted?: string; credentials?: unknown[]; files?: Record<string, string> } = {}) {
  const dir = join(tmp, `agent-${n++}`);
  const ws = join(dir, "workspace");
  mkdirSync(ws, { recursive: true });
  git(ws, "init", "-q", "-b", "main");
  writeFileSync(join(ws, "README.md"), "notes\n");
  for (const [f, c] of Object.entries(o.files ?? {})) {
    mkdirSync(join(ws, f, ".."), { recursive: true });
    writeFileSync(join(ws, f), c);
  }
  git(ws, "add", "-A");
  git(ws, "commit", "-qm", "first");
  writeFileSync(join(dir, "agentbak.json"), JSON.stringify({ agent: { id: "a", tenant: "t" }, repository: "../repo", recipients: ["age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"], workspace: { path: "workspace", uncommitted: o.uncommitted ?? "include" }, credentials: o.credentials ?? [] }));
  const lc = loadConfig(join(dir, "agentbak.json"));
  const home = join(dir, "home");
  mkdirSync(home);
  const scope = (warnings: string[] = []) => {
    const staging = mkdtempSync(join(dir, "staging-"));
    return captureScope(lc, staging, home, warnings);
  };
  return { dir, ws, lc, home, scope };
}
/** rebuilds a capture into `dest` with plain git, as a person would */
function rebuild(files: { path: string; file: string }[], dest: string) {
  git(tmp, "clone", "-q", files.find((f) => f.path === "workspace/repo.bundle")!.file, dest);
  const patch = files.find((f) => f.path === "workspace/changes.patch");
  if (patch) git(dest, "apply", "--binary", patch.file);
}

describe("captureWs", () => {
  it("captures HEAD and uncommitted work so that git alone rebuilds the tree; the same state again reuses it, a changed file does not", async () => {
    const a = agent();
    writeFileSync(join(a.ws, "README.md"), "notes, edited\n");
    writeFileSync(join(a.ws, "new.txt"), "untracked\n");
    const head = git(a.ws, "rev-parse", "HEAD").trim();
    const w = await captureWs(a.scope(), a.ws, null);
    expect(w.manifest).toMatchObject({ path: "workspace", commit: head, branch: "main", dirty: true, uncommitted: "include", files: 2 });
    expect(w.staged.map((s) => [s.path, s.kind])).toEqual([["workspace/repo.bundle", "git-bundle"], ["workspace/changes.patch", "git-patch"]]);
    const dest = join(a.dir, "rebuilt");
    rebuild(w.staged, dest);
    expect(readFileSync(join(dest, "README.md"), "utf8")).toBe("notes, edited\n");
    expect(readFileSync(join(dest, "new.txt"), "utf8")).toBe("untracked\n");
    expect(w.manifest!.tree_sha256).toBe((await treeDigest(a.ws)).sha256);
    expect(w.findings).toEqual([]);
    // the same state again: the same capture; a changed file: captured afresh
    const again = await captureWs(a.scope(), a.ws, null);
    expect(again.manifest).toEqual(w.manifest);
    for (const [i, s] of again.staged.entries()) expect(readFileSync(s.file).equals(readFileSync(w.staged[i]!.file))).toBe(true);
    writeFileSync(join(a.ws, "new.txt"), "untracked, edited\n");
    const changed = await captureWs(a.scope(), a.ws, null);
    expect(changed.manifest!.tree_sha256).not.toBe(w.manifest!.tree_sha256);
    expect(readFileSync(changed.staged[1]!.file, "utf8")).toContain("+untracked, edited");
  });

  it("a clean workspace has no patch; uncommitted: refuse on a dirty one is exit 14", async () => {
    const a = agent({ uncommitted: "refuse" });
    const w = await captureWs(a.scope(), a.ws, null);
    expect(w.staged.map((s) => s.path)).toEqual(["workspace/repo.bundle"]);
    expect(w.manifest!.dirty).toBe(false);
    writeFileSync(join(a.ws, "wip.txt"), "x");
    await expect(captureWs(a.scope(), a.ws, null)).rejects.toMatchObject({ code: 14, message: expect.stringContaining('workspace.uncommitted is "refuse"') });
  });

  it("leaves out uncommitted .env files and a credential's file, and the backup repository inside the workspace, saying where", async () => {
    const a = agent({ credentials: [{ name: "api", ref: "file:workspace/keys/api.txt" }] });
    writeFileSync(join(a.ws, ".env"), "TOKEN=x\n");
    mkdirSync(join(a.ws, "keys"));
    writeFileSync(join(a.ws, "keys/api.txt"), "secret\n");
    mkdirSync(join(a.ws, "backups"));
    writeFileSync(join(a.ws, "backups/bundle.agentbak"), "repository bytes");
    writeFileSync(join(a.ws, "kept.txt"), "kept\n");
    const w = await captureWs(a.scope(), a.ws, join(a.ws, "backups"));
    expect(w.notCaptured.map((x) => [x.path, x.reason]).sort()).toEqual([
      ["workspace/.env", "exclude"],
      ["workspace/backups", "repository"],
      ["workspace/keys/api.txt", "credential"],
    ]);
    const patch = readFileSync(w.staged.find((s) => s.path === "workspace/changes.patch")!.file, "utf8");
    expect(patch).toContain("kept.txt");
    expect(patch).not.toContain("TOKEN=x");
    expect(patch).not.toContain("secret");
    expect(patch).not.toContain("repository bytes");
  });

  it("finds a committed token (naming the file, never the value) and a committed credential file", async () => {
    const token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8";
    const a = agent({ credentials: [{ name: "deploy", ref: "file:workspace/deploy.key" }], files: { "src/config.ts": `export const t = "${token}";\n`, "deploy.key": "k\n" } });
    const w = await captureWs(a.scope(), a.ws, null);
    expect(w.findings.map((f) => f.where)).toEqual(expect.arrayContaining([expect.stringContaining("src/config.ts"), "workspace: deploy.key (committed), the file of credential deploy (file:workspace/deploy.key)"]));
    expect(JSON.stringify(w.findings)).not.toContain(token);
  });

  it("the next process reuses the capture kept in AGENTBAK_HOME/cache (0600); a capture that warned is not kept", async () => {
    const a = agent();
    writeFileSync(join(a.ws, "wip.txt"), "one\n");
    const first = await captureWs(a.scope(), a.ws, null);
    const cache = homePaths(a.home).cache.workspaceCapture(createHash("sha256").update(a.ws).digest("hex").slice(0, 16));
    expect(statSync(cache).mode & 0o777).toBe(0o600);
    // mark the kept patch, so that its reuse shows; a fresh module has no capture in memory, as a new process
    const kept = JSON.parse(readFileSync(cache, "utf8"));
    kept.files[1].base64 = Buffer.from("marked patch").toString("base64");
    writeFileSync(cache, JSON.stringify(kept));
    vi.resetModules();
    const fresh = await import("../../../src/capture/workspace.js");
    const reused = await fresh.captureWs(a.scope(), a.ws, null);
    expect(reused.manifest).toEqual(first.manifest);
    expect(readFileSync(reused.staged[1]!.file, "utf8")).toBe("marked patch");

    const b = agent();
    const warned = await captureWs(a.scope(["an earlier warning"]), b.ws, null);
    expect(warned.manifest!.commit).toMatch(/^[0-9a-f]{40}$/);
    expect(existsSync(homePaths(a.home).cache.workspaceCapture(createHash("sha256").update(b.ws).digest("hex").slice(0, 16)))).toBe(false);
  });

  it("a folder that is not a git repository is exit 2 saying so", async () => {
    const a = agent();
    const plain = join(a.dir, "plain");
    mkdirSync(plain);
    await expect(captureWs(a.scope(), plain, null)).rejects.toMatchObject({ code: 2, message: expect.stringContaining("is not a git repository") });
  });
});
