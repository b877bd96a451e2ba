// Progress through the real binary: `--progress` on a pipe gives JSON lines on
// stderr whose bytes grow to the stage's total for backup, restore, verify,
// copy, compact and drill; nothing at all on a pipe without it; on a real
// terminal (node-pty) a line that is drawn and cleared, also before Ctrl-C's
// "interrupted".
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { join } from "node:path";
import { json, makeAgent, ROOT, type RunResult, type TestAgent } from "../helpers.js";
import { plain, Term } from "../pty.js";

let a: TestAgent;
beforeAll(async () => {
  // ~48 MiB of state: several updates at ≤ 10 a second on two shared cores
  a = await makeAgent({ sizeMb: 48 });
}, 180_000);
afterAll(() => a?.cleanup(), 60_000);

interface Line {
  stage: string;
  bytes: number;
  total: number | null;
  done?: true;
}

/** Every stderr line parsed as a progress line (a line that is not one fails the test). */
function lines(r: RunResult): Line[] {
  // 3: done with warnings (the fixture agent's restore and drill warn, in the --json result on stdout)
  expect([0, 3], r.stderr).toContain(r.code);
  const out = r.stderr.split("\n").filter(Boolean);
  expect(out.length).toBeGreaterThan(0);
  return out.map((l) => {
    const o = JSON.parse(l) as Line;
    expect(Object.keys(o).sort()).toEqual(o.done ? ["bytes", "done", "stage", "total"] : ["bytes", "stage", "total"]);
    return o;
  });
}

/** The lines of `stage`: bytes never go down, and its last (done) line has bytes == total. @returns how many there were */
function grows(all: Line[], stage: string, minTotal = 1): Line[] {
  const s = all.filter((l) => l.stage === stage);
  expect(s.length, `stage ${stage} in ${JSON.stringify(all.map((l) => l.stage))}`).toBeGreaterThan(1);
  for (let i = 1; i < s.length; i++) expect(s[i]!.bytes).toBeGreaterThanOrEqual(s[i - 1]!.bytes);
  const last = s.at(-1)!;
  expect(last.done).toBe(true);
  expect(last.total).toBeGreaterThanOrEqual(minTotal);
  expect(last.bytes).toBe(last.total);
  expect(s[0]!.bytes).toBe(0);
  return s;
}

const MiB = 1 << 20;

describe("--progress off a terminal: JSON lines on stderr", () => {
  it("backup: the payload stage counts every byte of the databases and files, in several updates", async () => {
    const all = lines(await a.run(["backup", "--progress", "--json"]));
    const s = grows(all, "writing payload", 40 * MiB);
    expect(s.length).toBeGreaterThanOrEqual(4);
    // the phases before it are stages of unknown size
    expect(all.find((l) => l.stage === "snapshotting databases")).toMatchObject({ total: null });
  });

  it("verify with an identity: one read of the payload, its digest checked chunk by chunk as it is decrypted, reaches the payload's tar size", async () => {
    const r = await a.run(["verify", "latest", "--identity", a.identity, "--progress", "--json"]);
    const all = lines(r);
    expect(all.map((l) => l.stage)).not.toContain("checking payload digest"); // a second read (54e8681: read once)
    grows(all, "decrypting payload", 40 * MiB);
    expect(json(r).deep).toBe(true);
  });

  it("restore: decrypting grows to the payload's tar size, then placing", async () => {
    const r = await a.run(["restore", "latest", "--target", join(a.tmp, "restored"), "--yes", "--progress", "--json"]);
    const all = lines(r);
    grows(all, "decrypting payload", 40 * MiB);
    expect(all.at(-1)).toMatchObject({ stage: "placing restored state", done: true });
  });

  it("drill: the restore into a temp folder is counted, then the checks", async () => {
    const r = await a.run(["drill", "latest", "--spec", join(ROOT, "drills/checks-only.json"), "--identity", a.identity, "--no-report", "--progress", "--json"]);
    const all = lines(r);
    grows(all, "decrypting payload", 40 * MiB);
    expect(all.some((l) => l.stage === "checking the restored agent")).toBe(true);
  });

  it("copy: each bundle is checked and then sent, to its size", async () => {
    const all = lines(await a.run(["copy", "--from", a.repo, "--to", join(a.tmp, "copy"), "--progress", "--json"]));
    grows(all, "checking payload digest");
    grows(all, "sending bundle");
  });

  it("compact: the chain is read and the full bundle written, each to its total", async () => {
    const db = new Database(join(a.dir, "state/agent.sqlite"));
    db.prepare("UPDATE messages SET content = content || ' (edited)' WHERE abs(random()) % 50 = 0").run();
    db.close();
    const inc = json(await a.run(["backup", "--incremental", "--json"]));
    expect(inc.kind).toBe("incremental");
    const all = lines(await a.run(["compact", inc.snapshot_id, "--identity", a.identity, "--progress", "--json"]));
    grows(all, "decrypting payload");
    grows(all, "writing payload", 40 * MiB);
  });
});

describe("no --progress off a terminal", () => {
  it("prints nothing on stderr: backup, verify and restore with --json leave it empty", async () => {
    for (const args of [["backup", "--json"], ["verify", "latest", "--identity", a.identity, "--json"], ["restore", "latest", "--target", join(a.tmp, "quiet"), "--yes", "--json"]]) {
      const r = await a.run(args);
      expect([0, 3], r.stderr).toContain(r.code);
      expect(r.stderr).toBe("");
    }
  });
});

describe("on a terminal", () => {
  it("backup draws a line with bytes, total and percent, and clears it before the receipt", async () => {
    const t = Term.agentbak(["backup"], { cwd: a.dir, env: a.env, cols: 100 });
    expect((await t.exit()).code, plain(t.output)).toBe(0);
    expect(t.output).toMatch(/\r\x1b\[2Kwriting payload {2}[\d.]+ (KiB|MiB) \/ [\d.]+ MiB {2}\d+%/);
    // the last thing written before the receipt is the clearing: the receipt starts on a clean line
    const clear = t.output.lastIndexOf("\r\x1b[2K");
    expect(clear).toBeGreaterThan(t.output.lastIndexOf("writing payload"));
    expect(plain(t.output.slice(clear))).toMatch(/^✓ backed up billing-agent as \S+ \(full, sequence \d+, \d+ bytes\)\n/);
    expect(t.output).not.toMatch(/"stage"/);
  });

  it("Ctrl-C clears the line before 'interrupted', exits 130 and publishes nothing", async () => {
    const before = (json(await a.run(["snapshots", "--json"])) as unknown[]).length;
    const t = Term.agentbak(["backup", "--no-incremental"], { cwd: a.dir, env: a.env });
    await t.waitFor(/writing payload {2}/);
    t.write("\x03");
    expect((await t.exit()).code, plain(t.output)).toBe(130);
    expect(t.output).toMatch(/\r\x1b\[2Kagentbak: interrupted/);
    expect((json(await a.run(["snapshots", "--json"])) as unknown[]).length).toBe(before);
    expect(a.leftovers()).toEqual([]);
  });
});
