/**
 * Restore requests: an agent asks for a restore (it can never run one), an
 * operator approves or denies it, and only an approval runs the restore, with
 * all of restore's policy. Each request is a few records in the repository
 * beside the agent's snapshots: the request (written once), the decision
 * (written once, so approve and deny can not both win), and the outcome of the
 * last attempt to carry it out; the agent reads its state from them.
 *
 * An approval is one decision: each attempt to carry a request out is
 * confirmed on its own (a prompt or --yes), so a failed attempt leaves nothing
 * another target could reuse. Every record is signed (SSHSIG, namespace
 * agentbak-receipt, its `kind` inside the signed bytes) and bound to its
 * request id and, for decisions and outcomes, to the request's digest; one
 * that is unsigned, edited, swapped or signed by an untrusted key is refused
 * (13) naming its file, never shown or acted on.
 */
import canonicalize from "canonicalize";
import { createHash } from "node:crypto";
import { resolve } from "node:path";
import { hostname, userInfo } from "node:os";
import type { LoadedConfig } from "../config/load.js";
import type { AgeIdentity } from "../crypto/age.js";
import { verifyChainText } from "../crypto/chainlog.js";
import { signRecord, verifyRecord } from "../crypto/signed.js";
import { NS, type SigningKey } from "../crypto/sshsig.js";
import type { Trust } from "../crypto/trust.js";
import { AgentbakError, ConflictError, Exit, notFound, policyError, usageError, verifyError } from "../errors.js";
import { realTarget } from "../fsutil.js";
import { keys } from "../repository/layout.js";
import type { Repository, Snapshot } from "../repository/repository.js";
import { runRestore, type RestoreResult } from "./apply.js";
import type { RestorePlan } from "./plan.js";
import { newRequestId, REQUEST_ID, type AgentRef } from "../facts.js";

/** What an agent asked for; written once. */
export interface RestoreRequest {
  request_id: string;
  tenant: string;
  agent_id: string;
  snapshot_id: string;
  sequence: number;
  reason: string;
  /** the folder the agent proposes; the operator may name another when approving */
  target: string | null;
  requested_at: string;
  /** who asked: a token id or the local MCP server, never a secret */
  requested_by: string;
  idempotency_key: string | null;
  params_sha256: string;
}

/** The first decision on a request (approve and deny can not both win). */
export interface RequestDecision {
  decision: "approved" | "denied";
  by: string;
  at: string;
  reason: string | null;
  /** the folder the first approval named (null for a denial) */
  target: string | null;
}

/** The last attempt to carry a request out; each attempt was approved on its own. */
export interface RequestOutcome {
  status: "restored" | "failed";
  at: string;
  target: string;
  generation: number | null;
  error: { code: number; message: string } | null;
  /** who approved and ran this attempt */
  by: string;
}

/** The kinds of the signed records, inside the signed bytes. */
const KIND = { request: "restore-request", decision: "restore-decision", outcome: "restore-outcome" } as const;

const sha256hex = (s: string) => createHash("sha256").update(s).digest("hex");

/**
 * A signed record of request `bind.request_id`, verified and bound: every field of `bind` must be as given.
 * @returns the record without kind, signature or binding fields, and the digest of what was signed; null when absent.
 * @throws AgentbakError(13) naming the file when it is not JSON, unsigned, edited, untrusted, or belongs elsewhere.
 */
async function readSigned(repo: Repository, trust: Trust, key: string, kind: string, bind: Record<string, string>): Promise<{ record: Record<string, unknown>; sha256: string } | null> {
  const raw = await repo.readJson<unknown>(key);
  if (raw === undefined) return null;
  const what = `${key} in ${repo.location}`;
  const body = verifyRecord(raw, trust, NS.receipt, kind, what);
  for (const [k, v] of Object.entries(bind))
    if (body[k] !== v) throw verifyError(`${what}: its ${k} is ${JSON.stringify(body[k])?.slice(0, 80)}, not ${v} (moved or swapped from elsewhere)`);
  const { kind: _k, request_sha256: _s, ...record } = body;
  return { record, sha256: sha256hex(canonicalize(body)!) };
}

/** Signs and writes a record of request `id`. */
const writeSigned = (repo: Repository, key: string, kind: string, body: Record<string, unknown>, signingKey: SigningKey, opts: { ifNoneMatch?: boolean } = {}) =>
  repo.writeJson(key, signRecord({ kind, ...body }, signingKey, NS.receipt), opts);

/** A request and where it stands: pending → approved → restored | failed (approve may be tried again), or denied. */
export interface RequestStatus extends RestoreRequest {
  status: "pending" | "approved" | "denied" | "restored" | "failed";
  decision: RequestDecision | null;
  outcome: RequestOutcome | null;
}

