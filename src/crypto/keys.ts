/**
 * Key files: where they live, how they are generated and loaded.
 */
import { appendFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { noKey } from "../errors.js";
import { KEY_FILES, homePaths } from "../home.js";
import { ensureDir, writeFileAtomic, fsyncDir, readFileRegular } from "../fsutil.js";
import { generateIdentity, identityString, parseIdentities, type AgeIdentity } from "./age.js";
import { encodePrivateKey, fingerprint, generateSigningKey, parsePrivateKey, publicKeyLine, NS, type SigningKey } from "./sshsig.js";

/** What keygen wrote. */
export interface KeygenResult {
  dir: string;
  recipient: string;
  signer_fingerprint: string;
  principal: string;
  files: string[];
}

/**
 * Writes a fresh age identity and Ed25519 signing key into `dir` and appends
 * the signer to `dir/allowed_signers`. Refuses to overwrite existing keys.
 * @throws Error (EEXIST) when a key file is already there.
 */
export function keygen(dir: string, principal: string): KeygenResult {
  ensureDir(dir, 0o700);
  const files = [KEY_FILES.identity, KEY_FILES.recipient, KEY_FILES.signingKey, KEY_FILES.signingPub].map((f) => join(dir, f));
  for (const f of files) if (existsSync(f)) throw Object.assign(new Error(`key file exists: ${f}`), { code: "EEXIST", path: f });
  const id = generateIdentity();
  const sk = generateSigningKey(principal);
  const created = new Date().toISOString();
  writeFileAtomic(files[0]!, `# created: ${created}\n# public key: ${id.recipient}\n${identityString(id)}\n`, 0o600);
  writeFileAtomic(files[1]!, `${id.recipient}\n`);
  writeFileAtomic(files[2]!, encodePrivateKey(sk), 0o600);
  writeFileAtomic(files[3]!, publicKeyLine(sk.publicKey, principal) + "\n");
  const allowed = join(dir, KEY_FILES.allowedSigners);
  appendFileSync(allowed, `${principal} namespaces="${NS.manifest},${NS.report},${NS.receipt}" ${publicKeyLine(sk.publicKey)}\n`);
  fsyncDir(dir);
  return { dir, recipient: id.recipient, signer_fingerprint: fingerprint(sk.publicKey), principal, files: [...files, allowed] };
}

/** Why a key file could not be read: its errno, or what it is instead of a file. */
const why = (e: unknown) => {
  const x = e as NodeJS.ErrnoException;
  return x.code === "ENOTREG" || x.code === "EISDIR" ? x.message.replace(/^.* is /, "it is ") : x.code;
};

/**
 * Loads age identities: `AGENTBAK_IDENTITY` (the text itself), else the given
 * file, else `AGENTBAK_IDENTITY_FILE`, else AGENTBAK_HOME/age-identity.txt.
 * @throws AgentbakError(12) when none can be read.
 */
export function loadIdentities(file?: string): AgeIdentity[] {
  const inline = file ? undefined : process.env.AGENTBAK_IDENTITY;
  const path = file ?? process.env.AGENTBAK_IDENTITY_FILE ?? homePaths().identity;
  let text: string;
  if (inline) text = inline;
  else {
    try {
      text = readFileRegular(path, "utf8");
    } catch (e) {
      throw noKey(`no usable identity: cannot read ${path} (${why(e)})`);
    }
  }
  try {
    return parseIdentities(text);
  } catch (e) {
    throw noKey(`no usable identity in ${inline ? "AGENTBAK_IDENTITY" : path}: ${(e as Error).message}`);
  }
}

/**
 * Loads the signing key from `file`, AGENTBAK_SIGNING_KEY_FILE, or
 * AGENTBAK_HOME/signing-key.
 * @throws AgentbakError(12) when missing or unreadable.
 */
export function loadSigningKey(file?: string): SigningKey {
  const path = file ?? process.env.AGENTBAK_SIGNING_KEY_FILE ?? homePaths().signingKey;
  let text: string;
  try {
    text = readFileRegular(path, "utf8");
  } catch (e) {
    throw noKey(`signing key missing: cannot read ${path} (${why(e)})`);
  }
  try {
    return parsePrivateKey(text);
  } catch (e) {
    throw noKey(`signing key ${path} unusable: ${(e as Error).message}`);
  }
}
