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
import { junitFailure, junitFleet, junitXml, markdownFailure, markdownFleet, markdownSummary } from "../drill/junit.js";
import { fleetReportBody, fleetResult, pickTargets, type FleetDrillResult, type FleetOutcome, type FleetTarget } from "../drill/fleet.js";
import { agentIdentities, loadHostFile } from "../fleet/hostfile.js";
import type { CatalogEntry } from "../repository/repository.js";
import { appendReportFile, reportBody, type ReportedDrill } from "../drill/report.js";
import { runDrill, type DrillOptions, type DrillResult } from "../drill/runner.js";
import { openStore } from "../storage/open.js";
import { BUILTIN_SPEC, loadSpec } from "../drill/spec.js";
import { parseDuration } from "./duration.js";
import { context, type Context, type GlobalOpts } from "./context.js";
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
  /** refuse (2) to run the worker unsealed (no network namespace here) */
  requireSealed?: boolean;
  /** false: a credential reference that does not resolve here is recorded, not a warning (cron, timers) */
  credentialWarnings?: boolean;
  /** the next version's worker command (split on spaces; ./ and ../ resolve against the current folder) */
  upgradeTo?: string;
  progress?: Progress;
}

/** Writes the JUnit file (atomically) and appends the GitHub job summary, when asked for. */
function publish(opts: Pick<DrillCmdOptions, "junit">, xml: string, summary: string): void {
  if (opts.junit) writeFileAtomic(resolve(opts.junit), xml);
  if (process.env.GITHUB_STEP_SUMMARY) appendFileSync(process.env.GITHUB_STEP_SUMMARY, summary);
}

/**
 * Runs a drill of `ref`.
 * @throws AgentbakError when it cannot run (2 bad spec or flags, 10 not found, 12 no key, 13/14 the bundle does not verify or is refused); the JUnit file and job summary then say why.
 */
export async function drill(ref: string, opts: DrillCmdOptions): Promise<ReportedDrill> {
  const t0 = Date.now();
  checkJunitPlace(opts.junit);
  let r: ReportedDrill;
  try {
    r = await run(context(opts), ref, opts);
  } catch (e) {
    const code = e instanceof AgentbakError ? e.code : Exit.failure;
    const f = { spec: basename(opts.spec ?? BUILTIN_SPEC).replace(/\.json$/, ""), ref, exit_status: code, code: EXIT_NAMES[code], message: (e as Error)?.message ?? String(e), seconds: (Date.now() - t0) / 1000 };
    publish(opts, junitFailure(f), markdownFailure(f));
    throw e;
  }
  publish(opts, junitXml(r), markdownSummary(r));
  return r;
}

/** How the object-store nemeses read the snapshot again through their fault proxy: an S3 repository with a plain-http AGENTBAK_S3_ENDPOINT only. */
function storeReads(ctx: Context, snapshot: { key: string } | null): DrillOptions["storeReads"] {
  const location = ctx.repoLocation;
  const endpoint = process.env.AGENTBAK_S3_ENDPOINT;
  if (!snapshot || !location?.startsWith("s3://") || !endpoint?.startsWith("http://")) return undefined;
  return { endpoint, fetch: async (through, file) => (await openStore(location, { endpoint: through })).download(snapshot.key, file) };
}

/** `--upgrade-to CMD` as an argv: split on spaces, ./ and ../ against the current folder. @throws AgentbakError(2) when empty. */
function upgradeArgv(cmd: string | undefined): string[] | undefined {
  if (cmd === undefined) return undefined;
  const argv = cmd.split(/\s+/).filter(Boolean);
  if (!argv.length) throw usageError("--upgrade-to: which command? it is empty");
  return argv.map((x) => (x.startsWith("./") || x.startsWith("../") ? resolve(x) : x));
}

/** Where the JUnit file goes is checked before a drill runs, not after. @throws AgentbakError naming the place. */
function checkJunitPlace(junit: string | undefined): void {
  if (junit)
    try {
      ensureDir(dirname(resolve(junit)));
      accessSync(dirname(resolve(junit)), constants.W_OK);
    } catch (e) {
      throw placeError(e, `--junit ${resolve(junit)}`);
    }
}

