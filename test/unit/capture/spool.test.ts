// Backups that outlive an unreachable object store, in process: a folder repository is written directly and raises this host's watermark;
// an unreachable one spools (and is not asked again for 30 s), the next backup that reaches it uploads what waited, in sequence;
// an answer that the repository is gone is never spooled.
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import Database from "better-sqlite3";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { backupOrSpool, RETRY_AFTER_MS, type SpoolingBackupOptions } from "../../../src/capture/spool.js";
import { loadConfig } from "../../../src/config/load.js";
import { keygen, loadSigningKey } from "../../../src/crypto/keys.js";
import { loadTrust } from "../../../src/crypto/trust.js";
import { notFound, UnreachableError } from "../../../src/errors.js";
import { Repository } from "../../../src/repository/repository.js";
import { openSpool } from "../../../src/repository/spool.js";
import { hostWatermark, raiseBackupWatermark } from "../../../src/state/watermark.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-spool-unit-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
afterEach(() => vi.useRealTimers());
const home = join(tmp, "home");
const keys = keygen(home, "ops");
const signingKey = loadSigningKey(join(home, "signing-key"));
const trust = () => loadTrust(home);
let n = 0;
function agent() {
  const id = `agent-${n++}`;
  const dir = join(tmp, id);
  mkdirSync(dir);
  const db = new Database(join(dir, "state.sqlite"));
  db.exec("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('hello')");
  db.close();
  writeFileSync(join(dir, "agentbak.json"), JSON.stringify({ agent: { id, tenant: "t" }, repository: "repo", recipients: [keys.recipient], databases: [{ name: "state", path: "state.sqlite" }] }));
  const write = (body: string) => {
    const d = new Database(join(dir, "state.sqlite"));
    d.prepare("INSERT INTO notes VALUES (?)").run(body);
    d.close();
  };
  return { id, dir, lc: loadConfig(join(dir, "agentbak.json")), a: { tenant: "t", agent: id }, write };
}
const base = { trust: trust(), home, signingKey, principal: "ops" };
/** the repositories "opened" at `location`: asks `open` each time the backup asks for that one */
const opening = (location: string, open: () => Promise<Repository>) =>
  new (class extends Map<string, Promise<Repository>> {
    override get(k: string) {
      return k === location ? open() : undefined;
    }
  })();
const ids = async (r: Repository, agentId: string) => (await r.list(trust(), { tenant: "t", agent: agentId })).map((s) => [s.snapshot_id, s.sequence]);

describe("backupOrSpool", () => {
  it("a folder repository is written directly; this host's watermark rises, and the next sequence stays above it", async () => {
    const g = agent();
    const { repo } = await Repository.init(join(g.dir, "repo"), { home });
    const o: SpoolingBackupOptions = { ...base, location: join(g.dir, "repo"), repositories: new Map([[join(g.dir, "repo"), Promise.resolve(repo)]]) };
    const r = await backupOrSpool(g.lc, o);
    expect(r).toMatchObject({ status: "committed", sequence: 1 });
    expect(hostWatermark(home, g.a)).toBe(1);
    // this host once went further (a repository rolled back behind its back): it never reuses a sequence
    raiseBackupWatermark(home, g.a, 5);
    g.write("more");
    expect((await backupOrSpool(g.lc, o)).sequence).toBe(6);
    expect(hostWatermark(home, g.a)).toBe(6);
  });

  it("an unreachable object store: the backup spools, the store is not asked again for 30 s, then the next backup uploads what waited", async () => {
    const g = agent();
    const location = `s3://bucket-${g.id}/agents`;
    const { repo: remote } = await Repository.init(join(g.dir, "remote"), { home });
    let up = false;
    let asked = 0;
    const o: SpoolingBackupOptions = { ...base, location, repositories: opening(location, async () => (asked++, up ? remote : Promise.reject(new UnreachableError("connect ECONNREFUSED 127.0.0.1:9000")))) };
    const t0 = Date.now();
    vi.useFakeTimers({ toFake: ["Date"], now: t0 });
    const first = await backupOrSpool(g.lc, o);
    expect(first).toMatchObject({ status: "spooled", sequence: 1 });
    expect(first.warnings.at(-1)).toMatch(new RegExp(`^repository ${location} is unreachable \\(connect ECONNREFUSED 127\\.0\\.0\\.1:9000\\); the signed bundle waits in .+ for the next backup or "agentbak flush"$`));
    g.write("second");
    vi.setSystemTime(t0 + 1000); // the clock is faked: a second later, still within the 30 s
    const second = await backupOrSpool(g.lc, o);
    expect(second).toMatchObject({ status: "spooled", sequence: 2 });
    expect(second.warnings.at(-1)).toContain("was unreachable moments ago");
    expect(asked).toBe(1);
    const spool = await openSpool(home, location);
    expect(await ids(spool, g.id)).toEqual([[first.snapshot_id, 1], [second.snapshot_id, 2]]);

    up = true;
    vi.setSystemTime(t0 + RETRY_AFTER_MS + 1000);
    g.write("third");
    const third = await backupOrSpool(g.lc, o);
    expect(asked).toBe(2);
    expect(third).toMatchObject({ status: "committed", sequence: 3, warnings: [] });
    expect(await ids(remote, g.id)).toEqual([[first.snapshot_id, 1], [second.snapshot_id, 2], [third.snapshot_id, 3]]);
    spool.refresh(); // this handle's listing was read before the upload
    expect(await ids(spool, g.id)).toEqual([]);
  });

  it("while spooling, an idempotency key used again answers the spooled receipt instead of a second snapshot", async () => {
    const g = agent();
    const location = `s3://bucket-${g.id}/agents`;
    const o: SpoolingBackupOptions = { ...base, location, idempotencyKey: "req-1", repositories: opening(location, () => Promise.reject(new UnreachableError("timed out"))) };
    const first = await backupOrSpool(g.lc, o);
    const again = await backupOrSpool(g.lc, o);
    expect(again).toMatchObject({ snapshot_id: first.snapshot_id, repeated: true });
    expect(await ids(await openSpool(home, location), g.id)).toEqual([[first.snapshot_id, 1]]);
  });

  it("an answer that the repository is not there (exit 10) is not spooled", async () => {
    const g = agent();
    const location = `s3://bucket-${g.id}/agents`;
    const o: SpoolingBackupOptions = { ...base, location, repositories: opening(location, () => Promise.reject(notFound(`repository not found: ${location}`))) };
    await expect(backupOrSpool(g.lc, o)).rejects.toMatchObject({ code: 10 });
    expect(await ids(await openSpool(home, location), g.id)).toEqual([]);
    expect(hostWatermark(home, g.a)).toBe(0);
  });
});
