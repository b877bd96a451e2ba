// `agentbak backup`, `verify`, `snapshots`, `init`, `keygen` through the real binary.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import { createHash } from "node:crypto";
import Database from "better-sqlite3";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { json, makeAgent, ROOT, run, SNAPS, STORE, type TestAgent } from "../helpers.js";
// @ts-expect-error plain JS fixture
import { transfers } from "../../fixtures/agent/writer.js";

let a: TestAgent;
beforeAll(async () => {
  a = await makeAgent({ sizeMb: 3 });
});
afterAll(() => a.cleanup());

const bundles = async (t: TestAgent) => ((await (await t.store()).list(`${SNAPS}/`)) as string[]).filter((k) => k.endsWith(".agentbak"));

// keys, init's own local repository and config validation: the same work in both test projects (init's repository
// is a local folder in the "s3" one too), so it runs in the local one only
describe.skipIf(STORE === "s3")("keygen and init", () => {
  it("keygen writes age and OpenSSH key files with private ones at 0600", () => {
    const mode = (f: string) => statSync(join(a.home, f)).mode & 0o777;
    expect(mode("age-identity.txt")).toBe(0o600);
    expect(mode("signing-key")).toBe(0o600);
    expect(readFileSync(join(a.home, "age-recipient.txt"), "utf8")).toMatch(/^age1[0-9a-z]{58}\n$/);
    expect(readFileSync(join(a.home, "signing-key.pub"), "utf8")).toMatch(/^ssh-ed25519 AAAA\S+ agentbak\n$/);
    expect(readFileSync(join(a.home, "allowed_signers"), "utf8")).toMatch(/^agentbak namespaces="agentbak-manifest,agentbak-report,agentbak-receipt" ssh-ed25519 AAAA/);
  });

  it("keygen refuses to overwrite existing keys", async () => {
    const before = readFileSync(join(a.home, "signing-key"));
    const r = await a.run(["keygen", "--out", a.home]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/refusing to overwrite/);
    expect(readFileSync(join(a.home, "signing-key")).equals(before)).toBe(true);
  });

  it("init without a TTY and without --agent-id is a usage error naming the flag", async () => {
    const d = join(a.tmp, "init1");
    mkdirSync(d);
    const r = await run(["init", "--dir", d], { env: { AGENTBAK_HOME: join(a.tmp, "h2") } });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--agent-id/);
    expect(existsSync(join(d, "agentbak.json"))).toBe(false);
  });

  it("init writes a valid config, a repository, keys and a JSON Schema", async () => {
    const d = join(a.tmp, "init2");
    mkdirSync(d);
    const home = join(a.tmp, "h3");
    const r = await run(["init", "--dir", d, "--agent-id", "x1", "--tenant", "acme", "--yes", "--json"], { env: { AGENTBAK_HOME: home } });
    expect(r.code).toBe(0);
    const out = json(r);
    expect(out.keys_created).toBe(true);
    const cfg = JSON.parse(readFileSync(join(d, "agentbak.json"), "utf8"));
    expect(cfg.agent).toEqual({ id: "x1", tenant: "acme" });
    expect(cfg.recipients[0]).toBe(readFileSync(join(home, "age-recipient.txt"), "utf8").trim());
    expect(existsSync(join(d, "backups", "agentbak-repository.json"))).toBe(true);
    const schema = JSON.parse(readFileSync(join(d, "agentbak.schema.json"), "utf8"));
    expect(schema.properties.agent).toBeDefined();
    expect(schema.additionalProperties).toBe(false);
    const again = await run(["init", "--dir", d, "--agent-id", "x1", "--yes"], { env: { AGENTBAK_HOME: home } });
    expect(again.code).toBe(2);
  });

  it("a config with an unknown key is a usage error naming its path", async () => {
    const cfg = JSON.parse(readFileSync(a.config, "utf8"));
    cfg.workspace.colour = "blue";
    const p = join(a.tmp, "bad.json");
    writeFileSync(p, JSON.stringify(cfg));
    const r = await a.run(["backup", "-c", p]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/workspace: unknown key\(s\) "colour"/);
  });
});

