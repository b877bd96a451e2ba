/** `agentbak drill`: prove a bundle recovers; append a signed report entry. */
import { appendFileSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { usageError } from "../errors.js";
import { junitXml, markdownSummary } from "../drill/junit.js";
import { appendReportFile, reportBody } from "../drill/report.js";
import { runDrill, type DrillResult } from "../drill/runner.js";
import { loadSpec } from "../drill/spec.js";
import { parseDuration } from "./duration.js";
import { context, type GlobalOpts } from "./context.js";

export interface DrillCmdOptions extends GlobalOpts {
  spec: string;
  identity?: string;
  allowRuntimeChange?: boolean;
  report?: string | false;
  junit?: string;
  within?: string;
  agent?: string;
  tenant?: string;
  progress?: (t: string) => void;
}

export interface DrillCmdResult extends DrillResult {
  report_file: string | null;
  report_index: number | null;
}

export async function drill(ref: string, opts: DrillCmdOptions): Promise<DrillCmdResult> {
  const ctx = context(opts);
  const spec = loadSpec(opts.spec);
  if (opts.report === undefined && !ctx.repoLocation) throw usageError("where should the drill report go? pass --report FILE (or --no-report), or name a repository");
  const key = opts.report === false ? null : ctx.signingKey();
  const bundle = await ctx.openRef(ref, { ...ctx.agentFilter(opts), within: parseDuration(opts.within ?? "7d") });
  let r: DrillResult;
  try {
    r = await runDrill({
      bundle,
      spec,
      trust: ctx.trust,
      identities: () => ctx.identities(opts.identity),
      config: ctx.lc?.config,
      allowRuntimeChange: opts.allowRuntimeChange,
      progress: opts.progress,
    });
  } finally {
    bundle.release();
  }
  let reportFile: string | null = null;
  let index: number | null = null;
  if (key) {
    const body = reportBody(r);
    if (typeof opts.report === "string") {
      reportFile = resolve(opts.report);
      index = (await appendReportFile(reportFile, body, key)).index as number;
    } else {
      const a = await (await ctx.repository()).appendDrillReport({ tenant: r.tenant, agent: r.agent_id }, body, key);
      reportFile = a.location;
      index = a.entry.index as number;
    }
  }
  if (opts.junit) writeFileSync(opts.junit, junitXml(r));
  if (process.env.GITHUB_STEP_SUMMARY) appendFileSync(process.env.GITHUB_STEP_SUMMARY, markdownSummary(r));
  return { ...r, report_file: reportFile, report_index: index };
}
