/** `agentbak drill`: prove a bundle recovers; append a signed report entry. */
import { appendFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { loadIdentities, loadSigningKey } from "../crypto/keys.js";
import { notFound, usageError } from "../errors.js";
import { appendReport } from "../drill/report.js";
import { junitXml, markdownSummary } from "../drill/junit.js";
import { runDrill, type DrillResult } from "../drill/runner.js";
import { loadSpec } from "../drill/spec.js";
import { catalog, pickRandom, resolveSnapshot, type CatalogEntry } from "../repository/catalog.js";
import { openRepository } from "../repository/local.js";
import { parseDuration } from "./duration.js";
import { context, type GlobalOpts } from "./common.js";

export interface DrillCmdOptions extends GlobalOpts {
  spec: string;
  identity?: string;
  report?: string | false;
  junit?: string;
  within?: string;
  agent?: string;
  progress?: (t: string) => void;
}

export interface DrillCmdResult extends DrillResult {
  report_file: string | null;
  report_index: number | null;
}

export async function drill(ref: string, opts: DrillCmdOptions): Promise<DrillCmdResult> {
  const isFile = ref.endsWith(".agentbak") || ref.includes("/");
  const ctx = context(opts, !isFile || Boolean(opts.repo || process.env.AGENTBAK_REPOSITORY || opts.config));
  const spec = loadSpec(opts.spec);
  const repo = ctx.repoPath && !ctx.remote ? openRepository(ctx.repoPath) : undefined;
  const agent = opts.agent ?? ctx.lc?.config.agent.id;
  const randomOf = (entries: CatalogEntry[]) => {
    const e = pickRandom(entries, parseDuration(opts.within ?? "7d"));
    if (!e) throw notFound(`no verified snapshot within ${opts.within ?? "7d"} in ${ctx.repoPath}`);
    return e;
  };
  let bundle: string;
  let done = () => undefined as void;
  if (ctx.remote) {
    const { openStore } = await import("../repository/store.js");
    const { remoteCatalog, mirrorSnapshot } = await import("../repository/remote.js");
    const store = await openStore(ctx.repoPath);
    let id = ref;
    if (ref === "random") id = randomOf(await remoteCatalog(store, ctx.trust, agent)).snapshot_id;
    const m = await mirrorSnapshot(store, id, ctx.trust, agent);
    bundle = m.path;
    done = m.cleanup;
  } else if (ref === "random") {
    if (!repo) throw usageError("random needs a repository");
    bundle = randomOf(catalog(repo, ctx.trust, agent)).path;
  } else bundle = resolveSnapshot(repo, ref, ctx.trust, agent);
  const reportFile = opts.report === false ? null : resolve(opts.report ?? (repo ? join(repo.root, "drills", "report.jsonl") : "agentbak-drill-report.jsonl"));
  const key = reportFile ? loadSigningKey(ctx.lc?.config.signing.key ? ctx.lc.resolve(ctx.lc.config.signing.key) : undefined) : null;
  let r: DrillResult;
  try {
    r = await runDrill({ bundle, spec, trust: ctx.trust, identities: () => loadIdentities(opts.identity), progress: opts.progress });
  } finally {
    done();
  }
  let index: number | null = null;
  if (reportFile && key) {
    const e = appendReport(
      reportFile,
      {
        at: new Date().toISOString(),
        spec: r.spec,
        result: r.ok ? "pass" : "fail",
        snapshot_id: r.snapshot_id,
        agent_id: r.agent_id,
        tenant: r.tenant,
        sequence: r.sequence,
        manifest_sha256: r.manifest_sha256,
        runtime: r.runtime,
        schema: { ...r.schema, migrations: r.checks.filter((c) => c.name === "migration").map((c) => ({ scenario: c.scenario, ok: c.ok, detail: c.detail })) },
        integrity: r.integrity,
        credentials: r.credentials,
        cursors: r.cursors,
        test_task_id: r.test_task_id,
        receipts: r.receipts,
        recovery_seconds: r.recovery_seconds,
        total_seconds: r.total_seconds,
        scenarios: r.scenarios,
        failed_checks: r.checks.filter((c) => !c.ok).map((c) => ({ scenario: c.scenario, check: c.name, severity: c.severity, detail: c.detail })),
        unresolved: r.unresolved,
      },
      key,
    );
    index = e.index as number;
  }
  if (opts.junit) writeFileSync(opts.junit, junitXml(r));
  if (process.env.GITHUB_STEP_SUMMARY) appendFileSync(process.env.GITHUB_STEP_SUMMARY, markdownSummary(r));
  return { ...r, report_file: reportFile, report_index: index };
}
