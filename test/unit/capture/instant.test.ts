// The instant between the hooks: files listed after the pre hook, the post hook run whatever failed (its own failure then a warning),
// the first failure thrown, and databases read at one instant.
import { afterAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { captureInstant } from "../../../src/capture/instant.js";
import type { DbPlan } from "../../../src/capture/plan.js";
import { captureScope } from "../../../src/capture/scope.js";
import { loadConfig } from "../../../src/config/load.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-instant-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
let n = 0;
function agent(extra: Record<string, unknown>) {
  const dir = join(tmp, `agent-${n++}`);
  mkdirSync(join(dir, "notes"), { recursive: true });
  writeFileSync(join(dir, "agentbak.json"), JSON.stringify({ agent: { id: "a", tenant: "t" }, repository: "../repo", recipients: ["age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"], ...extra }));
  const lc = loadConfig(join(dir, "agentbak.json"));
  const warnings: string[] = [];
  const scope = captureScope(lc, mkdtempSync(join(dir, "staging-")), join(dir, "home"), warnings);
  return { dir, lc, scope, warnings };
}
// the copy read: no parent, nothing in place (the only part of the plan a copy reads)
const copyPlan = { mode: "copy", parents: new Map(), bases: new Map() } as unknown as DbPlan;
const opts = { repoDir: null, listed: null, waitMs: 2000, fingerprint: false, held: { taken: { kind: "copy" as const } } };

describe("captureInstant", () => {
  it("runs the pre hook, lists and captures `files` after it, then the post hook", async () => {
    const a = agent({ files: ["notes/*.md"], hooks: { pre: ["echo pre >> hooks.log; echo made-by-pre > notes/flushed.md"], post: ["echo post >> hooks.log"] } });
    const got = await captureInstant(a.lc, copyPlan, a.scope, opts);
    expect(readFileSync(join(a.dir, "hooks.log"), "utf8")).toBe("pre\npost\n");
    expect(got.files.map((f) => f.path)).toEqual(["files/notes/flushed.md"]);
    expect(readFileSync(got.files[0]!.file, "utf8")).toBe("made-by-pre\n");
    expect(got.dbs).toEqual([]);
    expect(got.ws.manifest).toBeNull();
  });

  it("a failing pre hook: nothing is captured, the post hook still runs, and the pre hook's failure (exit 1) is thrown", async () => {
    const a = agent({ files: ["notes/*.md"], hooks: { pre: ["echo 'cannot pause' >&2; exit 2"], post: ["echo post >> hooks.log"] } });
    writeFileSync(join(a.dir, "notes/a.md"), "a");
    await expect(captureInstant(a.lc, copyPlan, a.scope, opts)).rejects.toMatchObject({ code: 1, message: `pre hook "echo 'cannot pause' >&2; exit 2" exited 2: cannot pause` });
    expect(readFileSync(join(a.dir, "hooks.log"), "utf8")).toBe("post\n");
    expect(existsSync(join(a.scope.staging, "files"))).toBe(false);
  });

  it("when the capture failed and the post hook fails too, the capture's failure is thrown and the post hook's is a warning", async () => {
    const a = agent({ files: ["notes/missing.md"], hooks: { pre: [], post: ["exit 5"] } });
    await expect(captureInstant(a.lc, copyPlan, a.scope, opts)).rejects.toMatchObject({ message: expect.stringContaining("notes/missing.md") });
    expect(a.warnings).toEqual(['post hook "exit 5" exited 5']);
  });

  it("a failing post hook alone fails the capture", async () => {
    const a = agent({ hooks: { pre: [], post: ["exit 7"] } });
    await expect(captureInstant(a.lc, copyPlan, a.scope, opts)).rejects.toMatchObject({ code: 1, message: 'post hook "exit 7" exited 7' });
    expect(a.warnings).toEqual([]);
  });

  it("copies every database at one instant, each with its restore target", async () => {
    const a = agent({ databases: [{ name: "state", path: "state.sqlite" }, { name: "memory", path: "mem/memory.sqlite" }] });
    mkdirSync(join(a.dir, "mem"));
    for (const [f, v] of [["state.sqlite", 1], ["mem/memory.sqlite", 2]] as const) {
      const db = new Database(join(a.dir, f));
      db.pragma("journal_mode = WAL");
      db.exec(`CREATE TABLE t (x); INSERT INTO t VALUES (${v})`);
      db.close();
    }
    const got = await captureInstant(a.lc, copyPlan, a.scope, { ...opts, fingerprint: true });
    expect(got.dbs.map((d) => [d.name, d.target, d.copy])).toEqual([
      ["state", "state.sqlite", join(a.scope.staging, "db/state.sqlite")],
      ["memory", "mem/memory.sqlite", join(a.scope.staging, "db/memory.sqlite")],
    ]);
    expect(got.cut).toMatchObject({ method: "write-locks", databases: ["memory", "state"] });
    expect(got.dbState).toMatch(/./);
    const copy = new Database(got.dbs[1]!.copy, { readonly: true });
    expect(copy.prepare("SELECT x FROM t").pluck().get()).toBe(2);
    copy.close();
  });
});
