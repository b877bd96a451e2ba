/**
 * Every path under AGENTBAK_HOME, named in one module (src/home.ts), is the
 * path earlier versions wrote: a host's keys, trust files, trusted state,
 * spools, tokens and caches are found where they already are.
 */
import { afterEach, describe, expect, it } from "vitest";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { agentbakHome, homePaths, KEY_FILES } from "../../src/home.js";

const saved = process.env.AGENTBAK_HOME;
afterEach(() => {
  if (saved === undefined) delete process.env.AGENTBAK_HOME;
  else process.env.AGENTBAK_HOME = saved;
});

describe("AGENTBAK_HOME", () => {
  it("is the variable, resolved to an absolute path, else ~/.config/agentbak", () => {
    process.env.AGENTBAK_HOME = "rel/home";
    expect(agentbakHome()).toBe(resolve("rel/home"));
    delete process.env.AGENTBAK_HOME;
    expect(agentbakHome()).toBe(join(homedir(), ".config", "agentbak"));
  });

  it("holds the key files DESIGN names", () => {
    expect(KEY_FILES).toEqual({ identity: "age-identity.txt", recipient: "age-recipient.txt", signingKey: "signing-key", signingPub: "signing-key.pub", allowedSigners: "allowed_signers", revokedSigners: "revoked_signers" });
    process.env.AGENTBAK_HOME = "/srv/ab";
    expect(homePaths().identity).toBe("/srv/ab/age-identity.txt");
  });

  it("keeps every path where earlier versions wrote it", () => {
    const h = homePaths("/h");
    expect({
      identity: h.identity,
      recipient: h.recipient,
      signingKey: h.signingKey,
      allowedSigners: h.allowedSigners,
      revokedSigners: h.revokedSigners,
      pageIndexKey: h.pageIndexKey,
      credentialsEnv: h.credentialsEnv,
      trustedState: h.trustedState("acme", "billing"),
      trustedStateV1: h.trustedStateV1("billing"),
      spools: h.spools,
      spool: h.spool("0123456789abcdef"),
      tokens: h.tokens,
      token: h.token("tok_0123456789abcdef"),
      cache: h.cache.dir,
      headers: h.cache.headers("k"),
      headersKey: h.cache.headersKey,
      checkedPayloads: h.cache.checkedPayloads,
      blockSums: h.cache.blockSums("k"),
      lastBackup: h.cache.lastBackup("k"),
      workspaceCapture: h.cache.workspaceCapture("k"),
    }).toEqual({
      identity: "/h/age-identity.txt",
      recipient: "/h/age-recipient.txt",
      signingKey: "/h/signing-key",
      allowedSigners: "/h/allowed_signers",
      revokedSigners: "/h/revoked_signers",
      pageIndexKey: "/h/page-index-key",
      credentialsEnv: "/h/agentbak.env",
      trustedState: "/h/state/acme/billing.json",
      trustedStateV1: "/h/state/billing.json",
      spools: "/h/spool",
      spool: "/h/spool/0123456789abcdef",
      tokens: "/h/tokens",
      token: "/h/tokens/tok_0123456789abcdef.json",
      cache: "/h/cache",
      headers: "/h/cache/headers-k.bin",
      headersKey: "/h/cache/headers.key",
      checkedPayloads: "/h/cache/checked-payloads.json",
      blockSums: "/h/cache/blocks-k",
      lastBackup: "/h/cache/last-backup-k.json",
      workspaceCapture: "/h/cache/workspace-k.json",
    });
  });
});
