/**
 * Restore requests: an agent asks for a restore (it can never run one), an
 * operator approves or denies it, and only an approval runs the restore, with
 * all of restore's policy. Each request is a few records in the repository
 * beside the agent's snapshots: the request (written once), the decision
 * (written once, so approve and deny can not both win), and the outcome of the
 * last attempt to carry it out; the agent reads its state from them.
 */
import canonicalize from "canonicalize";
import { createHash, randomBytes } from "node:crypto";
import { hostname, userInfo } from "node:os";
import type { LoadedConfig } from "../config/load.js";
import type { AgeIdentity } from "../crypto/age.js";
import type { SigningKey } from "../crypto/sshsig.js";
import type { Trust } from "../crypto/trust.js";
import { AgentbakError, ConflictError, Exit, notFound, policyError, usageError } from "../errors.js";
import { keys } from "../repository/layout.js";
import type { AgentRef, Repository, Snapshot } from "../repository/repository.js";
import { runRestore, type RestoreResult } from "./apply.js";
import type { RestorePlan } from "./plan.js";

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

export interface RequestDecision {
  decision: "approved" | "denied";
  by: string;
  at: string;
  reason: string | null;
}

export interface RequestOutcome {
  status: "restored" | "failed";
  at: string;
  target: string;
  generation: number | null;
  error: { code: number; message: string } | null;
}

/** A request and where it stands: pending → approved → restored | failed (approve may be tried again), or denied. */
export interface RequestStatus extends RestoreRequest {
  status: "pending" | "approved" | "denied" | "restored" | "failed";
  decision: RequestDecision | null;
  outcome: RequestOutcome | null;
}

