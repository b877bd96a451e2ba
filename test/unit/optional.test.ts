// Optional packages (src/optional.ts): a package that is not installed is exit 2 with the install command at
// package.json's peer version; anything else a package throws while loading passes through unchanged.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { AgentbakError, Exit } from "../../src/errors.js";
import { installCommand, loadOptional } from "../../src/optional.js";

const peers = JSON.parse(readFileSync(resolve(import.meta.dirname, "..", "..", "package.json"), "utf8")).peerDependencies;

describe("loadOptional", () => {
  it("turns a real missing package into exit 2 naming npm install -g at the peer version", async () => {
    const e = await loadOptional("a test source", ["agentbak-no-such-package"], () => import("agentbak-no-such-package" as string)).catch((x) => x);
    expect(e).toBeInstanceOf(AgentbakError);
    expect(e.code).toBe(Exit.usage);
    expect(e.message).toBe("a test source needs agentbak-no-such-package, not installed (optional, left out of a plain install): npm install -g agentbak-no-such-package");
  });

  it("passes through a missing module it was not asked about, and any other error", async () => {
    const other = await loadOptional("x", ["@lancedb/lancedb"], () => import("agentbak-no-such-package" as string)).catch((x) => x);
    expect(other).not.toBeInstanceOf(AgentbakError);
    expect(other.code).toBe("ERR_MODULE_NOT_FOUND");
    const boom = new Error("native library failed to load");
    await expect(loadOptional("x", ["@lancedb/lancedb"], () => Promise.reject(boom))).rejects.toBe(boom);
  });

  it("returns what loads", async () => {
    expect(await loadOptional("x", ["node:path"], () => import("node:path"))).toHaveProperty("join");
  });
});

describe("installCommand", () => {
  it("names each package at package.json's peer range, quoting a range for the shell", () => {
    expect(peers["@lancedb/lancedb"]).toBe("0.31.0");
    expect(installCommand(["@lancedb/lancedb"])).toBe("npm install -g @lancedb/lancedb@0.31.0");
    expect(installCommand(["@aws-sdk/client-s3"])).toBe(`npm install -g '@aws-sdk/client-s3@${peers["@aws-sdk/client-s3"]}'`);
  });
});
