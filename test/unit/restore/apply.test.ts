/**
 * Restoring a snapshot (restore/apply.ts) in-process, from a real signed
 * bundle that a real backup wrote (made once, in beforeAll): the restored
 * folder holds the agent's database and files, starts suspended with a
 * signed restore record at a newly reserved generation; a dry run writes
 * nothing; a target that is a file, a symbolic link or not empty is refused
 * (2) and left as it was; stale SQLite sidecars are moved aside; a request id
 * answers a repeat with the first result; a refused approval is 14 and
 * audited. The command line around it: test/e2e/restore.test.ts.
 */
import Database from "better-sqlite3";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runRestore, type RestoreOptions } from "../../../src/restore/apply.js";
import { MARKER_DIR, openTarget, SUSPENDED } from "../../../src/restore/state.js";
import { Repository, type OpenedBundle } from "../../../src/repository/repository.js";
import { keygen, loadIdentities, loadSigningKey } from "../../../src/crypto/keys.js";
import { loadTrust, type Trust } from "../../../src/crypto/trust.js";
import { loadConfig } from "../../../src/config/load.js";
import { runBackup } from "../../../src/capture/backup.js";
import { AgentbakError } from "../../../src/errors.js";
// @ts-expect-error the agent generator is plain JavaScript (fixtures/agent)
import { generateAgent } from "../../../fixtures/agent/generate.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-apply-"));
const home = join(dir, "home");
const savedHome = process.env.AGENTBAK_HOME;
process.env.AGENTBAK_HOME = home; // this host's trusted state
const a = { tenant: "acme", agent: "billing-agent" };
let repo: Repository;
let trust: Trust;
let bundle: OpenedBundle;
let agentDb: string;
let n = 0;

beforeAll(async () => {
  const k = keygen(home, "ops");
  const agent = join(dir, "agent");
  mkdirSync(agent);
  const g = generateAgent(agent, { recipient: k.recipient, sizeMb: 0.25, seed: 3 });
  agentDb = join(agent, "state", "agent.sqlite");
  repo = (await Repository.init(join(agent, "backups"))).repo;
  trust = loadTrust(home);
  await runBackup(loadConfig(g.config), { repo, trust, home, signingKey: loadSigningKey(join(home, "signing-key")), principal: "ops" });
  bundle = await repo.open(await repo.resolve("latest", trust), trust);
});
afterAll(() => {
  bundle?.release();
  rmSync(dir, { recursive: true, force: true });
  if (savedHome === undefined) delete process.env.AGENTBAK_HOME;
  else process.env.AGENTBAK_HOME = savedHome;
});

const opts = (target: string, o: Partial<RestoreOptions> = {}): RestoreOptions => ({
  bundle, target, repo, trust, identities: () => loadIdentities(join(home, "age-identity.txt")), signingKey: () => loadSigningKey(join(home, "signing-key")), approve: async () => true, ...o,
});
const fresh = () => join(dir, `target${n++}`);
async function failure(p: Promise<unknown>): Promise<AgentbakError> {
  const e = await p.then(() => null, (x: unknown) => x);
  expect(e).toBeInstanceOf(AgentbakError);
  return e as AgentbakError;
}
const count = (db: string, table: string) => { const d = new Database(db, { readonly: true }); try { return d.prepare(`SELECT count(*) FROM ${table}`).pluck().get(); } finally { d.close(); } };

