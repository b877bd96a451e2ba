// Self-signed JSON records: genuine only when signed, unedited, of the expected kind and by a key trusted for the namespace now (exit 13 otherwise).
import { describe, expect, it } from "vitest";
import { signRecord, verifyRecord } from "../../../src/crypto/signed.js";
import { generateSigningKey, NS, publicKeyLine } from "../../../src/crypto/sshsig.js";
import { parseAllowedSigners, type Trust } from "../../../src/crypto/trust.js";
import { AgentbakError } from "../../../src/errors.js";

const key = generateSigningKey("ops");
const stranger = generateSigningKey("mallory");
const trust: Trust = { signers: parseAllowedSigners(`ops namespaces="${NS.receipt}" ${publicKeyLine(key.publicKey)}\n`), revoked: [] };
const fail = (record: unknown, t = trust, kind = "restore-request") => {
  try {
    verifyRecord(record, t, NS.receipt, kind, "requests/r1.json");
  } catch (e) {
    return [(e as AgentbakError).code, (e as Error).message];
  }
  return "verified";
};

describe("signRecord / verifyRecord", () => {
  const body = { kind: "restore-request", snapshot: "s1", reason: "disk lost", n: 3 };

  it("a signed record verifies and comes back without its signature, whatever its key order", () => {
    const r = signRecord(body, key, NS.receipt);
    expect(typeof r.signature).toBe("string");
    expect(verifyRecord(r, trust, NS.receipt, "restore-request", "x")).toEqual(body);
    // canonical JSON: the same record with its keys reordered (as a JSON round trip by another tool may do) still verifies
    const reordered = JSON.parse(JSON.stringify({ signature: r.signature, n: 3, reason: "disk lost", snapshot: "s1", kind: "restore-request" }));
    expect(verifyRecord(reordered, trust, NS.receipt, "restore-request", "x")).toEqual(body);
  });

  it("refuses what is not a JSON object, or unsigned, naming what", () => {
    expect(fail(null)).toEqual([13, "requests/r1.json: not a JSON object"]);
    expect(fail([1])).toEqual([13, "requests/r1.json: not a JSON object"]);
    expect(fail("x")).toEqual([13, "requests/r1.json: not a JSON object"]);
    expect(fail(body)).toEqual([13, "requests/r1.json: unsigned, so not accepted as genuine"]);
  });

  it("refuses a record edited after it was signed", () => {
    const r = signRecord(body, key, NS.receipt);
    const [code, msg] = fail({ ...r, reason: "approved by ops" }) as [number, string];
    expect(code).toBe(13);
    expect(msg).toMatch(/^requests\/r1\.json: edited after it was signed \(/);
    // an added field is an edit too
    expect(fail({ ...r, extra: true })[0]).toBe(13);
  });

  it("refuses a signature under another namespace", () => {
    const r = signRecord(body, key, NS.manifest);
    expect(fail(r)[0]).toBe(13);
  });

  it("refuses a key not trusted, or trusted for another namespace, or revoked", () => {
    expect(fail(signRecord(body, stranger, NS.receipt))).toEqual([13, expect.stringMatching(/^requests\/r1\.json: .+/)]);
    const otherNs: Trust = { signers: parseAllowedSigners(`ops namespaces="${NS.manifest}" ${publicKeyLine(key.publicKey)}\n`), revoked: [] };
    expect(fail(signRecord(body, key, NS.receipt), otherNs)[0]).toBe(13);
    expect(fail(signRecord(body, key, NS.receipt), { ...trust, revoked: [key.publicKey] })[0]).toBe(13);
    expect(fail(signRecord(body, key, NS.receipt), { signers: [], revoked: [], missing: "/home/x/allowed_signers" })).toEqual([13, expect.stringContaining("/home/x/allowed_signers does not exist")]);
  });

  it("refuses a genuine record of another kind (a decision offered as a request)", () => {
    const r = signRecord({ ...body, kind: "restore-decision" }, key, NS.receipt);
    expect(fail(r)).toEqual([13, "requests/r1.json: a restore-decision record, not a restore-request record"]);
  });
});
