/**
 * Ed25519 keys in OpenSSH formats and detached signatures in the SSHSIG format
 * (OpenSSH PROTOCOL.sshsig), readable by `ssh-keygen -Y verify`.
 */
import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes, sign, verify, type KeyObject } from "node:crypto";

const PKCS8_ED25519 = Buffer.from("302e020100300506032b657004220420", "hex");
const SPKI_ED25519 = Buffer.from("302a300506032b6570032100", "hex");
const KEYTYPE = "ssh-ed25519";

/** Namespaces bound into every signature. */
export const NS = { manifest: "agentbak-manifest", report: "agentbak-report", receipt: "agentbak-receipt" } as const;

/** An Ed25519 signing key: 32-byte seed and 32-byte public key, and the public key's fingerprint (taken once, where the key is made). */
export interface SigningKey {
  seed: Buffer;
  publicKey: Buffer;
  comment: string;
  /** `SHA256:...`, as ssh-keygen prints it (fingerprint) */
  fingerprint: string;
}

function sshString(b: Uint8Array | string): Buffer {
  const body = typeof b === "string" ? Buffer.from(b) : Buffer.from(b);
  const len = Buffer.alloc(4);
  len.writeUInt32BE(body.length);
  return Buffer.concat([len, body]);
}

/** Sequential reader of SSH wire-format fields. */
class Reader {
  pos = 0;
  constructor(private readonly buf: Buffer) {}
  bytes(n: number): Buffer {
    if (n < 0 || this.pos + n > this.buf.length) throw new Error("truncated ssh structure");
    const b = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return b;
  }
  u32(): number {
    return this.bytes(4).readUInt32BE(0);
  }
  string(): Buffer {
    return this.bytes(this.u32());
  }
  get done(): boolean {
    return this.pos === this.buf.length;
  }
}

/** The SSH wire encoding of an Ed25519 public key. */
export const publicKeyBlob = (pub: Uint8Array) => Buffer.concat([sshString(KEYTYPE), sshString(pub)]);

/** `SHA256:...` fingerprint, as ssh-keygen prints it. */
export const fingerprint = (pub: Uint8Array) =>
  "SHA256:" + createHash("sha256").update(publicKeyBlob(pub)).digest("base64").replace(/=+$/, "");

/** The one-line OpenSSH public key. */
export const publicKeyLine = (pub: Uint8Array, comment = "") =>
  `${KEYTYPE} ${publicKeyBlob(pub).toString("base64")}${comment ? " " + comment : ""}`;

/**
 * Parses `ssh-ed25519 AAAA... [comment]` (or just the base64 blob).
 * @throws Error if it is not an Ed25519 key.
 */
export function parsePublicKey(text: string): Buffer {
  const parts = text.trim().split(/\s+/);
  const b64 = parts[0] === KEYTYPE ? parts[1] : parts[0];
  if (!b64) throw new Error("empty public key");
  const r = new Reader(Buffer.from(b64, "base64"));
  if (r.string().toString() !== KEYTYPE) throw new Error("not an ssh-ed25519 key");
  const pub = r.string();
  if (pub.length !== 32 || !r.done) throw new Error("malformed ssh-ed25519 key");
  return Buffer.from(pub);
}

const privateKeyObject = (seed: Uint8Array): KeyObject =>
  createPrivateKey({ key: Buffer.concat([PKCS8_ED25519, seed]), format: "der", type: "pkcs8" });
/** Key objects by key, so that checking many signatures of one signer builds its key once. */
const keyObjects = new Map<string, KeyObject>();
function publicKeyObject(pub: Uint8Array): KeyObject {
  const id = Buffer.from(pub).toString("hex");
  let k = keyObjects.get(id);
  if (!k) keyObjects.set(id, (k = createPublicKey({ key: Buffer.concat([SPKI_ED25519, pub]), format: "der", type: "spki" })));
  return k;
}

/** Generates an Ed25519 key. */
export function generateSigningKey(comment: string): SigningKey {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const pub = publicKey.export({ format: "der", type: "spki" }).subarray(SPKI_ED25519.length);
  return { seed: privateKey.export({ format: "der", type: "pkcs8" }).subarray(PKCS8_ED25519.length), publicKey: pub, comment, fingerprint: fingerprint(pub) };
}

