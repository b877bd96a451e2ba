/**
 * The age v1 file format (C2SP age spec) for X25519 recipients, on node:crypto.
 *
 * The payload is encrypted with node's native ChaCha20-Poly1305 (the pure-JS
 * age-encryption package runs an order of magnitude slower); files written here
 * decrypt with the `age` CLI and files from `age` decrypt here (interop tests).
 */
import {
  createCipheriv,
  createDecipheriv,
  createHmac,
  createPrivateKey,
  createPublicKey,
  diffieHellman,
  generateKeyPairSync,
  hkdfSync,
  randomBytes,
  timingSafeEqual,
  type KeyObject,
} from "node:crypto";
import { Transform, type TransformCallback } from "node:stream";
import { bech32 } from "@scure/base";

/** bech32 (BIP 173) as age uses it: no length limit; upper- or lower-case input. */
function bech32Decode(s: string): { hrp: string; data: Uint8Array } {
  const { prefix, words } = bech32.decode(s as `${string}1${string}`, false);
  return { hrp: prefix, data: bech32.fromWords(words) };
}
const bech32Encode = (hrp: string, data: Uint8Array) => bech32.encode(hrp, bech32.toWords(data), false);

const INTRO = "age-encryption.org/v1\n";
const X25519_LABEL = "age-encryption.org/v1/X25519";
const CHUNK = 64 * 1024;
const TAG = 16;
const MAX_HEADER = 64 * 1024;
const PKCS8_X25519 = Buffer.from("302e020100300506032b656e04220420", "hex");
const SPKI_X25519 = Buffer.from("302a300506032b656e032100", "hex");

/** An age X25519 identity: the secret scalar and its public recipient. */
export interface AgeIdentity {
  secret: Buffer;
  recipient: string;
}

const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64").replace(/=+$/, "");
function unb64(s: string): Buffer {
  if (!/^[A-Za-z0-9+/]*$/.test(s)) throw new Error("invalid base64 in age header");
  const b = Buffer.from(s, "base64");
  if (b64(b) !== s) throw new Error("non-canonical base64 in age header");
  return b;
}

const privKey = (secret: Uint8Array): KeyObject =>
  createPrivateKey({ key: Buffer.concat([PKCS8_X25519, secret]), format: "der", type: "pkcs8" });
const pubKey = (pub: Uint8Array): KeyObject =>
  createPublicKey({ key: Buffer.concat([SPKI_X25519, pub]), format: "der", type: "spki" });
const rawPublic = (k: KeyObject): Buffer => k.export({ format: "der", type: "spki" }).subarray(SPKI_X25519.length);
const hkdf = (ikm: Uint8Array, salt: Uint8Array, info: string) =>
  Buffer.from(hkdfSync("sha256", ikm, salt, info, 32));

function sealOnce(key: Buffer, nonce: Buffer, plain: Uint8Array): Buffer {
  const c = createCipheriv("chacha20-poly1305", key, nonce, { authTagLength: TAG });
  const out = Buffer.concat([c.update(plain), c.final(), c.getAuthTag()]);
  return out;
}

function openOnce(key: Buffer, nonce: Buffer, sealed: Uint8Array): Buffer | null {
  if (sealed.length < TAG) return null;
  const d = createDecipheriv("chacha20-poly1305", key, nonce, { authTagLength: TAG });
  d.setAuthTag(sealed.subarray(sealed.length - TAG));
  try {
    const plain = d.update(sealed.subarray(0, sealed.length - TAG));
    d.final(); // checks the tag; a stream cipher has no bytes left over
    return plain;
  } catch {
    return null;
  }
}

/** Parses an `age1...` recipient into its 32-byte public key. @throws Error if malformed. */
export function parseRecipient(r: string): Buffer {
  const { hrp, data } = bech32Decode(r);
  if (hrp !== "age" || data.length !== 32 || r !== r.toLowerCase()) throw new Error(`invalid age recipient ${r.slice(0, 12)}...`);
  return Buffer.from(data);
}

/** Generates a new identity. */
export function generateIdentity(): AgeIdentity {
  const { privateKey } = generateKeyPairSync("x25519");
  const secret = privateKey.export({ format: "der", type: "pkcs8" }).subarray(PKCS8_X25519.length);
  return { secret: Buffer.from(secret), recipient: bech32Encode("age", rawPublic(createPublicKey(privateKey))) };
}