export const REQUEST_ID = /^req-\d{8}T\d{9}Z-[0-9a-f]{8}$/;

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
  p: { snapshot: string; reason: string; target?: string | null; by: string; idempotencyKey?: string | null; signingKey: SigningKey | null },
): Promise<{ request: RequestStatus; repeated: boolean }> {
  const params_sha256 = createHash("sha256").update(canonicalize({ snapshot: p.snapshot, reason: p.reason, target: p.target ?? null })!).digest("hex");
  const idemKey = p.idempotencyKey ? keys.idempotency(a, "request", p.idempotencyKey) : null;
  if (idemKey) {
    const prior = await repo.readJson<{ request_id: string; params_sha256: string }>(idemKey);
    if (prior) {
      if (prior.params_sha256 !== params_sha256) throw new ConflictError(`idempotency key ${p.idempotencyKey} was first used for a restore request with other parameters (request ${prior.request_id})`);
      return { request: await getRequest(repo, a, prior.request_id), repeated: true };
    }
  }
  const s = await repo.resolve(p.snapshot, trust, a);
  if (s.status !== "ok") throw new AgentbakError(s.problem_code === Exit.policy ? Exit.policy : Exit.verify, `snapshot ${s.snapshot_id} can not be restored: ${s.problem}`);
  const now = new Date();
  const request: RestoreRequest = {
    request_id: `req-${now.toISOString().replace(/[-:.]/g, "")}-${randomBytes(4).toString("hex")}`,
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
  await repo.writeJson(keys.request(a, request.request_id), request, { ifNoneMatch: true });
  if (idemKey && !(await repo.writeJson(idemKey, { request_id: request.request_id, params_sha256 }, { ifNoneMatch: true }))) {
    // a concurrent request with the same key won: withdraw this one and answer with that one
    await repo.store.delete(keys.request(a, request.request_id));
    return recordRequest(repo, trust, a, p);
  }
  await repo.audit(a, { event: "restore-request", request_id: request.request_id, snapshot_id: s.snapshot_id, by: p.by }, p.signingKey);
  return { request: { ...request, status: "pending", decision: null, outcome: null }, repeated: false };
}

/** A request and its state. @throws AgentbakError(10) when `a` has no such request, (2) for a malformed id. */
export async function getRequest(repo: Repository, a: AgentRef, id: string): Promise<RequestStatus> {
  checkId(id);
  const request = await repo.readJson<RestoreRequest>(keys.request(a, id));
  if (!request) throw notFound(`restore request ${id} not found for ${a.tenant}/${a.agent} in ${repo.location}`);
  const decision = (await repo.readJson<RequestDecision>(keys.requestDecision(a, id))) ?? null;
  const outcome = (await repo.readJson<RequestOutcome>(keys.requestOutcome(a, id))) ?? null;
  const status = decision?.decision === "denied" ? "denied" : outcome ? outcome.status : decision ? "approved" : "pending";
  return { ...request, status, decision, outcome };
}

/** Every request of `a`, oldest first. */
export async function listRequests(repo: Repository, a: AgentRef): Promise<RequestStatus[]> {
  const ids = (await repo.store.list(keys.requests(a))).map((k) => k.slice(keys.requests(a).length).replace(/\.json$/, "")).filter((id) => REQUEST_ID.test(id));
  return Promise.all(ids.sort().map((id) => getRequest(repo, a, id)));
}

/** Writes the decision unless one exists. @returns the decision that stands. */
async function decide(repo: Repository, a: AgentRef, id: string, d: RequestDecision): Promise<RequestDecision> {
  if (await repo.writeJson(keys.requestDecision(a, id), d, { ifNoneMatch: true })) return d;
  return (await repo.readJson<RequestDecision>(keys.requestDecision(a, id)))!;
}

/**
 * Denies a pending request, recording the reason the agent will see.
 * @throws AgentbakError(10) no such request, (2) when it was already approved.
 */
export async function denyRequest(
  repo: Repository,
  a: AgentRef,
  id: string,
  o: { reason: string; by: string; signingKey: SigningKey | null; confirm: (r: RequestStatus) => Promise<boolean> },
): Promise<{ request: RequestStatus; repeated: boolean }> {
  const r = await getRequest(repo, a, id);
  if (r.status === "denied") return { request: r, repeated: true };
  if (r.decision) throw usageError(`restore request ${id} was already approved by ${r.decision.by} at ${r.decision.at}; it can not be denied`);
  if (!(await o.confirm(r))) throw policyError(`denial of restore request ${id} not confirmed`);
  const d = await decide(repo, a, id, { decision: "denied", by: o.by, at: new Date().toISOString(), reason: o.reason });
  if (d.decision !== "denied") throw usageError(`restore request ${id} was approved by ${d.by} meanwhile; it can not be denied`);
  await repo.audit(a, { event: "restore-denied", request_id: id, snapshot_id: r.snapshot_id, by: o.by, reason: o.reason }, o.signingKey);
  return { request: await getRequest(repo, a, id), repeated: false };
}

export interface ApproveOptions {
  /** where to restore; default the folder the request proposed */
  target?: string;
  lc?: LoadedConfig;
  trust: Trust;
  identities: () => AgeIdentity[];
  signingKey: () => SigningKey | null;
  by: string;
  allowRollback?: boolean;
  /** shows the plan and asks the operator (or answers for --yes) */
  confirm: (plan: RestorePlan, r: RequestStatus) => Promise<boolean>;
}

/**
 * Approves a request and carries it out: the restore runs with all of
 * restore's policy (tenant and agent of the request, rollback, expiry, schema,
 * approval), under the request id, so approving again after it succeeded
 * returns the first result. A failure is recorded for the agent to see; the
 * request can be approved again once the cause is fixed.
 * @throws AgentbakError(10) no such request or snapshot, (14) denied, refused by policy or not confirmed,
 *   and whatever the restore throws.
 */
export async function approveRequest(repo: Repository, a: AgentRef, id: string, o: ApproveOptions): Promise<{ request: RequestStatus; restore: RestoreResult }> {
  const r = await getRequest(repo, a, id);
  if (r.status === "denied") throw policyError(`restore request ${id} was denied by ${r.decision!.by} at ${r.decision!.at}: ${r.decision!.reason}`);
  const target = o.target ?? r.target;
  if (!target) throw usageError(`restore request ${id} names no target folder: pass --target DIR`);
  const s: Snapshot | undefined = (await repo.list(o.trust, a)).find((e) => e.snapshot_id === r.snapshot_id);
  if (!s) throw notFound(`snapshot ${r.snapshot_id} of restore request ${id} is no longer in ${repo.location}`);
  const bundle = await repo.open(s, o.trust);
  // no outcome is recorded while the operator has not said yes (declined at the prompt, or no TTY to ask on)
  let undecided = false;
  const outcome = async (x: Omit<RequestOutcome, "at" | "target">) => {
    await repo.writeJson(keys.requestOutcome(a, id), { ...x, at: new Date().toISOString(), target });
    await repo.audit(a, { event: `restore-request-${x.status}`, request_id: id, snapshot_id: r.snapshot_id, by: o.by, ...(x.error ? { error: x.error.message } : { generation: x.generation }) }, o.signingKey());
  };
  try {
    const restore = await runRestore({
      bundle,
      target,
      repo,
      lc: o.lc,
      trust: o.trust,
      identities: o.identities,
      signingKey: o.signingKey,
      approve: async (plan) => {
        if (r.decision?.decision !== "approved") {
          undecided = true;
          if (!(await o.confirm(plan, r))) return false;
          undecided = false;
          const d = await decide(repo, a, id, { decision: "approved", by: o.by, at: new Date().toISOString(), reason: null });
          if (d.decision === "denied") throw policyError(`restore request ${id} was denied by ${d.by} meanwhile: ${d.reason}`);
          await repo.audit(a, { event: "restore-approved", request_id: id, snapshot_id: r.snapshot_id, by: o.by, target }, o.signingKey());
        }
        return true;
      },
      allowRollback: o.allowRollback,
      expectAgent: a.agent,
      expectTenant: a.tenant,
      requestId: id,
    });
    if (!restore.repeated || r.outcome?.status !== "restored") await outcome({ status: "restored", generation: restore.generation, error: null });
    return { request: await getRequest(repo, a, id), restore };
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
