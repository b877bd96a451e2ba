/**
 * Reading and verifying a bundle (src/bundle/reader.ts), on bundles the real
 * writer made: the signature decides first (an unknown or wrong-namespace
 * key 13, a revoked or out-of-window one 14), the header check never reads
 * the payload, the payload digest catches a flipped byte (13), decryption
 * without a matching identity is 12 naming the recipients, and the
 * components come out byte for byte (0600), only those asked for.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createCipheriv, createHash } from "node:crypto";
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateIdentity, type AgeIdentity } from "../../../src/crypto/age.js";
import { fingerprint, generateSigningKey, publicKeyLine, type SigningKey } from "../../../src/crypto/sshsig.js";
import { parseAllowedSigners, type Trust } from "../../../src/crypto/trust.js";
import type { Manifest } from "../../../src/bundle/manifest.js";
import { readLayout } from "../../../src/bundle/outer.js";
import { planBundle, writeBundleFile, writePayload, type StagedComponent } from "../../../src/bundle/writer.js";
import { fileRangeSha256, readPayload, verifyBundle, verifyHeader } from "../../../src/bundle/reader.js";
import { AgentbakError } from "../../../src/errors.js";
import { manifestDraft } from "./draft.js";

let tmp: string;
let key: SigningKey;
let id: AgeIdentity;
let trust: Trust;
let bundle: string;
const files = { "files/notes.md": Buffer.from("remember the customer's timezone\n".repeat(200)), "files/data/blob.bin": createCipheriv("aes-128-ctr", Buffer.alloc(16, 2), Buffer.alloc(16)).update(Buffer.alloc(200_000)) };
const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");
const trustOf = (line: string): Trust => ({ signers: parseAllowedSigners(line), revoked: [] });

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), "agentbak-reader-"));
  key = generateSigningKey("backup@host");
  id = generateIdentity();
  trust = trustOf(`backup@host namespaces="agentbak-manifest" ${publicKeyLine(key.publicKey)}`);
  const components: StagedComponent[] = Object.entries(files).map(([p, data]) => {
    const f = join(tmp, p.replaceAll("/", "_"));
    writeFileSync(f, data);
    return { path: p, kind: "file", name: p, file: f };
  });
  bundle = join(tmp, "snap.agentbak");
  const plan = planBundle(bundle, key, components);
  const { components: written, payload } = await writePayload(components, [id.recipient], plan);
  const m = manifestDraft(key, id.recipient, { components: written, payload }) as Manifest;
  await writeBundleFile(m, key, plan);
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

let n = 0;
/** a copy of the bundle with one byte flipped at `at` */
const flipped = (at: (l: ReturnType<typeof readLayout>) => number) => {
  const p = join(tmp, `copy${n++}.agentbak`);
  copyFileSync(bundle, p);
  const b = readFileSync(p);
  b[at(readLayout(p))] ^= 0x01;
  writeFileSync(p, b);
  return p;
};
const failure = async (f: () => unknown) => {
  try {
    await f();
  } catch (e) {
    expect(e).toBeInstanceOf(AgentbakError);
    return [(e as AgentbakError).code, (e as Error).message] as const;
  }
  throw new Error("accepted");
};

