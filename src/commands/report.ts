/**
 * `agentbak report verify [FILE]`: a drill report's hash chain and signatures (default: the agent's report in the
 * repository, which also reaches its signed head record: a cut-off tail would hide the last drills).
 */
import type { ChainVerifyResult } from "../crypto/chainlog.js";
import { readReportFile, verifyReportText } from "../drill/report.js";
import { agentOf, context, type GlobalOpts } from "./context.js";

export async function reportVerify(file: string | undefined, opts: GlobalOpts & { agent?: string; tenant?: string }): Promise<ChainVerifyResult & { report: string; warnings: string[] }> {
  const ctx = context(opts);
  if (file) return { ...verifyReportText(readReportFile(file), ctx.trust), report: file, warnings: [] };
  const repo = await ctx.repository();
  const a = await agentOf(ctx, opts);
  return { ...(await repo.verifyDrillReport(a, ctx.trust)), report: `${repo.location} ${a.tenant}/${a.agent}` };
}
