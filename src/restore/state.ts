/**
 * The records a restore and a reconciliation write into a restored target
 * (signed, so that activation trusts only what agentbak wrote), and reading
 * them back.
 */
import canonicalize from "canonicalize";
import { createHash } from "node:crypto";
import { existsSync, realpathSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { NS, signMessage, verifyMessage, type SigningKey } from "../crypto/sshsig.js";
import { trusts, type Trust } from "../crypto/trust.js";
import { AgentbakError, Exit, notFound } from "../errors.js";
import { readFileRegular, realTarget, writeFileAtomic } from "../fsutil.js";
import type { OpenOperation, OperationResult } from "../reconcile/operations.js";

/** Files inside a restored target. */
export const MARKER_DIR = ".agentbak";
export const SUSPENDED = "SUSPENDED";

/** What a restore records inside the target (.agentbak/restore.json, signed). */
export interface TargetRecord {
  kind: "restore-record";
  agent_id: string;
  tenant: string;
  snapshot_id: string;
  sequence: number;
  generation: number;
  repository: string;
  restored_at: string;
  open_operations: OpenOperation[];
  /** the restored databases, by config name, as paths inside the target (absent in records of agentbak before 0.2) */
  databases?: { name: string; path: string }[];
  /** the config the restore ran with: reconcile and activate use it when none is named */
  config?: string | null;
  /** the folder restored into (absolute, every link on its path followed): the record is not another folder's, nor a copy reached through a link (absent in records before the twelfth attack) */
  target?: string;
}

/** What `agentbak reconcile` records inside the target (.agentbak/reconcile.json, signed): one result per open operation, in the restore record's order. */
export interface ReconcileRecord {
  kind: "reconcile-record";
  snapshot_id: string;
  generation: number;
  /** the restore record this reconciliation belongs to (its recordDigest) */
  restore_record_sha256: string;
  reconciled_at: string;
  operations: OperationResult[];
  summary: ReconcileSummary;
}

export interface ReconcileSummary {
  operations: number;
  completed: number;
  retry: number;
  escalated: number;
  unknown: number;
  /** operations a person must still decide (never reconciled, escalated, unknown, or not recorded) */
  unresolved: number;
}

/** A restored target whose restore record is signed by a trusted key: what reconcile and activate act on. */
export interface Target {
  dir: string;
  record: TargetRecord;
  /** recordDigest of the restore record */
  digest: string;
  /** the signers its records are checked against */
  trust: Trust;
}

const restorePath = (target: string) => join(target, MARKER_DIR, "restore.json");
const reconcilePath = (target: string) => join(target, MARKER_DIR, "reconcile.json");
const activationPath = (target: string) => join(target, MARKER_DIR, "activation.json");

/** The sha256 (hex) of a record's canonical JSON without its signature: what its signature covers. */
export const recordDigest = (r: object): string => createHash("sha256").update(canonicalize(unsigned(r))!).digest("hex");
const unsigned = (r: object) => Object.fromEntries(Object.entries(r).filter(([k]) => k !== "signature"));

/**
 * Writes `record` to `file` with a signature (SSHSIG, namespace agentbak-receipt) over its canonical JSON, or
 * unsigned when there is no key. @returns its recordDigest.
 */
function writeSigned(file: string, record: object, key: SigningKey | null): string {
  const body = unsigned(record);
  const signature = key ? signMessage(key, NS.receipt, Buffer.from(canonicalize(body)!)) : undefined;
  writeFileAtomic(file, JSON.stringify({ ...body, ...(signature ? { signature } : {}) }, null, 2) + "\n");
  return recordDigest(body);
}

/**
 * Checks the signature of a record read from `p` against `trust`.
 * @throws AgentbakError(13) naming `p`: unsigned, not matching (edited), or signed by a key not trusted; `remedy` says what to do.
 */
function checkSignature(p: string, r: Record<string, unknown>, trust: Trust, remedy: string): void {
  if (typeof r.signature !== "string") throw new AgentbakError(Exit.verify, `${p} is not signed (written without a signing key, or by an older agentbak): it is not trusted; ${remedy}`);
  let signer: Buffer;
  try {
    signer = verifyMessage(r.signature, NS.receipt, Buffer.from(canonicalize(unsigned(r))!));
  } catch (e) {
    throw new AgentbakError(Exit.verify, `${p} was changed after agentbak signed it (${(e as Error).message}); ${remedy}`);
  }
  const t = trusts(trust, signer, NS.receipt, new Date());
  if (!t.trusted) throw new AgentbakError(Exit.verify, `${p} is not trusted: ${t.reason}; ${remedy}`);
}

/** Parses a record file; null when it is not a JSON object. */
function readObject(p: string): Record<string, unknown> | null {
  let r: unknown;
  try {
    r = JSON.parse(readFileRegular(p, "utf8"));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code && (e as NodeJS.ErrnoException).code !== "ENOTREG") throw e;
    return null;
  }
  return r && typeof r === "object" && !Array.isArray(r) ? (r as Record<string, unknown>) : null;
}

