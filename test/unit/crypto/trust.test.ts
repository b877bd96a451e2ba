// allowed_signers trust: unknown, revoked, namespace and validity windows.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { keygen } from "../../../src/crypto/keys.js";
import { parsePrivateKey, NS } from "../../../src/crypto/sshsig.js";
import { checkTrust, parseAllowedSigners, readRevoked } from "../../../src/crypto/trust.js";

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "agentbak-trust-"));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("allowed_signers", () => {
  it("trust: unknown, revoked, namespace and validity windows", () => {
    const k = keygen(join(dir, "keys3"), "a");
    const key = parsePrivateKey(readFileSync(join(k.dir, "signing-key"), "utf8"));
    const line = readFileSync(join(k.dir, "signing-key.pub"), "utf8").trim().split(" ").slice(0, 2).join(" ");
    const now = new Date("2026-06-01T00:00:00Z");
    const signers = parseAllowedSigners(`# comment\nops namespaces="agentbak-manifest" valid-after="20260101",valid-before="20261231" ${line}\n`);
    expect(checkTrust(signers, [], key.publicKey, NS.manifest, now)).toMatchObject({ trusted: true, principal: "ops" });
    expect(checkTrust(signers, [], key.publicKey, NS.report, now)).toMatchObject({ trusted: false, kind: "namespace" });
    expect(checkTrust(signers, [], key.publicKey, NS.manifest, new Date("2027-01-02T00:00:00Z"))).toMatchObject({ trusted: false, kind: "window" });
    expect(checkTrust(signers, [key.publicKey], key.publicKey, NS.manifest, now)).toMatchObject({ trusted: false, kind: "revoked" });
    expect(checkTrust([], [], key.publicKey, NS.manifest, now)).toMatchObject({ trusted: false, kind: "unknown" });
  });

  it("skips comments and keys that are not Ed25519, keeps several principals and line numbers, names a malformed option's line", () => {
    const k = keygen(join(dir, "keys4"), "a");
    const line = readFileSync(join(k.dir, "signing-key.pub"), "utf8").trim().split(" ").slice(0, 2).join(" ");
    const signers = parseAllowedSigners(`# ops\n\nci ssh-rsa AAAAB3NzaC1yc2E\nops,backup@acme cert-authority ${line}\r\n`);
    expect(signers).toHaveLength(1);
    expect(signers[0]).toMatchObject({ principals: ["ops", "backup@acme"], namespaces: null, validAfter: null, validBefore: null, line: 4 });
    expect(() => parseAllowedSigners(`# x\nops valid-after="yesterday" ${line}\n`)).toThrow(/^allowed_signers line 2: /);
  });

  it("revocation wins over a valid entry; a missing revoked file means none", () => {
    const k = keygen(join(dir, "keys5"), "a");
    const key = parsePrivateKey(readFileSync(join(k.dir, "signing-key"), "utf8"));
    const pub = readFileSync(join(k.dir, "signing-key.pub"), "utf8");
    expect(readRevoked(join(dir, "no-such-file"))).toEqual([]);
    writeFileSync(join(dir, "revoked"), `# revoked 2026-05\n${pub}`);
    const revoked = readRevoked(join(dir, "revoked"));
    expect(revoked).toHaveLength(1);
    const signers = parseAllowedSigners(`ops ${pub.trim().split(" ").slice(0, 2).join(" ")}\n`);
    expect(checkTrust(signers, [], key.publicKey, NS.manifest, new Date())).toMatchObject({ trusted: true });
    const r = checkTrust(signers, revoked, key.publicKey, NS.manifest, new Date());
    expect(r).toMatchObject({ trusted: false, kind: "revoked" });
    expect((r as { reason: string }).reason).toMatch(/^signer key SHA256:\S+ is revoked$/);
  });
});
