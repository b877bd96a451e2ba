// Signed hash-chained JSON Lines (drill report, audit log): any edit, deletion, insertion or reorder breaks the chain at its index.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { holdsCheckpoint, lineSha256, nextLine, verifyChainText } from "../../../src/crypto/chainlog.js";
import { keygen } from "../../../src/crypto/keys.js";
import { NS, parsePrivateKey, type SigningKey } from "../../../src/crypto/sshsig.js";
import { parseAllowedSigners, type Trust } from "../../../src/crypto/trust.js";
import { AgentbakError } from "../../../src/errors.js";

let dir: string;
let key: SigningKey;
let trust: Trust;
let stranger: SigningKey;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "agentbak-chainlog-"));
  const k = keygen(join(dir, "k"), "ops");
  key = parsePrivateKey(readFileSync(join(k.dir, "signing-key"), "utf8"));
  trust = { signers: parseAllowedSigners(readFileSync(join(k.dir, "allowed_signers"), "utf8")), revoked: [] };
  const s = keygen(join(dir, "s"), "mallory");
  stranger = parsePrivateKey(readFileSync(join(s.dir, "signing-key"), "utf8"));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const chain = (bodies: Record<string, unknown>[], k: SigningKey | null = key) => bodies.reduce((text, b) => text + nextLine(text, b, k, NS.report).line, "");
const refusal = (f: () => unknown) => {
  try { f(); } catch (e) { return [(e as AgentbakError).code, (e as Error).message]; }
  return "verified";
};
const bodies = [1, 2, 3].map((n) => ({ at: "2026-03-01T00:00:00.000Z", result: "pass", sequence: n }));

describe("chain log", () => {
  it("entries chain by index and the previous line's sha256; a verified chain names its head", () => {
    const text = chain(bodies);
    const lines = text.split("\n").slice(0, -1).map((l) => JSON.parse(l));
    expect(lines.map((e) => e.index)).toEqual([0, 1, 2]);
    expect(lines[0].prev_sha256).toBe("0".repeat(64));
    expect(lines[2].prev_sha256).toBe(lineSha256(text.split("\n")[1]!));
    expect(verifyChainText(text, trust, NS.report, "report entry")).toEqual({ ok: true, entries: 3, head_sha256: lineSha256(text.split("\n")[2]!) });
  });

  it("an edited, deleted or reordered entry, or a cut line, is refused (13) at its index", () => {
    const lines = chain(bodies).split("\n").slice(0, -1);
    const join_ = (ls: string[]) => ls.join("\n") + "\n";
    expect(refusal(() => verifyChainText(join_([lines[0]!, lines[1]!.replace('"pass"', '"fail"'), lines[2]!]), trust, NS.report, "entry"))).toEqual([13, expect.stringMatching(/^entry 1 \(line 2\): signature: .*\(entry edited\)$/)]);
    expect(refusal(() => verifyChainText(join_([lines[0]!, lines[2]!]), trust, NS.report, "entry"))).toEqual([13, "entry 1 (line 2): index is 2, expected 1 (entry deleted, inserted or reordered)"]);
    expect(refusal(() => verifyChainText(join_([lines[1]!, lines[0]!]), trust, NS.report, "entry"))).toEqual([13, expect.stringMatching(/^entry 0 \(line 1\): index is 1/)]);
    expect(refusal(() => verifyChainText(join_(lines).slice(0, -5), trust, NS.report, "entry"))).toEqual([13, "entry 2: truncated line"]);
  });

  it("a key outside allowed_signers, another namespace, or an unsigned entry is refused; unsigned passes only when allowed", () => {
    expect(refusal(() => verifyChainText(chain(bodies, stranger), trust, NS.report, "entry"))).toEqual([13, expect.stringMatching(/^entry 0 \(line 1\): signer key SHA256:\S+ is not in allowed_signers$/)]);
    expect(refusal(() => verifyChainText(chain(bodies), trust, NS.receipt, "entry"))).toEqual([13, expect.stringMatching(/^entry 0 \(line 1\): signature: .*namespace/)]);
    const unsigned = chain(bodies, null);
    expect(refusal(() => verifyChainText(unsigned, trust, NS.report, "entry"))).toEqual([13, expect.stringMatching(/^entry 0 \(line 1\): unsigned/)]);
    expect(verifyChainText(unsigned, trust, NS.report, "entry", { allowUnsigned: true }).entries).toBe(3);
  });

  it("an entry lacking an expected field (a log moved in from another agent) is refused", () => {
    const text = chain(bodies.map((b) => ({ ...b, agent_id: "other" })));
    expect(refusal(() => verifyChainText(text, trust, NS.report, "entry", { expect: { agent_id: "billing-agent" } }))).toEqual([13, 'entry 0 (line 1): its agent_id is "other", not billing-agent (moved in from another log)']);
  });

  it("a checkpoint finds entries cut off the end, which leave a valid shorter chain", () => {
    const text = chain(bodies);
    const cp = { entries: 3, head_sha256: verifyChainText(text, trust, NS.report, "e").head_sha256 };
    const cut = text.split("\n").slice(0, 2).join("\n") + "\n";
    expect(verifyChainText(cut, trust, NS.report, "e").entries).toBe(2);
    expect(holdsCheckpoint(cut, cp)).toBe(false);
    expect(holdsCheckpoint(text, cp)).toBe(true);
    expect(holdsCheckpoint(text + nextLine(text, { at: "2026-03-02T00:00:00.000Z" }, key, NS.report).line, cp)).toBe(true);
    expect(holdsCheckpoint("", { entries: 0, head_sha256: "" })).toBe(true);
  });
});