describe("backup, snapshots, verify", () => {
  let receipt: any;
  it("backs up and prints a receipt", async () => {
    const r = await a.run(["backup", "--json", "--label", "first"]);
    expect(r.code, r.stderr).toBe(0);
    receipt = json(r);
    expect(receipt.snapshot_id).toMatch(/^\d{8}T\d{9}Z-[0-9a-f]{8}$/);
    expect(receipt.sequence).toBe(1);
    expect(receipt.manifest_sha256).toMatch(/^[0-9a-f]{64}$/);
    receipt.file = await a.file(receipt.path);
    expect(statSync(receipt.file).size).toBe(receipt.size);
    expect(r.stderr).toBe(""); // quiet without a TTY
  });

  it("interop: tar, ssh-keygen, age, zstd, sqlite3 and git open the bundle", async () => {
    const x = join(a.tmp, "x");
    mkdirSync(x);
    const tf = await execa("tar", ["tf", receipt.file]);
    expect(tf.stdout.split("\n")).toEqual(["manifest.json", "manifest.sig", "payload.age"]);
    await execa("tar", ["xf", receipt.file], { cwd: x });
    const v = await execa("ssh-keygen", ["-Y", "verify", "-f", join(a.home, "allowed_signers"), "-I", "agentbak", "-n", "agentbak-manifest", "-s", "manifest.sig"], { cwd: x, inputFile: join(x, "manifest.json") });
    expect(v.stdout).toMatch(/Good "agentbak-manifest" signature/);
    await execa("sh", ["-c", `age -d -i '${a.identity}' payload.age | zstd -d | tar x`], { cwd: x });
    const ic = await execa("sqlite3", [join(x, "db/state.sqlite"), "PRAGMA integrity_check"]);
    expect(ic.stdout).toBe("ok");
    const live = new Database(join(a.dir, "state/agent.sqlite"), { readonly: true });
    const snap = new Database(join(x, "db/state.sqlite"), { readonly: true });
    expect(snap.prepare("SELECT count(*) FROM messages").pluck().get()).toBe(live.prepare("SELECT count(*) FROM messages").pluck().get());
    expect(snap.pragma("journal_mode", { simple: true })).toBe("delete");
    live.close();
    snap.close();
    expect(existsSync(join(x, "db/state.sqlite-wal"))).toBe(false);
    const m = JSON.parse(readFileSync(join(x, "manifest.json"), "utf8"));
    // the payload's digests with coreutils: whole, and per 4 MiB chunk (payload.chunks, which verify hashes on two threads)
    expect((await execa("sha256sum", ["payload.age"], { cwd: x })).stdout.slice(0, 64)).toBe(m.payload.sha256);
    const perChunk = (await execa("sh", ["-c", "split -b 4194304 --filter=sha256sum payload.age"], { cwd: x })).stdout.split("\n").map((l) => l.slice(0, 64));
    expect(m.payload.chunks.size).toBe(4194304);
    expect(createHash("sha256").update(Buffer.from(perChunk.join(""), "hex")).digest("hex")).toBe(m.payload.chunks.sha256);
    expect(m.workspace.commit).toBe(a.commit);
    expect(m.workspace.dirty).toBe(true);
    expect(m.workspace.branch).toBe("main");
    const cl = join(x, "ws");
    await execa("git", ["clone", "-q", join(x, "workspace/repo.bundle"), cl]);
    expect((await execa("git", ["rev-parse", "HEAD"], { cwd: cl })).stdout).toBe(a.commit);
    await execa("git", ["apply", "--binary", join(x, "workspace/changes.patch")], { cwd: cl });
    expect(readFileSync(join(cl, "src/draft-reply.txt"), "utf8")).toBe("Dear customer, ...\n");
    expect(readFileSync(join(cl, "src/bin.dat")).equals(Buffer.from([0, 1, 2, 3, 255, 254]))).toBe(true);
    expect(m.credentials).toEqual([{ name: "llm", ref: "env:OPENAI_API_KEY" }, { name: "mail", ref: "file:secrets/smtp-password" }]);
    expect(m.open_operations).toEqual([{ id: "dlv-task-open-1", idempotency_key: "idem-task-open-1", kind: "send_invoice", strategy: "retry-safe" }]);
    expect(m.cursors.last_event_id).toBeGreaterThan(0);
    expect(m.schema_version).toBe(3);
    expect(m.runtime.agent_version).toBe("1.4.2");
    expect(new Date(m.expires_at).getTime() - new Date(m.created_at).getTime()).toBe(365 * 86400_000);
  });

  it("snapshots lists it as restorable; verify checks signature, payload and (with an identity) contents", async () => {
    const s = json(await a.run(["snapshots", "--json"]));
    expect(s).toHaveLength(1);
    expect(s[0]).toMatchObject({ snapshot_id: receipt.snapshot_id, status: "ok", sequence: 1, label: "first" });
    const v = json(await a.run(["verify", "latest", "--json"]));
    expect(v).toMatchObject({ ok: true, snapshot_id: receipt.snapshot_id, deep: false });
    const d = json(await a.run(["verify", receipt.snapshot_id, "--identity", a.identity, "--json"]));
    expect(d.deep).toBe(true);
    expect(d.checks.map((c: any) => c.name)).toEqual(["signature", "manifest", "payload", "components", "integrity:state", "workspace"]);
  });

  it("the same idempotency key returns the first receipt and writes no new bundle", async () => {
    const r1 = json(await a.run(["backup", "--json", "--idempotency-key", "job-42"]));
    const n = (await bundles(a)).length;
    const r2 = json(await a.run(["backup", "--json", "--idempotency-key", "job-42"]));
    expect(r2.snapshot_id).toBe(r1.snapshot_id);
    expect(r2.repeated).toBe(true);
    expect((await bundles(a)).length).toBe(n);
    expect(r1.sequence).toBe(2);
  });

  it("verify fails with 13 when the bundle is altered, naming the part", async () => {
    const p = join(a.tmp, "tampered.agentbak");
    const b = readFileSync(receipt.file);
    b[b.length - 2000]! ^= 1; // inside the payload
    writeFileSync(p, b);
    const r = await a.run(["verify", p]);
    expect(r.code).toBe(13);
    expect(r.stderr).toMatch(/payload\.age: digest mismatch/);
  });

  it("verify with the wrong identity exits 12", async () => {
    const other = join(a.tmp, "other-id");
    const k = await run(["keygen", "--out", other]);
    expect(k.code).toBe(0);
    const r = await a.run(["verify", "latest", "--identity", join(other, "age-identity.txt")]);
    expect(r.code).toBe(12);
    expect(r.stderr).toMatch(/no identity matched/);
  });
});

