// One backup, in process, into a real folder repository: a signed snapshot of a real SQLite database; a repeated idempotency key
// answers the first receipt (another label is a conflict); an unchanged agent writes nothing; bad labels, empty configs and secrets
// are refused before anything is published.
import { afterAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { replay, runBackup, type BackupOptions, type BackupReceipt } from "../../../src/capture/backup.js";
import { loadConfig } from "../../../src/config/load.js";
import { keygen, loadSigningKey } from "../../../src/crypto/keys.js";
import { loadTrust } from "../../../src/crypto/trust.js";
import { AgentbakError, ConflictError } from "../../../src/errors.js";
import { Repository } from "../../../src/repository/repository.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-backup-unit-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const home = join(tmp, "home");
const keys = keygen(home, "ops");
const signingKey = loadSigningKey(join(home, "signing-key"));
let n = 0;
async function agent(extra: Record<string, unknown> = {}, row = "hello") {
  const dir = join(tmp, `agent-${n++}`);
  mkdirSync(dir);
  const db = new Database(join(dir, "state.sqlite"));
  db.exec("CREATE TABLE notes (body TEXT)");
  db.prepare("INSERT INTO notes VALUES (?)").run(row);
  db.close();
  writeFileSync(join(dir, "agentbak.json"), JSON.stringify({ agent: { id: `agent-${n}`, tenant: "t" }, repository: "repo", recipients: [keys.recipient], databases: [{ name: "state", path: "state.sqlite" }], ...extra }));
  const { repo } = await Repository.init(join(dir, "repo"), { home });
  const lc = loadConfig(join(dir, "agentbak.json"));
  const o: BackupOptions = { repo, trust: loadTrust(home), home, signingKey, principal: "ops" };
  const snapshots = async () => (await repo.list(loadTrust(home), { tenant: "t", agent: `agent-${n}` })).map((s) => s.snapshot_id);
  return { dir, lc, repo, o, snapshots };
}
const failure = (p: Promise<unknown>) => p.then(() => "backed up", (e: AgentbakError) => [e.code, e.message]);

describe("replay", () => {
  const prior = { snapshot_id: "s1", params_sha256: "", status: "spooled", repeated: false } as unknown as BackupReceipt;

  it("answers the first receipt, marked repeated and committed, when the key comes with the same label and incremental choice", async () => {
    const a = await agent();
    const first = await runBackup(a.lc, { ...a.o, idempotencyKey: "k-1", label: "nightly" });
    expect(replay(first, { idempotencyKey: "k-1", label: "nightly" })).toEqual({ ...first, repeated: true, status: "committed" });
    expect(() => replay(first, { idempotencyKey: "k-1", label: "other" })).toThrow(ConflictError);
    expect(() => replay(first, { idempotencyKey: "k-1", label: "nightly", incremental: true })).toThrow("idempotency key k-1 was first used with another label or incremental choice (snapshot");
    // a receipt of an earlier version, without the parameters' digest, is answered as it is
    expect(replay(prior, { label: "x" })).toMatchObject({ snapshot_id: "s1", repeated: true, status: "committed" });
  });
});

describe("runBackup", () => {
  it("writes one signed full snapshot of the database; the same idempotency key again answers it without a second", async () => {
    const a = await agent();
    const r = await runBackup(a.lc, { ...a.o, idempotencyKey: "k-1" });
    expect(r).toMatchObject({ tenant: "t", kind: "full", parent: null, sequence: 1, status: "committed", repeated: false, databases_read: "copy", warnings: [], not_captured: [] });
    expect(existsSync(r.path)).toBe(true);
    expect(await a.snapshots()).toEqual([r.snapshot_id]);
    const again = await runBackup(a.lc, { ...a.o, idempotencyKey: "k-1" });
    expect(again).toEqual({ ...r, repeated: true });
    await expect(runBackup(a.lc, { ...a.o, idempotencyKey: "k-1", label: "changed" })).rejects.toMatchObject({ code: 2 });
    expect(await a.snapshots()).toEqual([r.snapshot_id]);
  });

  it("skipUnchanged: nothing changed since this host's last snapshot writes nothing; a write to the database does", async () => {
    const a = await agent();
    const first = await runBackup(a.lc, { ...a.o, skipUnchanged: true });
    const same = await runBackup(a.lc, { ...a.o, skipUnchanged: true });
    expect(same).toMatchObject({ snapshot_id: first.snapshot_id, status: "unchanged", repeated: false });
    const db = new Database(join(a.dir, "state.sqlite"));
    db.prepare("INSERT INTO notes VALUES ('more')").run();
    db.close();
    const next = await runBackup(a.lc, { ...a.o, skipUnchanged: true });
    expect(next).toMatchObject({ status: "committed", sequence: 2 });
    expect(await a.snapshots()).toEqual([first.snapshot_id, next.snapshot_id]);
  });

  it("refuses a label with a line break, escape or bidi control, or over 200 characters (exit 2), before taking the lock", async () => {
    const a = await agent();
    for (const label of ["a\nb", "x\x1b[31m", "a\u202eb", "x".repeat(201)])
      expect(await failure(runBackup(a.lc, { ...a.o, label }))).toEqual([2, "--label: at most 200 characters, none of them control characters, escape sequences, Unicode bidi/format controls or noncharacters"]);
    expect(await a.snapshots()).toEqual([]);
    // no lock was left behind: a backup runs at once
    expect((await runBackup(a.lc, { ...a.o, label: "fine" })).status).toBe("committed");
  });

  it("a config that names nothing that exists is exit 2 and writes no snapshot", async () => {
    const a = await agent({ databases: [], files: [] });
    expect(await failure(runBackup(a.lc, a.o))).toEqual([2, `nothing to back up: ${a.lc.path} names no database, no state source, no file that exists and no workspace; no snapshot was written`]);
    expect(await a.snapshots()).toEqual([]);
  });

  it("a token in the database is refused (exit 14) naming where, never the value, and nothing is published or left in staging", async () => {
    const token = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2";
    const a = await agent({}, `deploy with ${token}`);
    const [code, msg] = (await failure(runBackup(a.lc, a.o))) as [number, string];
    expect(code).toBe(14);
    expect(msg).toContain("state");
    expect(msg).not.toContain(token);
    expect(await a.snapshots()).toEqual([]);
    expect(readdirSync(join(a.dir, "repo"), { recursive: true }).filter((f) => String(f).endsWith(".agentbak"))).toEqual([]);
  });
});
