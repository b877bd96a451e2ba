/**
 * The agent's git workspace: capture (commit, branch, dirty flag, a git bundle
 * and a binary patch of uncommitted and untracked work, nested repositories'
 * files included, secret-bearing names left out), its secret scan, and
 * reconstruction.
 *
 * Reconstruction never runs a hook or reads config that came from a bundle:
 * the repository is cloned fresh with an empty template, and every git call
 * disables hooks and fsmonitor.
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, lstatSync, readdirSync, readFileSync, readlinkSync, realpathSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, relative, sep } from "node:path";
import { notFound, policyError, usageError, wrap } from "../../errors.js";
import { atPath, isInside } from "../../fsutil.js";
import { stopOnInterrupt } from "../../cleanup.js";
import { leaveOutOf, scanText, TOKEN_PATTERNS, type LeaveOut, type SecretFinding } from "../secrets/scan.js";

/** Options that neutralise repository-controlled code execution. */
const SAFE = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false", "-c", "protocol.file.allow=always"];
const ENV = { GIT_TERMINAL_PROMPT: "0", GIT_CONFIG_NOSYSTEM: "1", GIT_OPTIONAL_LOCKS: "0" };

/**
 * Runs git (node's own spawn, not execa: the "nothing changed" check of a backup runs git twice and nothing else
 * that needs execa, whose load was a tenth of that check's time). @returns its stdout, as text or bytes.
 * @throws Error naming the git command and its first line of stderr when it exits otherwise than 0 or `okExit`.
 */
async function git(cwd: string, args: string[], opts: { encoding?: "buffer"; okExit?: number[] } = {}) {
  // own process group: an interrupt kills git and the helpers it runs (index-pack writes into the clone too)
  const child = stopOnInterrupt(spawn("git", [...SAFE, ...args], { cwd, env: { ...process.env, ...ENV }, stdio: ["ignore", "pipe", "pipe"], detached: true }), { group: true });
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  child.stdout.on("data", (b: Buffer) => out.push(b));
  child.stderr.on("data", (b: Buffer) => err.push(b));
  const [code, failed] = await new Promise<[number | null, string | null]>((res) => {
    child.once("error", (e) => res([null, e.message]));
    child.once("close", (c, signal) => res([c, signal && `killed by ${signal}`]));
  });
  const stdout = Buffer.concat(out);
  if (code === 0 || (code !== null && opts.okExit?.includes(code))) return (opts.encoding === "buffer" ? stdout : stdout.toString("utf8")) as unknown as string & Uint8Array;
  const why = (Buffer.concat(err).toString("utf8").trim() || failed || `exit ${code}`).split("\n")[0];
  throw wrap(new Error(why), `git ${args[0]} in ${cwd}`);
}

/** A path a capture deliberately left out, and why (manifest `not_captured`). */
export interface Skipped {
  path: string;
  reason: "credential" | "exclude" | "repository" | "nested-git";
  detail: string;
}

/** What to keep out of a workspace capture. */
export interface CaptureFilter {
  /** workspace-relative folders never read (the repository, when it lies inside the workspace) */
  skipDirs: string[];
  /** the files of uncommitted work that stay out: credentials' files, names like .env */
  leave?: LeaveOut;
}

/** What a workspace capture recorded. */
export interface WorkspaceCapture {
  commit: string;
  branch: string | null;
  dirty: boolean;
  uncommitted: "include" | "refuse" | "ignore";
  bundleFile: string;
  patchFile: string | null;
  /** workspace-relative files of uncommitted work in the patch */
  changed: string[];
  skipped: Skipped[];
  /** uncommitted files whose names are not UTF-8: git lists them, but they can not be read by the name listed, so they are not captured */
  notUtf8: string[];
}

const pathspec = (skipDirs: string[]) => ["--", ".", ...skipDirs.map((d) => `:(exclude,literal)${d}`)];