describe("the signature and the manifest", () => {
  it("a bundle from a trusted signer verifies, naming the signer", async () => {
    const v = await verifyBundle(bundle, trust);
    expect(v.signer).toEqual({ principal: "backup@host", fingerprint: fingerprint(key.publicKey) });
    expect(v.manifest.components.map((c) => c.path)).toEqual(Object.keys(files));
    expect(v.manifestSha256).toBe(sha(v.layout.manifest));
  });

  it("an unknown key, a key not allowed for manifests: 13; a revoked key or one outside its window: 14", async () => {
    const other = generateSigningKey("x");
    const line = publicKeyLine(key.publicKey);
    expect(await failure(() => verifyHeader(bundle, trustOf(`x ${publicKeyLine(other.publicKey)}`)))).toEqual([13, `manifest.sig: signer key ${fingerprint(key.publicKey)} is not in allowed_signers`]);
    expect((await failure(() => verifyHeader(bundle, trustOf(`backup@host namespaces="agentbak-report" ${line}`))))[0]).toBe(13);
    expect((await failure(() => verifyHeader(bundle, { ...trust, revoked: [Buffer.from(key.publicKey)] })))).toEqual([14, `signer key ${fingerprint(key.publicKey)} is revoked`]);
    expect((await failure(() => verifyHeader(bundle, trustOf(`backup@host valid-before="20200101" ${line}`))))[0]).toBe(14);
    // the window is judged at `now`
    expect(verifyHeader(bundle, trustOf(`backup@host valid-before="20300101" ${line}`), new Date("2029-01-01")).signer.principal).toBe("backup@host");
  });

  it("a changed manifest byte fails the signature (13) before anything is parsed", async () => {
    const p = flipped((l) => l.payloadOffset - 3 * 512 - 100);
    const [code, message] = await failure(() => verifyHeader(p, trust));
    expect(code).toBe(13);
    expect(message).toMatch(/^manifest\.(sig|json)/);
  });
});

describe("the payload", () => {
  it("the header check never reads the payload; the full check finds a flipped payload byte (13)", async () => {
    const p = flipped((l) => l.payloadOffset + Math.floor(l.payloadSize / 2));
    expect(verifyHeader(p, trust).manifest.snapshot_id).toBe("20261206T120000000Z-0123abcd");
    expect(await failure(() => verifyBundle(p, trust))).toEqual([13, "payload.age: digest mismatch (not the payload the manifest signed)"]);
  });

  it("fileRangeSha256 is the sha256 of the range; a range past the end is 13 naming the byte", async () => {
    const b = readFileSync(bundle);
    expect(await fileRangeSha256(bundle, 100, 5000)).toBe(sha(b.subarray(100, 5100)));
    expect(await fileRangeSha256(bundle, 0, 0)).toBe(sha(Buffer.alloc(0)));
    expect(await failure(() => fileRangeSha256(bundle, b.length - 10, 20))).toEqual([13, `bundle truncated at byte ${b.length}`]);
  });

  it("readPayload writes each component byte for byte, mode 0600; `only` writes just those asked for", async () => {
    const v = await verifyBundle(bundle, trust);
    const out = join(tmp, "out");
    const r = await readPayload(v, [id], out);
    expect(r.components.map((c) => [c.path, c.sha256, c.size])).toEqual(Object.entries(files).map(([p, d]) => [p, sha(d), d.length]));
    for (const [p, d] of Object.entries(files)) {
      expect(readFileSync(join(out, p)).equals(d)).toBe(true);
      expect(statSync(join(out, p)).mode & 0o777).toBe(0o600);
    }
    const some = join(tmp, "some");
    await readPayload(v, [id], some, new Set(["files/notes.md"]));
    expect(readdirSync(some, { recursive: true })).toEqual(["files", "files/notes.md"]);
  });

  it("without an identity the payload was encrypted to: 12, naming its recipients", async () => {
    const v = await verifyBundle(bundle, trust);
    const [code, message] = await failure(() => readPayload(v, [generateIdentity()]));
    expect(code).toBe(12);
    expect(message).toContain(`(recipients: ${id.recipient})`);
  });

  it("a component written where a file is in the way is an I/O failure naming the place (1), not a bad bundle", async () => {
    const v = await verifyBundle(bundle, trust);
    const out = join(tmp, "blocked");
    mkdirSync(out);
    writeFileSync(join(out, "files"), "a file where a folder goes");
    const [code, message] = await failure(() => readPayload(v, [id], out));
    expect(code).toBe(1);
    expect(message).toContain(join(out, "files"));
  });
});