/** Who acts on this host (for decisions made at a terminal). */
export function localActor(): string {
  let user: string;
  try {
    user = userInfo().username;
  } catch {
    user = process.env.USER ?? "?";
  }
  return `${user}@${hostname()}`;
}

function checkId(id: string): void {
  if (!REQUEST_ID.test(id)) throw usageError(`not a restore request id: ${JSON.stringify(id.slice(0, 80))} (req-<time>-<hex>)`);
}

/**
 * Records a pending restore request for a verified snapshot of `a`; never restores.
 * The same idempotency key returns the first request.
 * @throws AgentbakError(10) no such snapshot of this agent, (13/14) it does not verify or has expired,
 *   ConflictError (2) when the key was used with other parameters.
 */
export async function recordRequest(
  repo: Repository,
  trust: Trust,
  a: AgentRef,
  p: { snapshot: string; reason: string; target?: string | null; by: string; idempotencyKey?: string | null; signingKey: SigningKey },
): Promise<{ request: RequestStatus; repeated: boolean }> {
  const params_sha256 = createHash("sha256").update(canonicalize({ snapshot: p.snapshot, reason: p.reason, target: p.target ?? null })!).digest("hex");
  const idemKey = p.idempotencyKey ? keys.idempotency(a, "request", p.idempotencyKey) : null;
  if (idemKey) {
    const prior = await repo.readJson<{ request_id: string; params_sha256: string }>(idemKey);
    if (prior) {
      if (prior.params_sha256 !== params_sha256) throw new ConflictError(`idempotency key ${p.idempotencyKey} was first used for a restore request with other parameters (request ${prior.request_id})`);
      const first = await getRequest(repo, trust, a, String(prior.request_id));
      // the key's record is not signed: the (signed) request it points to must be the one asked for with this key
      if (first.params_sha256 !== params_sha256 || first.idempotency_key !== p.idempotencyKey) throw verifyError(`${idemKey} in ${repo.location}: points to request ${first.request_id}, which was not made with this idempotency key (edited)`);
      return { request: first, repeated: true };
    }
  }
  const s = await repo.resolve(p.snapshot, trust, a);
  if (s.status !== "ok") throw new AgentbakError(s.problem_code === Exit.policy ? Exit.policy : Exit.verify, `snapshot ${s.snapshot_id} can not be restored: ${s.problem}`);
  const now = new Date();
  const request: RestoreRequest = {
    request_id: newRequestId(now),
    tenant: a.tenant,
    agent_id: a.agent,
    snapshot_id: s.snapshot_id,
    sequence: s.sequence!,
    reason: p.reason,
    target: p.target ?? null,
    requested_at: now.toISOString(),
    requested_by: p.by,
    idempotency_key: p.idempotencyKey ?? null,
    params_sha256,
  };
  await writeSigned(repo, keys.request(a, request.request_id), KIND.request, { ...request }, p.signingKey, { ifNoneMatch: true });
  if (idemKey && !(await repo.writeJson(idemKey, { request_id: request.request_id, params_sha256 }, { ifNoneMatch: true }))) {
    // a concurrent request with the same key won: withdraw this one and answer with that one
    await repo.store.delete(keys.request(a, request.request_id));
    return recordRequest(repo, trust, a, p);
  }
  await repo.audit(a, { event: "restore-request", request_id: request.request_id, snapshot_id: s.snapshot_id, by: p.by }, p.signingKey);
  return { request: { ...request, status: "pending", decision: null, outcome: null }, repeated: false };
}

/**
 * A request and its state, every record verified.
 * @throws AgentbakError(10) when `a` has no such request, (2) for a malformed id, (13) naming the file of a record
 *   that is unsigned, edited, swapped from another request, or signed by an untrusted key.
 */
export async function getRequest(repo: Repository, trust: Trust, a: AgentRef, id: string): Promise<RequestStatus> {
  return (await readRequest(repo, trust, a, id)).status;
}

