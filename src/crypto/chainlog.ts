/**
 * Signed, hash-chained JSON Lines: the drill report and the audit log. Each
 * entry carries its index, the sha256 of the line before it and an SSHSIG
 * signature over the canonical JSON of the entry without its signature, so an
 * edited, deleted, inserted or reordered entry breaks the chain at its index.
 */
import canonicalize from "canonicalize";
import { createHash } from "node:crypto";
import { verifyError } from "../errors.js";
import { signMessage, verifyMessage, type SigningKey } from "./sshsig.js";
import { trusts, type Trust } from "./trust.js";

const GENESIS = "0".repeat(64);
const sha256hex = (s: string) => createHash("sha256").update(s).digest("hex");

/** Lines of a chain's text (every line ends with "\n"). */
const linesOf = (text: string) => text.split("\n").slice(0, -1);

/**
 * The line (with its newline) that appends `body` to the chain in `text`:
 * signed with `key` under `namespace`, or unsigned when `key` is null.
 */
export function nextLine(text: string, body: Record<string, unknown>, key: SigningKey | null, namespace: string): { line: string; entry: Record<string, unknown> } {
  const lines = linesOf(text);
  const entry: Record<string, unknown> = { index: lines.length, prev_sha256: lines.length ? sha256hex(lines.at(-1)!) : GENESIS, ...body };
  const signature = key ? signMessage(key, namespace, Buffer.from(canonicalize(entry)!)) : null;
  const signed = { ...entry, signature };
  return { line: canonicalize(signed)! + "\n", entry: signed };
}

export interface ChainVerifyResult {
  ok: true;
  entries: number;
  head_sha256: string;
}

/**
 * Verifies every entry: JSON, index, link to the line before, canonical form,
 * and a signature by a key trusted for `namespace` (unsigned entries are
 * refused unless `allowUnsigned`).
 * @throws AgentbakError(13) naming the first bad entry.
 */
export function verifyChainText(text: string, trust: Trust, namespace: string, what: string, allowUnsigned = false): ChainVerifyResult {
  if (text.length && !text.endsWith("\n")) throw verifyError(`${what} ${linesOf(text + "\n").length - 1}: truncated line`);
  let prev = GENESIS;
  const lines = linesOf(text);
  lines.forEach((line, i) => {
    const bad = (why: string) => verifyError(`${what} ${i} (line ${i + 1}): ${why}`);
    let e: Record<string, unknown>;
    try {
      e = JSON.parse(line);
    } catch {
      throw bad("not JSON");
    }
    if (e.index !== i) throw bad(`index is ${String(e.index).slice(0, 20)}, expected ${i} (entry deleted, inserted or reordered)`);
    if (e.prev_sha256 !== prev) throw bad("does not follow the entry before it (edited, deleted or reordered)");
    if (canonicalize(e) !== line) throw bad("not in canonical form (edited)");
    const { signature, ...body } = e;
    if (signature === null && allowUnsigned) {
      prev = sha256hex(line);
      return;
    }
    if (typeof signature !== "string") throw bad("unsigned");
    let pub: Buffer;
    try {
      pub = verifyMessage(signature, namespace, Buffer.from(canonicalize(body)!));
    } catch (err) {
      throw bad(`signature: ${(err as Error).message} (entry edited)`);
    }
    const t = trusts(trust, pub, namespace, new Date(String(body.at ?? Date.now())));
    if (!t.trusted) throw bad(t.reason);
    prev = sha256hex(line);
  });
  return { ok: true, entries: lines.length, head_sha256: prev };
}
