// compact in process on a real folder repository: an incremental rewritten as a full snapshot of the same state and sequence,
// linked to what it replaces; a full one left alone; a wrong identity publishes nothing and keeps no lock.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runBackup, type BackupOptions } from "../../../src/capture/backup.js";
import { compact } from "../../../src/capture/compact.js";
import { loadConfig } from "../../../src/config/load.js";
import { generateIdentity } from "../../../src/crypto/age.js";
import { keygen, loadIdentities, loadSigningKey } from "../../../src/crypto/keys.js";
import { loadTrust } from "../../../src/crypto/trust.js";
import { readPayload, verifyBundle } from "../../../src/bundle/reader.js";
import { Repository } from "../../../src/repository/repository.js";
import { pageIndexKey } from "../../../src/state/pages/index.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-compact-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const home = join(tmp, "home");
const keys = keygen(home, "ops");
const key = loadSigningKey(join(home, "signing-key"));
const ids = loadIdentities(join(home, "age-identity.txt"));
const trust = () => loadTrust(home);

/** an agent with a full snapshot and an incremental on it */
async function chain(name: string) {
  const dir = join(tmp, name);
  mkdirSync(dir);
  const file = join(dir, "state.sqlite");
  const db = new Database(file);
  db.exec("CREATE TABLE notes (body TEXT)");
  const ins = db.prepare("INSERT INTO notes VALUES (?)");
  db.transaction(() => {
    for (let i = 0; i < 200; i++) ins.run(`note ${i} ${"x".repeat(100)}`);
  })();
  writeFileSync(join(dir, "agentbak.json"), JSON.stringify({ agent: { id: name, tenant: "t" }, repository: "repo", recipients: [keys.recipient], databases: [{ name: "state", path: "state.sqlite" }], incremental: { enabled: true } }));
  const { repo } = await Repository.init(join(dir, "repo"), { home });
  const lc = loadConfig(join(dir, "agentbak.json"));
  const o: BackupOptions = { repo, trust: trust(), home, signingKey: key, principal: "ops" };
  const full = await runBackup(lc, o);
  ins.run("written after the full snapshot");
  db.close();
  const inc = await runBackup(lc, o);
  const list = () => repo.list(trust(), { tenant: "t", agent: name });
  return { dir, repo, full, inc, list, file };
}

describe("compact", () => {
  let c: Awaited<ReturnType<typeof chain>>;
  beforeAll(async () => {
    c = await chain("a");
  });

  it("rewrites an incremental as a full snapshot: same sequence and state, a new id, compacted_from naming it", async () => {
    expect(c.inc.kind).toBe("incremental");
    const s = (await c.list()).find((x) => x.snapshot_id === c.inc.snapshot_id)!;
    const r = await compact(c.repo, s, trust(), ids, key, "ops", pageIndexKey(home));
    expect(r).toMatchObject({ replaces: c.inc.snapshot_id, already_full: false });
    expect(r.snapshot_id).not.toBe(c.inc.snapshot_id);
    const made = (await c.list()).find((x) => x.snapshot_id === r.snapshot_id)!;
    expect(made).toMatchObject({ kind: "full", parent: null, sequence: c.inc.sequence, status: "ok" });
    const v = await verifyBundle(r.path!, trust());
    expect(v.manifest.compacted_from).toEqual({ snapshot_id: c.inc.snapshot_id, manifest_sha256: c.inc.manifest_sha256 });
    // the rebuilt database stands alone, and holds the incremental's state
    const out = join(c.dir, "out");
    mkdirSync(out);
    await readPayload(v, ids, out);
    const db = new Database(join(out, "db/state.sqlite"), { readonly: true });
    expect(db.prepare("SELECT count(*) FROM notes").pluck().get()).toBe(201);
    expect(db.prepare("SELECT body FROM notes ORDER BY rowid DESC LIMIT 1").pluck().get()).toBe("written after the full snapshot");
    expect(db.pragma("integrity_check", { simple: true })).toBe("ok");
    db.close();
  });

  it("a full snapshot is already full: nothing is written", async () => {
    const s = (await c.list()).find((x) => x.snapshot_id === c.full.snapshot_id)!;
    const before = (await c.list()).map((x) => x.snapshot_id);
    expect(await compact(c.repo, s, trust(), ids, key, "ops", pageIndexKey(home))).toEqual({ snapshot_id: c.full.snapshot_id, replaces: c.full.snapshot_id, path: null, already_full: true });
    expect((await c.list()).map((x) => x.snapshot_id)).toEqual(before);
  });

  it("an identity that can not decrypt the chain publishes nothing, leaves no staging and keeps no lock", async () => {
    const s = (await c.list()).find((x) => x.snapshot_id === c.inc.snapshot_id)!;
    const before = (await c.list()).map((x) => x.snapshot_id);
    const stranger = [generateIdentity()];
    await expect(compact(c.repo, s, trust(), stranger, key, "ops", pageIndexKey(home))).rejects.toMatchObject({ code: 12 });
    expect((await c.list()).map((x) => x.snapshot_id)).toEqual(before);
    expect(readdirSync(join(c.dir, "repo"), { recursive: true }).filter((f) => /compact-/.test(String(f)))).toEqual([]);
    // the agent's lock was released: compacting with the right identity goes ahead at once
    expect((await compact(c.repo, s, trust(), ids, key, "ops", pageIndexKey(home))).already_full).toBe(false);
  });
});
