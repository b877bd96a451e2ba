/**
 * The status page of `agentbak serve` (GET /): server-side HTML with inline
 * SVG charts, one inline stylesheet, no script and no other asset, readable at
 * 390 px and 1280 px. Every string that came from an agent or a repository
 * goes through html() (ui/escape.ts). The page shows pending restore requests
 * and says how to decide them; it has no form and no link that decides one.
 */
import { human, type AgentStatus, type CheckState, type StatusReport } from "../status/gather.js";
import { html } from "./escape.js";
import { humanSize } from "./progress.js";

const WORD: Record<CheckState, string> = { ok: "healthy", warn: "warning", fail: "failing" };
const time = (iso: string) => iso.replace("T", " ").replace(/\.\d+Z$/, "Z");

const STYLE = `
:root{color-scheme:light;--ok:#0b6b30;--ok-bg:#e3f3e8;--warn:#7a4300;--warn-bg:#fff1d0;--fail:#a3121b;--fail-bg:#fde6e7;--line:#d0d4da;--muted:#4a5360}
*{box-sizing:border-box}
body{margin:0;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#14181f;background:#f6f7f9}
header{background:#14181f;color:#fff;padding:16px 24px}
header h1{margin:0;font-size:1.4rem}
header p{margin:4px 0 0;color:#d6dae0;font-size:.9rem;overflow-wrap:anywhere}
main{max-width:1200px;margin:0 auto;padding:16px}
.agent{background:#fff;border:1px solid var(--line);border-radius:8px;padding:16px 20px;margin:0 0 20px}
.agent>h2{margin:0 0 12px;font-size:1.25rem;display:flex;flex-wrap:wrap;gap:8px;align-items:center;overflow-wrap:anywhere}
h3{font-size:1rem;margin:20px 0 8px}
.badge{font-size:.85rem;font-weight:600;padding:2px 10px;border-radius:999px;border:1px solid currentColor}
.ok{color:var(--ok);background:var(--ok-bg)}.warn{color:var(--warn);background:var(--warn-bg)}.fail{color:var(--fail);background:var(--fail-bg)}
dl.facts{display:grid;grid-template-columns:repeat(auto-fit,minmax(160px,1fr));gap:10px;margin:0}
dl.facts div{border:1px solid var(--line);border-radius:6px;padding:8px 12px}
dl.facts dt{font-size:.8rem;color:var(--muted);text-transform:uppercase;letter-spacing:.04em}
dl.facts dd{margin:2px 0 0;font-weight:600;overflow-wrap:anywhere}
dl.facts div.warn,dl.facts div.fail{border-color:currentColor}
ul.checks{list-style:none;padding:0;margin:0}
ul.checks li{padding:8px 12px;border-radius:6px;margin:0 0 6px;overflow-wrap:anywhere}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(320px,1fr));gap:16px}
figure{margin:0;border:1px solid var(--line);border-radius:6px;padding:8px 12px}
figcaption{font-size:.9rem;color:var(--muted)}
svg{width:100%;height:auto;display:block;overflow:visible}
.scroll{overflow-x:auto}
table{border-collapse:collapse;width:100%;min-width:560px;font-size:.9rem}
th,td{text-align:left;padding:6px 8px;border-bottom:1px solid var(--line);vertical-align:top}
td{overflow-wrap:break-word}
code{font-size:.85rem}
.none{color:var(--muted)}
@media (min-width:900px){dl.facts{grid-template-columns:repeat(4,1fr)}}
@media (max-width:600px){main{padding:8px}.agent{padding:12px}header{padding:12px 16px}.charts{grid-template-columns:1fr}svg text{font-size:21px}}
footer{color:var(--muted);font-size:.85rem;text-align:center;padding:8px 16px 24px}
`;

