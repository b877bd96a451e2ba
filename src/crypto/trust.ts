/**
 * Trust decisions over OpenSSH `allowed_signers` files (the format
 * `ssh-keygen -Y verify` reads) plus a revoked-keys list.
 */
import { existsSync } from "node:fs";
import { fingerprint, parsePublicKey } from "./sshsig.js";
import { readFileRegular } from "../fsutil.js";
import { homePaths } from "../home.js";

/** One allowed_signers entry. */
export interface AllowedSigner {
  principals: string[];
  namespaces: string[] | null;
  validAfter: Date | null;
  validBefore: Date | null;
  publicKey: Buffer;
  line: number;
}

/** Trust inputs for signature checks: allowed signers and revoked keys. */
export interface Trust {
  signers: AllowedSigner[];
  revoked: Buffer[];
  /** the allowed_signers file, when it does not exist (so nobody is trusted) */
  missing?: string;
}

/** The outcome of a trust check; `reason` is set when not trusted. */
export type TrustResult =
  | { trusted: true; principal: string; fingerprint: string }
  | { trusted: false; kind: "unknown" | "revoked" | "namespace" | "window"; reason: string; fingerprint: string };

function parseTime(s: string): Date {
  const m = s.match(/^(\d{4})(\d{2})(\d{2})(?:(\d{2})(\d{2})(\d{2})?)?(Z?)$/);
  if (!m) throw new Error(`bad time "${s}"`);
  const [, y, mo, d, h = "00", mi = "00", se = "00", z] = m;
  const iso = `${y}-${mo}-${d}T${h}:${mi}:${se}${z ? "Z" : ""}`;
  return new Date(iso);
}

function tokenize(line: string): string[] {
  const out: string[] = [];
  let cur = "";
  let quoted = false;
  for (const ch of line) {
    if (ch === '"') quoted = !quoted;
    if (!quoted && /\s/.test(ch)) {
      if (cur) out.push(cur);
      cur = "";
    } else cur += ch;
  }
  if (cur) out.push(cur);
  return out;
}

/**
 * Parses allowed_signers text. Lines that are not Ed25519 keys are skipped.
 * @throws Error naming the line when an option is malformed.
 */
export function parseAllowedSigners(text: string): AllowedSigner[] {
  const out: AllowedSigner[] = [];
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (!line || line.startsWith("#")) return;
    const tok = tokenize(line);
    const principals = (tok.shift() ?? "").split(",");
    let namespaces: string[] | null = null;
    let validAfter: Date | null = null;
    let validBefore: Date | null = null;
    while (tok.length && tok[0] !== "ssh-ed25519" && !tok[0]!.startsWith("ssh-") && !tok[0]!.startsWith("ecdsa-")) {
      for (const opt of tok.shift()!.split(/,(?=(?:[^"]*"[^"]*")*[^"]*$)/)) {
        const [k, v = ""] = opt.split(/=(.*)/s);
        const val = v.replace(/^"|"$/g, "");
        try {
          if (k === "namespaces") namespaces = val.split(",");
          else if (k === "valid-after") validAfter = parseTime(val);
          else if (k === "valid-before") validBefore = parseTime(val);
        } catch (e) {
          throw new Error(`allowed_signers line ${i + 1}: ${(e as Error).message}`);
        }
      }
    }
    if (tok[0] !== "ssh-ed25519" || !tok[1]) return;
    out.push({ principals, namespaces, validAfter, validBefore, publicKey: parsePublicKey(tok[1]), line: i + 1 });
  });
  return out;
}

/** Reads revoked keys: one OpenSSH public key per line. A missing file means none. */
export function readRevoked(path: string): Buffer[] {
  if (!existsSync(path)) return [];
  return readFileRegular(path, "utf8")
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith("#"))
    .map((l) => parsePublicKey(l));
}

/**
 * Decides whether `key` may sign under `namespace` at `now`. Revocation wins
 * over everything, whatever time a signed document claims for itself.
 */
export function checkTrust(signers: AllowedSigner[], revoked: Buffer[], key: Buffer, namespace: string, now: Date): TrustResult {
  const fp = fingerprint(key);
  if (revoked.some((r) => r.equals(key))) return { trusted: false, kind: "revoked", reason: `signer key ${fp} is revoked`, fingerprint: fp };
  const matches = signers.filter((s) => s.publicKey.equals(key));
  if (matches.length === 0) return { trusted: false, kind: "unknown", reason: `signer key ${fp} is not in allowed_signers`, fingerprint: fp };
  const nsOk = matches.filter((s) => !s.namespaces || s.namespaces.includes(namespace));
  if (nsOk.length === 0) return { trusted: false, kind: "namespace", reason: `signer key ${fp} is not allowed for namespace ${namespace}`, fingerprint: fp };
  const timeOk = nsOk.find((s) => (!s.validAfter || now >= s.validAfter) && (!s.validBefore || now < s.validBefore));
  if (!timeOk) return { trusted: false, kind: "window", reason: `signer key ${fp} is outside its validity window`, fingerprint: fp };
  return { trusted: true, principal: timeOk.principals[0]!, fingerprint: fp };
}

/**
 * checkTrust against a loaded Trust. An unknown signer where the
 * allowed_signers file does not exist says so: a wrong or unset AGENTBAK_HOME
 * (a cron job's) made every bundle look untrusted, and nothing said why.
 */
export function trusts(trust: Trust, key: Buffer, namespace: string, now: Date): TrustResult {
  const t = checkTrust(trust.signers, trust.revoked, key, namespace, now);
  if (t.trusted || t.kind !== "unknown" || !trust.missing) return t;
  return { ...t, reason: `${t.reason}: ${trust.missing} does not exist (is AGENTBAK_HOME the home that holds the signers?)` };
}

/**
 * Loads trust from an allowed_signers file (default AGENTBAK_HOME/allowed_signers)
 * and AGENTBAK_HOME/revoked_signers. A missing allowed_signers file trusts no one.
 * @throws Error when the file is malformed.
 */
export function loadTrust(home: string, allowedSignersPath?: string): Trust {
  const paths = homePaths(home);
  const path = allowedSignersPath ?? paths.allowedSigners;
  const found = existsSync(path);
  const signers = found ? parseAllowedSigners(readFileRegular(path, "utf8")) : [];
  return { signers, revoked: readRevoked(paths.revokedSigners), ...(found ? {} : { missing: path }) };
}
