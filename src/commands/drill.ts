/**
 * `agentbak drill`: prove a bundle recovers; append a signed report entry;
 * write JUnit XML and the CI job summary, also when the drill cannot run.
 */
import { letInterruptsIn } from "../cleanup.js";
import { accessSync, appendFileSync, constants } from "node:fs";
import { basename, dirname, resolve } from "node:path";
import { configuredEmbeddings } from "../config/schema.js";
import { AgentbakError, Exit, EXIT_NAMES, placeError, usageError } from "../errors.js";
import { ensureDir, writeFileAtomic } from "../fsutil.js";
import { junitFailure, junitXml, markdownFailure, markdownSummary } from "../drill/junit.js";
import { appendReportFile, reportBody, type ReportedDrill } from "../drill/report.js";
import { runDrill, type DrillResult } from "../drill/runner.js";
import { BUILTIN_SPEC, loadSpec } from "../drill/spec.js";
import { parseDuration } from "./duration.js";
import { context, type GlobalOpts } from "./context.js";
import type { Progress } from "../progress.js";

export interface DrillCmdOptions extends GlobalOpts {
  /** a spec file or a shipped spec's name; default the built-in checks */
  spec?: string;
  identity?: string;
  allowRuntimeChange?: boolean;
  report?: string | false;
  junit?: string;
  within?: string;
  agent?: string;
  tenant?: string;
  source?: string[];
  allowEmbeddingChange?: boolean;
  /** false: a credential reference that does not resolve here is recorded, not a warning (cron, timers) */
  credentialWarnings?: boolean;
  progress?: Progress;
}

/** Writes the JUnit file (atomically) and appends the GitHub job summary, when asked for. */
function publish(opts: DrillCmdOptions, xml: string, summary: string): void {
  if (opts.junit) writeFileAtomic(resolve(opts.junit), xml);
  if (process.env.GITHUB_STEP_SUMMARY) appendFileSync(process.env.GITHUB_STEP_SUMMARY, summary);
}

/**
 * Runs a drill of `ref`.
 * @throws AgentbakError when it cannot run (2 bad spec or flags, 10 not found, 12 no key, 13/14 the bundle does not verify or is refused); the JUnit file and job summary then say why.
 */
export async function drill(ref: string, opts: DrillCmdOptions): Promise<ReportedDrill> {
  const t0 = Date.now();
  // where the JUnit file goes is checked before the drill runs, not after
  if (opts.junit)
    try {
      ensureDir(dirname(resolve(opts.junit)));
      accessSync(dirname(resolve(opts.junit)), constants.W_OK);
    } catch (e) {
      throw placeError(e, `--junit ${resolve(opts.junit)}`);
    }
  let r: ReportedDrill;
  try {
    r = await run(ref, opts);
  } catch (e) {
    const code = e instanceof AgentbakError ? e.code : Exit.failure;
    const f = { spec: basename(opts.spec ?? BUILTIN_SPEC).replace(/\.json$/, ""), ref, exit_status: code, code: EXIT_NAMES[code], message: (e as Error)?.message ?? String(e), seconds: (Date.now() - t0) / 1000 };
    publish(opts, junitFailure(f), markdownFailure(f));
    throw e;
  }
  publish(opts, junitXml(r), markdownSummary(r));
  return r;
}

async function run(ref: string, opts: DrillCmdOptions): Promise<ReportedDrill> {
  const ctx = context(opts);
  const spec = loadSpec(opts.spec);
  // a snapshot id or latest without a repository fails here first, saying so (not asking where the report goes)
  const bundle = await ctx.openRef(ref, { ...ctx.agentFilter(opts), within: parseDuration(opts.within ?? "7d") });
  let key: ReturnType<typeof ctx.signingKey> | null;
  try {
    if (opts.report === undefined && !ctx.repoLocation) throw usageError("where should the drill report go? pass --report FILE (or --no-report), or name a repository");
    key = opts.report === false ? null : ctx.signingKey();
  } catch (e) {
    bundle.release();
    throw e;
  }
  let r: DrillResult;
  try {
    r = await runDrill({
      bundle,
      spec,
      trust: ctx.trust,
      identities: () => ctx.identities(opts.identity),
      sources: opts.source,
      embeddings: ctx.lc ? configuredEmbeddings(ctx.lc.config) : undefined,
      allowEmbeddingChange: opts.allowEmbeddingChange,
      // as restore resolves them, against the agent's folder (the config's), not the temp restore
      credentials: { root: ctx.lc?.dir ?? process.cwd(), checkers: ctx.lc?.config.restore.credentialCheck, warn: opts.credentialWarnings !== false },
      config: ctx.lc?.config,
      allowRuntimeChange: opts.allowRuntimeChange,
      progress: opts.progress,
    });
  } finally {
    bundle.release();
  }
  let reportFile: string | null = null;
  let index: number | null = null;
  // a drill interrupted (its children killed, so a check failed) records nothing: 130, not a failed entry
  await letInterruptsIn();
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
  return { ...r, report_file: reportFile, report_index: index };
}
