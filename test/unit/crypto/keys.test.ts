// Key files: keygen writes a usable age identity and signing key (0600) and never overwrites; loading names the file and exits 12 when it can not.
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { keygen, loadIdentities, loadSigningKey } from "../../../src/crypto/keys.js";
import { fingerprint, NS, signMessage, verifyMessage } from "../../../src/crypto/sshsig.js";
import { parseAllowedSigners } from "../../../src/crypto/trust.js";
import { AgentbakError } from "../../../src/errors.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-keys-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const saved = { ...process.env };
afterEach(() => {
  for (const k of ["AGENTBAK_IDENTITY", "AGENTBAK_IDENTITY_FILE", "AGENTBAK_SIGNING_KEY_FILE", "AGENTBAK_HOME"]) {
    if (saved[k] === undefined) delete process.env[k];
    else process.env[k] = saved[k];
  }
});
const failure = (f: () => unknown) => {
  try {
    f();
  } catch (e) {
    return [(e as AgentbakError).code, (e as Error).message];
  }
  return "loaded";
};

describe("keygen", () => {
  it("writes an identity and a signing key (0600) that load back, and an allowed_signers entry for the three namespaces", () => {
    const dir = join(tmp, "k1");
    const r = keygen(dir, "ops@acme");
    expect(r.files.map((f) => f.slice(dir.length + 1))).toEqual(["age-identity.txt", "age-recipient.txt", "signing-key", "signing-key.pub", "allowed_signers"]);
    expect(statSync(join(dir, "age-identity.txt")).mode & 0o777).toBe(0o600);
    expect(statSync(join(dir, "signing-key")).mode & 0o777).toBe(0o600);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(readFileSync(join(dir, "age-recipient.txt"), "utf8")).toBe(`${r.recipient}\n`);
    const ids = loadIdentities(join(dir, "age-identity.txt"));
    expect(ids).toHaveLength(1);
    expect(ids[0]!.recipient).toBe(r.recipient);
    const sk = loadSigningKey(join(dir, "signing-key"));
    expect(fingerprint(sk.publicKey)).toBe(r.signer_fingerprint);
    expect(verifyMessage(signMessage(sk, NS.report, Buffer.from("m")), NS.report, Buffer.from("m")).equals(sk.publicKey)).toBe(true);
    const [signer] = parseAllowedSigners(readFileSync(join(dir, "allowed_signers"), "utf8"));
    expect(signer).toMatchObject({ principals: ["ops@acme"], namespaces: [NS.manifest, NS.report, NS.receipt] });
  });

  it("refuses to overwrite an existing key (EEXIST, naming it) and leaves it as it was", () => {
    const dir = join(tmp, "k2");
    keygen(dir, "a");
    const before = readFileSync(join(dir, "signing-key"), "utf8");
    expect(() => keygen(dir, "b")).toThrow(expect.objectContaining({ code: "EEXIST", path: join(dir, "age-identity.txt") }));
    expect(readFileSync(join(dir, "signing-key"), "utf8")).toBe(before);
    expect(readFileSync(join(dir, "allowed_signers"), "utf8").trim().split("\n")).toHaveLength(1);
  });

  it("appends to an allowed_signers already there (another signer stays trusted)", () => {
    const dir = join(tmp, "k3");
    mkdirSync(dir);
    writeFileSync(join(dir, "allowed_signers"), "# team\n");
    keygen(dir, "a");
    expect(readFileSync(join(dir, "allowed_signers"), "utf8")).toMatch(/^# team\na namespaces=/);
  });
});

describe("loadIdentities", () => {
  const dir = join(tmp, "ids");
  const r = keygen(dir, "a");
  const idFile = join(dir, "age-identity.txt");
  const text = readFileSync(idFile, "utf8");

  it("takes AGENTBAK_IDENTITY (the text), then AGENTBAK_IDENTITY_FILE, then AGENTBAK_HOME's file; a named file beats them", () => {
    process.env.AGENTBAK_HOME = join(tmp, "nohome");
    expect(failure(() => loadIdentities())).toEqual([12, `no usable identity: cannot read ${join(tmp, "nohome", "age-identity.txt")} (ENOENT)`]);
    process.env.AGENTBAK_HOME = dir;
    expect(loadIdentities()[0]!.recipient).toBe(r.recipient);
    process.env.AGENTBAK_IDENTITY_FILE = join(tmp, "missing.txt");
    expect(failure(() => loadIdentities())[1]).toContain("missing.txt");
    process.env.AGENTBAK_IDENTITY = text;
    expect(loadIdentities()[0]!.recipient).toBe(r.recipient);
    process.env.AGENTBAK_IDENTITY = "garbage";
    expect(failure(() => loadIdentities())).toEqual([12, expect.stringMatching(/^no usable identity in AGENTBAK_IDENTITY: /)]);
    // a file named on the command line: the environment's text is not used
    expect(loadIdentities(idFile)[0]!.recipient).toBe(r.recipient);
  });

  it("a folder, or a file without an identity, is exit 12 naming the path and why, never the file's content", () => {
    const [dcode, dmsg] = failure(() => loadIdentities(dir)) as [number, string];
    expect(dcode).toBe(12);
    expect(dmsg).toMatch(new RegExp(`^no usable identity: cannot read ${dir} \\((EISDIR|it is .+)\\)$`));
    const bad = join(tmp, "bad-id.txt");
    writeFileSync(bad, "AGE-SECRET-KEY-NOT-REALLY secret-words\n");
    const [code, msg] = failure(() => loadIdentities(bad)) as [number, string];
    expect(code).toBe(12);
    expect(msg).toMatch(new RegExp(`^no usable identity in ${bad}: `));
    expect(msg).not.toContain("secret-words");
  });
});

describe("loadSigningKey", () => {
  it("takes the named file, then AGENTBAK_SIGNING_KEY_FILE, then AGENTBAK_HOME's; a missing or unusable key is exit 12 naming it", () => {
    const dir = join(tmp, "sk");
    const r = keygen(dir, "a");
    process.env.AGENTBAK_HOME = dir;
    expect(fingerprint(loadSigningKey().publicKey)).toBe(r.signer_fingerprint);
    process.env.AGENTBAK_SIGNING_KEY_FILE = join(tmp, "none");
    expect(failure(() => loadSigningKey())).toEqual([12, `signing key missing: cannot read ${join(tmp, "none")} (ENOENT)`]);
    expect(fingerprint(loadSigningKey(join(dir, "signing-key")).publicKey)).toBe(r.signer_fingerprint);
    // the public half where the private key should be
    expect(failure(() => loadSigningKey(join(dir, "signing-key.pub")))).toEqual([12, expect.stringMatching(new RegExp(`^signing key ${join(dir, "signing-key.pub")} unusable: `))]);
  });
});