/** The identity string (bech32, prefix "age-secret-key-", upper-cased), as age-keygen writes it. */
export const identityString = (id: AgeIdentity) => bech32Encode("age-secret-key-", id.secret).toUpperCase();

/**
 * Parses identity file text in the age-keygen format (comments and blank lines
 * allowed, one or more secret-key lines).
 * @throws Error naming the line number when a line is not an identity.
 */
export function parseIdentities(text: string): AgeIdentity[] {
  const out: AgeIdentity[] = [];
  text.split(/\r?\n/).forEach((line, i) => {
    const t = line.trim();
    if (t === "" || t.startsWith("#")) return;
    let decoded: { hrp: string; data: Uint8Array };
    try {
      decoded = bech32Decode(t);
    } catch {
      throw new Error(`identity line ${i + 1} is not an age identity`);
    }
    if (decoded.hrp !== "age-secret-key-" || decoded.data.length !== 32) throw new Error(`identity line ${i + 1} is not an X25519 age identity`);
    const secret = Buffer.from(decoded.data);
    out.push({ secret, recipient: bech32Encode("age", rawPublic(createPublicKey(privKey(secret)))) });
  });
  if (out.length === 0) throw new Error("no age identity found");
  return out;
}

/** Builds an age header for `recipients` around a fresh file key. */
function buildHeader(recipients: string[], fileKey: Buffer): Buffer {
  let text = INTRO;
  for (const r of recipients) {
    const theirs = parseRecipient(r);
    const eph = generateKeyPairSync("x25519");
    const share = rawPublic(eph.publicKey);
    const shared = diffieHellman({ privateKey: eph.privateKey, publicKey: pubKey(theirs) });
    const wrapKey = hkdf(shared, Buffer.concat([share, theirs]), X25519_LABEL);
    const body = sealOnce(wrapKey, Buffer.alloc(12), fileKey);
    text += `-> X25519 ${b64(share)}\n${b64(body)}\n`;
  }
  text += "---";
  const mac = createHmac("sha256", hkdf(fileKey, Buffer.alloc(0), "header")).update(text).digest();
  return Buffer.from(`${text} ${b64(mac)}\n`);
}

interface Stanza {
  type: string;
  args: string[];
  body: Buffer;
}

/**
 * Parses a header from the start of `buf`.
 * @returns null when more bytes are needed; otherwise the stanzas, the bytes covered by the MAC, the MAC and the header length.
 * @throws Error when the header is malformed.
 */
function parseHeader(buf: Buffer): { stanzas: Stanza[]; macInput: Buffer; mac: Buffer; length: number } | null {
  if (buf.length < INTRO.length) return null;
  if (buf.subarray(0, INTRO.length).toString("latin1") !== INTRO) throw new Error("not an age v1 file");
  let pos = INTRO.length;
  const stanzas: Stanza[] = [];
  const nextLine = (): string | null => {
    const nl = buf.indexOf(0x0a, pos);
    if (nl < 0) {
      if (buf.length > MAX_HEADER) throw new Error("age header too long");
      return null;
    }
    const line = buf.subarray(pos, nl).toString("latin1");
    pos = nl + 1;
    return line;
  };
  for (;;) {
    const lineStart = pos;
    const line = nextLine();
    if (line === null) return null;
    if (line.startsWith("--- ")) {
      const mac = unb64(line.slice(4));
      if (mac.length !== 32) throw new Error("invalid age header MAC length");
      return { stanzas, macInput: buf.subarray(0, lineStart + 3), mac, length: pos };
    }
    if (!line.startsWith("-> ")) throw new Error("invalid age header line");
    const parts = line.slice(3).split(" ");
    if (parts.some((p) => p.length === 0 || /[^\x21-\x7e]/.test(p))) throw new Error("invalid age stanza arguments");
    const bodyParts: Buffer[] = [];
    for (;;) {
      const bl = nextLine();
      if (bl === null) return null;
      if (bl.length > 64) throw new Error("age stanza body line too long");
      bodyParts.push(unb64(bl));
      if (bl.length < 64) break;
    }
    stanzas.push({ type: parts[0]!, args: parts.slice(1), body: Buffer.concat(bodyParts) });
  }
}