/** getRequest, with the digest of the signed request that decisions and outcomes are bound to. */
async function readRequest(repo: Repository, trust: Trust, a: AgentRef, id: string, auditLog = lazyAuditLog(repo, a)): Promise<{ status: RequestStatus; sha256: string }> {
  checkId(id);
  const req = await readSigned(repo, trust, keys.request(a, id), KIND.request, { request_id: id, tenant: a.tenant, agent_id: a.agent });
  if (!req) throw notFound(`restore request ${id} not found for ${a.tenant}/${a.agent} in ${repo.location}`);
  const bound = { request_id: id, request_sha256: req.sha256 };
  const strip = (r: { record: Record<string, unknown> } | null) => (r ? (({ request_id: _i, ...rest }) => rest)(r.record) : null);
  const decision = strip(await readSigned(repo, trust, keys.requestDecision(a, id), KIND.decision, bound)) as RequestDecision | null;
  const outcome = strip(await readSigned(repo, trust, keys.requestOutcome(a, id), KIND.outcome, bound)) as RequestOutcome | null;
  if (!decision) noLoggedDecision(await auditLog(), trust, a, id, keys.requestDecision(a, id));
  const request = req.record as unknown as RestoreRequest;
  const status = decision?.decision === "denied" ? "denied" : outcome ? outcome.status : decision ? "approved" : "pending";
  return { status: { ...request, status, decision, outcome }, sha256: req.sha256 };
}

/**
 * A request without a decision record must have none in the audit log either: a decision is written once, so one
 * the log holds and the repository lacks was deleted, and reading the request as pending would let it be decided
 * again (a denial approved, an approval's target changed).
 * @throws AgentbakError(13) naming the decision the audit log holds (and whether the log itself verifies).
 */
function noLoggedDecision(text: string, trust: Trust, a: AgentRef, id: string, file: string): void {
  const logged = text.split("\n").findIndex((l) => l.includes(`"request_id":${JSON.stringify(id)}`) && /"event":"restore-(approved|denied)"/.test(l));
  if (logged < 0) return;
  let damaged = "";
  try {
    verifyChainText(text, trust, NS.receipt, "audit log entry", { expect: { tenant: a.tenant, agent_id: a.agent } });
  } catch (e) {
    if (!(e instanceof AgentbakError)) throw e;
    damaged = `; the audit log does not verify either: ${e.message}`;
  }
  throw verifyError(`restore request ${id}: audit log entry ${logged} records its decision, but ${file} is missing (deleted): it is not decided again${damaged}`);
}

/** `a`'s audit log, read on first use and then shared (one read for every undecided request of a listing). */
function lazyAuditLog(repo: Repository, a: AgentRef): () => Promise<string> {
  let text: Promise<string> | undefined;
  return () => (text ??= repo.auditLog(a));
}

/** Every request of `a`, oldest first. @throws as getRequest, for the first bad one. */
export async function listRequests(repo: Repository, trust: Trust, a: AgentRef): Promise<RequestStatus[]> {
  const ids = (await repo.store.list(keys.requests(a))).map((k) => k.slice(keys.requests(a).length).replace(/\.json$/, "")).filter((id) => REQUEST_ID.test(id));
  const log = lazyAuditLog(repo, a);
  return Promise.all(ids.sort().map(async (id) => (await readRequest(repo, trust, a, id, log)).status));
}

/** Writes the decision unless one exists. @returns the decision that stands (verified). */
async function decide(repo: Repository, trust: Trust, a: AgentRef, id: string, requestSha: string, d: RequestDecision, key: SigningKey): Promise<RequestDecision> {
  const k = keys.requestDecision(a, id);
  if (await writeSigned(repo, k, KIND.decision, { request_id: id, request_sha256: requestSha, ...d }, key, { ifNoneMatch: true })) return d;
  const { request_id: _i, ...stands } = (await readSigned(repo, trust, k, KIND.decision, { request_id: id, request_sha256: requestSha }))!.record;
  return stands as unknown as RequestDecision;
}

/**
 * Denies a pending request, recording the reason the agent will see.
 * @throws AgentbakError(10) no such request, (2) when it was already approved.
 */
export async function denyRequest(
  repo: Repository,
  a: AgentRef,
  id: string,
  o: { reason: string; by: string; trust: Trust; signingKey: SigningKey; confirm: (r: RequestStatus) => Promise<boolean> },
): Promise<{ request: RequestStatus; repeated: boolean }> {
  const { status: r, sha256 } = await readRequest(repo, o.trust, a, id);
  if (r.status === "denied") return { request: r, repeated: true };
  if (r.decision) throw usageError(`restore request ${id} was already approved by ${r.decision.by} at ${r.decision.at}; it can not be denied`);
  if (!(await o.confirm(r))) throw policyError(`denial of restore request ${id} not confirmed`);
  const d = await decide(repo, o.trust, a, id, sha256, { decision: "denied", by: o.by, at: new Date().toISOString(), reason: o.reason, target: null }, o.signingKey);
  if (d.decision !== "denied") throw usageError(`restore request ${id} was approved by ${d.by} meanwhile; it can not be denied`);
  await repo.audit(a, { event: "restore-denied", request_id: id, snapshot_id: r.snapshot_id, by: o.by, reason: o.reason }, o.signingKey);
  return { request: await getRequest(repo, o.trust, a, id), repeated: false };
}

