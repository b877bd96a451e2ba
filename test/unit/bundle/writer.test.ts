/**
 * The bundle writer (src/bundle/writer.ts), payload first then the signed
 * head: what it writes opens with stock tools (GNU tar lists three members,
 * `age -d | zstd -d | tar -x` gives each component byte for byte,
 * `ssh-keygen -Y verify` accepts manifest.sig), the manifest states the
 * payload's real digest, sizes and chunk root; a manifest larger than its
 * room moves the payload after it and leaves no temp file; a failure leaves
 * no bundle and names the file.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFileSync } from "node:child_process";
import { createCipheriv, createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateIdentity, identityString, type AgeIdentity } from "../../../src/crypto/age.js";
import { fingerprint, generateSigningKey, publicKeyLine, type SigningKey } from "../../../src/crypto/sshsig.js";
import { encodeManifest, parseManifest, type Manifest } from "../../../src/bundle/manifest.js";
import { readLayout } from "../../../src/bundle/outer.js";
import { planBundle, writeBundleFile, writePayload, type ManifestDraft, type StagedComponent } from "../../../src/bundle/writer.js";
import { AgentbakError } from "../../../src/errors.js";
import { manifestDraft } from "./draft.js";

let tmp: string;
let key: SigningKey;
let id: AgeIdentity;
beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), "agentbak-writer-"));
  key = generateSigningKey("backup@host");
  id = generateIdentity();
  writeFileSync(join(tmp, "identity.txt"), identityString(id) + "\n", { mode: 0o600 });
  writeFileSync(join(tmp, "allowed_signers"), `backup@host namespaces="agentbak-manifest" ${publicKeyLine(key.publicKey)}\n`);
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const noise = (n: number, seed: string) => createCipheriv("aes-128-ctr", createHash("sha256").update(seed).digest().subarray(0, 16), Buffer.alloc(16)).update(Buffer.alloc(n));
const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");
const draft = (o: Partial<ManifestDraft> = {}): ManifestDraft => manifestDraft(key, id.recipient, o);
let n = 0;
/** Stages files under a fresh folder and writes a bundle of them; returns the bundle, its manifest bytes and the plan. */
async function write(files: Record<string, Buffer>, o: Partial<ManifestDraft> = {}) {
  const dir = join(tmp, `w${n++}`);
  mkdirSync(dir);
  const components: StagedComponent[] = Object.entries(files).map(([p, data]) => {
    const f = join(dir, p.replaceAll("/", "_"));
    writeFileSync(f, data);
    return { path: p, kind: "file", name: p.split("/").pop()!, file: f };
  });
  const bundle = join(dir, "snap.agentbak");
  const plan = planBundle(bundle, key, components);
  const { components: written, payload } = await writePayload(components, [id.recipient], plan);
  const signed = await writeBundleFile({ ...draft(o), components: written, payload } as Manifest, key, plan);
  const mbytes = signed.bytes;
  expect(signed.sha256).toBe(createHash("sha256").update(mbytes).digest("hex")); // the digest receipts name is of the bytes signed
  return { bundle, dir, mbytes, plan, manifest: parseManifest(mbytes) };
}