function unwrapFileKey(stanzas: Stanza[], identities: AgeIdentity[]): Buffer | null {
  for (const id of identities) {
    const ourPub = parseRecipient(id.recipient);
    for (const s of stanzas) {
      if (s.type !== "X25519") continue;
      if (s.args.length !== 1) throw new Error("invalid X25519 stanza");
      const share = unb64(s.args[0]!);
      if (share.length !== 32 || s.body.length !== 32) throw new Error("invalid X25519 stanza");
      let shared: Buffer;
      try {
        shared = diffieHellman({ privateKey: privKey(id.secret), publicKey: pubKey(share) });
      } catch {
        throw new Error("invalid X25519 share");
      }
      if (shared.every((b) => b === 0)) throw new Error("invalid X25519 share");
      const key = openOnce(hkdf(shared, Buffer.concat([share, ourPub]), X25519_LABEL), Buffer.alloc(12), s.body);
      if (key) return key;
    }
  }
  return null;
}

function chunkNonce(counter: number, last: boolean): Buffer {
  const n = Buffer.alloc(12);
  n.writeUIntBE(counter, 5, 6);
  n[11] = last ? 1 : 0;
  return n;
}

/**
 * A Transform that age-encrypts its input to `recipients` (STREAM, 64 KiB chunks).
 * @throws Error at construction when a recipient does not parse.
 */
export class AgeEncryptStream extends Transform {
  private key: Buffer;
  /** plaintext not yet sealed: at most one chunk, kept until more data shows whether it is the last */
  private readonly acc = Buffer.allocUnsafe(CHUNK);
  private accLen = 0;
  private counter = 0;

  /** @param spent called with each input chunk once it is sealed or copied: its buffer may be reused */
  constructor(
    recipients: string[],
    private readonly spent?: (chunk: Buffer) => void,
  ) {
    super();
    if (recipients.length === 0) throw new Error("no age recipients");
    const fileKey = randomBytes(16);
    const nonce = randomBytes(16);
    this.key = hkdf(fileKey, nonce, "payload");
    this.push(Buffer.concat([buildHeader(recipients, fileKey), nonce]));
  }

  /** Seals one chunk and pushes its ciphertext and tag as they come (no concatenation: each would copy every byte). */
  private seal(plain: Buffer, last: boolean): void {
    const c = createCipheriv("chacha20-poly1305", this.key, chunkNonce(this.counter++, last), { authTagLength: TAG });
    this.push(c.update(plain));
    c.final();
    this.push(c.getAuthTag());
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    // a full chunk is sealed only once a byte after it has arrived, so the final chunk is known at flush time
    for (let off = 0; off < chunk.length; ) {
      if (this.accLen === CHUNK) {
        this.seal(this.acc, false); // the cipher's output is a new buffer: acc is free again at once
        this.accLen = 0;
      }
      if (this.accLen === 0 && chunk.length - off > CHUNK) {
        this.seal(chunk.subarray(off, off + CHUNK), false); // sealed where it lies, not copied first
        off += CHUNK;
        continue;
      }
      const n = Math.min(CHUNK - this.accLen, chunk.length - off);
      chunk.copy(this.acc, this.accLen, off, off + n);
      this.accLen += n;
      off += n;
    }
    this.spent?.(chunk);
    done();
  }

  override _flush(done: TransformCallback): void {
    this.seal(this.acc.subarray(0, this.accLen), true);
    done();
  }
}

/**
 * age decryption in steps, for a reader that holds the file's bytes itself:
 * the header (with the payload nonce), then each sealed chunk opened where it
 * lies. Each plaintext is a new buffer (node's decipher writes into none of
 * the caller's): nothing handed in is referenced once a call returns. Errors
 * (thrown): `not an age v1 file`, `no identity matched any of the file's
 * recipients` (code NO_IDENTITY), `invalid header MAC`, `payload chunk N
 * failed authentication`, `truncated age payload`, `trailing data after
 * final chunk`.
 */
export class AgeOpener {
  private key: Buffer | null = null;
  private counter = 0;
  private done = false;

  constructor(private readonly identities: AgeIdentity[]) {}