describe("backup refusals and hooks", () => {
  it("refuses a database holding a token, naming table, column and rowid but not the value", async () => {
    const t = await makeAgent({ sizeMb: 1 });
    try {
      const secret = "sk-proj-" + "Q".repeat(40);
      const db = new Database(join(t.dir, "state/agent.sqlite"));
      const id = db.prepare("INSERT INTO messages (conversation_id, role, content, created_at) VALUES ('c', 'tool', ?, 'now')").run(`key is ${secret}`).lastInsertRowid;
      db.close();
      const r = await t.run(["backup"]);
      expect(r.code).toBe(14);
      expect(r.stderr).toContain(`messages.content rowid ${id}`);
      expect(r.stderr).not.toContain(secret);
      expect(await bundles(t)).toHaveLength(0);
      // warn mode: backs up, exit 3 with the warning
      const cfg = JSON.parse(readFileSync(t.config, "utf8"));
      cfg.secretScan = { databases: "warn" };
      writeFileSync(t.config, JSON.stringify(cfg));
      const w = await t.run(["backup"]);
      expect(w.code).toBe(3);
      expect(w.stderr).toMatch(/possible secret \(OpenAI API key\)/);
      expect(await bundles(t)).toHaveLength(1);
    } finally {
      t.cleanup();
    }
  });

  it("refuses a config carrying a secret, naming the field", async () => {
    const t = await makeAgent({ sizeMb: 1 });
    try {
      const cfg = JSON.parse(readFileSync(t.config, "utf8"));
      cfg.runtime.models.llm = "ghp_" + "a".repeat(36);
      writeFileSync(t.config, JSON.stringify(cfg));
      const r = await t.run(["backup"]);
      expect(r.code).toBe(14);
      expect(r.stderr).toContain("config.runtime.models.llm");
      expect(r.stderr).not.toContain("ghp_aaaa");
    } finally {
      t.cleanup();
    }
  });

  it("uncommitted: refuse stops a dirty workspace with 14; ignore backs up the commit only", async () => {
    const t = await makeAgent({ sizeMb: 1 });
    try {
      const cfg = JSON.parse(readFileSync(t.config, "utf8"));
      cfg.workspace.uncommitted = "refuse";
      writeFileSync(t.config, JSON.stringify(cfg));
      const r = await t.run(["backup"]);
      expect(r.code).toBe(14);
      expect(r.stderr).toMatch(/uncommitted changes/);
      cfg.workspace.uncommitted = "ignore";
      writeFileSync(t.config, JSON.stringify(cfg));
      const ok = await t.run(["backup", "--json"]);
      expect(ok.code, ok.stderr).toBe(0);
      const tf = await execa("tar", ["xOf", await t.file(json(ok).path), "manifest.json"]);
      const m = JSON.parse(tf.stdout);
      expect(m.components.map((c: any) => c.path)).not.toContain("workspace/changes.patch");
      expect(m.workspace.dirty).toBe(true);
    } finally {
      t.cleanup();
    }
  });

  it("a failing pre-hook aborts cleanly, the post-hook still runs, nothing is published", async () => {
    const t = await makeAgent({ sizeMb: 1 });
    try {
      const cfg = JSON.parse(readFileSync(t.config, "utf8"));
      cfg.hooks = { pre: ["echo pre >> hooks.log; exit 3"], post: ["echo post >> hooks.log"], timeoutSeconds: 5 };
      writeFileSync(t.config, JSON.stringify(cfg));
      const r = await t.run(["backup"]);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/pre hook .* exited 3/);
      expect(readFileSync(join(t.dir, "hooks.log"), "utf8")).toBe("pre\npost\n");
      expect(await bundles(t)).toHaveLength(0);
      expect(t.leftovers()).toEqual([]);
      cfg.hooks = { pre: ["sleep 5"], post: [], timeoutSeconds: 1 };
      writeFileSync(t.config, JSON.stringify(cfg));
      const slow = await t.run(["backup"]);
      expect(slow.code).toBe(1);
      expect(slow.stderr).toMatch(/timed out after 1s/);
    } finally {
      t.cleanup();
    }
  });

  it("a consistent snapshot while the agent keeps writing: the invariant holds and the state equals a committed one", async () => {
    const t = await makeAgent({ sizeMb: 8 });
    const w = execa("node", [join(ROOT, "fixtures/agent/writer.js"), join(t.dir, "state/agent.sqlite"), "11"], { reject: false });
    try {
      await new Promise<void>((res) => w.stdout!.once("data", () => res()));
      const r = await t.run(["backup", "--json"]);
      expect(r.code, r.stderr).toBe(0);
      const x = join(t.tmp, "x");
      mkdirSync(x);
      await execa("sh", ["-c", `tar xOf '${await t.file(json(r).path)}' payload.age | age -d -i '${t.identity}' | zstd -d | tar x`], { cwd: x });
      const db = new Database(join(x, "db/state.sqlite"), { readonly: true });
      const bal = Object.fromEntries((db.prepare("SELECT account, balance FROM budget").all() as any[]).map((r) => [r.account, r.balance]));
      const n = Number(db.prepare("SELECT value FROM agent_state WHERE key = 'transfers'").pluck().get());
      const events = db.prepare("SELECT count(*) FROM events WHERE type = 'transfer'").pluck().get();
      db.close();
      expect(n).toBeGreaterThan(0);
      expect(events).toBe(n);
      expect(bal.tokens + bal.reserve + bal.spent).toBe(1_000_000);
      const expected: Record<string, number> = { tokens: 1_000_000, reserve: 0, spent: 0 };
      let i = 0;
      for (const tr of transfers(11)) {
        if (i++ === n) break;
        expected[tr.from]! -= tr.amount;
        expected[tr.to]! += tr.amount;
      }
      expect(bal).toEqual(expected);
    } finally {
      w.kill("SIGKILL");
      await w;
      t.cleanup();
    }
  });

  it("two backups of one agent at once: one runs, the other exits 11; neither corrupts the repository", async () => {
    const t = await makeAgent({ sizeMb: 6 });
    try {
      const [r1, r2] = await Promise.all([t.run(["backup", "--json"]), t.run(["backup", "--json"])]);
      const codes = [r1.code, r2.code].sort();
      expect(codes).toEqual([0, 11]);
      const loser = r1.code === 11 ? r1 : r2;
      expect(loser.stderr).toMatch(/repository locked .* by pid \d+/);
      const s = json(await t.run(["snapshots", "--json"]));
      expect(s.map((e: any) => e.status)).toEqual(["ok"]);
      const waited = await Promise.all([t.run(["backup", "--json", "--wait", "60s"]), t.run(["backup", "--json", "--wait", "60s"])]);
      expect(waited.map((w) => w.code)).toEqual([0, 0]);
      expect(new Set(waited.map((w) => json(w).sequence))).toEqual(new Set([2, 3]));
    } finally {
      t.cleanup();
    }
  });
});
