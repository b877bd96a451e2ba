// Paths in agentbak.json: a NUL byte is refused by the schema (a usage error naming the field),
// never passed to the file system, where node throws deep inside a stage (found by test/e2e/fuzz.test.ts's
// mutated configs: databases[0].path = "\0" reached "internal error").
import { describe, expect, it } from "vitest";
import { ConfigSchema } from "../../../src/config/schema.js";

const base = {
  agent: { id: "a", tenant: "t" },
  repository: "/var/backups/agentbak",
  recipients: ["age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"],
  databases: [{ name: "state", path: "state/agent.sqlite" }],
  files: ["prompts/**"],
  workspace: { path: "workspace" },
};
const issues = (c: unknown) => {
  const r = ConfigSchema.safeParse(c);
  return r.success ? [] : r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`);
};

describe("config paths", () => {
  it("accepts ordinary paths", () => expect(issues(base)).toEqual([]));
  it.each([
    ["databases.0.path", { ...base, databases: [{ name: "state", path: "state/\0agent.sqlite" }] }],
    ["repository", { ...base, repository: "/var/\0" }],
    ["files.0", { ...base, files: ["\0"] }],
    ["workspace.path", { ...base, workspace: { path: "work\0space" } }],
  ])("refuses a NUL byte in %s", (field, c) => expect(issues(c)).toEqual([`${field}: contains a NUL byte`]));
});
