// childCli(): the arguments that run this same CLI in a child, read from a real node process started with flags.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";

const VERSION = pathToFileURL(join(import.meta.dirname, "..", "..", "dist", "version.js")).href;

describe("childCli", () => {
  it("keeps node's own flags and the script, and leaves a debugger's out", () => {
    const dir = mkdtempSync(join(tmpdir(), "agentbak-childcli-"));
    const script = join(dir, "cli.mjs");
    writeFileSync(script, `import { childCli } from ${JSON.stringify(VERSION)};\nprocess.stdout.write(JSON.stringify(childCli()));\n`);
    let out: string;
    try {
      out = execFileSync(process.execPath, ["--max-old-space-size=64", "--inspect-port=0", "--stack-size=900", script], { encoding: "utf8" });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    expect(JSON.parse(out)).toEqual(["--max-old-space-size=64", "--stack-size=900", script]);
  });
});
