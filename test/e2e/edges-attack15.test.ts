// Issue 32, the fifteenth attack (docs/security-edges.md "Fifteenth attack"): probe answers that are not UTF-8, the
// spool made immutable under a backup and a flush. Each case failed on the build before its fix, through the real
// binary, real probe processes and an HTTP provider on 127.0.0.1, real SQLite files, a real immutable folder
// (chattr +i: the tests run as root, which modes do not stop) and the S3 gateway of AGENTBAK_TEST_S3_ENDPOINT.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import { randomBytes } from "node:crypto";
import { cpSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import Database from "better-sqlite3";
import { closedPort, describeBackedUpAgent, json, makeAgent, makeBucket, SNAPS, type TestAgent } from "../helpers.js";
import { api, makeToken, startServer } from "../agentapi-helpers.js";

const ACCEPT = ["--yes", "--accept-unresolved", "--reason", "attack15"];

describe("[E5] the folder restored into, reached through a bind mount, is that folder", () => {
  const s = describeBackedUpAgent();
  const t = s.t;

  it("[E5] restored into P/x, P bind-mounted at B: activate --target B/x activates (same device and inode); a copy beside it is still 13", async (ctx) => {
    mkdirSync(t("P"));
    mkdirSync(t("B"));
    const r = await s.a.run(["restore", "latest", "--target", t("P/x"), "--yes", "--json"]);
    expect([0, 3], r.stderr).toContain(r.code);
    if ((await execa("mount", ["--bind", t("P"), t("B")], { reject: false })).exitCode !== 0) ctx.skip();
    try {
      cpSync(t("P/x"), t("P/copy"), { recursive: true });
      const copy = await s.a.run(["activate", "--target", t("B/copy"), ...ACCEPT]);
      expect(copy.code, copy.stderr).toBe(13);
      // before the fix: 13, "belongs to the restore into <P/x>, not <B/x> (moved in from there, or the folder moved)" - the very folder
      const act = await s.a.run(["activate", "--target", t("B/x"), ...ACCEPT]);
      expect(act.code, act.stderr).toBe(3);
      expect(act.stderr).toContain(`activated billing-agent at generation ${json(r).generation}`);
    } finally {
      await execa("umount", [t("B")], { reject: false });
    }
  });
});

describe("[E3] a provider's answer that is not UTF-8 is not a receipt", () => {
  const s = describeBackedUpAgent();

  /** Restores into `name`, reconciles with `probe` in the config, @returns the result and the open delivery's row. */
  async function reconcileWith(name: string, probe: unknown) {
    const c = JSON.parse(readFileSync(s.a.config, "utf8"));
    c.reconcile.probe = probe;
    const cfg = join(s.a.dir, `${name}.json`);
    writeFileSync(cfg, JSON.stringify(c, null, 2));
    const t = join(s.a.tmp, name);
    const r0 = await s.a.run(["restore", "latest", "--target", t, "--yes"]);
    expect([0, 3], r0.stderr).toContain(r0.code);
    const r = await s.a.run(["reconcile", "--target", t, "-c", cfg, "--json"]);
    const db = new Database(join(t, "state/agent.sqlite"), { readonly: true });
    const row = db.prepare("SELECT status, provider_receipt FROM deliveries WHERE idempotency_key = 'idem-task-open-1'").get();
    db.close();
    return { r, row };
  }

  it("[E3] a command probe answering completed with 0xff 0xfe in its receipt: unknown, nothing recorded (3)", async () => {
    const script = join(s.a.tmp, "not-utf8.mjs");
    writeFileSync(script, `process.stdout.write(Buffer.concat([Buffer.from('{"state":"completed","receipt":"r'), Buffer.from([0xff, 0xfe]), Buffer.from('x","extra":"e"}')]));`);
    const { r, row } = await reconcileWith("e3-command", { command: [process.execPath, script] });
    // before the fix: exit 0, "completed -> completed, recorded by onCompleted", provider_receipt 'r\ufffd\ufffdx' (signed in the receipt)
    expect(r.code, r.stderr).toBe(3);
    expect(json(r).operations[0]).toMatchObject({ outcome: "unknown", receipt: null, resolved: false });
    expect(json(r).operations[0].detail).toContain("probe command's answer is not UTF-8: not read");
    expect(row).toEqual({ status: "attempted", provider_receipt: null });
  });

  it("[E3] an HTTP provider answering 200 with an overlong '/' (C0 AF) in its receipt: unknown, nothing recorded (3)", async () => {
    const srv = createServer((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(Buffer.concat([Buffer.from('{"receipt":"h'), Buffer.from([0xc0, 0xaf]), Buffer.from('","other":"o"}')]));
    });
    await new Promise<void>((ok) => srv.listen(0, "127.0.0.1", ok));
    try {
      const port = (srv.address() as { port: number }).port;
      const { r, row } = await reconcileWith("e3-http", { http: { url: `http://127.0.0.1:${port}/v1/{idempotency_key}`, headers: {} } });
      expect(r.code, r.stderr).toBe(3);
      expect(json(r).operations[0]).toMatchObject({ outcome: "unknown", receipt: null, resolved: false });
      expect(json(r).operations[0].detail).toContain("provider's answer is not UTF-8: not read");
      expect(row).toEqual({ status: "attempted", provider_receipt: null });
    } finally {
      srv.close();
    }
  });
});

const endpoint = process.env.AGENTBAK_TEST_S3_ENDPOINT;

/** Whether chattr +i works here (root on a filesystem with the attribute). */
async function immutableWorks(dir: string): Promise<boolean> {
  const r = await execa("chattr", ["+i", dir], { reject: false });
  if (r.exitCode === 0) await execa("chattr", ["-i", dir]);
  return r.exitCode === 0;
}

describe.skipIf(!endpoint)("[E10] a spool folder that can not be written", () => {
  let a: TestAgent;
  let closed: string;
  let first: string;
  const up = () => ({ AGENTBAK_S3_ENDPOINT: endpoint! });
  const snaps = () => join(a.home, "spool", readdirSync(join(a.home, "spool"))[0]!, SNAPS);
  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
    const bucket = `edges15-${randomBytes(4).toString("hex")}`;
    await makeBucket(bucket);
    writeFileSync(a.config, JSON.stringify({ ...JSON.parse(readFileSync(a.config, "utf8")), repository: `s3://${bucket}/repo` }, null, 2));
    expect((await a.run(["init"], up())).code).toBe(0);
    closed = await closedPort();
    const r = await a.run(["backup", "--json"], { AGENTBAK_S3_ENDPOINT: closed });
    expect(r.code, r.stderr).toBe(3);
    first = json(r).snapshot_id;
  }, 180_000);
  afterAll(async () => {
    await execa("chattr", ["-i", snaps()], { reject: false });
    a?.cleanup();
  });

  it("[E10] the spool's folder immutable, the repository down: the backup says it was spooling, that nothing was kept, and what was spooled stays", async (ctx) => {
    if (!(await immutableWorks(snaps()))) ctx.skip();
    await execa("chattr", ["+i", snaps()]);
    try {
      const r = await a.run(["backup"], { AGENTBAK_S3_ENDPOINT: closed });
      // before the fix: exit 1, "agentbak: EPERM: operation not permitted, open '<spool>/…/.tmp-….pageindex-…'"
      expect(r.code, r.stderr).toBe(1);
      expect(r.stderr.trim().split("\n")).toHaveLength(1);
      expect(r.stderr).toContain(`is unreachable (`);
      expect(r.stderr).toContain(`and spooling the backup into ${join(a.home, "spool")}`);
      expect(r.stderr).toContain("nothing was committed or spooled (what was spooled before stays there): EPERM");
      expect(readdirSync(snaps()).filter((f) => f.endsWith(".agentbak"))).toEqual([`${first}.agentbak`]);
    } finally {
      await execa("chattr", ["-i", snaps()]);
    }
  });

  it("[E10] a flush whose spooled copy can not be removed: uploaded once, said so (3), the next flush finds it already there", async (ctx) => {
    if (!(await immutableWorks(snaps()))) ctx.skip();
    await execa("chattr", ["+i", snaps()]);
    try {
      const f = await a.run(["flush"], up());
      // before the fix: exit 1, "agentbak: ENOTDIR: not a directory, scandir '<spool>/…/<id>.agentbak'" - the bundle uploaded all the same
      expect(f.code, f.stderr).toBe(3);
      expect(f.stderr).not.toContain("ENOTDIR");
      expect(f.stderr).toContain("1 spooled snapshot(s) uploaded");
      expect(f.stderr).toContain(`spooled snapshot ${first} is committed in s3://`);
      expect(f.stderr).toContain("but its spooled copy could not be removed (EPERM: operation not permitted, unlink");
      const again = await a.run(["flush", "--json"], up());
      expect(again.code, again.stderr).toBe(3);
      expect(json(again)[0]).toMatchObject({ flushed: [], already: [first] });
    } finally {
      await execa("chattr", ["-i", snaps()]);
    }
    const last = await a.run(["flush", "--json"], up());
    expect(last.code, last.stderr).toBe(0);
    expect(json(last)[0]).toMatchObject({ flushed: [], already: [first], warnings: [] });
    const list = json(await a.run(["snapshots", "--json"], up()));
    expect(list.map((s: { snapshot_id: string }) => s.snapshot_id)).toEqual([first]);
  });
});

