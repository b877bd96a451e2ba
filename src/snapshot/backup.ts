/**
 * The backup stage: quiesce, capture every state layer consistently, resume,
 * check for secrets, write the signed bundle, publish it atomically.
 */
import { execa } from "execa";
import { randomBytes } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, rmSync, statSync } from "node:fs";
import { rm } from "node:fs/promises";
import { crashStep } from "../crashpoint.js";
import { hostname } from "node:os";
import { join, relative, sep } from "node:path";
import type { LoadedConfig } from "../config/load.js";
import { fingerprint, type SigningKey } from "../crypto/sshsig.js";
import { AgentbakError, Exit, policyError, usageError, verifyError, wrap } from "../errors.js";
import { componentPath, sha256hex, type Manifest } from "../bundle/manifest.js";
import { writeBundleFile, writePayload, type StagedComponent } from "../bundle/writer.js";
import { writeFileAtomic } from "../fsutil.js";
import { openRepository, type LocalRepository } from "../repository/local.js";
import { catalog } from "../repository/catalog.js";
import { verifyBundle, type Trust, type VerifiedBundle } from "../bundle/reader.js";
import { agentbakHome } from "../crypto/keys.js";
import { loadParent } from "../restore/extract.js";
import { changedPages, decodeIndex, encodeIndex, indexFileName, indexPages, pageIndexKey, writeDelta, type PageIndex } from "./pages.js";
import { readFileSync } from "node:fs";
import { TOOL_VERSION } from "../version.js";
import { expandGlob } from "./glob.js";
import { inspectInWorker, scanChangedPages } from "./inspect.js";
import { scanValue, type SecretFinding } from "./secrets.js";
import { snapshotDatabase } from "./sqlite.js";
import { captureWorkspace, treeDigest, rebuildWorkspace } from "./workspace.js";

/** What a backup returns (and what `--idempotency-key` replays). */
/** The parent's page index for `db`, if it exists and matches the digest the parent's manifest signed. */
function parentIndex(repo: LocalRepository, parent: VerifiedBundle, db: string): PageIndex | null {
  const c = parent.manifest.components.find((x) => x.name === db && (x.kind === "sqlite" || x.kind === "sqlite-delta"));
  const p = join(repo.agentDir(parent.manifest.agent_id), indexFileName(parent.manifest.snapshot_id, db));
  if (!c?.page_index_sha256 || !existsSync(p)) return null;
  const b = readFileSync(p);
  if (sha256hex(b) !== c.page_index_sha256) return null;
  try {
    return decodeIndex(b);
  } catch {
    return null;
  }
}

export interface BackupReceipt {
  snapshot_id: string;
  agent_id: string;
  sequence: number;
  created_at: string;
  manifest_sha256: string;
  payload_sha256: string;
  size: number;
  parent: string | null;
  path: string;
  repeated: boolean;
  warnings: string[];
}

export interface BackupOptions {
  repo: string;
  trust: Trust;
  /** page-level incremental against the latest verified snapshot (config incremental.enabled by default) */
  incremental?: boolean;
  signingKey: SigningKey;
  principal: string;
  idempotencyKey?: string;
  label?: string;
  waitMs?: number;
  progress?: (phase: string) => void;
}

/** A time-sortable snapshot id: UTC time to the millisecond plus 32 random bits. */
export const newSnapshotId = (d: Date) => d.toISOString().replace(/[-:]/g, "").replace(".", "").replace(/Z$/, "Z") + "-" + randomBytes(4).toString("hex");

/** The parent for an incremental, or why there is none. */
async function chooseParent(repo: LocalRepository, agent: string, trust: Trust, fullEvery: number): Promise<{ parent: VerifiedBundle | null; reason: string }> {
  const latest = catalog(repo, trust, agent).filter((e) => e.status === "ok").sort((a, b) => a.sequence! - b.sequence!).at(-1);
  if (!latest) return { parent: null, reason: "no verified snapshot to build on" };
  let v: VerifiedBundle;
  try {
    v = await verifyBundle(latest.path, trust);
    // the whole chain must verify, link by link, and be short enough
    let depth = 0;
    for (let cur = v; cur.manifest.parent; cur = await loadParent(cur, trust)) depth++;
    if (depth + 1 > fullEvery) return { parent: null, reason: `a full snapshot is due after ${fullEvery} incrementals` };
  } catch (e) {
    return { parent: null, reason: `chain of ${latest.snapshot_id} is not usable (${(e as Error).message})` };
  }
  return { parent: v, reason: "" };
}

