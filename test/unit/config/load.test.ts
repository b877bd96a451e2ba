// Loading agentbak.json: exit 10 when missing, 2 naming the file and each bad key, and nothing the workspace would capture twice.
import { afterAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig } from "../../../src/config/load.js";
import { AgentbakError } from "../../../src/errors.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-config-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const base = {
  agent: { id: "a", tenant: "t" },
  repository: "../repo",
  recipients: ["age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"],
  databases: [{ name: "state", path: "state/agent.sqlite" }],
  workspace: { path: "workspace" },
};
let n = 0;
const file = (content: unknown) => {
  const p = join(tmp, `c${n++}.json`);
  writeFileSync(p, typeof content === "string" ? content : JSON.stringify(content));
  return p;
};
const failure = (p: string) => {
  try { loadConfig(p); } catch (e) { return [(e as AgentbakError).code, (e as Error).message]; }
  return "loaded";
};

describe("loadConfig", () => {
  it("resolves relative paths against the config's folder", () => {
    const p = file(base);
    const lc = loadConfig(p);
    expect(lc.dir).toBe(tmp);
    expect(lc.resolve("state/agent.sqlite")).toBe(join(tmp, "state/agent.sqlite"));
    expect(lc.resolve("/abs")).toBe("/abs");
  });

  it("a missing file is exit 10, bad JSON or a bad key exit 2, each naming the file", () => {
    const missing = join(tmp, "nope.json");
    expect(failure(missing)).toEqual([10, `config ${missing}: not found`]);
    const bad = file("{ not json");
    expect(failure(bad)).toEqual([2, expect.stringMatching(new RegExp(`^config ${bad}: `))]);
    const wrong = file({ ...base, databases: [{ name: "state" }] });
    expect(failure(wrong)).toEqual([2, expect.stringMatching(new RegExp(`^config ${wrong}: .*databases\\.0\\.path`))]);
  });

  it("refuses a files entry or a database inside the workspace (it would be captured twice and never restore)", () => {
    const f = file({ ...base, files: ["workspace/notes/*.md"] });
    expect(failure(f)).toEqual([2, expect.stringContaining('files.0: "workspace/notes/*.md" is inside the workspace (workspace)')]);
    const d = file({ ...base, databases: [{ name: "state", path: "workspace/agent.sqlite" }] });
    expect(failure(d)).toEqual([2, expect.stringContaining('databases.0.path: "workspace/agent.sqlite" is inside the workspace (workspace)')]);
    expect(failure(file({ ...base, files: ["workspace-notes/**"] }))).toBe("loaded");
  });
});