/**
 * The files of a working tree as git sees them (tracked and untracked, not
 * ignored), workspace-relative and sorted. A nested repository (a clone in
 * the workspace) or a submodule is listed by its own git, so its files count
 * and its `.git` never does; a folder git lists whole without a `.git` (a
 * submodule rebuilt as plain files) is walked.
 * @returns the files and the nested repositories met.
 */
export async function workingFiles(root: string, skipDirs: string[] = []): Promise<{ files: string[]; nested: string[]; notUtf8: string[] }> {
  const files: string[] = [];
  const nested: string[] = [];
  const notUtf8: string[] = [];
  const walk = async (dir: string) => {
    const listed = await git(join(root, dir), ["ls-files", "-c", "-o", "--exclude-standard", "-z", ...(dir ? [] : pathspec(skipDirs))]);
    for (const n of new Set(listed.split("\0").filter(Boolean))) {
      const rel = (dir ? `${dir}/${n}` : n).replace(/\/$/, "");
      let st;
      try {
        st = lstatSync(join(root, rel));
      } catch {
        // a name whose bytes are not UTF-8 reads with U+FFFD, and is not there by that name: named, never dropped unsaid
        if (rel.includes("\uFFFD")) notUtf8.push(rel);
        continue; // deleted in the working tree
      }
      if (!st.isDirectory()) files.push(rel);
      else if (existsSync(join(root, rel, ".git"))) {
        nested.push(rel);
        await walk(rel);
      } else
        for (const e of readdirSync(join(root, rel), { withFileTypes: true, recursive: true }))
          if (!e.isDirectory() && !join(e.parentPath, e.name).split(sep).includes(".git")) files.push(relative(root, join(e.parentPath, e.name)).split(sep).join("/"));
    }
  };
  await walk("");
  return { files: [...new Set(files)].sort(), nested, notUtf8: [...new Set(notUtf8)].sort() };
}

/** @throws AgentbakError 10 when the workspace folder is missing, 2 when it is a file. */
function checkFolder(path: string): void {
  if (!existsSync(path)) throw notFound(`workspace ${path} not found`);
  if (!statSync(path).isDirectory()) throw usageError(`workspace ${path} is not a folder`);
}

/**
 * Captures the workspace into `outDir` (repo.bundle, changes.patch): HEAD as a
 * git bundle, and uncommitted work (staged, unstaged, untracked, and the files
 * of nested repositories and submodules) as a binary patch, without what
 * `filter` keeps out.
 * @throws AgentbakError 10 when the folder is missing, 2 when it is not the top of a git repository with a commit, 14 when it is dirty and the config says refuse.
 */
