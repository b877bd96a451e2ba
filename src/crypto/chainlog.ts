/**
 * Signed, hash-chained JSON Lines: the drill report and the audit log. Each
 * entry carries its index, the sha256 of the line before it and an SSHSIG
 * signature over the canonical JSON of the entry without its signature, so an
 * edited, deleted, inserted or reordered entry breaks the chain at its index.
 * Entries cut off the end leave a valid shorter chain: a checkpoint (a count
 * and the sha256 of the last line, kept somewhere the cut can not reach) is
 * what finds them.
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

/** A point a chain reached: how many entries, and the sha256 of the last one's line (without its newline). */
export interface ChainCheckpoint {
  entries: number;
  head_sha256: string;
}

/** The sha256 of a chain line, as the next entry's prev_sha256 and a checkpoint name it (`line` may end in its newline). */
export const lineSha256 = (line: string) => sha256hex(line.endsWith("\n") ? line.slice(0, -1) : line);

/** Whether the chain in `text` still holds `cp`: at least that many entries, the last of them the line it names. */
export function holdsCheckpoint(text: string, cp: ChainCheckpoint): boolean {
  if (cp.entries === 0) return true;
  const lines = linesOf(text);
  return lines.length >= cp.entries && sha256hex(lines[cp.entries - 1]!) === cp.head_sha256;
}

/**
 * Verifies every entry: JSON, index, link to the line before, canonical form,
 * the fields every entry must carry (`o.expect`: an audit log's tenant and
 * agent, so a whole log moved in from another agent is found), and a
 * signature by a key trusted for `namespace` (unsigned entries are refused
 * unless `o.allowUnsigned`).
 * @throws AgentbakError(13) naming the first bad entry.
 */
export function verifyChainText(text: string, trust: Trust, namespace: string, what: string, o: { allowUnsigned?: boolean; expect?: Record<string, string> } = {}): ChainVerifyResult {
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
    for (const [k, v] of Object.entries(o.expect ?? {})) if (e[k] !== v) throw bad(`its ${k} is ${JSON.stringify(e[k])?.slice(0, 80)}, not ${v} (moved in from another log)`);
    const { signature, ...body } = e;
    if (signature === null && o.allowUnsigned) {
      prev = sha256hex(line);
      return;
    }
    if (typeof signature !== "string") throw bad("unsigned (written without a signing key, or forged), so not accepted as genuine");
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