describe("a bundle written", () => {
  const files = { "files/notes.md": Buffer.from("# what the agent learnt\n".repeat(300)), "files/blob.bin": noise(300_000, "blob"), "files/empty": Buffer.alloc(0) };

  it("opens with stock tools: tar, age -d | zstd -d | tar, ssh-keygen -Y verify", async () => {
    const { bundle, dir, mbytes } = await write(files);
    expect(execFileSync("tar", ["-tf", bundle], { encoding: "utf8" }).trim().split("\n")).toEqual(["manifest.json", "manifest.sig", "payload.age"]);
    const x = join(dir, "x");
    mkdirSync(x);
    execFileSync("tar", ["-xf", bundle, "-C", x]);
    expect(readFileSync(join(x, "manifest.json")).equals(mbytes)).toBe(true);
    const out = join(x, "out");
    mkdirSync(out);
    execFileSync("sh", ["-c", `age -d -i '${join(tmp, "identity.txt")}' payload.age | zstd -dc | tar -xf - -C out`], { cwd: x });
    for (const [p, data] of Object.entries(files)) expect(readFileSync(join(out, p)).equals(data), p).toBe(true);
    execFileSync("ssh-keygen", ["-Y", "verify", "-f", join(tmp, "allowed_signers"), "-I", "backup@host", "-n", "agentbak-manifest", "-s", join(x, "manifest.sig")], { input: mbytes });
  });

  it("the manifest states the components' and the payload's real digests and sizes, and the chunk root", async () => {
    const { bundle, manifest } = await write(files);
    const l = readLayout(bundle);
    const payload = readFileSync(bundle).subarray(l.payloadOffset, l.payloadOffset + l.payloadSize);
    expect(manifest.payload).toMatchObject({ sha256: sha(payload), size: payload.length, compression: "zstd", encryption: "age-x25519" });
    const chunkRoot = createHash("sha256");
    for (let off = 0; off < payload.length; off += manifest.payload.chunks!.size) chunkRoot.update(createHash("sha256").update(payload.subarray(off, off + manifest.payload.chunks!.size)).digest());
    expect(manifest.payload.chunks!.sha256).toBe(chunkRoot.digest("hex"));
    expect(manifest.components.map((c) => [c.path, c.sha256, c.size])).toEqual(Object.entries(files).map(([p, d]) => [p, sha(d), d.length]));
    // the tar holds each component in 512-byte blocks after its header, then the end marker
    const tarSize = Object.values(files).reduce((s, d) => s + 512 + Math.ceil(d.length / 512) * 512, 0);
    expect(manifest.payload.tar_size).toBeGreaterThanOrEqual(tarSize + 1024);
    expect(manifest.format_version).toBe(4);
  });

  it("the manifest fills the room kept for it (padding), so the payload was written in place", async () => {
    const { bundle, plan, mbytes, manifest } = await write(files);
    expect(readLayout(bundle).payloadOffset).toBe(plan.payloadAt);
    expect(mbytes.length).toBe(plan.manifestRoom);
    expect(manifest.layout_padding).toMatch(/^ +$/);
  });

  it("a manifest larger than its room: written unpadded, the payload moved after it, no temp file left", async () => {
    const label = "x".repeat(20_000);
    const { bundle, dir, plan, manifest, mbytes } = await write(files, { label });
    const l = readLayout(bundle);
    expect(l.payloadOffset).toBeGreaterThan(plan.payloadAt);
    expect(manifest.label).toBe(label);
    expect(manifest.layout_padding).toBeUndefined();
    expect(l.manifest.equals(mbytes)).toBe(true);
    expect(sha(readFileSync(bundle).subarray(l.payloadOffset, l.payloadOffset + l.payloadSize))).toBe(manifest.payload.sha256);
    expect(readdirSync(dir).filter((f) => f.includes("agentbak"))).toEqual(["snap.agentbak"]);
  });

  it("planBundle keeps room for the agent's previous manifest and 1 KiB more, in whole blocks", () => {
    const prior = { ...draft({ label: "y".repeat(9000) }), components: [], payload: { sha256: "a".repeat(64), size: 1, tar_size: 1, compression: "zstd", encryption: "age-x25519" } } as Manifest;
    const p = planBundle(join(tmp, "p.agentbak"), key, [{ path: "files/a" }], prior);
    expect(p.manifestRoom % 512).toBe(0);
    expect(p.manifestRoom).toBeGreaterThanOrEqual(encodeManifest(prior).length + 1024);
    expect(planBundle(join(tmp, "p.agentbak"), key, [{ path: "files/a" }]).manifestRoom).toBe(3584);
  });
});

describe("failures", () => {
  it("a component that can not be read fails naming its file and ENOENT (exit 1, never 13)", async () => {
    const dir = join(tmp, "missing");
    mkdirSync(dir);
    const plan = planBundle(join(dir, "snap.agentbak"), key, [{ path: "files/gone" }]);
    const e = await writePayload([{ path: "files/gone", kind: "file", name: "gone", file: join(dir, "gone") }], [id.recipient], plan).then(() => null, (x: unknown) => x);
    expect(e).toBeInstanceOf(AgentbakError);
    expect((e as AgentbakError).message).toMatch(/ENOENT/);
    expect((e as AgentbakError).message).toContain(join(dir, "gone"));
    expect((e as AgentbakError).code).toBe(1);
  });

  it("writeBundleFile on a bundle whose payload file is gone removes what it made and names it", async () => {
    const dir = join(tmp, "gone");
    mkdirSync(dir);
    const plan = planBundle(join(dir, "snap.agentbak"), key, []);
    const e = await writeBundleFile({ ...draft(), components: [], payload: { sha256: "a".repeat(64), size: 10, tar_size: 10, compression: "zstd", encryption: "age-x25519" } } as Manifest, key, plan).then(
      () => null,
      (x: unknown) => x,
    );
    expect(e).toBeInstanceOf(AgentbakError);
    expect((e as Error).message).toContain(plan.path);
    expect(existsSync(plan.path)).toBe(false);
  });
});