/** Writes the restore record into a target's (staged) root, signed with `key`. @returns its recordDigest. */
export const writeTargetRecord = (root: string, r: Omit<TargetRecord, "kind">, key: SigningKey | null): string => writeSigned(restorePath(root), { kind: "restore-record", ...r }, key);

/**
 * Reads the restore record of a target, checking only its shape (fence check, which a worker without the
 * operator's signers runs). @throws AgentbakError(10) when the folder was not restored by agentbak, (13) when
 * the record is damaged.
 */
export function readTargetRecord(target: string): TargetRecord {
  const p = restorePath(target);
  if (!existsSync(p)) throw notFound(`${target} holds no agentbak restore record (${MARKER_DIR}/restore.json)`);
  const r = readObject(p) as Partial<TargetRecord> | null;
  // written by restore and never edited: anything else is damage, and nothing here is guessed
  const ok = r && typeof r.agent_id === "string" && typeof r.tenant === "string" && typeof r.snapshot_id === "string" && Number.isSafeInteger(r.generation) && Array.isArray(r.open_operations);
  if (!ok) throw new AgentbakError(Exit.verify, `${p} is damaged (not the record restore wrote); restore the snapshot again into a new folder`);
  return r as TargetRecord;
}

/**
 * A restored target, its restore record signed by a key `trust` trusts.
 * @throws AgentbakError(10) not a restored target; (13) the record damaged, unsigned, edited or signed by a key not trusted.
 */
export function openTarget(target: string, trust: Trust): Target {
  const record = readTargetRecord(target);
  const remedy = "restore the snapshot again into a new folder (with a signing key)";
  checkSignature(restorePath(target), record as unknown as Record<string, unknown>, trust, remedy);
  if (record.kind !== "restore-record") throw new AgentbakError(Exit.verify, `${restorePath(target)} is a signed ${String(record.kind)}, not a restore record; ${remedy}`);
  if (record.target !== undefined && record.target !== restoredFolder(target) && !sameFolder(record.target, target))
    throw new AgentbakError(Exit.verify, `${restorePath(target)} belongs to the restore into ${record.target}, not ${restoredFolder(target)} (moved in from there, or the folder moved); ${remedy}`);
  return { dir: target, record, digest: recordDigest(record), trust };
}

/**
 * The folder a restore into `target` places the agent at, and the folder a record is checked in: `target` with every
 * link on its path followed (fsutil realTarget: the real path of its deepest part that exists, joined with the rest,
 * as the restore request's check reads a proposed folder). Never the record's own path followed at check time: a
 * link on it, pointed elsewhere later, would make the record another folder's (a copy's). A restore's target is
 * absent or an empty folder under a parent that exists when its record is written, so it is the parent's real path
 * joined with the name; a checked one exists, so it is its own real path.
 */
export const restoredFolder = (target: string): string => realTarget(resolve(target));

/**
 * Whether `b` is the folder the record names, `a`, reached through a bind mount (which no realpath follows): the
 * same device and inode, with `a` still reached without a link (a link put on the record's path since would make
 * any folder "the same": the copy it points at). A copy, or another folder put at either path, is another inode.
 */
const sameFolder = (a: string, b: string): boolean => {
  try {
    if (realpathSync(a) !== a) return false;
    const x = statSync(a);
    const y = statSync(b);
    return x.isDirectory() && x.dev === y.dev && x.ino === y.ino;
  } catch {
    return false;
  }
};

export const isSuspended = (target: string) => existsSync(join(target, MARKER_DIR, SUSPENDED));

