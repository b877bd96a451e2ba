/**
 * The agent's git workspace (state/workspace/workspace.ts) on real git
 * repositories: capture and rebuild give back the same tree (committed work,
 * staged, unstaged, untracked, binary, a nested repository's files); what the
 * filter keeps out stays out and is named; refuse mode refuses dirty work
 * (14); a folder that is no repository's top is 2, a missing one 10; the
 * rebuild runs no hook from the bundle; the state key changes with any change.
 */
import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { captureWorkspace, committedPaths, rebuildWorkspace, scanWorkspace, treeDigest, workingFiles, workspaceState } from "../../../../src/state/workspace/workspace.js";
import { AgentbakError } from "../../../../src/errors.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-ws-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
const git = (cwd: string, ...args: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main", ...args], { cwd, encoding: "utf8" });

/** A repository with one commit: a.txt, bin/tool (executable), link -> a.txt. */
function repo(): string {
  const r = join(dir, `ws${n++}`);
  mkdirSync(r);
  git(r, "init", "-q");
  writeFileSync(join(r, "a.txt"), "one\n");
  mkdirSync(join(r, "bin"));
  writeFileSync(join(r, "bin", "tool"), "#!/bin/sh\n");
  chmodSync(join(r, "bin", "tool"), 0o755);
  symlinkSync("a.txt", join(r, "link"));
  writeFileSync(join(r, ".gitignore"), "*.log\n");
  git(r, "add", "-A");
  git(r, "commit", "-qm", "first");
  return r;
}
const out = () => { const o = join(dir, `out${n++}`); mkdirSync(o); return o; };
async function failure(p: Promise<unknown>): Promise<AgentbakError> {
  const e = await p.then(() => null, (x: unknown) => x);
  expect(e).toBeInstanceOf(AgentbakError);
  return e as AgentbakError;
}

describe("capture and rebuild", () => {
  it("a clean workspace: commit and branch, no patch; the rebuild has the same tree and no origin", async () => {
    const r = repo();
    const c = await captureWorkspace(r, "include", out());
    expect(c).toMatchObject({ commit: git(r, "rev-parse", "HEAD").trim(), branch: "main", dirty: false, patchFile: null, changed: [], skipped: [] });
    const dest = join(dir, `rebuilt${n++}`);
    await rebuildWorkspace(c.bundleFile, c.patchFile, c.commit, c.branch, dest);
    expect(await treeDigest(dest)).toEqual(await treeDigest(r));
    expect(git(dest, "remote").trim()).toBe("");
    expect(git(dest, "symbolic-ref", "--short", "HEAD").trim()).toBe("main");
  });

  it("uncommitted work of every kind comes back: staged, unstaged, deleted, untracked, binary, a nested repository's files; ignored files do not", async () => {
    const r = repo();
    writeFileSync(join(r, "a.txt"), "two\n");
    writeFileSync(join(r, "staged.txt"), "staged\n");
    git(r, "add", "staged.txt");
    rmSync(join(r, "bin", "tool"));
    writeFileSync(join(r, "blob.bin"), Buffer.from([0, 1, 2, 255, 0, 10]));
    writeFileSync(join(r, "debug.log"), "ignored\n");
    const nested = join(r, "vendor", "lib");
    mkdirSync(nested, { recursive: true });
    git(nested, "init", "-q");
    writeFileSync(join(nested, "x.js"), "x\n");
    const c = await captureWorkspace(r, "include", out());
    expect(c.dirty).toBe(true);
    expect(c.changed.sort()).toEqual(["a.txt", "bin/tool", "blob.bin", "staged.txt", "vendor/lib/x.js"]);
    expect(c.skipped).toEqual([{ path: "vendor/lib", reason: "nested-git", detail: expect.stringContaining("its files are captured, not its history") }]);
    const dest = join(dir, `rebuilt${n++}`);
    await rebuildWorkspace(c.bundleFile, c.patchFile, c.commit, c.branch, dest);
    const files = (await workingFiles(dest)).files;
    expect(files).toEqual(["a.txt", "blob.bin", ".gitignore", "link", "staged.txt", "vendor/lib/x.js"].sort());
    expect(readFileSync(join(dest, "blob.bin"))).toEqual(Buffer.from([0, 1, 2, 255, 0, 10]));
    expect(existsSync(join(dest, "debug.log"))).toBe(false);
    expect(await treeDigest(dest, { skip: (f) => f === "debug.log" })).toEqual(await treeDigest(r, { skip: (f) => f === "debug.log" }));
  });

  it("the filter keeps files and the repository folder out, and names them", async () => {
    const r = repo();
    writeFileSync(join(r, "a.txt"), "changed\n");
    writeFileSync(join(r, ".env"), "TOKEN=x\n");
    mkdirSync(join(r, "backups"));
    writeFileSync(join(r, "backups", "snap"), "bundle bytes");
    const c = await captureWorkspace(r, "include", out(), { skipDirs: ["backups"], leave: { credentials: new Map([[join(r, ".env"), { name: "token", ref: "file:.env" }]]), exclude: [] } });
    expect(c.changed).toEqual(["a.txt"]);
    expect(c.skipped).toEqual([{ path: "backups", reason: "repository", detail: "the backup repository" }, { path: ".env", reason: "credential", detail: "token (file:.env)" }]);
    expect(readFileSync(c.patchFile!, "utf8")).not.toMatch(/TOKEN|bundle bytes/);
  });

  it("refuse mode refuses dirty work with 14; ignore mode records dirty and writes no patch", async () => {
    const r = repo();
    writeFileSync(join(r, "new.txt"), "x");
    const e = await failure(captureWorkspace(r, "refuse", out()));
    expect(e.code).toBe(14);
    expect(e.message).toBe(`workspace ${r} has uncommitted changes and workspace.uncommitted is "refuse"`);
    const c = await captureWorkspace(r, "ignore", out());
    expect([c.dirty, c.patchFile, c.changed]).toEqual([true, null, []]);
  });

  it("missing is 10; a file, a folder that is no repository, a subfolder of one, or a repository with no commit is 2", async () => {
    expect((await failure(captureWorkspace(join(dir, "missing"), "include", out()))).code).toBe(10);
    writeFileSync(join(dir, "afile"), "");
    expect((await failure(captureWorkspace(join(dir, "afile"), "include", out()))).message).toBe(`workspace ${join(dir, "afile")} is not a folder`);
    const plain = join(dir, `plain${n++}`);
    mkdirSync(plain);
    expect((await failure(captureWorkspace(plain, "include", out()))).message).toMatch(/is not a git repository/);
    const r = repo();
    const sub = await failure(captureWorkspace(join(r, "bin"), "include", out()));
    expect([sub.code, sub.message]).toEqual([2, `workspace ${join(r, "bin")} is inside the git repository ${r}; name the repository's top folder`]);
    const empty = join(dir, `empty${n++}`);
    mkdirSync(empty);
    git(empty, "init", "-q");
    expect((await failure(captureWorkspace(empty, "include", out()))).message).toBe(`workspace ${empty} has no commit yet; commit once before backing it up`);
  });

  it("the rebuild takes no template and runs no hook: a post-checkout hook in GIT_TEMPLATE_DIR is neither copied nor run", async () => {
    const r = repo();
    const marker = join(dir, `hook-ran${n++}`);
    const tpl = join(dir, `template${n++}`);
    mkdirSync(join(tpl, "hooks"), { recursive: true });
    writeFileSync(join(tpl, "hooks", "post-checkout"), `#!/bin/sh\ntouch ${marker}\n`);
    chmodSync(join(tpl, "hooks", "post-checkout"), 0o755);
    const c = await captureWorkspace(r, "include", out());
    const dest = join(dir, `rebuilt${n++}`);
    process.env.GIT_TEMPLATE_DIR = tpl;
    try {
      await rebuildWorkspace(c.bundleFile, c.patchFile, c.commit, c.branch, dest);
    } finally {
      delete process.env.GIT_TEMPLATE_DIR;
    }
    expect(existsSync(join(dest, ".git", "hooks", "post-checkout"))).toBe(false);
    expect(existsSync(marker)).toBe(false);
  });
});

describe("scan, committed paths, state", () => {
  it("scanWorkspace finds tokens in committed and uncommitted files, naming file and line, never the value", async () => {
    const r = repo();
    const token = "ghp_" + "A".repeat(36);
    writeFileSync(join(r, "committed.txt"), `x\nkey = ${token}\n`);
    git(r, "add", "committed.txt");
    git(r, "commit", "-qm", "oops");
    writeFileSync(join(r, "notes.md"), `${token}\n`);
    const c = await captureWorkspace(r, "include", out());
    const dest = join(dir, `rebuilt${n++}`);
    await rebuildWorkspace(c.bundleFile, c.patchFile, c.commit, c.branch, dest);
    const found = await scanWorkspace(dest, c.commit, [...c.changed, "deleted-meanwhile.txt"]);
    expect(found.map((f) => f.kind)).toEqual([found[0]!.kind, found[0]!.kind]);
    const text = JSON.stringify(found);
    expect(text).toContain("workspace: committed.txt (committed)");
    expect(text).toContain("workspace: notes.md (uncommitted)");
    expect(text).not.toContain(token);
    expect(await committedPaths(r, c.commit, ["committed.txt", "notes.md", "a.txt"])).toEqual(["a.txt", "committed.txt"]);
    expect(await committedPaths(r, c.commit, [])).toEqual([]);
  });

  it("the state key changes with content, the executable bit, staging and HEAD; not otherwise", async () => {
    const r = repo();
    const k0 = (await workspaceState(r)).key;
    expect((await workspaceState(r)).key).toBe(k0);
    writeFileSync(join(r, "a.txt"), "one\n"); // same bytes rewritten
    expect((await workspaceState(r)).key).toBe(k0);
    writeFileSync(join(r, "a.txt"), "ONE\n");
    const k1 = (await workspaceState(r)).key;
    expect(k1).not.toBe(k0);
    writeFileSync(join(r, "a.txt"), "one\n");
    chmodSync(join(r, "a.txt"), 0o755);
    const k2 = (await workspaceState(r)).key;
    expect(k2).not.toBe(k0);
    chmodSync(join(r, "a.txt"), 0o644);
    git(r, "commit", "-q", "--allow-empty", "-m", "empty");
    expect((await workspaceState(r)).key).not.toBe(k0);
    expect((await treeDigest(r)).files).toBe(4);
    await expect(workspaceState(join(dir, "nowhere"))).rejects.toMatchObject({ code: 10 });
  });
});
