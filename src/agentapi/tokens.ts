/**
 * Bearer tokens of the agent interface: each is scoped to one tenant, one
 * agent and one tier, and kept only as its sha256 in AGENTBAK_HOME/tokens/<id>.json
 * (one file per token, created exclusively, mode 0600). The token itself is
 * shown once, at creation; the server reads the file named by the token's id
 * on every request, so a revocation takes effect at once.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { readdirSync } from "node:fs";
import { TIERS, type Tier } from "../config/schema.js";
import { notFound, usageError } from "../errors.js";
import { createFileExclusive, writeFileAtomic, readFileRegular } from "../fsutil.js";
import { homePaths } from "../home.js";
import { notAnId } from "../facts.js";

/** A token as stored (and listed): never the token itself. */
export interface TokenRecord {
  id: string;
  tenant: string;
  agent: string;
  tier: Tier;
  created_at: string;
  revoked_at: string | null;
  sha256: string;
}

/** A token record as shown: never the hash. */
export type TokenView = Omit<TokenRecord, "sha256">;

/** `abk_<id>_<secret>`: the id names the record, the secret is 256 random bits. */
const TOKEN_RE = /^abk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$/;
const ID_RE = /^tok_[0-9a-f]{16}$/;

const dir = (home: string) => homePaths(home).tokens;
const file = (home: string, id: string) => homePaths(home).token(id);
const digest = (token: string) => createHash("sha256").update(token).digest();

function read(home: string, id: string): TokenRecord | null {
  try {
    return JSON.parse(readFileRegular(file(home, id), "utf8")) as TokenRecord;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw e;
  }
}

/**
 * Creates a token for one agent at one tier.
 * @returns the token (shown once; only its hash is kept) and its record.
 * @throws AgentbakError(2) for a malformed tenant or agent id or an unknown tier.
 */
export function createToken(home: string, scope: { tenant: string; agent: string; tier: string }): { token: string; record: TokenRecord } {
  for (const [k, v] of [["--tenant", scope.tenant], ["--agent", scope.agent]] as const) {
    const why = notAnId(k, v);
    if (why) throw usageError(why);
  }
  if (!(TIERS as readonly string[]).includes(scope.tier)) throw usageError(`--tier: ${JSON.stringify(scope.tier)} is not one of ${TIERS.join(", ")}`);
  const hex = randomBytes(8).toString("hex");
  const token = `abk_${hex}_${randomBytes(32).toString("base64url")}`;
  const record: TokenRecord = {
    id: `tok_${hex}`,
    tenant: scope.tenant,
    agent: scope.agent,
    tier: scope.tier as Tier,
    created_at: new Date().toISOString(),
    revoked_at: null,
    sha256: digest(token).toString("hex"),
  };
  createFileExclusive(file(home, record.id), JSON.stringify(record, null, 2) + "\n", 0o600);
  return { token, record };
}

/** Every token record, oldest first. */
export function listTokens(home: string): TokenRecord[] {
  let names: string[];
  try {
    names = readdirSync(dir(home));
  } catch {
    return [];
  }
  return names
    .filter((n) => ID_RE.test(n.replace(/\.json$/, "")))
    .map((n) => read(home, n.replace(/\.json$/, ""))!)
    .filter(Boolean)
    .sort((x, y) => x.created_at.localeCompare(y.created_at));
}

/**
 * Revokes a token (idempotent); the record stays, for the audit log's sake.
 * @throws AgentbakError(2) for a malformed id, (10) when there is no such token.
 */
export function revokeToken(home: string, id: string): TokenRecord {
  if (!ID_RE.test(id)) throw usageError(`not a token id: ${JSON.stringify(id.slice(0, 80))} (tok_ and 16 hex digits; see agentbak token list)`);
  const r = read(home, id);
  if (!r) throw notFound(`token ${id} not found in ${dir(home)}`);
  if (r.revoked_at) return r;
  const revoked = { ...r, revoked_at: new Date().toISOString() };
  writeFileAtomic(file(home, id), JSON.stringify(revoked, null, 2) + "\n", 0o600);
  return revoked;
}

/** The record a presented token belongs to, or null when it is malformed, unknown, wrong or revoked. */
export function authenticate(home: string, token: string): TokenRecord | null {
  const m = token.match(TOKEN_RE);
  if (!m) return null;
  const r = read(home, `tok_${m[1]}`);
  if (!r || r.revoked_at) return null;
  const want = Buffer.from(r.sha256, "hex");
  const got = digest(token);
  return want.length === got.length && timingSafeEqual(want, got) ? r : null;
}