export async function captureWorkspace(path: string, mode: "include" | "refuse" | "ignore", outDir: string, filter: CaptureFilter = { skipDirs: [] }): Promise<WorkspaceCapture> {
  checkFolder(path);
  const top = (await git(path, ["rev-parse", "--show-toplevel"]).catch(() => "")).trim();
  if (!top) throw usageError(`workspace ${path} is not a git repository (git init it, or remove "workspace" from the config)`);
  if (realpathSync(top) !== realpathSync(path)) throw usageError(`workspace ${path} is inside the git repository ${top}; name the repository's top folder`);
  const commit = (await git(path, ["rev-parse", "--verify", "-q", "HEAD"], { okExit: [1] })).trim();
  if (!commit) throw usageError(`workspace ${path} has no commit yet; commit once before backing it up`);
  const branch = (await git(path, ["symbolic-ref", "--short", "-q", "HEAD"], { okExit: [1] })).trim() || null;
  const spec = pathspec(filter.skipDirs);
  const status = await git(path, ["status", "--porcelain=v1", "-z", "--untracked-files=all", ...spec]);
  const dirty = status.length > 0;
  if (dirty && mode === "refuse")
    throw policyError(`workspace ${path} has uncommitted changes and workspace.uncommitted is "refuse"`);
  const bundleFile = join(outDir, "repo.bundle");
  await git(path, ["bundle", "create", bundleFile, "HEAD", ...(branch ? [`refs/heads/${branch}`] : [])]);
  const skipped: Skipped[] = filter.skipDirs.filter((d) => existsSync(join(path, d))).map((d) => ({ path: d, reason: "repository", detail: "the backup repository" }));
  const changed: string[] = [];
  const notUtf8: string[] = [];
  let patchFile: string | null = null;
  if (dirty && mode === "include") {
    const leaveOut = filter.leave ? leaveOutOf(filter.leave) : () => null;
    const keep = (rel: string) => {
      const why = leaveOut(join(path, rel), rel);
      if (why) skipped.push({ path: rel, ...why });
      return !why;
    };
    // tracked files: one diff, submodules left to their files below
    const diffArgs = ["--binary", "--no-renames", "--ignore-submodules=all", "HEAD"];
    const trackedChanged = (await git(path, ["diff", "--name-only", "-z", ...diffArgs.slice(1), ...spec])).split("\0").filter(Boolean);
    const kept = trackedChanged.filter(keep);
    const left = trackedChanged.filter((f) => !kept.includes(f)).map((f) => `:(exclude,literal)${f}`);
    const parts: Buffer[] = [Buffer.from(await git(path, ["diff", ...diffArgs, ...spec, ...left], { encoding: "buffer" }))];
    changed.push(...kept);
    // everything else git would list that HEAD does not track: untracked files, and the files of nested repositories and submodules
    const tracked = new Set((await git(path, ["ls-files", "-c", "-z", ...spec])).split("\0").filter(Boolean));
    const { files, nested, notUtf8: unnamed } = await workingFiles(path, filter.skipDirs);
    notUtf8.push(...unnamed);
    for (const n of nested) skipped.push({ path: n, reason: "nested-git", detail: "a nested repository or submodule: its files are captured, not its history" });
    for (const f of files.filter((x) => !tracked.has(x) && keep(x))) {
      // `git diff --no-index` exits 1 when files differ, which they always do here
      parts.push(Buffer.from(await git(path, ["diff", "--no-index", "--binary", "--", "/dev/null", f], { encoding: "buffer", okExit: [1] })));
      changed.push(f);
    }
    patchFile = join(outDir, "changes.patch");
    writeFileSync(patchFile, Buffer.concat(parts));
  }
  return { commit, branch, dirty, uncommitted: mode, bundleFile, patchFile, changed, skipped, notUtf8 };
}

/** A workspace capture proven to rebuild the tree, and what its scan found. */
export interface ProvenCapture extends WorkspaceCapture {
  /** the digest of the tree the capture rebuilds */
  tree: { sha256: string; files: number };
  /** the live tree is not the one the capture rebuilds (without what stayed out): it changed while it was captured */
  changedMeanwhile: boolean;
  /** possible secrets in what it holds, and credentials' files that are committed (they can not be left out of the git bundle) */
  findings: SecretFinding[];
}

/**
 * Captures the workspace into `outDir` (captureWorkspace), proves the capture rebuilds the tree (in `check`, removed
 * after) and, with `scan`, scans what it holds.
 * @throws what captureWorkspace throws, and what rebuilding throws
 */
