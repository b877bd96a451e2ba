/** Human rendering for the agent interface's commands: tokens, restore requests and decisions, flush, the server's log. */
import type { TokenView } from "../agentapi/tokens.js";
import type { FlushResult } from "../repository/spool.js";
import type { RestoreResult } from "../restore/apply.js";
import type { RestorePlan } from "../restore/plan.js";
import type { RequestStatus } from "../restore/request.js";
import { safe } from "./escape.js";
import { ok, out, say, table, warn } from "./output.js";
import { renderPlan } from "./plan.js";

/** The new token goes to stdout (it is the result, shown once); the rest to stderr. */
export function tokenCreated(r: TokenView & { token: string }): void {
  ok(`token ${r.id} for ${r.tenant}/${r.agent}, tier ${r.tier}; it is shown only now, keep it in the agent's secret store`);
  out(`${r.token}\n`);
}

export function tokenList(list: TokenView[]): void {
  table(["ID", "TENANT", "AGENT", "TIER", "CREATED", "REVOKED"], list.map((t) => [t.id, t.tenant, t.agent, t.tier, t.created_at, t.revoked_at ?? "-"]));
}

export function tokenRevoked(r: TokenView): void {
  ok(`token ${r.id} (${r.tenant}/${r.agent}) revoked at ${r.revoked_at}`);
}

/** One request, as an operator reads it before deciding: the agent wrote most of it, so every field is escaped. */
export function request(r: RequestStatus): void {
  const $ = (v: unknown) => safe(String(v));
  say(`restore request ${$(r.request_id)} (${$(r.status)})`);
  say(`  agent      ${$(r.tenant)}/${$(r.agent_id)}, asked by ${$(r.requested_by)} at ${$(r.requested_at)}`);
  say(`  snapshot   ${$(r.snapshot_id)} (sequence ${$(r.sequence)})`);
  say(`  reason     ${$(r.reason)}`);
  if (r.target) say(`  proposed   ${$(r.target)}`);
  if (r.decision) say(`  decision   ${$(r.decision.decision)} by ${$(r.decision.by)} at ${$(r.decision.at)}${r.decision.reason ? `: ${$(r.decision.reason)}` : ""}`);
  if (r.outcome?.error) say(`  last try   failed at ${$(r.outcome.at)}: ${$(r.outcome.error.message)}`);
}

/** What approve shows before asking: the request, then the restore plan. */
export function approvalPrompt(plan: RestorePlan, r: RequestStatus): void {
  request(r);
  renderPlan(plan);
}

export function approved(r: { request: RequestStatus; restore: RestoreResult }): void {
  const x = r.restore;
  ok(`${x.repeated ? "already restored" : "restored"} ${x.plan.snapshot_id} into ${x.plan.target} at generation ${x.generation} for request ${r.request.request_id}; the agent is suspended until "agentbak activate --target ${x.plan.target}"`);
  for (const w of x.warnings) warn(w);
}

export function denied(r: { request: RequestStatus; repeated: boolean }): void {
  ok(`${r.repeated ? "already denied" : "denied"} restore request ${r.request.request_id}: ${r.request.decision?.reason}`);
}

export function requests(list: RequestStatus[]): void {
  table(["REQUEST", "STATUS", "SNAPSHOT", "ASKED", "BY", "REASON"], list.map((r) => [r.request_id, r.status, r.snapshot_id, r.requested_at, r.requested_by, r.reason.slice(0, 60)]));
}

/** One set-aside spooled bundle, as flush and backup name it. */
export const setAside = (q: FlushResult["quarantined"][number]) =>
  `spooled snapshot ${q.snapshot_id} does not verify, set aside ${q.earlier ? "by an earlier run that did not report it " : ""}(not uploaded, not deleted) in ${q.path}: ${q.problem}`;

export function flushed(list: FlushResult[]): void {
  if (!list.length) ok("nothing spooled");
  for (const f of list) {
    ok(`${f.flushed.length} spooled snapshot(s) uploaded to ${f.remote}${f.already.length ? `, ${f.already.length} already there` : ""} (spool ${f.spool})`);
    for (const q of f.quarantined) warn(setAside(q));
    for (const w of f.warnings) warn(w);
  }
}

export function listening(info: { url: string; agents: string[]; page?: "ui" | "token" }): void {
  ok(`agent interface on ${info.url} (REST under /v1, OpenAPI at /v1/openapi.json, MCP at /mcp) for ${info.agents.join(", ")}`);
  // the address once: scripts take the first URL of this output (docs/agent-interface.md)
  if (info.page === "ui") say("  status page: GET / — open that address in a browser on this host (no token: --ui)");
  if (info.page === "token") say("  status page: GET / with a read-tier token (agentbak token create --tier read), or serve --ui on this host");
  const host = new URL(info.url).hostname;
  if (host !== "127.0.0.1" && host !== "[::1]" && host !== "localhost") warn(`listening on ${host}, not loopback: tokens travel in plain HTTP; put TLS in front`);
}

/** The server's log: one line per request, to stderr; what a caller sent (or a stack) can not break it into more lines. */
export const log = (line: string) => say(`${new Date().toISOString()} ${safe(line)}`);
