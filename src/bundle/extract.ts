/**
 * Decrypts a verified bundle into a private staging folder laid out as the
 * agent's root (databases, files and workspace at their recorded places) and
 * checks it: component digests, SQLite integrity, row counts and schema
 * versions, the rebuilt workspace tree, and each state source's captured
 * files (parsed offline). Used by verify, restore and drill.
 */
import type { Progress } from "../progress.js";
import { chmodSync, closeSync, mkdirSync, openSync, readSync, renameSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import type { AgeIdentity } from "../crypto/age.js";
import type { Trust } from "../crypto/trust.js";
import { ioErrno, ioError, verifyError } from "../errors.js";
import { integrityCheckInWorker, warmInspection } from "../state/inspect/inspect.js";
import { openDefensive, sqliteError, tableCounts, userVersion, type DB } from "../state/sqlite/open.js";
import { rebuildDatabases, verifyChain, type LinkSource } from "./chain.js";
import { imageDigest, integrityAttested, isDatabase, isSource, type Component } from "./manifest.js";
import type { SourceFile, SourceKind } from "../state/sources/index.js";
import { readPayload, type VerifiedBundle } from "./reader.js";
import { extractChunked, type ChunkSource } from "./chunked.js";
import { ensureDir } from "../fsutil.js";

/** One named check and its outcome. */
export interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

/** A state source's captured files, checked, waiting to be restored into its target. */
export interface ExtractedSource {
  name: string;
  kind: SourceKind;
  files: SourceFile[];
}

/** Where each restored piece landed, relative to the staging root. */
export interface Extracted {
  root: string;
  /** each database where it landed, and which check established its integrity */
  databases: { name: string; path: string; schemaVersion: number | null; integrity?: Established }[];
  /** source files sit beside the root (`<root>.sources/`), not inside it: they go into servers, not the agent's folder */
  sources: ExtractedSource[];
  checks: Check[];
}

/**
 * How much of a restored database is checked beyond its signed sha256 (which
 * every mode checks, as the payload is decrypted): `full` runs
 * integrity_check and counts every table's rows against the manifest;
 * `quick` runs quick_check (no index cross-checks) and the counts; `digest`
 * trusts the digest alone — the file is then the same bytes as the database
 * the backup read. `attested` (restore's default) is `full` except where the
 * signed manifest attests that integrity_check, or the index digest check
 * (state/sqlite/indexdigest.ts: the same findings in sequential reads), passed at backup on exactly
 * this image (`integrity_checked` or `index_digest_checked` equal to its digest): that check's result
 * is already known for these bytes, and so are the row counts, which were
 * read off the same image. Drills and verify always run `full`.
 */
export type IntegrityPolicy = "attested" | "full" | "quick" | "digest";

/** Which check established a database's integrity: re-run here, attested at backup for these bytes, or the digest alone. */
export type Established = "integrity_check" | "quick_check" | "attested" | "digest";

/**
 * Checks a database file against its manifest entry: one self-contained file
 * (not in WAL mode), then per `policy` integrity_check or quick_check, row
 * counts and user_version. The integrity check of a large file runs on a
 * worker thread while this one counts the rows (and the caller goes on with
 * its own work until it awaits); its failure is reported before a count's.
 * @throws AgentbakError(13) naming the database and what differs.
 */
export async function checkDatabase(file: string, c: Component, asked: IntegrityPolicy = "full"): Promise<Established> {
  const policy = asked === "attested" ? (integrityAttested(c) ? "digest" : "full") : asked;
  // a header still in WAL mode (bytes 18-19 = 2) means frames may be missing
  const head = Buffer.alloc(20);
  const fd = openSync(file, "r");
  try {
    readSync(fd, head, 0, 20, 0);
  } finally {
    closeSync(fd);
  }
  if (head[18] !== 1 || head[19] !== 1) throw verifyError(`database ${c.name}: the file is in WAL mode (header ${head[18]}/${head[19]}); a snapshot must be one self-contained file`);
  // a file SQLite refuses (not a database) is 13 naming it, a failing disk 1
  let db: DB | undefined;
  let uv: number;
  try {
    db = openDefensive(file);
    uv = userVersion(db);
  } catch (e) {
    db?.close();
    throw sqliteError(e, c.name, file);
  }
  let counting: Error | null = null;
  let counts: Record<string, number> = {};
  let checking: Promise<string[]> | undefined;
  try {
    if (c.schema_version !== undefined && uv !== c.schema_version) throw verifyError(`database ${c.name}: user_version ${uv}, manifest says ${c.schema_version}`);
    if (policy === "digest") return asked === "attested" ? "attested" : "digest";
    checking = integrityCheckInWorker(file, policy === "quick" ? "quick_check" : "integrity_check");
    try {
      counts = tableCounts(db).counts;
    } catch (e) {
      counting = verifyError(`database ${c.name}: counting rows: ${(e as Error).message}`);
    }
  } finally {
    db.close();
  }
  const ic = await checking!;
  if (ic.length === 1 && ioErrno(ic[0])) throw ioError(ic[0], file);
  if (ic.length !== 1 || ic[0] !== "ok") throw verifyError(`database ${c.name}: ${policy === "quick" ? "quick_check" : "integrity_check"}: ${ic.slice(0, 3).join("; ")}`);
  if (counting) throw counting;
  for (const [t, n] of Object.entries(c.records ?? {}))
    if (counts[t] !== n) throw verifyError(`database ${c.name}: table ${t} has ${counts[t] ?? 0} rows, manifest says ${n}`);
  return policy === "quick" ? "quick_check" : "integrity_check";
}

/**
 * Extracts and checks everything of a verified bundle into `root` (created;
 * must not exist), laid out as the agent's folder: the chain of an
 * incremental is verified first, then each payload is decrypted once, then
 * each chunked component is read from `from.chunks` (every chunk checked).
 * @throws AgentbakError(13) at the first failed check, (12) when no identity matches, (10) when the bundle lists
 *   chunks and `from.chunks` is null
 */
export async function extractAndCheck(v: VerifiedBundle, identities: AgeIdentity[], root: string, trust: Trust, from: { links: LinkSource; chunks?: ChunkSource | null }, integrity: IntegrityPolicy = "full", progress?: Progress): Promise<Extracted> {
  const m = v.manifest;
  // each link's payload is read once: a format-7 one checked chunk by chunk as rebuildDatabases decrypts it
  const chain = m.components.some((c) => c.kind === "sqlite-delta") ? await verifyChain(v, from.links, trust, undefined, { decrypting: true }) : [];
  const raw = join(root, ".agentbak-raw");
  ensureDir(raw, 0o700);
  // the worker that will run a large database's integrity_check starts beside the payload's read (nothing for small ones)
  const unattested = m.components.filter((c) => isDatabase(c) && (integrity !== "attested" || !integrityAttested(c)));
  if (integrity !== "digest") warmInspection(unattested.reduce((n, c) => n + (c.full_size ?? c.size), 0)).catch(() => undefined);
  await readPayload(v, identities, raw, undefined, progress);
  const chunked = await extractChunked(m, from.chunks, identities, raw);
  const checks: Check[] = [{ name: "components", ok: true, detail: `${m.components.length} components match their sha256 and size${chunked ? ` (${chunked} from the chunk store, each chunk's digest checked before it was decrypted)` : ""}` }];
  const work = join(raw, ".chain");
  mkdirSync(work);
  const rebuilt = await rebuildDatabases(v, chain, raw, identities, work);
  if (chain.length) checks.push({ name: "chain", ok: true, detail: `${chain.length} parent link(s) verified; databases rebuilt match their recorded digests` });
  const databases: Extracted["databases"] = [];
  const sources: ExtractedSource[] = [];
  const placed: [string, Component][] = [];
  for (const c of m.components) {
    if (isSource(c)) {
      const dest = join(`${root}.sources`, c.path);
      ensureDir(dirname(dest), 0o700);
      renameSync(join(raw, c.path), dest);
      let s = sources.find((x) => x.name === c.name);
      if (!s) sources.push((s = { name: c.name, kind: c.kind, files: [] }));
      s.files.push({ path: c.path, file: dest, records: c.records ?? {}, ...(c.dimension !== undefined ? { dimension: c.dimension } : {}) });
      continue;
    }
    const src = c.kind === "sqlite-delta" ? rebuilt.get(c.name)! : join(raw, c.path);
    if (isDatabase(c) || c.kind === "file") {
      const dest = join(root, c.target ?? c.path);
      ensureDir(dirname(dest));
      chmodSync(src, 0o600);
      renameSync(src, dest);
      if (!isDatabase(c)) continue;
      databases.push({ name: c.name, path: dest, schemaVersion: c.schema_version ?? null });
      placed.push([dest, c]);
    }
  }
  // every component in place before any check starts: a component that cannot be placed fails with nothing in flight.
  // Each database is checked where it lies (the staging root, removed if anything fails); a large one's integrity_check
  // runs on a worker thread beside the workspace's rebuild and the sources' checks
  const settled = await Promise.allSettled([
    ...placed.map(([dest, c], i) =>
      checkDatabase(dest, c, integrity).then((how): Check => {
        databases[i]!.integrity = how;
        return { name: `integrity:${c.name}`, ok: true, detail: checkedDetail(how, integrity, c) };
      }),
    ),
    workspaceAndSources(m, raw, root, sources),
  ]);
  // the first failure in the order they were started: a database's before the workspace's
  for (const s of settled) if (s.status === "rejected") throw s.reason;
  for (const s of settled) if (s.status === "fulfilled") checks.push(...[s.value].flat());
  rmSync(raw, { recursive: true, force: true });
  return { root, databases, sources, checks };
}

/** What a database's check established, for people: under the default, why integrity_check was or was not re-run. */
function checkedDetail(how: Established, asked: IntegrityPolicy, c: Component): string {
  if (how === "attested") return `attested at backup: ${c.integrity_checked === imageDigest(c) ? "integrity_check" : "quick_check and the index digests (every index holds exactly its table's entries, no UNIQUE duplicates)"} passed on these exact bytes (${c.kind === "sqlite-delta" ? "pages root" : "sha256"} ${imageDigest(c).slice(0, 12)}, signed in the manifest), not re-run; row counts are those of the same bytes; user_version matches the manifest`;
  if (how === "digest") return "sha256 matches the signed digest (--integrity digest); user_version matches the manifest";
  const why = asked !== "attested" ? "" : c.integrity_checked === undefined && c.index_digest_checked === undefined ? " (re-run: no integrity check at backup is attested for this image)" : ` (re-run: the manifest's ${c.integrity_checked !== undefined ? "integrity_checked" : "index_digest_checked"} names other bytes than this image)`;
  return `${how} ok${why}; row counts and user_version match the manifest`;
}

/** The workspace rebuilt and its tree checked, then each state source's files checked offline. */
async function workspaceAndSources(m: VerifiedBundle["manifest"], raw: string, root: string, sources: ExtractedSource[]): Promise<Check[]> {
  const checks: Check[] = [];
  if (m.workspace) {
    // loaded only for a snapshot with a workspace (git, the tree walk), as the source drivers are only for one with sources
    const { rebuildWorkspace, treeDigest } = await import("../state/workspace/workspace.js");
    const bundle = join(raw, "workspace/repo.bundle");
    const patch = m.components.some((c) => c.path === "workspace/changes.patch") ? join(raw, "workspace/changes.patch") : null;
    const dest = join(root, m.workspace.path);
    ensureDir(dirname(dest));
    try {
      await rebuildWorkspace(bundle, patch, m.workspace.commit, m.workspace.branch, dest);
    } catch (e) {
      if (ioErrno(e)) throw ioError(e, dest);
      throw verifyError(`workspace: cannot rebuild: ${(e as Error).message}`);
    }
    const d = await treeDigest(dest);
    if (d.sha256 !== m.workspace.tree_sha256) throw verifyError(`workspace: rebuilt tree does not match the manifest (${d.files} files, ${m.workspace.files} recorded)`);
    checks.push({ name: "workspace", ok: true, detail: `commit ${m.workspace.commit.slice(0, 12)}, ${d.files} files, tree digest matches` });
  }
  if (!sources.length) return checks;
  const { driverFor } = await import("../state/sources/index.js");
  for (const src of sources) {
    const detail = await driverFor(src.kind).check(src.name, src.files);
    checks.push({ name: `source:${src.name}`, ok: true, detail: `${src.kind}: ${detail}` });
  }
  return checks;
}
