// Bearer tokens: only the hash is kept, revocation is immediate, and malformed input is refused with exit 2.
import { afterAll, describe, expect, it } from "vitest";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { authenticate, createToken, listTokens, revokeToken } from "../../../src/agentapi/tokens.js";
import { homePaths } from "../../../src/home.js";
import { AgentbakError } from "../../../src/errors.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-tokens-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const home = () => mkdtempSync(join(tmp, "home-"));
const code = (f: () => unknown) => {
  try { f(); } catch (e) { return e instanceof AgentbakError ? e.code : `not an AgentbakError: ${e}`; }
  return "no error";
};

describe("tokens", () => {
  it("a created token authenticates to its record; the file holds its sha256, never the token, mode 0600", () => {
    const h = home();
    const { token, record } = createToken(h, { tenant: "acme", agent: "billing-agent", tier: "restore-request" });
    expect(token).toMatch(/^abk_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$/);
    expect(record.id).toBe(`tok_${token.slice(4, 20)}`);
    const f = homePaths(h).token(record.id);
    const text = readFileSync(f, "utf8");
    expect(text).not.toContain(token.slice(21));
    expect(JSON.parse(text).sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(statSync(f).mode & 0o777).toBe(0o600);
    expect(authenticate(h, token)).toEqual(record);
  });

  it("a wrong secret under a real id, a malformed token, or an unknown id authenticates to nothing", () => {
    const h = home();
    const { token } = createToken(h, { tenant: "acme", agent: "a", tier: "read" });
    const flipped = token.slice(0, -1) + (token.endsWith("A") ? "B" : "A");
    expect(authenticate(h, flipped)).toBeNull();
    expect(authenticate(h, token + "x")).toBeNull();
    expect(authenticate(h, `abk_${"0".repeat(16)}_${token.slice(21)}`)).toBeNull();
    expect(authenticate(h, "")).toBeNull();
  });

  it("revocation takes effect at once, is idempotent, and keeps the record", () => {
    const h = home();
    const { token, record } = createToken(h, { tenant: "acme", agent: "a", tier: "read" });
    const r1 = revokeToken(h, record.id);
    expect(r1.revoked_at).not.toBeNull();
    expect(authenticate(h, token)).toBeNull();
    expect(revokeToken(h, record.id).revoked_at).toBe(r1.revoked_at);
    expect(listTokens(h).map((t) => t.id)).toEqual([record.id]);
  });

  it("lists oldest first, ignoring files that are not token records; an empty home lists nothing", () => {
    const h = home();
    expect(listTokens(h)).toEqual([]);
    const a = createToken(h, { tenant: "acme", agent: "a", tier: "read" }).record;
    const b = createToken(h, { tenant: "acme", agent: "b", tier: "read" }).record;
    const later = { ...a, created_at: "2999-01-01T00:00:00.000Z" };
    writeFileSync(homePaths(h).token(a.id), JSON.stringify(later));
    writeFileSync(join(homePaths(h).tokens, "notes.json"), "{}");
    expect(readdirSync(homePaths(h).tokens)).toHaveLength(3);
    expect(listTokens(h).map((t) => t.id)).toEqual([b.id, a.id]);
  });

  it("refuses a malformed tenant, agent, tier or id (exit 2) and an unknown id (exit 10)", () => {
    const h = home();
    expect(code(() => createToken(h, { tenant: "Acme!", agent: "a", tier: "read" }))).toBe(2);
    expect(code(() => createToken(h, { tenant: "acme", agent: "../a", tier: "read" }))).toBe(2);
    expect(code(() => createToken(h, { tenant: "acme", agent: "a", tier: "root" }))).toBe(2);
    expect(code(() => revokeToken(h, "tok_xyz"))).toBe(2);
    expect(code(() => revokeToken(h, `tok_${"a".repeat(16)}`))).toBe(10);
  });
});
