/** `agentbak audit verify`: the agent's audit log in the repository, its chain, signatures and signed head, and how far this host saw it reach. */
import type { LogVerifyResult } from "../repository/repository.js";
import { raiseAuditSeen, readAuditSeen } from "../state/watermark.js";
import { agentOf, context, type GlobalOpts } from "./context.js";

/**
 * Verifies the agent's audit log and, when it holds, records how far it
 * reached in this host's trusted state: a later cut below that point is
 * found here even if the head record was replaced too.
 * @throws AgentbakError(2) which agent is unclear, (10) no repository or no log, (13) naming the first bad entry or the cut.
 */
export async function auditVerify(opts: GlobalOpts & { agent?: string; tenant?: string }): Promise<LogVerifyResult> {
  const ctx = context(opts);
  const repo = await ctx.repository();
  const a = await agentOf(ctx, opts);
  const r = await repo.verifyAudit(a, ctx.trust, readAuditSeen(ctx.home, a, repo.location));
  raiseAuditSeen(ctx.home, a, repo.location, { entries: r.entries, head_sha256: r.head_sha256 });
  return r;
}
