// The status page, /healthz and /metrics of `agentbak serve`, through the real server on a real socket, a real agent
// with real backups, drills and a restore request, and the page in a real headless browser (Debian's chromium driven
// by playwright-core). Also: SIGTERM finishes a request in flight and exits 0; Ctrl-C stays 130.
import { mkdirSync, mkdtempSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, makeToken, startServer, type Server } from "../agentapi-helpers.js";
import { json, makeAgent, ROOT, type TestAgent } from "../helpers.js";

let a: TestAgent;
let srv: Server;
let browser: Browser;
const tok: Record<string, string> = {};
let requestId: string;
const snapshots: { snapshot_id: string; size: number; created_at: string }[] = [];
/** where the test leaves its screenshots for review (copied by hand into docs/img) */
const SHOTS = process.env.AGENTBAK_SCREENSHOTS ?? mkdtempSync(join(tmpdir(), "agentbak-status-shots-"));
const HOSTILE = "<script>alert(1)</script> & <b>not bold</b>";

beforeAll(async () => {
  a = await makeAgent();
  const cfg = JSON.parse(readFileSync(a.config, "utf8"));
  writeFileSync(a.config, JSON.stringify({ ...cfg, objectives: { rpoMinutes: 60, rtoSeconds: 600, drillEvery: "7d" } }, null, 2));
  mkdirSync(join(a.dir, "secrets"), { recursive: true });
  writeFileSync(join(a.dir, "secrets", "smtp-password"), "x\n", { mode: 0o600 });
  for (let i = 0; i < 3; i++) {
    const b = await a.run(["backup", "--json"]);
    expect(b.code, b.stderr).toBe(0);
    snapshots.push(json(b));
  }
  const env = { OPENAI_API_KEY: "x" };
  expect((await a.run(["drill", "latest", "--spec", join(ROOT, "drills", "checks-only.json"), "--identity", a.identity], env)).code).toBe(0);
  const inv = join(a.tmp, "failing-inv");
  mkdirSync(inv);
  writeFileSync(join(inv, "always_fails.sql"), "-- severity: error\n-- database: state\nSELECT 1 AS found;\n");
  writeFileSync(join(a.tmp, "failing.json"), JSON.stringify({ name: "failing", invariants: [join(inv, "*.sql")] }));
  expect((await a.run(["drill", "latest", "--spec", join(a.tmp, "failing.json"), "--identity", a.identity], env)).code).toBe(15);
  for (const tier of ["read", "restore-request"]) tok[tier] = (await makeToken(a, "acme", "billing-agent", tier)).token;
  srv = await startServer(a);
  const req = await api(srv.url, tok["restore-request"]!, "POST", "/v1/restores", { body: { reason: HOSTILE, snapshot: snapshots[0]!.snapshot_id } });
  expect(req.status).toBe(202);
  requestId = req.body.request_id;
  browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}, 180_000);
afterAll(async () => {
  await browser?.close();
  await srv?.stop();
  a?.cleanup();
});

describe("/healthz", () => {
  it("answers 200 without a token while the repository is there, 503 once it is gone, 200 when it is back", async () => {
    expect(await api(srv.url, null, "GET", "/healthz")).toMatchObject({ status: 200, body: { status: "ok" } });
    renameSync(a.repo, `${a.repo}.away`);
    try {
      const r = await api(srv.url, null, "GET", "/healthz");
      expect(r).toMatchObject({ status: 503, body: { status: "unavailable" } });
      // an unauthenticated caller learns nothing about where the repository is
      expect(JSON.stringify(r.body)).not.toContain(a.repo);
    } finally {
      renameSync(`${a.repo}.away`, a.repo);
    }
    expect((await api(srv.url, null, "GET", "/healthz")).status).toBe(200);
  });
});