  /** the header was read and a file key unwrapped */
  get keyed(): boolean {
    return this.key !== null;
  }

  /**
   * Reads the header and the payload nonce at the start of `buf`.
   * @param final no byte follows `buf` in the file
   * @returns the bytes they took, or null when more are needed (never when `final`)
   */
  header(buf: Buffer, final: boolean): number | null {
    let h: ReturnType<typeof parseHeader>;
    try {
      h = parseHeader(buf);
    } catch (e) {
      throw ageError((e as Error).message);
    }
    if (!h || buf.length < h.length + 16) {
      if (final) throw ageError("truncated age header");
      return null;
    }
    let fileKey: Buffer | null;
    try {
      fileKey = unwrapFileKey(h.stanzas, this.identities);
    } catch (e) {
      throw ageError((e as Error).message);
    }
    if (!fileKey) throw ageError("no identity matched any of the file's recipients", "NO_IDENTITY");
    const mac = createHmac("sha256", hkdf(fileKey, Buffer.alloc(0), "header")).update(h.macInput).digest();
    if (!timingSafeEqual(mac, h.mac)) throw ageError("invalid header MAC");
    this.key = hkdf(fileKey, buf.subarray(h.length, h.length + 16), "payload");
    return h.length + 16;
  }

  /**
   * Opens the next sealed chunk (64 KiB + 16, or the shorter last one).
   * @param end nothing follows it in the file: it may be the final chunk
   */
  open(sealed: Buffer, end: boolean): Buffer {
    if (this.done) throw ageError("trailing data after final chunk");
    let plain = end ? openOnce(this.key!, chunkNonce(this.counter, true), sealed) : null;
    if (plain) this.done = true;
    else {
      plain = openOnce(this.key!, chunkNonce(this.counter, false), sealed);
      if (!plain || plain.length < CHUNK) throw ageError(`payload chunk ${this.counter} failed authentication`);
    }
    if (this.done && plain.length === 0 && this.counter > 0) throw ageError("empty final chunk");
    this.counter++;
    return plain;
  }

  /** At the file's end. @throws Error `truncated age payload` when its final chunk was not opened */
  finish(): void {
    if (!this.done) throw ageError("truncated age payload");
  }
}

function ageError(msg: string, code?: string): Error {
  const e = new Error(msg) as NodeJS.ErrnoException;
  if (code) e.code = code;
  return e;
}

/** A Transform that decrypts an age file with `identities` (AgeOpener's steps; its errors as the stream's 'error'). */
export class AgeDecryptStream extends Transform {
  private buf: Buffer = Buffer.alloc(0);
  private readonly age: AgeOpener;

  constructor(identities: AgeIdentity[]) {
    super();
    this.age = new AgeOpener(identities);
  }

  private drain(final: boolean): void {
    if (!this.age.keyed) {
      const used = this.age.header(this.buf, final);
      if (used === null) return;
      this.buf = this.buf.subarray(used);
    }
    const sealedSize = CHUNK + TAG;
    // a whole sealed chunk is kept until a byte after it arrives (or the file ends): only then is it known not to be the last
    while (this.buf.length > sealedSize || (final && this.buf.length > 0)) {
      const take = Math.min(sealedSize, this.buf.length);
      const plain = this.age.open(this.buf.subarray(0, take), final && take === this.buf.length);
      this.buf = this.buf.subarray(take);
      this.push(plain); // each chunk as it is (concatenating them would copy every byte once more)
    }
    if (final) this.age.finish();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    try {
      const need = CHUNK + TAG - this.buf.length;
      if (this.age.keyed && this.buf.length > 0 && chunk.length > need) {
        // the carried part of a chunk is completed from this one (a copy of at most one chunk) and opened: more
        // bytes follow it, so it is not the last; the rest is opened where it lies instead of being appended
        this.push(this.age.open(Buffer.concat([this.buf, chunk.subarray(0, need)]), false));
        this.buf = chunk.subarray(need);
      } else this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
      this.drain(false);
      cb();
    } catch (e) {
      cb(e as Error);
    }
  }

  override _flush(cb: TransformCallback): void {
    try {
      this.drain(true);
      cb();
    } catch (e) {
      cb(e as Error);
    }
  }
}