export async function captureProven(live: string, mode: WorkspaceCapture["uncommitted"], outDir: string, check: string, o: { skipDirs: string[]; leave: LeaveOut; scan: boolean }): Promise<ProvenCapture> {
  const cap = await captureWorkspace(live, mode, outDir, { skipDirs: o.skipDirs, leave: o.leave });
  await rebuildWorkspace(cap.bundleFile, cap.patchFile, cap.commit, cap.branch, check);
  const tree = await treeDigest(check);
  let changedMeanwhile = false;
  if (cap.uncommitted === "include") {
    const left = new Set(cap.skipped.map((x) => x.path));
    const skip = (rel: string) => left.has(rel);
    const rebuilt = left.size ? await treeDigest(check, { skip }) : tree;
    changedMeanwhile = (await treeDigest(live, { skipDirs: o.skipDirs, skip })).sha256 !== rebuilt.sha256;
  }
  const findings: SecretFinding[] = [];
  if (o.scan) {
    findings.push(...(await scanWorkspace(check, cap.commit, cap.changed)));
    const inside = [...o.leave.credentials].filter(([abs]) => isInside(abs, live)).map(([abs, c]) => [relative(live, abs).split(sep).join("/"), c] as const);
    const committed = await committedPaths(check, cap.commit, inside.map(([rel]) => rel));
    for (const [rel, c] of inside) if (committed.includes(rel)) findings.push({ where: `workspace: ${rel} (committed), the file of credential ${c.name} (${c.ref})`, kind: "credential file" });
  }
  rmSync(check, { recursive: true, force: true });
  return { ...cap, tree, changedMeanwhile, findings };
}

/**
 * Possible secrets in what a capture holds: every file of the captured
 * commit's tree (git grep for the token prefixes, then a full look at the
 * files it names) and every file of uncommitted work, read from `rebuilt` (the
 * workspace rebuilt from the capture). Findings name the file and line, never the value.
 */
export async function scanWorkspace(rebuilt: string, commit: string, changed: string[]): Promise<SecretFinding[]> {
  const out: SecretFinding[] = [];
  const grep = await git(rebuilt, ["grep", "-l", "-z", "-F", ...TOKEN_PATTERNS.flatMap((p) => ["-e", p.prefix]), commit, "--"], { okExit: [1] });
  for (const hit of grep.split("\0").filter(Boolean)) {
    const file = hit.slice(commit.length + 1);
    out.push(...scanText(Buffer.from(await git(rebuilt, ["cat-file", "blob", `${commit}:${file}`], { encoding: "buffer" })), `workspace: ${file} (committed)`));
  }
  for (const f of changed) {
    let bytes: Buffer;
    try {
      bytes = atPath(join(rebuilt, f), () => readFileSync(join(rebuilt, f)));
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "ENOENT" || code === "EISDIR" || code === "ENOTDIR") continue; // deleted, or a symlink to a folder
      throw e;
    }
    out.push(...scanText(bytes, `workspace: ${f} (uncommitted)`));
  }
  return out;
}

/** Which of `paths` (workspace-relative) the commit's tree holds. */
export async function committedPaths(repo: string, commit: string, paths: string[]): Promise<string[]> {
  if (!paths.length) return [];
  return (await git(repo, ["ls-tree", "-r", "--name-only", "-z", commit, "--", ...paths.map((p) => `:(literal)${p}`)])).split("\0").filter(Boolean);
}

/**
 * A digest of a working tree as git sees it (workingFiles): path, executable
 * bit or symlink, and content of every file; folders in `skipDirs` and files
 * `skip` names are left out.
 */
export async function treeDigest(path: string, o: { skipDirs?: string[]; skip?: (rel: string) => boolean } = {}): Promise<{ sha256: string; files: number }> {
  const h = createHash("sha256");
  let files = 0;
  for (const n of (await workingFiles(path, o.skipDirs)).files) {
    if (o.skip?.(n)) continue;
    let st;
    try {
      st = lstatSync(join(path, n));
    } catch {
      continue; // deleted in the working tree
    }
    const kind = st.isSymbolicLink() ? "l" : st.mode & 0o111 ? "x" : "f";
    const content = st.isSymbolicLink() ? Buffer.from(readlinkSync(join(path, n))) : atPath(join(path, n), () => readFileSync(join(path, n)));
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
  checkFolder(path);
  // both git calls at once: a backup reads its databases on this thread meanwhile, and a second call started only
  // after the first one's answer waited for that read (small agent: git status at ~260 ms, ls-files at ~440)
  const [status, tree] = await Promise.all([git(path, ["status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all"]), treeDigest(path)]);
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
