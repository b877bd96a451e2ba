/**
 * The databases stage, carrying out the read plan (plan.ts): every database read at one instant, then one record
 * each flows through the parent's index, the new index, the delta and the inspection (integrity_check, counts,
 * cursors, open operations, the secret scan), which runs in a worker while the payload is written.
 */
import type { CapturedDatabase, Component, Manifest } from "../bundle/manifest.js";
import { writeComponents, type StagedComponent, type StagedFile } from "../bundle/writer.js";
import type { SigningKey } from "../crypto/sshsig.js";
import type { Progress } from "../progress.js";
import { verifyError } from "../errors.js";
import type { InspectResult } from "../state/inspect/inspect.js";
import { readInstant, settleInspection, stageTaken, type Staged, type Taken } from "../state/inspect/read.js";
import type { HeadHashed } from "../state/pages/index.js";
import type { SecretFinding } from "../state/secrets/scan.js";
import type { CopyJob, Cut } from "../state/sqlite/cut.js";
import type { PageSource } from "../state/sqlite/pagefile.js";
import type { DbPlan } from "./plan.js";
import { join } from "node:path";

export { releasePinned, type Taken } from "../state/inspect/read.js";

/** One database on its way through the pipeline; each step fills in its part. */
export interface DbRecord {
  name: string;
  /** where it goes in a restored root */
  target: string;
  /** the consistent copy in staging (none is written when `pages` is set) */
  copy: string;
  /** a full snapshot read in place: the live pages, pinned at the instant by a read transaction */
  pages: PageSource | null;
  /** the pages root of this copy's page index (the manifest signs it) */
  indexRoot: string | null;
  /** the index as stored: encoded whole, or an incremental's as the changes since its parent's */
  stored: Buffer | null;
  delta: { file: string; pages: number[]; meta: NonNullable<CapturedDatabase["delta"]> } | null;
  inspected: InspectResult["dbs"][number] | null;
  /** this snapshot's block sums were written (kept on this host for the next incremental once the snapshot is published) */
  sums: boolean;
  /** the pinned pages the payload streams, its share hashed as they are read (the worker hashes the rest) */
  head: HeadHashed | null;
}

/**
 * Reads every database at one instant as the plan says (state/inspect/read.ts: readInstant), and begins one record
 * each. With `fingerprint`, the databases' part of the unchanged fingerprint (unchanged.ts) is read at the instant
 * itself, when every write lock is held (`dbState`, else null). A "pinned" result must be released (releasePinned)
 * whatever happens next.
 */
export async function readAtInstant(plan: DbPlan, jobs: (CopyJob & { target: string })[], waitMs: number, fingerprint: boolean): Promise<{ cut: Cut; taken: Taken; dbs: DbRecord[]; dbState: string | null }> {
  const { cut, taken, dbState } = await readInstant(plan, jobs, waitMs, fingerprint);
  const dbs = jobs.map((j): DbRecord => ({ name: j.name, target: j.target, copy: j.dest, pages: null, indexRoot: null, stored: null, delta: null, inspected: null, sums: false, head: null }));
  return { cut, taken, dbs, dbState };
}

/**
 * Stages each database from what the instant took (state/inspect/read.ts: stageTaken, its inspection started): a delta
 * (incrementals), the pinned pages (their head hashed as the payload streams them), or the copy.
 * @returns the staged components, in database order, what was staged (settled by settleInspection), and every
 *   possible secret the deltas found
 */
function stageDatabases(plan: DbPlan, dbs: DbRecord[], taken: Taken, scan: boolean): { components: StagedComponent[]; staged: Staged; findings: SecretFinding[] } {
  const findings: SecretFinding[] = [];
  const staged = stageTaken(plan, taken, dbs.map((d) => ({ name: d.name, file: d.copy })), scan);
  for (const d of dbs) {
    const x = staged.deltas.get(d.name);
    if (x) {
      d.indexRoot = x.ix.root;
      d.stored = x.stored;
      d.delta = { file: x.file, pages: x.pages, meta: x.meta };
      d.sums = x.sums;
      findings.push(...x.findings);
    }
    d.pages = d.head = staged.heads.get(d.name) ?? null;
  }
  const components = dbs.map((d): StagedComponent => (d.delta ? { path: `db/${d.name}.delta`, kind: "sqlite-delta", name: d.name, file: d.delta.file } : d.pages ? { path: `db/${d.name}.sqlite`, kind: "sqlite", name: d.name, pages: d.pages } : { path: `db/${d.name}.sqlite`, kind: "sqlite", name: d.name, file: d.copy }));
  return { components, staged, findings };
}