describe("[E10] a checkpoint's warnings reach the server's log, as a scheduled backup's do", () => {
  let a: TestAgent;
  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E10] POST /v1/backups whose receipt warns (a possible secret in a file the agent named with ESC and U+202E): the log names it, escaped", async () => {
    // the cheapest warning a checkpoint gives: secretScan.files warn; the agent chose the file's name
    mkdirSync(join(a.dir, "notes"));
    writeFileSync(join(a.dir, "notes", "ev\x1b[31mil\u202e.txt"), `key = ${"AKIA" + "ABCDEFGHIJKLMNOP"}\n`);
    const cfg = JSON.parse(readFileSync(a.config, "utf8"));
    writeFileSync(a.config, JSON.stringify({ ...cfg, files: [...cfg.files, "notes/*"], secretScan: { ...cfg.secretScan, files: "warn" } }, null, 2));
    const tok = await makeToken(a, "acme", "billing-agent", "checkpoint");
    const srv = await startServer(a, ["-c", a.config]);
    try {
      const r = await api(srv.url, tok.token, "POST", "/v1/backups", { body: { label: "warned" } });
      expect(r.status, JSON.stringify(r.body)).toBe(201);
      expect(r.body.warnings).toEqual([expect.stringMatching(/^possible secret \(.*\) in .*notes\/ev\x1b\[31mil\u202e\.txt/)]);
      // before: only the request line (POST "/v1/backups" 201); the operator heard of the warning after the server stopped, if ever
      const head = `backup acme/billing-agent (checkpoint by ${tok.id}): committed ${r.body.snapshot_id} (full, `;
      // the server's stderr may reach this process after its answer: wait for the line a little
      for (let i = 0; i < 100 && !srv.log().includes(head); i++) await new Promise((res) => setTimeout(res, 50));
      const line = srv.log().split("\n").find((l) => l.includes(head));
      expect(line ?? srv.log()).toMatch(/; possible secret \(.*\) in .*notes\/ev\\x1b\[31mil\\u202e\.txt/);
      expect(srv.log()).not.toMatch(/[\x1b\u202e]/);
    } finally {
      await srv.stop();
    }
  });
});
