// SSHSIG: interoperates with ssh-keygen -Y both ways; a signature binds its namespace and bytes.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { keygen } from "../../../src/crypto/keys.js";
import { parsePrivateKey, signMessage, verifyMessage, NS } from "../../../src/crypto/sshsig.js";

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "agentbak-sshsig-"));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("SSHSIG signatures and allowed_signers", () => {
  it("ssh-keygen -Y verify accepts our signature, and we accept ssh-keygen's", async () => {
    const k = keygen(join(dir, "keys1"), "ops@acme");
    const key = parsePrivateKey(readFileSync(join(k.dir, "signing-key"), "utf8"));
    const msg = Buffer.from('{"a":1}');
    writeFileSync(join(dir, "m.json"), msg);
    writeFileSync(join(dir, "m.sig"), signMessage(key, NS.manifest, msg));
    const r = await execa("ssh-keygen", ["-Y", "verify", "-f", join(k.dir, "allowed_signers"), "-I", "ops@acme", "-n", NS.manifest, "-s", join(dir, "m.sig")], { inputFile: join(dir, "m.json") });
    expect(r.stdout).toContain('Good "agentbak-manifest" signature for ops@acme');
    await execa("ssh-keygen", ["-Y", "sign", "-f", join(k.dir, "signing-key"), "-n", NS.report, join(dir, "m.json")]);
    const pub = verifyMessage(readFileSync(join(dir, "m.json.sig"), "utf8"), NS.report, msg);
    expect(pub.equals(key.publicKey)).toBe(true);
    const fp = await execa("ssh-keygen", ["-l", "-f", join(k.dir, "signing-key.pub")]);
    expect(fp.stdout).toContain(k.signer_fingerprint);
  });

  it("a signature binds its namespace and its exact bytes", () => {
    const k = keygen(join(dir, "keys2"), "a");
    const key = parsePrivateKey(readFileSync(join(k.dir, "signing-key"), "utf8"));
    const sig = signMessage(key, NS.report, Buffer.from("x"));
    expect(() => verifyMessage(sig, NS.manifest, Buffer.from("x"))).toThrow(/namespace/);
    expect(() => verifyMessage(sig, NS.report, Buffer.from("y"))).toThrow(/does not match/);
  });
});