/** A config path as a path inside a restored root; paths outside the config folder fall back to `fallback`. */
function restoreTarget(lc: LoadedConfig, p: string, fallback: string): string {
  const rel = relative(lc.dir, lc.resolve(p)).split(sep).join("/");
  return rel === "" || rel.startsWith("..") || rel.startsWith("/") ? fallback : rel;
}

async function runHooks(cmds: string[], cwd: string, timeoutSeconds: number, phase: string): Promise<void> {
  for (const cmd of cmds) {
    // own process group, so a timeout kills the hook and everything it started
    const child = execa(cmd, { shell: true, cwd, detached: true, reject: false, env: { AGENTBAK_HOOK: phase }, stdio: ["ignore", "ignore", "pipe"] });
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch {
        /* already gone */
      }
    }, timeoutSeconds * 1000);
    const r = await child;
    clearTimeout(timer);
    if (timedOut || r.exitCode !== 0) {
      const first = String(r.stderr ?? "").trim().split("\n")[0];
      const why = timedOut ? `timed out after ${timeoutSeconds}s` : `exited ${r.exitCode ?? r.signal ?? "?"}${first ? ": " + first : ""}`;
      throw new AgentbakError(Exit.failure, `${phase} hook "${cmd}" ${why}`);
    }
  }
}

/**
 * Runs one backup of the configured agent.
 * @throws AgentbakError: 10 repository/db missing, 11 locked, 14 secrets or refused dirty workspace, 1 hook failures.
 */
