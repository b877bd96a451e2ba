/**
 * The agent's git workspace: capture (commit, branch, dirty flag, a git bundle
 * and a binary patch of uncommitted and untracked work) and reconstruction.
 *
 * Reconstruction never runs a hook or reads config that came from a bundle:
 * the repository is cloned fresh with an empty template, and every git call
 * disables hooks and fsmonitor.
 */
import { execa } from "execa";
import { createHash } from "node:crypto";
import { lstatSync, readFileSync, readlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { policyError, wrap } from "../errors.js";

/** Options that neutralise repository-controlled code execution. */
const SAFE = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false", "-c", "protocol.file.allow=always"];
const ENV = { GIT_TERMINAL_PROMPT: "0", GIT_CONFIG_NOSYSTEM: "1", GIT_OPTIONAL_LOCKS: "0" };

async function git(cwd: string, args: string[], opts: { input?: string; encoding?: "buffer" } = {}) {
  try {
    const r = await execa("git", [...SAFE, ...args], { cwd, env: ENV, input: opts.input, stripFinalNewline: false, encoding: opts.encoding === "buffer" ? "buffer" : "utf8" });
    return r.stdout as unknown as string & Uint8Array;
  } catch (e) {
    const err = e as { stderr?: string; shortMessage?: string };
    throw wrap(new Error(String(err.stderr || err.shortMessage).trim().split("\n")[0]), `git ${args[0]} in ${cwd}`);
  }
}

/** What a workspace capture recorded. */
export interface WorkspaceCapture {
  commit: string;
  branch: string | null;
  dirty: boolean;
  uncommitted: "include" | "refuse" | "ignore";
  bundleFile: string;
  patchFile: string | null;
}

/**
 * Captures the workspace into `outDir` (repo.bundle, changes.patch).
 * @throws AgentbakError(14) when it is dirty and the config says refuse.
 */
export async function captureWorkspace(path: string, mode: "include" | "refuse" | "ignore", outDir: string): Promise<WorkspaceCapture> {
  const commit = (await git(path, ["rev-parse", "--verify", "HEAD"])).trim();
  const branch = (await git(path, ["symbolic-ref", "--short", "-q", "HEAD"]).catch(() => "")).trim() || null;
  const status = await git(path, ["status", "--porcelain=v1", "-z", "--untracked-files=all"]);
  const dirty = status.length > 0;
  if (dirty && mode === "refuse")
    throw policyError(`workspace ${path} has uncommitted changes and workspace.uncommitted is "refuse"`);
  const bundleFile = join(outDir, "repo.bundle");
  await git(path, ["bundle", "create", bundleFile, "HEAD", ...(branch ? [`refs/heads/${branch}`] : [])]);
  let patchFile: string | null = null;
  if (dirty && mode === "include") {
    const parts: Buffer[] = [Buffer.from(await git(path, ["diff", "--binary", "HEAD"], { encoding: "buffer" }))];
    const untracked = (await git(path, ["ls-files", "-o", "--exclude-standard", "-z"])).split("\0").filter(Boolean);
    for (const f of untracked) {
      // `git diff --no-index` exits 1 when files differ, which they always do here
      const r = await execa("git", [...SAFE, "diff", "--no-index", "--binary", "--", "/dev/null", f], { cwd: path, env: ENV, reject: false, encoding: "buffer", stripFinalNewline: false });
      if (r.exitCode !== 1) throw wrap(new Error(Buffer.from(r.stderr).toString().trim()), `git diff of untracked ${f}`);
      parts.push(Buffer.from(r.stdout));
    }
    patchFile = join(outDir, "changes.patch");
    writeFileSync(patchFile, Buffer.concat(parts));
  }
  return { commit, branch, dirty, uncommitted: mode, bundleFile, patchFile };
}

/**
 * A digest of a working tree as git sees it (tracked plus untracked, not
 * ignored): path, executable bit or symlink, and content of every file.
 */
export async function treeDigest(path: string): Promise<{ sha256: string; files: number }> {
  const names = [...new Set((await git(path, ["ls-files", "-c", "-o", "--exclude-standard", "-z"])).split("\0").filter(Boolean))].sort();
  const h = createHash("sha256");
  let files = 0;
  for (const n of names) {
    let st;
    try {
      st = lstatSync(join(path, n));
    } catch {
      continue; // deleted in the working tree
    }
    const kind = st.isSymbolicLink() ? "l" : st.mode & 0o111 ? "x" : "f";
    const content = st.isSymbolicLink() ? Buffer.from(readlinkSync(join(path, n))) : readFileSync(join(path, n));
    h.update(`${n}\0${kind}\0${createHash("sha256").update(content).digest("hex")}\n`);
    files++;
  }
  return { sha256: h.digest("hex"), files };
}

/**
 * What a capture of the workspace at `path` depends on, read with two git
 * calls: HEAD, branch and every staged, unstaged and untracked change (git
 * status), and the working tree's digest. Two equal keys capture the same
 * bundle and patch, so a long-running process can reuse its last capture.
 */
export async function workspaceState(path: string): Promise<{ key: string; tree: { sha256: string; files: number } }> {
  const status = await git(path, ["status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all"]);
  const tree = await treeDigest(path);
  return { key: createHash("sha256").update(status).update("\0").update(tree.sha256).digest("hex"), tree };
}

/**
 * Rebuilds a workspace at `dest` (must not exist) from a bundle and optional
 * patch: fresh clone with an empty template, checkout of the recorded commit,
 * patch applied, origin removed. Nothing from the bundle's config or hooks runs.
 */
export async function rebuildWorkspace(bundleFile: string, patchFile: string | null, commit: string, branch: string | null, dest: string): Promise<void> {
  await git(join(dest, ".."), ["clone", "--quiet", "--no-checkout", "--template=", bundleFile, dest]);
  if (branch) await git(dest, ["checkout", "--quiet", "-B", branch, commit]);
  else await git(dest, ["checkout", "--quiet", "--detach", commit]);
  if (patchFile && lstatSync(patchFile).size > 0) await git(dest, ["apply", "--binary", "--whitespace=nowarn", patchFile]);
  await git(dest, ["remote", "remove", "origin"]);
}