describe("/metrics", () => {
  it("refuses a request without a token (401)", async () => {
    expect((await api(srv.url, null, "GET", "/metrics")).status).toBe(401);
  });

  it("answers OpenMetrics text for the token's agent with what the repository holds", async () => {
    const r = await fetch(`${srv.url}/metrics`, { headers: { authorization: `Bearer ${tok.read}` } });
    expect(r.status).toBe(200);
    expect(r.headers.get("content-type")).toBe("application/openmetrics-text; version=1.0.0; charset=utf-8");
    const text = await r.text();
    expect(text.endsWith("\n# EOF\n")).toBe(true);
    for (const line of text.trimEnd().split("\n")) expect(line).toMatch(/^(# (TYPE|HELP) agentbak_[a-z_]+ .+|agentbak_[a-z_]+\{tenant="acme",agent="billing-agent"\} -?[\d.e+]+|# EOF)$/);
    const v = (name: string) => {
      const m = text.match(new RegExp(`^${name}\\{tenant="acme",agent="billing-agent"\\} (\\S+)$`, "m"));
      return m ? Number(m[1]) : undefined;
    };
    expect(v("agentbak_last_snapshot_timestamp_seconds")).toBe(Date.parse(snapshots[2]!.created_at) / 1000);
    expect(v("agentbak_last_drill_success")).toBe(0);
    expect(v("agentbak_last_drill_rto_seconds")).toBeGreaterThan(0);
    expect(v("agentbak_unresolved_operations")).toBe(0);
    expect(v("agentbak_spool_bundles")).toBe(0);
    expect(v("agentbak_pending_restore_requests")).toBe(1);
    expect(v("agentbak_repository_bytes")).toBe(snapshots.reduce((n, s) => n + s.size, 0));
    expect(v("agentbak_status")).toBe(15);
  });
});

describe("the status page", () => {
  it("refuses a request without a token (401), and lists /, /healthz and /metrics in openapi.json", async () => {
    expect((await api(srv.url, null, "GET", "/")).status).toBe(401);
    const doc = (await api(srv.url, null, "GET", "/v1/openapi.json")).body;
    expect(doc.paths["/healthz"].get.responses["503"]).toBeDefined();
    expect(Object.keys(doc.paths["/metrics"].get.responses["200"].content)).toEqual(["application/openmetrics-text; version=1.0.0; charset=utf-8"]);
    expect(Object.keys(doc.paths["/"].get.responses["200"].content)).toEqual(["text/html"]);
  });

  it("renders in a real browser: charts with one point per snapshot and per drill, the failing drill named, the request escaped", async () => {
    const ctx = await browser.newContext({ extraHTTPHeaders: { authorization: `Bearer ${tok.read}` }, javaScriptEnabled: false, viewport: { width: 1280, height: 900 } });
    const page = await ctx.newPage();
    const res = await page.goto(`${srv.url}/`);
    expect(res!.status()).toBe(200);
    expect(res!.headers()["content-security-policy"]).toContain("default-src 'none'");
    expect(await page.title()).toBe("agentbak status: failing (1 agent)");
    expect(await page.getAttribute("html", "lang")).toBe("en");
    expect(await page.locator("#snapshots-0 circle.point").count()).toBe(3);
    expect(await page.locator("#drills-0 circle.point").count()).toBe(2);
    expect(await page.locator("#drills-0 circle.point.fail").count()).toBe(1);
    // an RTO objective of 600 s over drills of a second would flatten the points: named in the caption, not drawn
    expect(await page.locator("#drills-0 line.objective").count()).toBe(0);
    expect(await page.locator("figcaption", { hasText: "Drill recovery time" }).innerText()).toContain("objective 600 s");
    await expect(page.locator("h2#agent-0").innerText()).resolves.toMatch(/acme\/billing-agent\s+failing/);
    const failing = page.locator("ul.checks li.fail");
    expect(await failing.count()).toBe(1);
    expect(await failing.innerText()).toMatch(/^Failing: drill — last drill failed: .*invariant:always_fails/);
    // the agent's reason is text on the page, never markup
    const reason = page.locator("td", { hasText: "<script>alert(1)</script>" });
    expect(await reason.innerText()).toBe(HOSTILE);
    expect(await page.locator("script, form, td b").count()).toBe(0);
    // every heading level in order, every chart named for a screen reader
    expect(await page.locator("h1").count()).toBe(1);
    expect(await page.locator("svg[role=img] > title").count()).toBe(2);
    await page.screenshot({ path: join(SHOTS, "status-page-1280.png"), fullPage: true });
    await page.setViewportSize({ width: 390, height: 844 });
    // nothing wider than the phone's screen
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    // the hint on deciding requests is on the screen, not scrolled away with the table (it was the table's caption)
    const hint = (await page.getByText("this page never decides").boundingBox())!;
    expect(hint.x + hint.width).toBeLessThanOrEqual(390);
    // chart labels stay readable on a phone (the 600-unit charts shrink to half: 13 units were 6.5 px), inside their box
    const labels = await page.locator("svg text").evaluateAll((ts) =>
      ts.map((t) => {
        const [r, box] = [t.getBoundingClientRect(), t.closest("figure")!.getBoundingClientRect()];
        return { text: t.textContent, px: parseFloat(getComputedStyle(t).fontSize) * (t.closest("svg")!.getBoundingClientRect().width / 600), inside: r.left >= box.left && r.right <= box.right };
      }),
    );
    expect(labels.length).toBeGreaterThan(8);
    expect(labels.filter((l) => l.px < 10 || !l.inside)).toEqual([]);
    await page.screenshot({ path: join(SHOTS, "status-page-390.png"), fullPage: true });
    await ctx.close();
    console.log(`status page screenshots in ${SHOTS}`);
  });

  it("--ui opens the page without a token on a loopback address, and is refused (2) on any other", async () => {
    const ui = await startServer(a, ["--ui"]);
    try {
      const r = await api(ui.url, null, "GET", "/");
      expect(r.status).toBe(200);
      expect(r.body).toContain("acme/billing-agent");
      // the start line says where the page is and how it opens (a new user saw only the API's addresses)
      expect(ui.log()).toContain("status page: GET / — open that address in a browser on this host (no token: --ui)");
      expect(srv.log()).toContain("status page: GET / with a read-tier token (agentbak token create --tier read), or serve --ui on this host");
      // one address in the start lines: scripts take it with grep -o (docs/agent-interface.md)
      for (const s of [ui, srv]) expect(s.log().split(/GET "\//)[0]!.match(/http:\/\/127\.0\.0\.1:\d+/g)).toEqual([s.url]);
      // the API and /metrics still want a token
      expect((await api(ui.url, null, "GET", "/metrics")).status).toBe(401);
      expect((await api(ui.url, null, "GET", "/v1/snapshots")).status).toBe(401);
    } finally {
      await ui.stop();
    }
    const bad = await a.run(["serve", "--ui", "--listen", "0.0.0.0:0"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--ui shows the status page without a token, so only on a loopback address .*0\.0\.0\.0 is not one/);
  });
});

describe("the status page judges", () => {
  it("no GET decides a restore request: every GET route of openapi.json, with the request's id, leaves it pending", async () => {
    const doc = (await api(srv.url, null, "GET", "/v1/openapi.json")).body;
    const gets = Object.keys(doc.paths).filter((p) => doc.paths[p].get && !p.startsWith("/mcp")).map((p) => p.replace(/\{id\}/g, requestId));
    expect(gets).toEqual(expect.arrayContaining(["/", "/metrics", "/healthz", `/v1/restores/${requestId}`]));
    for (const p of [...gets, `/v1/restores/${requestId}/approve`, `/?approve=${requestId}`]) expect((await api(srv.url, tok["restore-request"]!, "GET", p)).status).not.toBe(500);
    const r = await api(srv.url, tok["restore-request"]!, "GET", `/v1/restores/${requestId}`);
    expect(r.body).toMatchObject({ status: "pending", decision: null });
    expect((await a.run(["requests", "--json"])).stdout).toContain(requestId);
  });

  it("colours a snapshot older than the RPO, lists a restore's unresolved operations, and every text has 4.5:1 contrast", async () => {
    // a restore of the reference agent leaves its open operation unresolved until reconcile or activate settles it
    const target = join(a.tmp, "restored-for-page");
    const r = await a.run(["restore", "latest", "--target", target, "--yes", "--identity", a.identity], { OPENAI_API_KEY: "x" });
    expect([0, 3], r.stderr).toContain(r.code);
    // the same agent judged against an RPO of 60 ms: its newest snapshot is stale
    const stale = join(a.dir, "stale-rpo.json");
    const cfg = JSON.parse(readFileSync(a.config, "utf8"));
    writeFileSync(stale, JSON.stringify({ ...cfg, objectives: { ...cfg.objectives, rpoMinutes: 0.001 } }));
    const ui = await startServer(a, ["--ui", "-c", stale]);
    const ctx = await browser.newContext({ javaScriptEnabled: false, viewport: { width: 1280, height: 900 } });
    try {
      const page = await ctx.newPage();
      expect((await page.goto(`${ui.url}/`))!.status()).toBe(200);
      const snap = page.locator("dl.facts > div", { hasText: "Newest snapshot" });
      expect(await snap.getAttribute("class")).toBe("warn");
      expect(await snap.locator("dd").evaluate((e) => getComputedStyle(e).color)).toBe("rgb(122, 67, 0)");
      const fresh = page.locator("dl.facts > div", { hasText: "Chain" });
      expect(await fresh.locator("dd").evaluate((e) => getComputedStyle(e).color)).toBe("rgb(20, 24, 31)");
      expect(await page.locator("ul.checks li.warn", { hasText: "snapshot" }).innerText()).toMatch(/^Warning: snapshot — /);
      const ops = page.locator("h3:text('Unresolved operations') + p");
      expect(await ops.innerText()).toContain(`unresolved after the restore into ${target}`);
      expect(await ops.innerText()).toContain(`agentbak reconcile --target ${target}`);
      const low = await page.evaluate(() => {
        const lum = (c: string) => {
          const [r, g, b] = (c.match(/[\d.]+/g) ?? []).slice(0, 3).map((v) => Number(v) / 255).map((v) => (v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4));
          return 0.2126 * r! + 0.7152 * g! + 0.0722 * b!;
        };
        const opaque = (c: string) => c !== "transparent" && !/rgba\(.*,\s*0\)$/.test(c);
        const background = (e: Element | null): string => {
          for (; e; e = e.parentElement) if (opaque(getComputedStyle(e).backgroundColor)) return getComputedStyle(e).backgroundColor;
          return "rgb(255, 255, 255)";
        };
        const out: string[] = [];
        let seen = 0;
        for (const e of document.querySelectorAll("body *")) {
          if (![...e.childNodes].some((n) => n.nodeType === 3 && n.textContent!.trim())) continue;
          seen++;
          const s = getComputedStyle(e);
          const fg = e instanceof SVGElement ? s.fill : s.color;
          const [l1, l2] = [lum(fg), lum(background(e))].sort((x, y) => y - x);
          const ratio = (l1! + 0.05) / (l2! + 0.05);
          if (ratio < 4.5) out.push(`${e.tagName} "${e.textContent!.trim().slice(0, 30)}" ${fg} on ${background(e)}: ${ratio.toFixed(2)}`);
        }
        return { seen, out };
      });
      expect(low.seen).toBeGreaterThan(40);
      expect(low.out).toEqual([]);
    } finally {
      await ctx.close();
      await ui.stop();
    }
  });
});

describe("stopping serve", () => {
  it("SIGTERM lets a backup in flight finish (201, committed) and exits 0; SIGINT exits 130", async () => {
    const cfg = JSON.parse(readFileSync(a.config, "utf8"));
    const slow = join(a.dir, "slow.json");
    writeFileSync(slow, JSON.stringify({ ...cfg, hooks: { pre: ["sleep 1.5"], post: [], timeoutSeconds: 30 } }));
    const cp = (await makeToken(a, "acme", "billing-agent", "checkpoint")).token;
    const s = await startServer(a, ["-c", slow]);
    const inflight = api(s.url, cp, "POST", "/v1/backups", { body: {} });
    await new Promise((r) => setTimeout(r, 500));
    s.proc.kill("SIGTERM");
    const answer = await inflight;
    expect(answer.status).toBe(201);
    expect(answer.body.status).toBe("committed");
    const end = await s.proc;
    expect(end.exitCode).toBe(0);
    expect(s.log()).toContain("SIGTERM: no new requests; finishing those in flight");
    const listed = json(await a.run(["snapshots", "--json"]));
    expect(listed.map((e: any) => e.snapshot_id)).toContain(answer.body.snapshot_id);

    const t = await startServer(a);
    t.proc.kill("SIGINT");
    expect((await t.proc).exitCode).toBe(130);
  });
});

