// What scripts and people read: the snapshots listing on stdout (80 columns by
// default, every column with --wide: human sizes, age, kind, parent, label;
// --label, --latest, --tenant, --agent), one JSON
// error object on stdout when --json fails, snake_case keys and a warnings list
// in every command's JSON, and a refused restore --dry-run showing its plan.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { join } from "node:path";
import { json, makeAgent, ROOT, type RunResult, type TestAgent } from "../helpers.js";

let a: TestAgent;
let full: any;
let incr: any;
beforeAll(async () => {
  a = await makeAgent({ sizeMb: 1 });
  full = json(await a.run(["backup", "--json"]));
  incr = json(await a.run(["backup", "--incremental", "--label", "nightly", "--json"]));
}, 180_000);
afterAll(() => a?.cleanup(), 60_000);

describe("snapshots", () => {
  it("--wide writes every column to stdout: tenant, sequence, sizes, age, kind, parent and label", async () => {
    const r = await a.run(["snapshots", "--wide"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe("");
    const [head, ...rows] = r.stdout.trimEnd().split("\n");
    expect(head!.split(/\s+/)).toEqual(["SNAPSHOT", "TENANT", "AGENT", "SEQ", "KIND", "PARENT", "CREATED", "AGE", "SIZE", "LABEL", "STATUS"]);
    expect(rows).toHaveLength(2);
    expect(rows[0]).toMatch(new RegExp(`^${full.snapshot_id} +acme +billing-agent +1 +full +- +\\S+Z +\\d+[smh] +[\\d.]+ (KiB|MiB) +ok$`));
    expect(rows[1]).toMatch(new RegExp(`^${incr.snapshot_id} +acme +billing-agent +2 +incremental +${full.snapshot_id} +\\S+Z +\\d+[smh] +[\\d.]+ (B|KiB|MiB) +nightly +ok$`));
  });

  it("fits 80 columns by default: id, agent, kind, age, size, label, status; a long agent id and label are cut with …, whole in --wide", async () => {
    const r = await a.run(["snapshots"]);
    expect(r.code, r.stderr).toBe(0);
    const [head, ...rows] = r.stdout.trimEnd().split("\n");
    expect(head!.split(/\s+/)).toEqual(["SNAPSHOT", "AGENT", "KIND", "AGE", "SIZE", "LABEL", "STATUS"]);
    expect(rows[0]).toMatch(new RegExp(`^${full.snapshot_id} +billing-agent +full +\\d+[smh] +[\\d.]+ (KiB|MiB) +ok$`));
    expect(rows[1]).toMatch(new RegExp(`^${incr.snapshot_id} +billing-agent +incr +\\d+[smh] +[\\d.]+ (B|KiB|MiB) +nightly +ok$`));

    const long = await makeAgent({ sizeMb: 1, agentId: "customer-support-agent-for-the-emea-region" });
    try {
      const label = "before the schema migration of the customer tables, kept for a year";
      expect((await long.run(["backup", "--label", label])).code).toBe(0);
      expect((await long.run(["backup"])).code).toBe(0);
      const narrow = await long.run(["snapshots"]);
      expect(narrow.code, narrow.stderr).toBe(0);
      const lines = narrow.stdout.trimEnd().split("\n");
      expect(lines).toHaveLength(3);
      for (const l of lines) expect([...l].length, l).toBeLessThanOrEqual(80);
      // the label gives up its width first (down to its header), then the agent id
      expect(lines[1]).toMatch(/^\S+ +customer-\S+… +full +\S+ +[\d.]+ (KiB|MiB) +befo… +ok$/);
      expect(lines[2]).toMatch(/ full +\S+ +[\d.]+ (KiB|MiB) +ok$/);
      const wide = await long.run(["snapshots", "--wide"]);
      expect(wide.stdout).toContain(label);
      expect(Math.max(...wide.stdout.trimEnd().split("\n").map((l) => l.length))).toBeGreaterThan(80);
    } finally {
      long.cleanup();
    }
  });

  it("filters by --label and --latest N, keeps --tenant and --agent, and --json carries kind and parent", async () => {
    const labelled = json(await a.run(["snapshots", "--label", "nightly", "--json"]));
    expect(labelled.map((e: any) => e.snapshot_id)).toEqual([incr.snapshot_id]);
    expect(labelled[0]).toMatchObject({ kind: "incremental", parent: full.snapshot_id, label: "nightly" });
    expect(json(await a.run(["snapshots", "--latest", "1", "--json"])).map((e: any) => e.snapshot_id)).toEqual([incr.snapshot_id]);
    expect(json(await a.run(["snapshots", "--latest", "5", "--json"]))).toHaveLength(2);
    expect(json(await a.run(["snapshots", "--tenant", "other", "--json"]))).toEqual([]);
    expect(json(await a.run(["snapshots", "--agent", "someone-else", "--json"]))).toEqual([]);
    const bad = await a.run(["snapshots", "--latest", "0"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--latest: not a positive whole number: 0/);
  });
});

describe("--json on failure", () => {
  const errorObject = (r: RunResult, exit: number, code: string, message: RegExp) => {
    expect(r.code).toBe(exit);
    const lines = r.stdout.trim().split("\n");
    expect(lines).toHaveLength(1);
    const e = JSON.parse(lines[0]!);
    expect(Object.keys(e).sort()).toEqual(["code", "exit_status", "message", "message_type"]);
    expect(e).toMatchObject({ message_type: "exit_error", code, exit_status: exit });
    expect(e.message).toMatch(message);
    expect(r.stderr).toMatch(message); // people still read stderr
  };

  it("prints one error object on stdout: not found, usage, no TTY, a flag commander rejects", async () => {
    errorObject(await a.run(["verify", "20200101T000000000Z-deadbeef", "--json"]), 10, "not_found", /snapshot 20200101T000000000Z-deadbeef not found/);
    errorObject(await a.run(["snapshots", "--latest", "x", "--json"]), 2, "usage_error", /--latest: not a positive whole number/);
    errorObject(await a.run(["restore", "latest", "--target", join(a.tmp, "t"), "--json"]), 2, "usage_error", /no TTY: pass --yes/);
    errorObject(await a.run(["backup", "--no-such-flag", "--json"]), 2, "usage_error", /unknown option '--no-such-flag'/);
  });

  it("without --json stdout stays empty", async () => {
    const r = await a.run(["verify", "20200101T000000000Z-deadbeef"]);
    expect(r.code).toBe(10);
    expect(r.stdout).toBe("");
  });
});

describe("restore --dry-run refused by policy", () => {
  it("prints the plan (stdout) and the refusal, and exits 14", async () => {
    const bundle = await a.file(full.path);
    const r = await a.run(["restore", bundle, "--target", join(a.tmp, "t-refused"), "--tenant", "other", "--dry-run"]);
    expect(r.code).toBe(14);
    expect(r.stdout).toMatch(/Restore plan for billing-agent \(tenant acme\)/);
    expect(r.stdout).toMatch(/write +state\/agent\.sqlite/);
    expect(r.stderr).toMatch(/refused by policy: snapshot belongs to tenant "acme", target is tenant "other"/);
    const j = await a.run(["restore", bundle, "--target", join(a.tmp, "t-refused"), "--tenant", "other", "--dry-run", "--json"]);
    expect(j.code).toBe(14);
    const d = json(j);
    expect(d.restored).toBe(false);
    expect(d.plan.snapshot_id).toBe(full.snapshot_id);
    expect(d.plan.policy.refusals).toEqual(['snapshot belongs to tenant "acme", target is tenant "other"']);
  });
});

describe("JSON keys", () => {
  /** Maps whose keys are names the user chose (tables, cursors, models, databases, unit files), not our keys. */
  const FREE = new Set(["records", "cursors", "models", "integrity", "restored", "receipts", "systemd", "cursor_queries"]);
  function badKeys(v: unknown, path = ""): string[] {
    if (Array.isArray(v)) return v.flatMap((x, i) => badKeys(x, `${path}[${i}]`));
    if (!v || typeof v !== "object") return [];
    return Object.entries(v).flatMap(([k, x]) => [...(/^[a-z][a-z0-9_]*$/.test(k) ? [] : [`${path}.${k}`]), ...(FREE.has(k) ? [] : badKeys(x, `${path}.${k}`))]);
  }

  it("are snake_case in every command's result, and every object result has a warnings list", async () => {
    const t = join(a.tmp, "restored-keys");
    const spec = join(ROOT, "drills", "checks-only.json");
    const id = { AGENTBAK_IDENTITY_FILE: a.identity, OPENAI_API_KEY: "x" };
    const results: [string, RunResult][] = [];
    const go = async (args: string[]) => results.push([args.slice(0, 2).join(" "), await a.run([...args, "--json"], id)]);
    await go(["keygen", "--out", join(a.tmp, "keys-2")]);
    await go(["init"]);
    await go(["backup"]);
    await go(["snapshots"]);
    await go(["verify", "latest", "--identity", a.identity]);
    await go(["restore", "latest", "--target", join(a.tmp, "dry"), "--dry-run"]);
    await go(["restore", "latest", "--target", t, "--yes"]);
    await go(["fence", "check", "--target", t, "--generation", "1"]);
    await go(["activate", "--target", t, "--yes", "--accept-unresolved", "--reason", "test: the open operation is known to be harmless"]);
    await go(["drill", "latest", "--spec", spec]);
    await go(["report", "verify"]);
    await go(["forget", "--keep-last", "5", "--dry-run"]);
    await go(["compact", "latest", "--identity", a.identity]);
    await go(["copy", "--from", a.repo, "--to", join(a.tmp, "copy")]);
    await go(["schedule", "--every", "1h"]);
    await go(["key", "check"]);
    for (const [cmd, r] of results) {
      expect([0, 3], `${cmd}: ${r.stderr}`).toContain(r.code);
      const v = json(r);
      expect(badKeys(v), cmd).toEqual([]);
      if (!Array.isArray(v)) expect(Array.isArray(v.warnings), `${cmd} has a warnings list`).toBe(true);
    }
  });
});
