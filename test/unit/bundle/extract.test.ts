/**
 * Extracting and checking a bundle (src/bundle/extract.ts) on real SQLite
 * files and a bundle the real writer made: checkDatabase by policy (full
 * finds an index that lies, quick does not look; both count rows; digest
 * trusts the signed digest but still reads user_version), a file still in WAL
 * mode or not a database refused (13); extractAndCheck lays the root out at
 * the recorded targets (databases 0600), lists its checks and leaves no raw
 * folder; a database whose rows differ from the manifest fails it (13).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checkDatabase, extractAndCheck, type IntegrityPolicy } from "../../../src/bundle/extract.js";
import type { Component, Manifest } from "../../../src/bundle/manifest.js";
import { verifyBundle } from "../../../src/bundle/reader.js";
import { planBundle, writeBundleFile, writePayload, type StagedComponent } from "../../../src/bundle/writer.js";
import type { LinkSource } from "../../../src/bundle/chain.js";
import { generateIdentity, type AgeIdentity } from "../../../src/crypto/age.js";
import { fingerprint, generateSigningKey, publicKeyLine, type SigningKey } from "../../../src/crypto/sshsig.js";
import { parseAllowedSigners, type Trust } from "../../../src/crypto/trust.js";
import { AgentbakError } from "../../../src/errors.js";

let tmp: string;
let db: string;
let key: SigningKey;
let id: AgeIdentity;
let trust: Trust;
beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), "agentbak-extract-"));
  db = join(tmp, "agent.sqlite");
  const d = new Database(db);
  d.exec("CREATE TABLE events(id INTEGER PRIMARY KEY, body TEXT); CREATE INDEX by_body ON events(body); CREATE TABLE notes(x); PRAGMA user_version = 7;");
  const ins = d.prepare("INSERT INTO events(body) VALUES (?)");
  for (let i = 0; i < 50; i++) ins.run(`event ${i}`);
  d.prepare("INSERT INTO notes VALUES (?)").run("remember");
  d.close();
  key = generateSigningKey("backup@host");
  id = generateIdentity();
  trust = { signers: parseAllowedSigners(`backup@host ${publicKeyLine(key.publicKey)}`), revoked: [] };
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const entry = (o: Partial<Component> = {}): Component => ({ path: "db/state.sqlite", kind: "sqlite", name: "state", sha256: "a".repeat(64), size: 1, target: "state/agent.sqlite", records: { events: 50, notes: 1 }, schema_version: 7, ...o });
let n = 0;
const copy = () => {
  const p = join(tmp, `copy${n++}.sqlite`);
  copyFileSync(db, p);
  return p;
};
const failure = async (p: Promise<unknown>) => {
  const e = await p.then(() => null, (x: unknown) => x);
  expect(e).toBeInstanceOf(AgentbakError);
  return [(e as AgentbakError).code, (e as Error).message] as const;
};

describe("checkDatabase", () => {
  it("passes a sound database whose counts and user_version match, under every policy", async () => {
    const established = { full: "integrity_check", quick: "quick_check", digest: "digest", attested: "integrity_check" };
    for (const p of ["full", "quick", "digest", "attested"] as IntegrityPolicy[]) await expect(checkDatabase(db, entry(), p)).resolves.toBe(established[p]);
  });

  it("a row count or user_version other than the manifest's is 13 naming both; digest checks only user_version", async () => {
    expect(await failure(checkDatabase(db, entry({ records: { events: 51, notes: 1 } })))).toEqual([13, "database state: table events has 50 rows, manifest says 51"]);
    expect(await failure(checkDatabase(db, entry({ records: { gone: 3 } }), "quick"))).toEqual([13, "database state: table gone has 0 rows, manifest says 3"]);
    expect(await failure(checkDatabase(db, entry({ schema_version: 8 }), "digest"))).toEqual([13, "database state: user_version 7, manifest says 8"]);
    await expect(checkDatabase(db, entry({ records: { events: 51 } }), "digest")).resolves.toBe("digest");
  });

  it("an index that disagrees with its table: integrity_check finds it (13), quick_check does not look", async () => {
    const bad = copy();
    execFileSync("sqlite3", [bad, "PRAGMA writable_schema=ON; UPDATE sqlite_master SET sql='CREATE INDEX by_body ON events(body DESC)' WHERE name='by_body';"]);
    const [code, message] = await failure(checkDatabase(bad, entry()));
    expect(code).toBe(13);
    expect(message).toMatch(/^database state: integrity_check: .*missing from index by_body/);
    await expect(checkDatabase(bad, entry(), "quick")).resolves.toBe("quick_check");
  });

  it("attested (restore's default): the check is not re-run when the manifest attests it for exactly this image's digest; re-run for other digests or none", async () => {
    const bad = copy();
    execFileSync("sqlite3", [bad, "PRAGMA writable_schema=ON; UPDATE sqlite_master SET sql='CREATE INDEX by_body ON events(body DESC)' WHERE name='by_body';"]);
    // the broken index passes only because the attestation names these bytes: integrity_check did not run
    await expect(checkDatabase(bad, entry({ integrity_checked: "a".repeat(64) }), "attested")).resolves.toBe("attested");
    expect((await failure(checkDatabase(bad, entry({ integrity_checked: "b".repeat(64) }), "attested")))[1]).toMatch(/^database state: integrity_check: .*missing from index by_body/);
    expect((await failure(checkDatabase(bad, entry(), "attested")))[1]).toMatch(/integrity_check: .*missing from index by_body/);
    // full re-runs it whatever the manifest attests; user_version is checked under every policy
    expect((await failure(checkDatabase(bad, entry({ integrity_checked: "a".repeat(64) }), "full")))[1]).toMatch(/integrity_check: .*missing from index by_body/);
    expect((await failure(checkDatabase(db, entry({ integrity_checked: "a".repeat(64), schema_version: 8 }), "attested")))[1]).toBe("database state: user_version 7, manifest says 8");
  });

  it("a file still in WAL mode, or not a database at all, is 13", async () => {
    const wal = copy();
    const d = new Database(wal);
    d.pragma("journal_mode = WAL");
    d.close();
    const [code, message] = await failure(checkDatabase(wal, entry()));
    expect(code).toBe(13);
    expect(message).toBe("database state: the file is in WAL mode (header 2/2); a snapshot must be one self-contained file");
    const junk = join(tmp, "junk.sqlite");
    writeFileSync(junk, Buffer.alloc(8192, 0x41));
    expect((await failure(checkDatabase(junk, entry())))[0]).toBe(13);
  });
});

describe("extractAndCheck", () => {
  /** a bundle of the database (with these manifest records) and a file, written by the real writer */
  async function bundleOf(records: Record<string, number>) {
    const dir = mkdtempSync(join(tmp, "b-"));
    writeFileSync(join(dir, "notes.md"), "the agent's notes\n");
    const components: StagedComponent[] = [
      { path: "db/state.sqlite", kind: "sqlite", name: "state", target: "state/agent.sqlite", records, schema_version: 7, file: db },
      { path: "files/notes.md", kind: "file", name: "notes.md", target: "notes/notes.md", file: join(dir, "notes.md") },
    ];
    const path = join(dir, "snap.agentbak");
    const plan = planBundle(path, key, components);
    const { components: written, payload } = await writePayload(components, [id.recipient], plan);
    const at = "2026-12-06T12:00:00.000Z";
    await writeBundleFile(
      {
        format: "agentbak-bundle", format_version: 4, tool_version: "0.1.0", agent_id: "billing-agent", tenant: "acme", snapshot_id: "20261206T120000000Z-0123abcd",
        created_at: at, expires_at: "2027-12-06T12:00:00.000Z", sequence: 1, parent: null, label: null, idempotency_key: null,
        signer: { fingerprint: fingerprint(key.publicKey), principal: "backup@host" }, recipients: [id.recipient],
        runtime: { image_digest: null, agent_version: null, models: {}, host: "h" }, schema_version: 7, components: written, payload,
        workspace: null, credentials: [], cursors: {}, cursor_queries: {}, open_operations: [],
      } as Manifest,
      key,
      plan,
    );
    return { path, dir };
  }
  const noLinks = {} as LinkSource; // a bundle without deltas asks for no parent

  it("lays the root out at the recorded targets, databases 0600, and lists its checks; no raw folder is left", async () => {
    const { path, dir } = await bundleOf({ events: 50, notes: 1 });
    const root = join(dir, "root");
    const x = await extractAndCheck(await verifyBundle(path, trust), [id], root, trust, noLinks);
    expect(readFileSync(join(root, "state/agent.sqlite")).equals(readFileSync(db))).toBe(true);
    expect(statSync(join(root, "state/agent.sqlite")).mode & 0o777).toBe(0o600);
    expect(readFileSync(join(root, "notes/notes.md"), "utf8")).toBe("the agent's notes\n");
    expect(x.databases).toEqual([{ name: "state", path: join(root, "state/agent.sqlite"), schemaVersion: 7, integrity: "integrity_check" }]);
    expect(x.checks.map((c) => [c.name, c.ok])).toEqual([["components", true], ["integrity:state", true]]);
    expect(x.sources).toEqual([]);
    expect(readdirSync(root).sort()).toEqual(["notes", "state"]);
    expect(existsSync(join(root, ".agentbak-raw"))).toBe(false);
  });

  it("a database whose rows are not the manifest's fails the whole extraction (13)", async () => {
    const { path, dir } = await bundleOf({ events: 49, notes: 1 });
    expect(await failure(extractAndCheck(await verifyBundle(path, trust), [id], join(dir, "root"), trust, noLinks))).toEqual([13, "database state: table events has 50 rows, manifest says 49"]);
  });
});
