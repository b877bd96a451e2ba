/**
 * export: one snapshot as a self-contained bundle file. Every chunked
 * component is read back from the chunk store (each chunk checked) and put
 * into the payload, an incremental's databases are rebuilt through its chain,
 * and the result is a format-4 bundle: three tar members that stock tools
 * open (`tar`, `ssh-keygen -Y verify`, `age -d | zstd -d | tar x`) and that
 * any agentbak restores without its repository. Its payload is new, so its
 * manifest is signed anew, by the exporting key (docs/bundle-format.md).
 */
import { linkSync, lstatSync, renameSync, statSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import type { LinkSource } from "../bundle/chain.js";
import type { ChunkSource } from "../bundle/chunked.js";
import type { Manifest } from "../bundle/manifest.js";
import { verifyBundle } from "../bundle/reader.js";
import { writeBundleFile, writeComponents } from "../bundle/writer.js";
import type { AgeIdentity } from "../crypto/age.js";
import type { SigningKey } from "../crypto/sshsig.js";
import type { Trust } from "../crypto/trust.js";
import { removeOnInterrupt, removeTree } from "../cleanup.js";
import { placeError, usageError, verifyError } from "../errors.js";
import { ensureDir, fsyncDir, pidDir } from "../fsutil.js";
import type { Progress } from "../progress.js";
import { stageWhole } from "./compact.js";

export interface ExportResult {
  snapshot_id: string;
  /** the file written */
  path: string;
  size: number;
  manifest_sha256: string;
  format_version: number;
  /** chunked components put back into the payload */
  inlined: number;
  /** an incremental's databases rebuilt whole */
  rebuilt: number;
  signer: { fingerprint: string; principal: string };
}

/**
 * Puts the finished file `from` at `out` without replacing anything there: linked into place, so a name that appeared
 * meanwhile (a link to nothing included) fails (EEXIST); renamed after a last look on a filesystem without hard links.
 * @throws AgentbakError(2) when `out` is taken, (1) naming it for any other error
 */
function place(from: string, out: string): void {
  const taken = () => usageError(`--out ${out} appeared while the export was written; nothing was replaced`);
  try {
    linkSync(from, out);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "EEXIST") throw taken();
    if (code !== "EPERM" && code !== "ENOTSUP" && code !== "EOPNOTSUPP") throw placeError(e, `--out ${out}`);
    if (lstatSync(out, { throwIfNoEntry: false })) throw taken();
    renameSync(from, out);
  }
}

/**
 * Writes snapshot `bundle` as a self-contained bundle at `out` (which must not exist): written beside it under a
 * temp name, fsynced, put into place (place); nothing is left at `out` when anything fails.
 * @throws AgentbakError(2) when `out` exists, (13) for any failed check, (12) when no identity matches, (10) when its chunks are not at hand
 */
export async function exportBundle(
  bundle: { path: string; links: LinkSource; chunks: ChunkSource | null },
  out: string,
  o: { trust: Trust; identities: AgeIdentity[]; key: SigningKey; principal: string; progress?: Progress },
): Promise<ExportResult> {
  // a name taken by anything, a link to nothing included, is never replaced
  if (lstatSync(out, { throwIfNoEntry: false })) throw usageError(`--out ${out} exists; name a new file`);
  try {
    ensureDir(dirname(out));
  } catch (e) {
    throw placeError(e, `--out ${out}`);
  }
  const staging = pidDir(dirname(out), `.agentbak-export-${basename(out)}`);
  const unregister = removeOnInterrupt(staging); // decrypted state: removed on Ctrl-C or SIGTERM too
  try {
    const v = await verifyBundle(bundle.path, o.trust, undefined, o.progress);
    const m = v.manifest;
    const { staged, inPayload } = await stageWhole(v, bundle, o.identities, { staging, trust: o.trust, inline: true, progress: o.progress });
    // the index digest check's attestation is format 8: an export stays format 4, so it is left out (a restore of it re-runs integrity_check)
    for (const s of staged) delete s.index_digest_checked;
    const { bundle: plan, written } = await writeComponents(join(staging, "bundle.agentbak"), o.key, staged, m.recipients, { prior: m, progress: o.progress, listChunks: false }); // format 4: no payload chunk list (format 7)
    // each component as the snapshot signed it (a rebuilt database: checked against its pages root as it was rebuilt)
    for (const [i, c] of inPayload.entries())
      if (c.kind !== "sqlite-delta" && written.components[i]!.sha256 !== c.sha256) throw verifyError(`export: component ${c.path} does not match its signed sha256`);
    const signer = { fingerprint: o.key.fingerprint, principal: o.principal };
    const manifest: Manifest = { ...m, parent: null, signer, components: written.components, payload: written.payload };
    const signed = await writeBundleFile(manifest, o.key, plan);
    place(plan.path, out);
    fsyncDir(dirname(out));
    return {
      snapshot_id: m.snapshot_id,
      path: out,
      size: statSync(out).size,
      manifest_sha256: signed.sha256,
      format_version: JSON.parse(signed.bytes.toString("utf8")).format_version as number,
      inlined: m.components.filter((c) => c.chunks).length,
      rebuilt: m.components.filter((c) => c.kind === "sqlite-delta").length,
      signer,
    };
  } finally {
    removeTree(staging);
    unregister();
  }
}