async function run(ctx: Context, ref: string, opts: DrillCmdOptions): Promise<ReportedDrill> {
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
      requireSealed: opts.requireSealed,
      // as restore resolves them, against the agent's folder (the config's), not the temp restore
      credentials: { root: ctx.lc?.dir ?? process.cwd(), checkers: ctx.lc?.config.restore.credentialCheck, warn: opts.credentialWarnings !== false },
      config: ctx.lc?.config,
      allowRuntimeChange: opts.allowRuntimeChange,
      upgradeTo: upgradeArgv(opts.upgradeTo),
      storeReads: storeReads(ctx, bundle.snapshot),
      restoreChild: { identity: opts.identity && resolve(opts.identity), config: ctx.lc?.path },
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

export interface FleetDrillOptions extends DrillCmdOptions {
  /** how many agents to drill */
  sample: string;
  seed?: string;
  /** how far back recovery points are drawn (default 7d) */
  window?: string;
  /** a host file: its agents are the fleet, each drilled with its own config */
  host?: string;
  /** the window's end (default now): with a report entry's seed and window, its picks again */
  until?: string;
}

/** A fleet member: who, and the context (its config, or the repository alone) its drill runs in. */
interface Member {
  tenant: string;
  agent: string;
  ctx: () => Context;
}

/**
 * `agentbak drill --fleet --sample K`: K agents of the repository (or of a
 * host file) drawn with a seed, each drilled at a random recovery point in
 * the window through the one drill path, then the fleet figure appended as
 * a signed entry to the repository's fleet report (or --report FILE).
 * A sampled agent whose drill fails or can not run counts as not recoverable.
 * @throws AgentbakError(2) for bad flags, a bad host file or a drill spec the agents can not run; (10) no repository; (12) no signing key.
 */
export async function drillFleet(opts: FleetDrillOptions): Promise<FleetDrillResult> {
  if (!/^\d+$/.test(opts.sample)) throw usageError(`--sample: not a positive whole number: ${JSON.stringify(opts.sample)}`);
  if (opts.config) throw usageError("drill --fleet drills every agent of a repository (--repo) or of a host file (--host FILE), not one config's: drop -c");
  if (opts.agent || opts.tenant) throw usageError("drill --fleet chooses the agents itself: drop --agent and --tenant");
  checkJunitPlace(opts.junit);
  const to = opts.until === undefined ? new Date() : new Date(opts.until);
  if (Number.isNaN(to.getTime()) || to.getTime() > Date.now()) throw usageError(`--until: not a time up to now (ISO 8601, e.g. 2026-12-01T00:00:00Z): ${JSON.stringify(opts.until)}`);
  const from = new Date(to.getTime() - parseDuration(opts.window ?? "7d"));
  const spec = loadSpec(opts.spec);
  const { members, entries, fleetCtx } = opts.host ? await hostFleet(opts) : await repositoryFleet(opts);
  const key = opts.report === false ? null : fleetCtx.signingKey();
  const picked = pickTargets(entries, { k: Number(opts.sample), seed: opts.seed, from, to, agents: opts.host ? members : undefined });
  const drills: FleetOutcome[] = [];
  for (const t of picked.targets) drills.push(await drillTarget(t, members.find((m) => m.tenant === t.tenant && m.agent === t.agent)!, opts));
  const r = fleetResult({ seed: picked.seed, from, to, population: picked.population, spec: spec.spec.name }, drills);
  let reportFile: string | null = null;
  let index: number | null = null;
  await letInterruptsIn();
  if (key) {
    const body = fleetReportBody(r);
    if (typeof opts.report === "string") [reportFile, index] = [resolve(opts.report), (await appendReportFile(resolve(opts.report), body, key)).index as number];
    else {
      const a = await (await fleetCtx.repository()).appendFleetReport(body, key);
      [reportFile, index] = [a.location, a.entry.index as number];
    }
  }
  const out = { ...r, report_file: reportFile, report_index: index };
  publish(opts, junitFleet(out), markdownFleet(out));
  return out;
}

/**
 * Every agent with a snapshot in the repository (--repo, AGENTBAK_REPOSITORY, or the config here names it), drilled
 * with the built-in checks or the spec and without a config: no agent's config is every agent's.
 */
async function repositoryFleet(opts: FleetDrillOptions): Promise<{ members: Member[]; entries: CatalogEntry[]; fleetCtx: Context }> {
  const ctx = context({ repo: context({ repo: opts.repo }).repoLocation }, { configless: true });
  // the fleet's snapshots from each agent's catalog record checked against its snapshots folder (repository/catalog.ts,
  // fresh: the sample is drawn from what the objects hold, not from what this host checked before); a drilled one is read whole
  const entries = await (await ctx.repository()).entries(ctx.trust, {}, new Date(), { fresh: true });
  const members = [...new Map(entries.filter((e) => e.tenant).map((e) => [`${e.tenant}/${e.agent_id}`, { tenant: e.tenant!, agent: e.agent_id, ctx: () => ctx }])).values()];
  return { members, entries, fleetCtx: ctx };
}

/** The host file's agents, each drilled in its own config's context; the fleet entry goes to their one repository. */
async function hostFleet(opts: FleetDrillOptions): Promise<{ members: Member[]; entries: CatalogEntry[]; fleetCtx: Context }> {
  const ids = agentIdentities(loadHostFile(resolve(opts.host!)).agents);
  const entries: CatalogEntry[] = [];
  const locations = new Set<string>();
  // a config is loaded to list its agent, then dropped: a drilled agent loads it again
  for (const a of ids) {
    const ctx = context({ config: a.config, repo: opts.repo });
    locations.add(ctx.repoLocation!);
    entries.push(...(await (await ctx.repository()).list(ctx.trust, { tenant: a.tenant, agent: a.agent })));
  }
  if (opts.report === undefined && locations.size > 1) throw usageError(`the host file's agents back up to ${locations.size} repositories; pass --repo or --report FILE for the fleet entry`);
  const members = ids.map((a) => ({ tenant: a.tenant, agent: a.agent, ctx: () => context({ config: a.config, repo: opts.repo }) }));
  return { members, entries, fleetCtx: context({ repo: opts.repo ?? [...locations][0] }) };
}

/** One sampled agent's drill through the drill path; a failed check or a drill that can not run (10, 13, 14, ...) is a failure of the fleet, not of the command. */
async function drillTarget(t: FleetTarget, m: Member, opts: FleetDrillOptions): Promise<FleetOutcome> {
  const t0 = Date.now();
  const base = { tenant: t.tenant, agent: t.agent, at: t.at, snapshot_id: t.snapshot?.snapshot_id ?? null };
  const seconds = () => (Date.now() - t0) / 1000;
  if (!t.snapshot) return { ...base, result: "fail", exit_status: Exit.notFound, detail: `no snapshot created at or before ${t.at}`, seconds: 0 };
  try {
    const r = await run(m.ctx(), t.snapshot.snapshot_id, { ...opts, junit: undefined, tenant: t.tenant, agent: t.agent });
    const failed = r.checks.find((c) => !c.ok && c.severity === "error");
    return { ...base, result: r.ok ? "pass" : "fail", exit_status: r.ok ? (r.warnings.length ? Exit.warnings : Exit.ok) : Exit.drillFailed, detail: failed ? `${failed.scenario}/${failed.name}: ${failed.detail}` : null, seconds: seconds() };
  } catch (e) {
    // a bad flag, spec or config is the operator's, and an interrupt is an interrupt: neither is the agent's recoverability
    if (!(e instanceof AgentbakError) || e.code === Exit.usage || e.code === Exit.interrupted) throw e;
    return { ...base, result: "fail", exit_status: e.code, detail: e.message, seconds: seconds() };
  }
}