/**
 * Takes the inspection's results into the records: each database's page index as sealed (`sealed`, by
 * settleInspection: the head hashed here joined to the worker's), whether its block sums were written, and its
 * integrity_check.
 * @throws AgentbakError(13) for a database whose snapshot failed integrity_check
 */
export function finishDatabases(dbs: DbRecord[], ins: InspectResult, sealed: Map<string, { stored: Buffer; root: string }>): void {
  for (const d of dbs) {
    d.inspected = ins.dbs.find((x) => x.name === d.name)!;
    const seal = d.stored ? undefined : sealed.get(d.name);
    if (seal) {
      d.stored = seal.stored;
      d.indexRoot = seal.root;
    }
    if (!d.delta) d.sums = d.inspected.sumsWritten === true;
    const ic = d.inspected.integrity;
    const how = d.inspected.integrityMethod === "index_digest" ? "quick_check + index digests" : "integrity_check";
    if (ic.length !== 1 || (ic[0] !== "ok" && ic[0] !== "skipped")) throw verifyError(`database ${d.name}: snapshot failed ${how}: ${ic.slice(0, 3).join("; ")}`);
  }
}

/**
 * Writes the payload (the databases, staged here, then `others`) while the inspection (integrity_check, counts,
 * cursors, open operations, the secret scan) reads the databases at their instant in a worker thread, then takes its
 * results into the records; the agent's newest manifest (`o.prior`) sizes the room kept for this one's.
 * @returns what was staged and written, the bundle's plan, the inspection, every possible secret it and the
 *   deltas found in the databases (the caller applies the policy), and the block sums to keep once the snapshot is
 *   published (keptSums)
 * @throws AgentbakError(13) for a database whose snapshot failed integrity_check
 */
export async function writeBesideInspection(
  plan: DbPlan,
  dbs: DbRecord[],
  taken: Taken,
  others: StagedFile[],
  o: { prior: Manifest | undefined; signingKey: SigningKey; recipients: string[]; scan: boolean; progress?: Progress; chunked: Component[] },
) {
  const st = stageDatabases(plan, dbs, taken, o.scan);
  const staged = [...st.components, ...others];
  // the manifest lists the chunked components too (their bytes are in the chunk store, not the payload); the agent's
  // newest manifest (`prior`, read when the backup began) sizes the room kept for this one's
  let out: Awaited<ReturnType<typeof writeComponents>>;
  try {
    out = await writeComponents(join(plan.dir, "..", `${plan.snapshotId}.agentbak`), o.signingKey, staged, o.recipients, { stored: o.chunked, prior: o.prior, progress: o.progress });
  } finally {
    await st.staged.inspection.catch(() => undefined);
  }
  o.progress?.stage("finishing snapshot checks");
  // the instant is no longer needed once the inspection settled: a pinned read is released (the WAL can be checkpointed past it)
  const { ins, sealed } = await settleInspection(plan, taken, st.staged);
  finishDatabases(dbs, ins, sealed);
  return { staged, bundle: out.bundle, written: out.written, ins, findings: [...ins.findings, ...st.findings], kept: keptSums(dbs, out.written.components) };
}

/** This snapshot's block sums to keep on this host for the next incremental once it is published (DbPlan.sums.finish): each database's whose were written, with its digest and page size. */
function keptSums(dbs: DbRecord[], written: { sha256: string }[]): { db: string; sha256: string; pageSize: number }[] {
  return dbs.flatMap((d, i) => (d.sums ? [{ db: d.name, sha256: d.delta?.meta.full_pages_sha256 ?? written[i]!.sha256, pageSize: d.delta?.meta.page_size ?? d.pages?.pageSize ?? d.inspected!.index!.pageSize }] : []));
}
