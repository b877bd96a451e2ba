/**
 * Restore requests (restore/request.ts), the parts that need no snapshot, on
 * a real local repository: a request's records are read only when signed by
 * a trusted key, unchanged, and bound to their request (an edited, unsigned,
 * swapped or stranger's record is 13 naming its file); an unknown request is
 * 10, a malformed id 2; a denial is written once, needs confirmation, can not
 * follow an approval, and is audited. Recording and approving against real
 * snapshots: test/e2e/approve.test.ts and test/e2e/mcp.test.ts.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import canonicalize from "canonicalize";
import { createHash } from "node:crypto";
import { denyRequest, getRequest, listRequests, localActor, type RestoreRequest } from "../../../src/restore/request.js";
import { Repository } from "../../../src/repository/repository.js";
import { keys } from "../../../src/repository/layout.js";
import { signRecord } from "../../../src/crypto/signed.js";
import { generateSigningKey, NS, publicKeyLine } from "../../../src/crypto/sshsig.js";
import { parseAllowedSigners, type Trust } from "../../../src/crypto/trust.js";
import { newRequestId } from "../../../src/facts.js";
import { AgentbakError } from "../../../src/errors.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-request-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const a = { tenant: "acme", agent: "billing-agent" };
const key = generateSigningKey("ops");
const stranger = generateSigningKey("stranger");
const trust: Trust = { signers: parseAllowedSigners(`ops ${publicKeyLine(key.publicKey)}\n`), revoked: [] };
let n = 0;

/** A repository holding one signed pending request, as recordRequest writes it. */
async function withRequest(signer = key): Promise<{ repo: Repository; id: string; body: Record<string, unknown> }> {
  const { repo } = await Repository.init(join(dir, `r${n++}`));
  const id = newRequestId(new Date(Date.UTC(2026, 2, 1, 10, 0, 0, n)));
  const req: RestoreRequest = {
    request_id: id, tenant: a.tenant, agent_id: a.agent, snapshot_id: "20260301T100000000Z-0a1b2c3d", sequence: 1, reason: "state corrupted",
    target: "/srv/agent-restored", requested_at: "2026-03-01T10:00:00.000Z", requested_by: "token:t1", idempotency_key: null, params_sha256: "0".repeat(64),
  };
  const body = signRecord({ kind: "restore-request", ...req }, signer, NS.receipt);
  await repo.writeJson(keys.request(a, id), body);
  return { repo, id, body };
}
async function failure(p: Promise<unknown>): Promise<AgentbakError> {
  const e = await p.then(() => null, (x: unknown) => x);
  expect(e).toBeInstanceOf(AgentbakError);
  return e as AgentbakError;
}
const deny = (repo: Repository, id: string, confirm = true) => denyRequest(repo, a, id, { reason: "not now", by: "ops@host", trust, signingKey: key, confirm: async () => confirm });

