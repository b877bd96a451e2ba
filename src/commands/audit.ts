/** `agentbak audit verify` and `agentbak report verify`: an agent's hash-chained log in the repository, its chain, signatures and signed head, and how far this host saw it reach. */
import type { LogVerifyResult } from "../repository/repository.js";
import { raiseAuditSeen, readAuditSeen, type ChainedLog } from "../state/watermark.js";
import { agentOf, context, type GlobalOpts } from "./context.js";

/**
 * Verifies the agent's audit log (or drill report) and, when it holds,
 * records how far it reached in this host's trusted state: a later cut below
 * that point is found here even if the head record was replaced too.
 * @throws AgentbakError(2) which agent is unclear, (10) no repository or no log, (13) naming the first bad entry or the cut.
 */
export async function verifyChainedLog(log: ChainedLog, opts: GlobalOpts & { agent?: string; tenant?: string }): Promise<LogVerifyResult & { agent: string }> {
  const ctx = context(opts);
  const repo = await ctx.repository();
  const a = await agentOf(ctx, opts);
  const seen = readAuditSeen(ctx.home, a, repo.location, log);
  const r = log === "audit" ? await repo.verifyAudit(a, ctx.trust, seen) : await repo.verifyDrillReport(a, ctx.trust, seen);
  raiseAuditSeen(ctx.home, a, repo.location, { entries: r.entries, head_sha256: r.head_sha256 }, log);
  return { ...r, agent: `${a.tenant}/${a.agent}` };
}

/** `agentbak audit verify`. @throws as verifyChainedLog. */
export const auditVerify = (opts: GlobalOpts & { agent?: string; tenant?: string }) => verifyChainedLog("audit", opts);