/** An inline SVG scatter with a line through the points: x time, y value. Each point is a circle with a <title>. */
function chart(id: string, title: string, points: { t: number; y: number; label: string; cls?: string }[], o: { unit: (v: number) => string; objective?: number | null }): string {
  const [W, H, L, R, T, B] = [600, 240, 76, 16, 14, 30];
  if (!points.length) return `<p class="none">no data yet</p>`;
  const ts = points.map((p) => p.t);
  const [t0, t1] = [Math.min(...ts), Math.max(...ts)];
  const top = Math.max(...points.map((p) => p.y));
  // an objective far above what was measured would flatten every point: it is drawn only when it is near the scale
  const drawn = o.objective && o.objective <= top * 3 ? o.objective : null;
  const ymax = Math.max(top, drawn ?? 0) * 1.15 || 1;
  const x = (t: number) => (t1 === t0 ? L + (W - L - R) / 2 : L + ((t - t0) / (t1 - t0)) * (W - L - R));
  const y = (v: number) => T + (1 - v / ymax) * (H - T - B);
  const grid = [0, 0.5, 1].map((f) => `<line x1="${L}" x2="${W - R}" y1="${y(ymax * f).toFixed(1)}" y2="${y(ymax * f).toFixed(1)}" stroke="#d0d4da"/><text x="${L - 6}" y="${(y(ymax * f) + 4).toFixed(1)}" text-anchor="end" font-size="13" fill="#4a5360">${html(o.unit(ymax * f))}</text>`);
  const axis = `<text x="${L}" y="${H - 8}" font-size="13" fill="#4a5360">${html(time(new Date(t0).toISOString()).slice(0, 16))}</text><text x="${W - R}" y="${H - 8}" font-size="13" fill="#4a5360" text-anchor="end">${html(time(new Date(t1).toISOString()).slice(0, 16))}</text>`;
  const objective = drawn ? `<line class="objective" x1="${L}" x2="${W - R}" y1="${y(drawn).toFixed(1)}" y2="${y(drawn).toFixed(1)}" stroke="#a3121b" stroke-dasharray="6 4"/><text x="${W - R}" y="${(y(drawn) - 4).toFixed(1)}" font-size="13" fill="#a3121b" text-anchor="end">objective ${html(o.unit(drawn))}</text>` : "";
  const path = points.map((p) => `${x(p.t).toFixed(1)},${y(p.y).toFixed(1)}`).join(" ");
  const dots = points.map((p) => `<circle class="point ${p.cls ?? ""}" cx="${x(p.t).toFixed(1)}" cy="${y(p.y).toFixed(1)}" r="4" fill="${p.cls === "fail" ? "#a3121b" : "#1f5fbf"}" stroke="#fff"><title>${html(p.label)}</title></circle>`);
  return `<svg id="${id}" viewBox="0 0 ${W} ${H}" role="img" aria-labelledby="${id}-t"><title id="${id}-t">${html(title)}</title>${grid.join("")}${axis}${objective}<polyline points="${path}" fill="none" stroke="#1f5fbf" stroke-width="1.5" opacity=".5"/>${dots.join("")}</svg>`;
}

const stateOf = (a: AgentStatus, name: string): CheckState => a.checks.find((c) => c.name === name)?.state ?? "ok";
const fact = (dt: string, dd: string, state: CheckState = "ok") => `<div class="${state === "ok" ? "" : state}"><dt>${dt}</dt><dd>${dd}</dd></div>`;

/** The facts of one agent, each coloured by the check that judges it. */
function facts(a: AgentStatus): string {
  const s = a.last_snapshot;
  const d = a.last_drill;
  const u = a.unresolved_operations;
  return `<dl class="facts">${[
    fact("Newest snapshot", s ? `${human(s.age_seconds)} ago${a.rpo_objective_seconds !== null ? ` <span class="none">(RPO ${human(a.rpo_objective_seconds)})</span>` : ""}` : "none verified", stateOf(a, "snapshot")),
    fact("Chain", a.chain ? `${a.chain.verified} of ${a.chain.links} links verified${a.chain.next_full_in !== null ? `; full in ${a.chain.next_full_in}` : ""}` : "—", stateOf(a, "chain")),
    fact("Last drill", d ? `${d.result === "pass" ? "passed" : "failed"} ${human(d.age_seconds)} ago${d.rto_seconds !== null ? `, RTO ${d.rto_seconds} s` : ""}${d.rto_objective_seconds !== null ? ` <span class="none">(objective ${d.rto_objective_seconds} s)</span>` : ""}` : "none recorded", stateOf(a, "drill")),
    fact("Pending requests", String(a.pending_requests.length), stateOf(a, "requests")),
    fact("Unresolved operations", u ? `${u.unresolved} of ${u.operations}` : "no restore recorded", stateOf(a, "operations")),
    fact("Spool", a.spool ? `${a.spool.bundles} bundle(s), ${humanSize(a.spool.bytes)}` : "— (folder repository)", stateOf(a, "spool")),
    fact("Stored", `${humanSize(a.bytes)} in ${a.snapshots.length} snapshot(s)`),
  ].join("")}</dl>`;
}

