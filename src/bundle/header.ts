/**
 * A bundle's header checked without its payload: the signature over the raw
 * manifest bytes, then the strict manifest parse (DESIGN.md's order). Apart
 * from reader.ts so that listing a repository loads none of the payload's
 * readers (tar, age, the worker threads).
 */
import { verifyError, policyError, AgentbakError } from "../errors.js";
import { NS, verifyMessage } from "../crypto/sshsig.js";
import { trusts, type Trust } from "../crypto/trust.js";
import { parseManifest, sha256hex, type Manifest } from "./manifest.js";
import { readLayout, type BundleLayout } from "./outer.js";

/** A bundle whose signature and manifest verified (verifyHeader), and its payload digest too (reader.ts verifyBundle). */
export interface VerifiedBundle {
  layout: BundleLayout;
  manifest: Manifest;
  manifestSha256: string;
  signer: { principal: string; fingerprint: string };
  /** verifyBundle's `decrypting`: the payload's digest is left to readPayload, which checks each chunk as it reads it */
  payloadUnchecked?: true;
}

/**
 * Checks the signature and manifest of a bundle without touching the payload.
 * @throws AgentbakError(13) for format/signature/untrusted key, (14) for revoked or out-of-window signers and newer formats.
 */
export function verifyHeader(path: string, trust: Trust, now = new Date()): VerifiedBundle {
  return verifyLayout(readLayout(path), trust, now);
}

/** verifyHeader for a layout read elsewhere (the head and tail of a remote object). */
export function verifyLayout(layout: BundleLayout, trust: Trust, now = new Date()): VerifiedBundle {
  let key: Buffer;
  try {
    key = layout.signedBy ?? verifyMessage(layout.signature, NS.manifest, layout.manifest);
  } catch (e) {
    throw verifyError(`manifest.sig: ${(e as Error).message}`);
  }
  const t = trusts(trust, key, NS.manifest, now);
  if (!t.trusted) throw t.kind === "unknown" || t.kind === "namespace" ? verifyError(`manifest.sig: ${t.reason}`) : policyError(t.reason);
  const digest = layout.manifestSha256 ?? sha256hex(layout.manifest);
  let manifest: Manifest;
  try {
    manifest = parseManifest(layout.manifest, digest);
  } catch (e) {
    if (e instanceof AgentbakError) throw e;
    throw verifyError(`manifest.json: ${(e as Error).message}`);
  }
  if (manifest.signer.fingerprint !== t.fingerprint) throw verifyError(`manifest.json: names signer ${manifest.signer.fingerprint} but was signed by ${t.fingerprint}`);
  if (layout.payloadSize !== manifest.payload.size) throw verifyError(`payload.age: ${layout.payloadSize} bytes, manifest says ${manifest.payload.size}`);
  return { layout: { ...layout, signedBy: key, manifestSha256: digest }, manifest, manifestSha256: digest, signer: { principal: t.principal, fingerprint: t.fingerprint } };
}