/**
 * The reconciliation recorded in a target, or null when `reconcile` never ran there: signed by a trusted key,
 * made for this very restore record, with one result for each of its open operations.
 * @throws AgentbakError(13) naming the file when it is damaged, unsigned, edited, or belongs to another restore.
 */
export function readReconcileRecord(t: Target): ReconcileRecord | null {
  const p = reconcilePath(t.dir);
  if (!existsSync(p)) return null;
  const again = `remove it and run agentbak reconcile --target ${t.dir} again (every operation is asked about afresh)`;
  const r = readObject(p) as Partial<ReconcileRecord> | null;
  if (!r || !Array.isArray(r.operations) || !r.operations.every((x) => x && typeof x === "object" && typeof x.idempotency_key === "string"))
    throw new AgentbakError(Exit.verify, `${p} is damaged; ${again}`);
  checkSignature(p, r as Record<string, unknown>, t.trust, again);
  const ops = t.record.open_operations;
  if (r.kind !== "reconcile-record" || r.restore_record_sha256 !== t.digest || r.generation !== t.record.generation)
    throw new AgentbakError(Exit.verify, `${p} belongs to another restore (not to generation ${t.record.generation} as restore.json records it); ${again}`);
  if (r.operations.length !== ops.length || r.operations.some((x, i) => x.idempotency_key !== ops[i]!.idempotency_key || x.id !== ops[i]!.id))
    throw new AgentbakError(Exit.verify, `${p} does not hold one result for each open operation of restore.json; ${again}`);
  return r as ReconcileRecord;
}

/** Writes a target's reconciliation, bound to its restore record and signed with `key`. @returns its recordDigest. */
export const writeReconcileRecord = (t: Target, r: Omit<ReconcileRecord, "kind" | "restore_record_sha256">, key: SigningKey): string =>
  writeSigned(reconcilePath(t.dir), { kind: "reconcile-record", ...r, restore_record_sha256: t.digest }, key);

/** Writes a target's activation record (the one signed into the audit log), bound to its restore record and signed with `key` (unsigned without one). */
export const writeActivationRecord = (t: Target, r: object, key: SigningKey | null): string => writeSigned(activationPath(t.dir), { ...r, restore_record_sha256: t.digest }, key);

/**
 * Checks that a target that is no longer suspended was activated by agentbak: its activation record is there,
 * signed by a trusted key and made for this very restore record. A SUSPENDED marker deleted by hand, or an
 * activation record written, edited or moved in, is not an activation.
 * @throws AgentbakError(13) naming the file.
 */
export function checkActivationRecord(t: Target): void {
  const p = activationPath(t.dir);
  const again = `the agent at ${t.dir} may be running without this restore's open operations reconciled; stop it, and restore the snapshot again into a new folder`;
  if (!existsSync(p)) throw new AgentbakError(Exit.verify, `${t.dir} is not suspended, but agentbak never activated it (no ${MARKER_DIR}/activation.json: its ${MARKER_DIR}/${SUSPENDED} marker was removed by hand); ${again}`);
  const r = readObject(p);
  if (!r) throw new AgentbakError(Exit.verify, `${p} is damaged; ${again}`);
  checkSignature(p, r, t.trust, again);
  if (r.kind !== "activation-record" || r.restore_record_sha256 !== t.digest || r.generation !== t.record.generation)
    throw new AgentbakError(Exit.verify, `${p} belongs to another restore (not to generation ${t.record.generation} as restore.json records it); ${again}`);
}

/** Each of the target's open operations with its latest result (none when never reconciled), by position. */
export function operationStatus(ops: OpenOperation[], results: OperationResult[] = []): { op: OpenOperation; result: OperationResult | null }[] {
  return ops.map((op, i) => ({ op, result: results[i] ?? null }));
}

/** Counts for receipts and activation records. */
export function summarize(ops: OpenOperation[], results: OperationResult[] = []): ReconcileSummary {
  const st = operationStatus(ops, results);
  const n = (res: string) => st.filter((x) => x.result?.resolution === res).length;
  return { operations: st.length, completed: n("completed"), retry: n("retry"), escalated: n("escalated"), unknown: n("unknown"), unresolved: st.filter((x) => !x.result?.resolved).length };
}
