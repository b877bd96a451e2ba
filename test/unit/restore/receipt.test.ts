/**
 * Signed receipts (restore/receipt.ts): the receipt is signed over its
 * canonical JSON (namespace agentbak-receipt) and lands in the agent's audit
 * log, whose chain verifies; without a key it is unsigned and says so;
 * without a repository nothing is written.
 */
import canonicalize from "canonicalize";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { appendReceipt } from "../../../src/restore/receipt.js";
import { Repository } from "../../../src/repository/repository.js";
import { generateSigningKey, NS, publicKeyLine, verifyMessage } from "../../../src/crypto/sshsig.js";
import { parseAllowedSigners } from "../../../src/crypto/trust.js";

const dir = mkdtempSync(join(tmpdir(), "agentbak-receipt-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const a = { tenant: "acme", agent: "billing-agent" };
const key = generateSigningKey("ops");
const trust = { signers: parseAllowedSigners(`ops ${publicKeyLine(key.publicKey)}\n`), revoked: [] };

describe("appendReceipt", () => {
  it("signs the receipt's canonical JSON and appends it to the audit log, which verifies", async () => {
    const { repo } = await Repository.init(join(dir, "r1"));
    const receipt = { kind: "restore-receipt", snapshot_id: "S1", generation: 2, z: 1, a: [1, 2] };
    expect(await appendReceipt(repo, a, "restore", receipt, key)).toBe(true);
    const entry = JSON.parse((await repo.auditLog(a)).trim());
    expect(entry).toMatchObject({ event: "restore", receipt, tenant: "acme", agent_id: "billing-agent" });
    const signer = verifyMessage(entry.receipt_signature, NS.receipt, Buffer.from(canonicalize(receipt)!));
    expect(signer.equals(Buffer.from(key.publicKey))).toBe(true);
    expect(() => verifyMessage(entry.receipt_signature, NS.receipt, Buffer.from(canonicalize({ ...receipt, generation: 3 })!))).toThrow();
    expect(() => verifyMessage(entry.receipt_signature, NS.manifest, Buffer.from(canonicalize(receipt)!))).toThrow();
    expect((await repo.verifyAudit(a, trust, null)).entries).toBe(1);
  });

  it("without a key: appended unsigned, and reported unsigned; without a repository: nothing written", async () => {
    const { repo } = await Repository.init(join(dir, "r2"));
    expect(await appendReceipt(repo, a, "activate-refused", { kind: "x" }, null)).toBe(false);
    expect(JSON.parse((await repo.auditLog(a)).trim())).toMatchObject({ event: "activate-refused", receipt_signature: null });
    expect(await appendReceipt(null, a, "restore", { kind: "x" }, key)).toBe(true);
    expect(await appendReceipt(undefined, a, "restore", { kind: "x" }, null)).toBe(false);
  });
});
