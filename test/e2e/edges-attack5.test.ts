// Issue 32, the fifth attack (agent side): cases the earlier attacks did not try, each through the real binary,
// server or S3 gateway: noncharacters from the agent's database in the drill's JUnit file and the terminal (E2),
// a spool flushed into a repository that replaced the one it was made for (E10), statuses the server answers that
// openapi.json did not list (E11). See docs/security-edges.md, "Fifth attack (agent side)".
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { makeAgent, type TestAgent } from "../helpers.js";

describe("[E2] noncharacters (U+FFFE, U+FFFF, U+FDD0) from the agent's database are escaped like controls", () => {
  let a: TestAgent;
  beforeAll(async () => {
    a = await makeAgent({ sizeMb: 1 });
  }, 120_000);
  afterAll(() => a?.cleanup());

  it("[E2] a failing invariant's row holding them: the JUnit file stays well-formed XML (xmllint), the terminal and the file show \\uffff", async () => {
    const db = new Database(join(a.dir, "state/agent.sqlite"));
    db.prepare("INSERT INTO agent_state (key, value) VALUES ('note', ?)").run("a\uffffb\ufffec\ufdd0d ]]> <x>");
    db.close();
    expect((await a.run(["backup"])).code).toBe(0);
    const inv = join(a.tmp, "note.sql");
    writeFileSync(inv, "-- check: no note\n-- severity: error\n-- database: state\nSELECT value FROM agent_state WHERE key = 'note';\n");
    const spec = join(a.tmp, "nonchar.json");
    writeFileSync(spec, JSON.stringify({ name: "nonchar", invariants: [inv] }));
    const junit = join(a.tmp, "junit.xml");
    const r = await a.run(["drill", "latest", "--spec", spec, "--identity", a.identity, "--no-report", "--junit", junit]);
    expect(r.code, r.stderr).toBe(15);
    const xml = readFileSync(junit, "utf8");
    expect(xml).toContain("a\\uffffb\\ufffec\\ufdd0d ]]&gt; &lt;x&gt;");
    expect(xml).not.toMatch(/[\ufffe\uffff\ufdd0]/);
    execFileSync("xmllint", ["--noout", junit]); // throws on a file that is not well-formed
    expect(r.stdout + r.stderr).toContain("a\\uffffb\\ufffec\\ufdd0d");
    expect(r.stdout + r.stderr).not.toMatch(/[\ufffe\uffff\ufdd0]/);
  }, 180_000);

  it("[E2] a label holding one is refused (2), as a control character is", async () => {
    const b = await a.run(["backup", "--label", "x\uffffy"]);
    expect(b.code).toBe(2);
    expect(b.stderr.trim()).toMatch(/^agentbak: --label: .*noncharacters$/);
  }, 60_000);
});