export interface ApproveOptions {
  /** where to restore; default the folder the request proposed */
  target?: string;
  lc?: LoadedConfig;
  trust: Trust;
  identities: () => AgeIdentity[];
  /** signs the decision, the outcome and the restore's receipts */
  signingKey: SigningKey;
  by: string;
  allowRollback?: boolean;
  /** shows the plan and asks the operator (or answers for --yes); asked for every attempt */
  confirm: (plan: RestorePlan, r: RequestStatus) => Promise<boolean>;
}

/**
 * Approves a request and carries it out: the restore runs with all of
 * restore's policy (tenant and agent of the request, rollback, expiry, schema,
 * approval), under the request id, so approving again after it succeeded
 * returns the first result. A failure is recorded for the agent to see; the
 * request can be approved again once the cause is fixed, with a new
 * confirmation: an approval is spent by the attempt it was given for.
 * @throws AgentbakError(10) no such request or snapshot, (13) a record of the request does not verify,
 *   (14) denied, refused by policy or not confirmed, and whatever the restore throws.
 */
export async function approveRequest(repo: Repository, a: AgentRef, id: string, o: ApproveOptions): Promise<{ request: RequestStatus; restore: RestoreResult }> {
  const { status: r, sha256 } = await readRequest(repo, o.trust, a, id);
  if (r.status === "denied") throw policyError(`restore request ${id} was denied by ${r.decision!.by} at ${r.decision!.at}: ${r.decision!.reason}`);
  if (!o.target && !r.target) throw usageError(`restore request ${id} names no target folder: pass --target DIR`);
  // the signed decision and outcome name the folder itself, never a path relative to where approve ran
  const target = resolve((o.target ?? r.target)!);
  // a folder the agent proposed is restored only where it says: not through a link it may have made (or /proc/self)
  const real = o.target ? target : realTarget(target);
  if (real !== target) throw usageError(`restore request ${id} proposes ${target}, which leads to ${real} through a symbolic link: pass --target with the folder to restore into`);
  const s: Snapshot | undefined = (await repo.list(o.trust, a)).find((e) => e.snapshot_id === r.snapshot_id);
  if (!s) throw notFound(`snapshot ${r.snapshot_id} of restore request ${id} is no longer in ${repo.location}`);
  const bundle = await repo.open(s, o.trust);
  // no outcome is recorded while the operator has not said yes (declined at the prompt, or no TTY to ask on)
  let undecided = false;
  const outcome = async (x: Pick<RequestOutcome, "status" | "generation" | "error">) => {
    const rec: RequestOutcome = { ...x, at: new Date().toISOString(), target, by: o.by };
    await writeSigned(repo, keys.requestOutcome(a, id), KIND.outcome, { request_id: id, request_sha256: sha256, ...rec }, o.signingKey);
    await repo.audit(a, { event: `restore-request-${x.status}`, request_id: id, snapshot_id: r.snapshot_id, by: o.by, ...(x.error ? { error: x.error.message } : { generation: x.generation }) }, o.signingKey);
  };
  try {
    const restore = await runRestore({
      bundle,
      target,
      repo,
      lc: o.lc,
      trust: o.trust,
      identities: o.identities,
      signingKey: () => o.signingKey,
      approve: async (plan) => {
        // every attempt is approved on its own: an earlier approval, whose attempt failed, is not reused
        undecided = true;
        if (!(await o.confirm(plan, r))) return false;
        undecided = false;
        const d = await decide(repo, o.trust, a, id, sha256, { decision: "approved", by: o.by, at: new Date().toISOString(), reason: null, target }, o.signingKey);
        if (d.decision === "denied") throw policyError(`restore request ${id} was denied by ${d.by} meanwhile: ${d.reason}`);
        await repo.audit(a, { event: "restore-approved", request_id: id, snapshot_id: r.snapshot_id, by: o.by, target }, o.signingKey);
        return true;
      },
      allowRollback: o.allowRollback,
      expectAgent: a.agent,
      expectTenant: a.tenant,
      requestId: id,
    });
    if (!restore.repeated || r.outcome?.status !== "restored") await outcome({ status: "restored", generation: restore.generation, error: null });
    return { request: await getRequest(repo, o.trust, a, id), restore };
  } catch (e) {
    if (!undecided) {
      const err = e instanceof AgentbakError ? e : new AgentbakError(Exit.failure, (e as Error).message);
      await outcome({ status: "failed", generation: null, error: { code: err.code, message: err.message } });
    }
    throw e;
  } finally {
    bundle.release();
  }
}