export async function runBackup(lc: LoadedConfig, opts: BackupOptions): Promise<BackupReceipt> {
  const cfg = lc.config;
  const repo = openRepository(opts.repo);
  const agent = cfg.agent.id;
  const lock = await repo.lock(`agent-${agent}`, opts.waitMs ?? 0);
  const staging = repo.tempDir(`backup-${agent}`);
  const removals: Promise<void>[] = [];
  try {
    crashStep("locked");
    repo.sweepTemp();
    const idemRel = opts.idempotencyKey ? join("idempotency", agent, `backup-${sha256hex(opts.idempotencyKey)}.json`) : undefined;
    if (idemRel) {
      // a record whose bundle is missing was written by a run that died before publishing
      const prior = repo.readRecord<BackupReceipt>(idemRel);
      if (prior && existsSync(prior.path)) return { ...prior, repeated: true };
    }
    const warnings: string[] = [];
    const created = new Date();
    const snapshotId = newSnapshotId(created);
    const staged: StagedComponent[] = [];
    const dbFiles = new Map<string, string>();
    let ws: Manifest["workspace"] = null;

    const wantIncremental = opts.incremental ?? cfg.incremental.enabled;
    const chosen = wantIncremental ? await chooseParent(repo, agent, opts.trust, cfg.incremental.fullEvery) : { parent: null, reason: "" };
    if (wantIncremental && !chosen.parent) warnings.push(`full snapshot instead of an incremental: ${chosen.reason}`);
    const pageKey = pageIndexKey(agentbakHome());
    const newIndexes = new Map<string, Buffer>();
    let usedParent = false;
    opts.progress?.("quiescing agent");
    let captureError: unknown;
    try {
      await runHooks(cfg.hooks.pre, lc.dir, cfg.hooks.timeoutSeconds, "pre");
      opts.progress?.("snapshotting databases");
      mkdirSync(join(staging, "db"), { recursive: true });
      for (const d of cfg.databases) {
        const dest = join(staging, "db", `${d.name}.sqlite`);
        await snapshotDatabase(d.name, lc.resolve(d.path), dest);
        dbFiles.set(d.name, dest);
      }
      for (const pattern of cfg.files) {
        const matches = expandGlob(lc.dir, pattern);
        for (const f of matches) {
          const rel = relative(lc.dir, f).split(sep).join("/");
          const path = `files/${rel}`;
          if (rel.startsWith("..") || !componentPath.safeParse(path).success) throw usageError(`files: ${rel} is outside the config folder or has characters a bundle path cannot hold`);
          const dest = join(staging, path);
          mkdirSync(join(dest, ".."), { recursive: true });
          try {
            copyFileSync(f, dest);
          } catch (e) {
            throw wrap(e, `files: ${pattern}`);
          }
          staged.push({ path, kind: "file", name: rel, file: dest, target: rel });
        }
      }
      if (cfg.workspace) {
        opts.progress?.("capturing workspace");
        const wsDir = join(staging, "workspace");
        mkdirSync(wsDir);
        const cap = await captureWorkspace(lc.resolve(cfg.workspace.path), cfg.workspace.uncommitted, wsDir);
        staged.push({ path: "workspace/repo.bundle", kind: "git-bundle", name: "workspace", file: cap.bundleFile });
        if (cap.patchFile) staged.push({ path: "workspace/changes.patch", kind: "git-patch", name: "workspace", file: cap.patchFile });
        // prove the capture reproduces the tree before trusting it
        const check = join(staging, "ws-check");
        await rebuildWorkspace(cap.bundleFile, cap.patchFile, cap.commit, cap.branch, check);
        const digest = await treeDigest(check);
        if (cap.uncommitted === "include") {
          const live = await treeDigest(lc.resolve(cfg.workspace.path));
          if (live.sha256 !== digest.sha256) warnings.push("workspace changed while it was being captured; the bundle holds a consistent earlier state");
        }
        rmSync(check, { recursive: true, force: true });
        ws = { path: restoreTarget(lc, cfg.workspace.path, "workspace"), commit: cap.commit, branch: cap.branch, dirty: cap.dirty, uncommitted: cap.uncommitted, tree_sha256: digest.sha256, files: digest.files };
      }
    } catch (e) {
      captureError = e;
    } finally {
      try {
        await runHooks(cfg.hooks.post, lc.dir, cfg.hooks.timeoutSeconds, "post");
      } catch (e) {
        if (captureError) warnings.push((e as Error).message);
        else captureError = e;
      }
    }
    if (captureError) throw captureError;
    crashStep("snapshotted");

    // integrity, counts, cursors, open operations and the secret scan read the snapshot copies (so they
    // describe the same instant) in a worker thread while the rest is done here; nothing is published unless they pass
    opts.progress?.("checking snapshot and writing bundle");
    const bases = new Map([...dbFiles.keys()].map((name) => [name, chosen.parent ? parentIndex(repo, chosen.parent, name) : null]));
    const scanning = cfg.secretScan.databases !== "off";
    const inspection = inspectInWorker({
      // a full copy gets its page index and page scan from one read in the worker; an incremental's are made here
      dbs: [...dbFiles].map(([name, file]) => (bases.get(name) ? { name, file, scan: false } : { name, file, indexKey: pageKey })),
      cursors: cfg.cursors,
      openOperations: cfg.openOperations,
      scan: cfg.secretScan.databases,
    });
    inspection.catch(() => undefined); // awaited below; avoid an unhandled rejection meanwhile
    const dbStaged: StagedComponent[] = [];
    const deltaFindings: SecretFinding[] = [];
    try {
      for (const d of cfg.databases) {
        const dest = dbFiles.get(d.name)!;
        const target = restoreTarget(lc, d.path, `db/${d.name}.sqlite`);
        const base = bases.get(d.name);
        if (!base) {
          dbStaged.push({ path: `db/${d.name}.sqlite`, kind: "sqlite", name: d.name, file: dest, target });
          continue;
        }
        // an incremental needs the new page index before the payload: it decides what goes in
        const ix = indexPages(dest, pageKey);
        const ixBytes = encodeIndex(ix);
        newIndexes.set(d.name, ixBytes);
        const pages = changedPages(base, ix);
        const deltaFile = join(staging, "db", `${d.name}.delta`);
        writeDelta(dest, pages, ix, deltaFile);
        usedParent = true;
        dbStaged.push({
          path: `db/${d.name}.delta`, kind: "sqlite-delta", name: d.name, file: deltaFile, target,
          full_sha256: ix.sha256, full_size: ix.size, page_size: ix.pageSize, page_count: ix.pageCount, changed_pages: pages.length,
        });
        // pages that did not change were scanned when their snapshot was made
        if (scanning) deltaFindings.push(...scanChangedPages(dest, d.name, pages));
      }
    } catch (e) {
      await inspection.catch(() => undefined);
      throw e;
    }
    staged.unshift(...dbStaged);
    const payloadFile = join(staging, "payload.age");
    let written: Awaited<ReturnType<typeof writePayload>>;
    try {
      written = await writePayload(staged, cfg.recipients, payloadFile);
    } finally {
      await inspection.catch(() => undefined);
    }
    opts.progress?.("finishing snapshot checks");
    const ins = await inspection;
    for (const d of ins.dbs)
      if (d.integrity.length !== 1 || d.integrity[0] !== "ok") throw verifyError(`database ${d.name}: snapshot failed integrity_check: ${d.integrity.slice(0, 3).join("; ")}`);
    const findings: SecretFinding[] = scanValue(cfg, "config");
    const dbFindings = [...ins.findings, ...deltaFindings];
    if (cfg.secretScan.databases === "refuse") findings.push(...dbFindings);
    else warnings.push(...dbFindings.map((f) => `possible secret (${f.kind}) in ${f.where}`));
    if (findings.length) throw policyError(`refusing to back up: possible secret (${findings[0]!.kind}) in ${findings.map((f) => f.where).join(", ")}`);
    const cursors = ins.cursors;
    const openOps = ins.openOperations;
    const byName = new Map(ins.dbs.map((d) => [d.name, d]));
    for (const d of ins.dbs) if (d.index) newIndexes.set(d.name, encodeIndex(d.index));
    // every database's page index is in newIndexes by now (made here for an incremental, in the worker for a full copy)
    const components = written.components.map((c) =>
      c.kind === "sqlite" || c.kind === "sqlite-delta"
        ? { ...c, records: byName.get(c.name)!.records, schema_version: byName.get(c.name)!.schemaVersion, page_index_sha256: sha256hex(newIndexes.get(c.name)!) }
        : c,
    );
    const payload = written.payload;
    crashStep("payload-written");
    const seqRel = join("state", `sequence-${agent}.json`);
    const lastSeq = Math.max(repo.readRecord<{ sequence: number }>(seqRel)?.sequence ?? 0, 0);
    const expires = new Date(created.getTime() + cfg.retention.expireDays * 86400_000);
    const firstDb = components.find((s) => s.kind === "sqlite" || s.kind === "sqlite-delta");
    const manifest: Manifest = {
      format: "agentbak-bundle",
      format_version: 1,
      tool_version: TOOL_VERSION,
      agent_id: agent,
      tenant: cfg.agent.tenant,
      snapshot_id: snapshotId,
      created_at: created.toISOString(),
      expires_at: expires.toISOString(),
      sequence: lastSeq + 1,
      parent: usedParent && chosen.parent ? { snapshot_id: chosen.parent.manifest.snapshot_id, manifest_sha256: chosen.parent.manifestSha256 } : null,
      label: opts.label ?? null,
      idempotency_key: opts.idempotencyKey ?? null,
      signer: { fingerprint: fingerprint(opts.signingKey.publicKey), principal: opts.principal },
      recipients: cfg.recipients,
      runtime: {
        image_digest: cfg.runtime.imageDigest ?? null,
        agent_version: cfg.runtime.agentVersion ?? null,
        models: cfg.runtime.models ?? {},
        host: hostname(),
      },
      schema_version: firstDb?.schema_version ?? null,
      components,
      payload,
      workspace: ws,
      credentials: cfg.credentials.map((c) => ({ name: c.name, ref: c.ref })),
      cursors,
      cursor_queries: Object.fromEntries(Object.entries(cfg.cursors).map(([k, c]) => [k, { database: c.database, sql: c.sql }])),
      open_operations: openOps,
    };
    const mfind = scanValue(manifest, "manifest");
    if (mfind.length) throw policyError(`refusing to back up: possible secret (${mfind[0]!.kind}) in ${mfind.map((f) => f.where).join(", ")}`);
    const bundleTmp = join(staging, "bundle.agentbak");
    opts.progress?.("signing and writing bundle");
    // staged copies are no longer needed: removed in the background now, so their unflushed pages are dropped
    // rather than written back during the bundle's fsync
    removals.push(...[...staged.map((c) => c.file), ...dbFiles.values()].map((f) => rm(f, { force: true })));
    const mbytes = await writeBundleFile(manifest, opts.signingKey, payloadFile, bundleTmp);
    crashStep("bundle-written");
    // reserve the sequence and record the idempotency key before publishing: a crash in between only burns a number
    repo.writeRecord(seqRel, { sequence: manifest.sequence, snapshot_id: snapshotId });
    const receipt: BackupReceipt = {
      snapshot_id: snapshotId,
      agent_id: agent,
      sequence: manifest.sequence,
      created_at: manifest.created_at,
      manifest_sha256: sha256hex(mbytes),
      payload_sha256: payload.sha256,
      size: statSync(bundleTmp).size,
      parent: manifest.parent?.snapshot_id ?? null,
      path: repo.bundlePath(agent, snapshotId),
      repeated: false,
      warnings,
    };
    if (idemRel) repo.writeRecord(idemRel, receipt);
    for (const [name, ix] of newIndexes) writeFileAtomic(join(repo.agentDir(agent), indexFileName(snapshotId, name)), ix, 0o600);
    crashStep("sequence-reserved");
    repo.publish(bundleTmp, agent, snapshotId);
    crashStep("published");
    repo.audit({ event: "backup", agent_id: agent, snapshot_id: snapshotId, sequence: manifest.sequence, manifest_sha256: receipt.manifest_sha256, signer: manifest.signer.fingerprint });
    crashStep("recorded");
    return receipt;
  } finally {
    await Promise.allSettled(removals);
    rmSync(staging, { recursive: true, force: true });
    lock.release();
  }
}