/** One agent's section: facts, checks, charts, drills, requests, operations. */
function agentSection(a: AgentStatus, i: number): string {
  const snaps = a.snapshots.slice(-200);
  const drills = a.drills.slice(-100);
  const bad = a.checks.filter((c) => c.state !== "ok");
  const checks = bad.length
    ? `<ul class="checks">${bad.map((c) => `<li class="${c.state}"><strong>${c.state === "fail" ? "Failing" : "Warning"}: ${html(c.name)}</strong> — ${html(c.detail)}</li>`).join("")}</ul>`
    : `<p class="ok" style="padding:8px 12px;border-radius:6px">All checks pass.</p>`;
  const total = snaps.reduce((n, s) => n + s.size, 0);
  const snapChart = chart(`snapshots-${i}`, `Snapshots of ${a.tenant}/${a.agent_id} over time: ${snaps.length}, ${humanSize(total)}`, snaps.map((s) => ({ t: Date.parse(s.created_at), y: s.size, label: `${time(s.created_at)}: ${humanSize(s.size)}` })), { unit: humanSize });
  const rtoPoints = drills.filter((d) => d.rto_seconds !== null).map((d) => ({ t: Date.parse(d.at), y: d.rto_seconds!, label: `${time(d.at)}: ${d.result}, RTO ${d.rto_seconds} s`, cls: d.result }));
  const drillChart = chart(`drills-${i}`, `Drill RTO of ${a.tenant}/${a.agent_id}: ${drills.length} drills`, rtoPoints, { unit: (v) => `${v.toFixed(v < 1 ? 2 : v < 10 ? 1 : 0)} s`, objective: a.last_drill?.rto_objective_seconds ?? null });
  const drillRows = drills
    .slice(-10)
    .reverse()
    .map((d) => `<tr><td>${html(time(d.at))}</td><td class="${d.result === "pass" ? "ok" : "fail"}">${d.result}</td><td>${d.rto_seconds ?? "—"}</td><td>${d.result === "fail" && d.failed.length ? html(d.failed[0]!) + (d.failed.length > 1 ? ` (+${d.failed.length - 1} more)` : "") : "—"}</td></tr>`);
  const requests = a.pending_requests.length
    ? `<p class="none">Decide with <code>agentbak approve ID</code> or <code>agentbak deny ID --reason TEXT</code>; this page never decides.</p><div class="scroll"><table aria-label="Pending restore requests"><thead><tr><th scope="col">Request</th><th scope="col">Snapshot</th><th scope="col">Asked</th><th scope="col">By</th><th scope="col">Reason</th></tr></thead><tbody>${a.pending_requests.map((r) => `<tr><td><code>${html(r.request_id)}</code></td><td><code>${html(r.snapshot_id)}</code></td><td>${html(time(r.requested_at))}</td><td>${html(r.requested_by)}</td><td>${html(r.reason)}</td></tr>`).join("")}</tbody></table></div>`
    : `<p class="none">None pending.</p>`;
  const u = a.unresolved_operations;
  const ops = u ? `<p>${u.unresolved} of ${u.operations} open operation(s) unresolved after the restore into <code>${html(u.target)}</code> (generation ${u.generation}).${u.unresolved ? ` Run <code>agentbak reconcile --target ${html(u.target)}</code>.` : ""}</p>` : `<p class="none">No restore recorded.</p>`;
  const who = `${html(a.tenant)}/${html(a.agent_id)}`;
  return `<section class="agent" aria-labelledby="agent-${i}"><h2 id="agent-${i}">${who} <span class="badge ${a.state}">${WORD[a.state]}</span></h2>${facts(a)}<h3>Checks</h3>${checks}<div class="charts"><figure>${snapChart}<figcaption>Snapshots over time: ${snaps.length} verified, ${humanSize(total)} (one point per snapshot, its size)</figcaption></figure><figure>${drillChart}<figcaption>Drill recovery time (RTO), ${drills.length} drill(s); red: failed${a.last_drill?.rto_objective_seconds ? `; objective ${a.last_drill.rto_objective_seconds} s` : ""}</figcaption></figure></div><h3>Recent drills</h3><div class="scroll"><table><thead><tr><th scope="col">When</th><th scope="col">Result</th><th scope="col">RTO (s)</th><th scope="col">Failing check</th></tr></thead><tbody>${drillRows.join("") || `<tr><td colspan="4" class="none">No drill recorded.</td></tr>`}</tbody></table></div><h3>Pending restore requests</h3>${requests}<h3>Unresolved operations</h3>${ops}</section>`;
}

/** The whole page. */
export function statusPage(r: StatusReport): string {
  const worst: CheckState = r.exit_status === 15 ? "fail" : r.exit_status === 3 ? "warn" : "ok";
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><meta name="color-scheme" content="light">
<title>agentbak status: ${WORD[worst]} (${r.agents.length} agent${r.agents.length === 1 ? "" : "s"})</title><style>${STYLE}</style></head>
<body><header><h1>agentbak status <span class="badge ${worst}">${WORD[worst]}</span></h1><p>${html(time(r.at))} · ${html(r.repository.location)} · ${humanSize(r.repository.bytes)}</p></header>
<main>${r.agents.map(agentSection).join("\n") || `<p>No agents served.</p>`}</main>
<footer>Read-only. The same facts: <code>agentbak status --json</code>, <code>/metrics</code>.</footer></body></html>
`;
}
