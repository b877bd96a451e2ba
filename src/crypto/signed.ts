/**
 * JSON records that carry their own signature: an SSHSIG over the canonical
 * JSON (RFC 8785) of the record without its `signature` field. Restore
 * requests, decisions and outcomes, and the audit log's head, are records a
 * repository holds and anyone with write access to it could edit; the
 * signature, its signer's trust and the `kind` inside the signed bytes (which
 * keeps them apart from receipts under the same namespace) are what make one
 * genuine.
 */
import canonicalize from "canonicalize";
import { verifyError } from "../errors.js";
import { signMessage, verifyMessage, type SigningKey } from "./sshsig.js";
import { trusts, type Trust, type TrustResult } from "./trust.js";

/** `body` with its signature under `namespace`. `body.kind` names what it is. */
export function signRecord<T extends { kind: string }>(body: T, key: SigningKey, namespace: string): T & { signature: string } {
  return { ...body, signature: signMessage(key, namespace, Buffer.from(canonicalize(body)!)) };
}

/**
 * Checks a record made by signRecord: a JSON object of the expected `kind`,
 * signed under `namespace` by a key trusted for it now.
 * @param what names the record in the error (its file or key, and where)
 * @returns the record without its signature
 * @throws AgentbakError(13) "<what>: <why>" when it is not a JSON object, is unsigned, of another kind, edited, or signed by a key not trusted.
 */
export function verifyRecord(record: unknown, trust: Trust, namespace: string, kind: string, what: string, now = new Date()): Record<string, unknown> & { kind: string } {
  return verifySigned(record, trust, namespace, kind, what, now).body;
}

/** verifyRecord, and the public key (SSH wire form) the record verified with. @throws as verifyRecord. */
export function verifySigned(record: unknown, trust: Trust, namespace: string, kind: string, what: string, now = new Date()): { body: Record<string, unknown> & { kind: string }; signer: Buffer } {
  const bad = (why: string) => verifyError(`${what}: ${why}`);
  if (!record || typeof record !== "object" || Array.isArray(record)) throw bad("not a JSON object");
  const { signature, ...body } = record as Record<string, unknown>;
  if (typeof signature !== "string") throw bad("unsigned, so not accepted as genuine");
  let pub: Buffer;
  try {
    pub = verifyMessage(signature, namespace, Buffer.from(canonicalize(body)!));
  } catch (e) {
    throw bad(`edited after it was signed (${(e as Error).message})`);
  }
  const t = trusts(trust, pub, namespace, now);
  if (!t.trusted) throw bad(t.reason);
  if (body.kind !== kind) throw bad(`a ${String(body.kind).slice(0, 40)} record, not a ${kind} record`);
  return { body: body as Record<string, unknown> & { kind: string }, signer: pub };
}

/**
 * Who signed a record made by signRecord, when it may also be unsigned or signed by a key not trusted (a record
 * believed either way, whose signer is only named): null when unsigned, else whether `trust` trusts the signer.
 * @throws AgentbakError(13) "<what>: edited after it was signed" when the signature does not match the record.
 */
export function signerOf(record: Record<string, unknown>, trust: Trust, namespace: string, what: string, now = new Date()): TrustResult | null {
  const { signature, ...body } = record;
  if (signature === undefined) return null;
  let pub: Buffer;
  try {
    if (typeof signature !== "string") throw new Error("the signature is not a string");
    pub = verifyMessage(signature, namespace, Buffer.from(canonicalize(body)!));
  } catch (e) {
    throw verifyError(`${what}: edited after it was signed (${(e as Error).message})`);
  }
  return trusts(trust, pub, namespace, now);
}
