/**
 * Signed receipts in the agent's audit log: restore, reconcile and activation
 * records (and refusals), each signed over its canonical JSON with the
 * namespace agentbak-receipt, in an entry of the hash-chained audit log.
 */
import canonicalize from "canonicalize";
import { NS, signMessage, type SigningKey } from "../crypto/sshsig.js";
import type { Repository } from "../repository/repository.js";
import { type AgentRef } from "../facts.js";

/**
 * Appends `{event, receipt, receipt_signature}` to `a`'s audit log when there
 * is a repository. Never pass state contents or credential values.
 * @returns whether the receipt is signed.
 */
export async function appendReceipt(repo: Repository | null | undefined, a: AgentRef, event: string, receipt: Record<string, unknown>, key: SigningKey | null): Promise<boolean> {
  const receipt_signature = key ? signMessage(key, NS.receipt, Buffer.from(canonicalize(receipt)!)) : null;
  await repo?.audit(a, { event, receipt, receipt_signature }, key);
  return Boolean(key);
}
