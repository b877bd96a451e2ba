// Spool naming: object storage spools, folders do not; one folder per remote, named by a hash (never the URL).
import { describe, expect, it } from "vitest";
import { spoolDir, spools } from "../../../src/repository/spool.js";
import { homePaths } from "../../../src/home.js";

describe("spools", () => {
  it("object storage URLs spool, local folders do not", () => {
    expect(spools("s3://bucket/prefix")).toBe(true);
    expect(spools("/var/backups/agentbak")).toBe(false);
    expect(spools("./repo")).toBe(false);
  });

  it("each remote gets its own spool folder under AGENTBAK_HOME, named by 16 hex digits of its sha256", () => {
    const a = spoolDir("/h", "s3://bucket/a");
    const b = spoolDir("/h", "s3://bucket/b");
    expect(a).not.toBe(b);
    expect(spoolDir("/h", "s3://bucket/a")).toBe(a);
    // sha256("s3://bucket/a") starts with these 16 hex digits
    expect(a).toBe(homePaths("/h").spool("77828262d48e29aa"));
    expect(a.startsWith("/h/")).toBe(true);
    expect(a).not.toContain("bucket");
  });
});