describe("runRestore", () => {
  it("restores database and files into an absent folder, suspended, with a signed record at a new generation; audited", async () => {
    const target = fresh();
    const before = await repo.generation(a, trust);
    const r = await runRestore(opts(target));
    expect(r).toMatchObject({ restored: true, repeated: false, generation: before + 1, receipt_signed: true });
    expect(await repo.generation(a, trust)).toBe(before + 1);
    expect(count(join(target, "state", "agent.sqlite"), "events")).toBe(count(agentDb, "events"));
    expect(readFileSync(join(target, "memory", "rules.json"), "utf8")).toContain("never refund over 500");
    expect(existsSync(join(target, MARKER_DIR, SUSPENDED))).toBe(true);
    expect(readFileSync(join(target, MARKER_DIR, "generation"), "utf8")).toBe(`${before + 1}\n`);
    expect(openTarget(target, trust).record).toMatchObject({ agent_id: "billing-agent", generation: before + 1, databases: [{ name: "state", path: "state/agent.sqlite" }] });
    const events = (await repo.auditLog(a)).trim().split("\n").map((l) => JSON.parse(l).event);
    expect(events.at(-1)).toBe("restore");
    expect(readdirSync(dir).filter((f) => f.startsWith(".agentbak-restore-"))).toEqual([]); // no staging left
  });

  it("a dry run shows the plan and writes nothing, reserves nothing", async () => {
    const target = fresh();
    const g = await repo.generation(a, trust);
    const r = await runRestore(opts(target, { dryRun: true }));
    expect([r.restored, r.plan.target, r.generation]).toEqual([false, target, null]);
    expect(existsSync(target)).toBe(false);
    expect(await repo.generation(a, trust)).toBe(g);
  });

  it("a target that is a file, a symbolic link, or not empty is refused (2) and left as it was", async () => {
    const file = fresh();
    writeFileSync(file, "x");
    expect((await failure(runRestore(opts(file)))).message).toBe(`target ${file} exists and is not a folder`);
    const link = fresh();
    symlinkSync(join(dir, "elsewhere"), link);
    expect((await failure(runRestore(opts(link)))).message).toBe(`target ${link} is a symbolic link to nothing; pass the folder it should be`);
    const busy = fresh();
    mkdirSync(join(busy, "sub"), { recursive: true });
    writeFileSync(join(busy, "sub", "notes.txt"), "mine");
    const e = await failure(runRestore(opts(busy)));
    expect([e.code, e.message]).toEqual([2, `target ${busy} is not empty (sub/notes.txt ...); restore only into an empty or absent folder`]);
    expect(readFileSync(join(busy, "sub", "notes.txt"), "utf8")).toBe("mine");
    expect((await failure(runRestore(opts("  ")))).message).toBe("--target is empty: name the folder to restore into");
  });

  it("stale SQLite sidecars in the target are moved aside, never paired with the restored database", async () => {
    const target = fresh();
    mkdirSync(join(target, "state"), { recursive: true });
    writeFileSync(join(target, "state", "agent.sqlite-wal"), "stale wal of another database");
    const r = await runRestore(opts(target));
    expect(r.restored).toBe(true);
    expect(existsSync(join(target, "state", "agent.sqlite-wal"))).toBe(false);
    const w = r.warnings.find((x) => x.startsWith("stale SQLite sidecar files in the target were moved to "))!;
    const q = w.slice("stale SQLite sidecar files in the target were moved to ".length);
    expect(readFileSync(join(q, "state", "agent.sqlite-wal"), "utf8")).toBe("stale wal of another database");
    expect(count(join(target, "state", "agent.sqlite"), "events")).toBe(count(agentDb, "events"));
  });

  it("a request id answers its repeat with the first result, restoring nothing again", async () => {
    const first = fresh();
    const id = `req-20260301T100000000Z-${(0xa0000000 + n).toString(16)}`;
    const r1 = await runRestore(opts(first, { requestId: id }));
    const g = await repo.generation(a, trust);
    const other = fresh();
    const r2 = await runRestore(opts(other, { requestId: id }));
    expect([r2.repeated, r2.generation]).toEqual([true, r1.generation]);
    expect(r2.warnings).toContain(`request ${id} was already restored into ${first}; --target ${other} was not used (a new restore needs a new --request-id)`);
    expect(existsSync(other)).toBe(false);
    expect(await repo.generation(a, trust)).toBe(g);
  });

  it("not approved: 14, nothing placed, the refusal audited; another agent expected: 14", async () => {
    const target = fresh();
    const e = await failure(runRestore(opts(target, { approve: async () => false })));
    expect(e.code).toBe(14);
    expect(e.message).toMatch(/^restore of \S+ not approved$/);
    expect(existsSync(target)).toBe(false);
    const events = (await repo.auditLog(a)).trim().split("\n").map((l) => JSON.parse(l).event);
    expect(events.at(-1)).toBe("restore-refused");
    expect((await failure(runRestore(opts(fresh(), { expectAgent: "other-agent" })))).code).toBe(14);
  });
});