describe("reading requests", () => {
  it("a signed request is pending, and listed", async () => {
    const { repo, id } = await withRequest();
    const r = await getRequest(repo, trust, a, id);
    expect(r).toMatchObject({ request_id: id, status: "pending", decision: null, outcome: null, reason: "state corrupted" });
    expect((r as unknown as Record<string, unknown>).signature).toBeUndefined();
    expect((await listRequests(repo, trust, a)).map((x) => x.request_id)).toEqual([id]);
  });

  it("no such request is 10; a malformed id is 2", async () => {
    const { repo } = await withRequest();
    const missing = newRequestId(new Date());
    expect((await failure(getRequest(repo, trust, a, missing))).code).toBe(10);
    const bad = await failure(getRequest(repo, trust, a, "../../etc"));
    expect([bad.code, bad.message]).toEqual([2, 'not a restore request id: "../../etc" (req-<time>-<hex>)']);
  });

  it("edited, unsigned, signed by a stranger, or moved in from another agent: 13 naming the file", async () => {
    const { repo, id, body } = await withRequest();
    const file = join(repo.location, keys.request(a, id));
    const what = `${keys.request(a, id)} in ${repo.location}`;
    writeFileSync(file, JSON.stringify({ ...body, reason: "edited" }));
    expect(await failure(getRequest(repo, trust, a, id))).toMatchObject({ code: 13, message: expect.stringContaining(what) });
    const { signature: _s, ...unsigned } = body;
    writeFileSync(file, JSON.stringify(unsigned));
    expect((await failure(getRequest(repo, trust, a, id))).message).toBe(`${what}: unsigned, so not accepted as genuine`);
    const foreign = await withRequest(stranger);
    expect((await failure(getRequest(foreign.repo, trust, a, foreign.id))).code).toBe(13);
    // a genuine request of another agent copied in under this agent's folder
    const other = { tenant: "acme", agent: "other-agent" };
    const theirs = signRecord({ ...(unsigned as { kind: string }), agent_id: other.agent }, key, NS.receipt);
    writeFileSync(file, JSON.stringify(theirs));
    expect((await failure(getRequest(repo, trust, a, id))).message).toBe(`${what}: its agent_id is "other-agent", not billing-agent (moved or swapped from elsewhere)`);
  });

  it("a decision bound to another request's digest is refused (13)", async () => {
    const { repo, id, body } = await withRequest();
    const digest = createHash("sha256").update(canonicalize({ ...body, signature: undefined, reason: "other" })!).digest("hex");
    await repo.writeJson(keys.requestDecision(a, id), signRecord({ kind: "restore-decision", request_id: id, request_sha256: digest, decision: "approved", by: "x", at: "t", reason: null, target: "/t" }, key, NS.receipt));
    expect((await failure(getRequest(repo, trust, a, id))).message).toMatch(/its request_sha256 is .* \(moved or swapped from elsewhere\)$/);
  });
});

describe("denyRequest", () => {
  it("denies once with the reason, audited; denying again repeats; the decision file is written once", async () => {
    const { repo, id } = await withRequest();
    const first = await deny(repo, id);
    expect(first.repeated).toBe(false);
    expect(first.request).toMatchObject({ status: "denied", decision: { decision: "denied", by: "ops@host", reason: "not now", target: null } });
    const again = await deny(repo, id);
    expect(again.repeated).toBe(true);
    const audit = (await repo.auditLog(a)).trim().split("\n").map((l) => JSON.parse(l));
    expect(audit.map((e) => e.event)).toEqual(["restore-denied"]);
    expect((await repo.verifyAudit(a, trust, null)).entries).toBe(1);
  });

  it("not confirmed: 14 and nothing written", async () => {
    const { repo, id } = await withRequest();
    const e = await failure(deny(repo, id, false));
    expect([e.code, e.message]).toEqual([14, `denial of restore request ${id} not confirmed`]);
    expect((await getRequest(repo, trust, a, id)).status).toBe("pending");
    expect(await repo.readJson(keys.requestDecision(a, id))).toBeUndefined();
  });

  it("an approved request can not be denied (2)", async () => {
    const { repo, id, body } = await withRequest();
    const { signature: _s, ...signed } = body;
    const sha = createHash("sha256").update(canonicalize(signed)!).digest("hex");
    await repo.writeJson(keys.requestDecision(a, id), signRecord({ kind: "restore-decision", request_id: id, request_sha256: sha, decision: "approved", by: "lead", at: "2026-03-01T11:00:00Z", reason: null, target: "/t" }, key, NS.receipt));
    expect((await getRequest(repo, trust, a, id)).status).toBe("approved");
    const e = await failure(deny(repo, id));
    expect([e.code, e.message]).toEqual([2, `restore request ${id} was already approved by lead at 2026-03-01T11:00:00Z; it can not be denied`]);
    expect(JSON.parse(readFileSync(join(repo.location, keys.requestDecision(a, id)), "utf8")).decision).toBe("approved");
  });

  it("localActor is user@host", () => {
    expect(localActor()).toMatch(/^[^@\s]+@[^@\s]+$/);
  });
});