function armor(label: string, body: Buffer): string {
  const b64 = body.toString("base64");
  const lines = b64.match(/.{1,70}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join("\n")}\n-----END ${label}-----\n`;
}

/** Decodes an armored block; only the exact canonical armoring is accepted (one spelling per signature). */
function dearmor(label: string, text: string): Buffer {
  const m = text.match(new RegExp(`^-----BEGIN ${label}-----\n([A-Za-z0-9+/=\n]*)\n-----END ${label}-----\n?$`));
  if (!m) throw new Error(`malformed ${label.toLowerCase()} block`);
  const body = Buffer.from(m[1]!.replace(/\n/g, ""), "base64");
  if (armor(label, body).trimEnd() !== text.trimEnd()) throw new Error(`non-canonical ${label.toLowerCase()} encoding`);
  return body;
}

/** The unencrypted `openssh-key-v1` private key file (ssh-keygen reads it). */
export function encodePrivateKey(k: SigningKey): string {
  const check = randomBytes(4);
  let priv = Buffer.concat([
    check,
    check,
    sshString(KEYTYPE),
    sshString(k.publicKey),
    sshString(Buffer.concat([k.seed, k.publicKey])),
    sshString(k.comment),
  ]);
  const pad: number[] = [];
  for (let i = 1; (priv.length + pad.length) % 8 !== 0; i++) pad.push(i);
  priv = Buffer.concat([priv, Buffer.from(pad)]);
  const body = Buffer.concat([
    Buffer.from("openssh-key-v1\0"),
    sshString("none"),
    sshString("none"),
    sshString(""),
    Buffer.from([0, 0, 0, 1]),
    sshString(publicKeyBlob(k.publicKey)),
    sshString(priv),
  ]);
  return armor("OPENSSH PRIVATE KEY", body);
}

/**
 * Parses an unencrypted OpenSSH Ed25519 private key file.
 * @throws Error when encrypted, not Ed25519, or malformed.
 */
export function parsePrivateKey(text: string): SigningKey {
  const r = new Reader(dearmor("OPENSSH PRIVATE KEY", text));
  if (r.bytes(15).toString("latin1") !== "openssh-key-v1\0") throw new Error("not an openssh-key-v1 file");
  if (r.string().toString() !== "none" || r.string().toString() !== "none") throw new Error("encrypted signing keys are not supported");
  r.string();
  if (r.u32() !== 1) throw new Error("expected exactly one key");
  r.string();
  const p = new Reader(r.string());
  if (p.u32() !== p.u32()) throw new Error("private key check bytes differ");
  if (p.string().toString() !== KEYTYPE) throw new Error("signing key is not ssh-ed25519");
  const pub = Buffer.from(p.string());
  const sk = p.string();
  if (pub.length !== 32 || sk.length !== 64) throw new Error("malformed ssh-ed25519 private key");
  return { seed: Buffer.from(sk.subarray(0, 32)), publicKey: pub, comment: p.string().toString(), fingerprint: fingerprint(pub) };
}

function signedData(namespace: string, message: Uint8Array): Buffer {
  return Buffer.concat([
    Buffer.from("SSHSIG"),
    sshString(namespace),
    sshString(""),
    sshString("sha512"),
    sshString(createHash("sha512").update(message).digest()),
  ]);
}

/** Signs `message` under `namespace`, returning the armored SSHSIG text. */
export function signMessage(key: SigningKey, namespace: string, message: Uint8Array): string {
  const sig = sign(null, signedData(namespace, message), privateKeyObject(key.seed));
  const blob = Buffer.concat([
    Buffer.from("SSHSIG"),
    Buffer.from([0, 0, 0, 1]),
    sshString(publicKeyBlob(key.publicKey)),
    sshString(namespace),
    sshString(""),
    sshString("sha512"),
    sshString(Buffer.concat([sshString(KEYTYPE), sshString(sig)])),
  ]);
  return armor("SSH SIGNATURE", blob);
}

/**
 * Checks an armored SSHSIG over `message`: structure, the namespace it binds
 * and the Ed25519 signature.
 * @returns the signer's public key.
 * @throws Error naming what is wrong (`signature namespace is "x", expected "y"`, `signature does not match`).
 */
export function verifyMessage(sigText: string, namespace: string, message: Uint8Array): Buffer {
  const r = new Reader(dearmor("SSH SIGNATURE", sigText));
  if (r.bytes(6).toString("latin1") !== "SSHSIG") throw new Error("not an SSHSIG signature");
  if (r.u32() !== 1) throw new Error("unsupported SSHSIG version");
  const pub = parsePublicKey(r.string().toString("base64"));
  const ns = r.string().toString();
  r.string();
  const hashAlg = r.string().toString();
  const sigBlob = new Reader(r.string());
  if (!r.done) throw new Error("trailing bytes in SSHSIG signature");
  if (ns !== namespace) throw new Error(`signature namespace is "${ns}", expected "${namespace}"`);
  if (hashAlg !== "sha512" && hashAlg !== "sha256") throw new Error(`unsupported SSHSIG hash ${hashAlg}`);
  if (sigBlob.string().toString() !== KEYTYPE) throw new Error("signature is not ssh-ed25519");
  const sig = sigBlob.string();
  if (sig.length !== 64 || !sigBlob.done) throw new Error("malformed ed25519 signature");
  const data = Buffer.concat([
    Buffer.from("SSHSIG"),
    sshString(namespace),
    sshString(""),
    sshString(hashAlg),
    sshString(createHash(hashAlg).update(message).digest()),
  ]);
  if (!verify(null, data, publicKeyObject(pub), sig)) throw new Error("signature does not match");
  return pub;
}
