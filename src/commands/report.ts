/**
 * `agentbak report verify [FILE]`: a drill report's hash chain and signatures (default: the agent's report in the
 * repository, which also reaches its signed head record and as far as this host verified it before: a cut-off tail
 * would hide the last drills). A FILE's entries must be of the agent given (--agent, or the config's), when one is.
 */
import type { ChainVerifyResult } from "../crypto/chainlog.js";
import { readReportFile, verifyReportText } from "../drill/report.js";
import { verifyError } from "../errors.js";
import { verifyChainedLog } from "./audit.js";
import { context, type GlobalOpts } from "./context.js";

export async function reportVerify(file: string | undefined, opts: GlobalOpts & { agent?: string; tenant?: string }): Promise<ChainVerifyResult & { report: string; agents: string[]; warnings: string[] }> {
  if (!file) {
    const r = await verifyChainedLog("report", opts);
    return { ...r, report: r.log, agents: [r.agent] };
  }
  const ctx = context(opts);
  const text = readReportFile(file);
  const r = verifyReportText(text, ctx.trust);
  const want = ctx.agentFilter(opts);
  const agents = new Set<string>();
  text.split("\n").forEach((line, i) => {
    if (!line) return;
    const e = JSON.parse(line) as { tenant?: unknown; agent_id?: unknown };
    // a fleet drill's entries name no one agent
    if (e.agent_id === undefined) return;
    const who = `${String(e.tenant)}/${String(e.agent_id)}`;
    if (want.agent && (e.agent_id !== want.agent || (want.tenant && e.tenant !== want.tenant)))
      throw verifyError(`report ${file}: entry ${i} is a drill of ${JSON.stringify(who).slice(0, 120)}, not of ${want.tenant ? `${want.tenant}/` : ""}${want.agent} (another agent's report)`);
    agents.add(who);
  });
  return { ...r, report: file, agents: [...agents].sort(), warnings: [] };
}
