// The walk of a backup (src/tools/walk.ts, issue 33), on tiny checkouts written here: a callback handed down and
// called from below is a climb, and data handed down is none (this checkout's own walk: test/e2e/walk.test.ts).
import { afterAll, describe, expect, it } from "vitest";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { walkBackup } from "../../../src/tools/walk.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-walk-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** a checkout with these files under src/ */
function checkout(name: string, files: Record<string, string>): string {
  const root = join(tmp, name);
  for (const [f, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, "src", f)), { recursive: true });
    writeFileSync(join(root, "src", f), text);
  }
  return root;
}

describe("walkBackup", () => {
  it("a callback from the command, called by the capture below it, is a climb; the same value handed down as data is none", () => {
    const root = checkout("callback", {
      "capture/run.ts": `export function run(open: () => number): number { return open() + 1; }\nexport function runWith(n: number): number { return n + 1; }\n`,
      "commands/backup.ts": `import { run, runWith } from "../capture/run.js";\nexport function backup(): number { return run(() => 41) + runWith(41); }\n`,
    });
    expect(walkBackup(root)).toEqual([
      { kind: "call", from: "commands/backup.ts", to: "capture/run.ts" },
      { kind: "climb", from: "capture/run.ts", to: "commands/backup.ts" },
      { kind: "return", from: "commands/backup.ts", to: "capture/run.ts" },
      { kind: "return", from: "capture/run.ts", to: "commands/backup.ts" },
      { kind: "call", from: "commands/backup.ts", to: "capture/run.ts" },
      { kind: "return", from: "capture/run.ts", to: "commands/backup.ts" },
    ]);
  });
});
