/**
 * The drill report: append-only JSON Lines. Each entry carries its index, the
 * sha256 of the line before it, and an SSHSIG signature (namespace
 * agentbak-report) over the canonical JSON of the entry without its signature.
 * An edited, deleted or reordered entry breaks the chain at its index.
 */
import canonicalize from "canonicalize";
import { appendFileSync, closeSync, existsSync, fsyncSync, mkdirSync, openSync, readFileSync } from "node:fs";
import { dirname } from "node:path";
import { sha256hex } from "../bundle/manifest.js";
import type { Trust } from "../bundle/reader.js";
import { NS, signMessage, verifyMessage, type SigningKey } from "../crypto/sshsig.js";
import { checkTrust } from "../crypto/trust.js";
import { verifyError } from "../errors.js";

const GENESIS = "0".repeat(64);

/** Appends `body` as the next entry; returns the entry written. */
export function appendReport(path: string, body: Record<string, unknown>, key: SigningKey): Record<string, unknown> {
  mkdirSync(dirname(path), { recursive: true });
  const lines = existsSync(path) ? readFileSync(path, "utf8").split("\n").filter(Boolean) : [];
  const entry: Record<string, unknown> = { index: lines.length, prev_sha256: lines.length ? sha256hex(lines.at(-1)!) : GENESIS, ...body };
  const signature = signMessage(key, NS.report, Buffer.from(canonicalize(entry)!));
  const line = canonicalize({ ...entry, signature })!;
  appendFileSync(path, line + "\n");
  const fd = openSync(path, "r+");
  fsyncSync(fd);
  closeSync(fd);
  return { ...entry, signature };
}

export interface ReportVerifyResult {
  ok: true;
  entries: number;
  head_sha256: string;
}

/**
 * Verifies every entry: JSON, index, chain link and signature by a trusted key.
 * @throws AgentbakError(13) naming the first bad entry's index.
 */
export function verifyReport(path: string, trust: Trust): ReportVerifyResult {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw Object.assign(verifyError(`report ${path}: ${(e as NodeJS.ErrnoException).code}`), { code: 10 as const });
  }
  if (text.length && !text.endsWith("\n")) throw verifyError(`report entry ${text.split("\n").length - 1}: truncated line`);
  const lines = text.split("\n").slice(0, -1);
  let prev = GENESIS;
  lines.forEach((line, i) => {
    const bad = (why: string) => verifyError(`report entry ${i} (line ${i + 1}): ${why}`);
    let e: Record<string, unknown>;
    try {
      e = JSON.parse(line);
    } catch {
      throw bad("not JSON");
    }
    if (e.index !== i) throw bad(`index is ${String(e.index)}, expected ${i} (entry deleted, inserted or reordered)`);
    if (e.prev_sha256 !== prev) throw bad("does not follow the entry before it (edited, deleted or reordered)");
    const { signature, ...body } = e;
    if (typeof signature !== "string") throw bad("unsigned");
    let pub: Buffer;
    try {
      pub = verifyMessage(signature, NS.report, Buffer.from(canonicalize(body)!));
    } catch (err) {
      throw bad(`signature: ${(err as Error).message} (entry edited)`);
    }
    const t = checkTrust(trust.signers, trust.revoked, pub, NS.report, new Date(String(body.at ?? Date.now())));
    if (!t.trusted) throw bad(t.reason);
    if (canonicalize(e) !== line) throw bad("not in canonical form (edited)");
    prev = sha256hex(line);
  });
  return { ok: true, entries: lines.length, head_sha256: prev };
}
