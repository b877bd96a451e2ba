// `agentbak restore`, `activate`, `fence check` through the real binary, and
// every refusal with the target untouched.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execa } from "execa";
import Database from "better-sqlite3";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, realpathSync, writeFileSync, appendFileSync, cpSync } from "node:fs";
import { dirname, join } from "node:path";
import canonicalize from "canonicalize";
import { json, makeAgent, run, STORE, type TestAgent } from "../helpers.js";
import { craft, manifestOf, payloadFrom, makeTar, ageEncrypt } from "../craft.js";
import { compress } from "zstd-napi";
import { verifyMessage, NS } from "../../dist/crypto/sshsig.js";
import { treeDigest } from "../../dist/state/workspace/workspace.js";

const sha = (p: string) => createHash("sha256").update(readFileSync(p)).digest("hex");

let a: TestAgent;
let first: any;
let second: any;
beforeAll(async () => {
  a = await makeAgent({ sizeMb: 3 });
  first = json(await a.run(["backup", "--json"]));
  second = json(await a.run(["backup", "--json"]));
  // the bundles as local files (downloaded when the repository is a bucket), for the tests that craft from them
  first.path = await a.file(first.path);
  second.path = await a.file(second.path);
});
afterAll(() => a.cleanup());

/**
 * Everything under the parent of `target`, for "untouched" checks. A repository's
 * lease grants (`locks/<name>/<token>.lease`) are left out: every restore takes
 * the agent's restore lease and leaves its released grant behind (tokens are never
 * reissued, docs/repositories.md), so a refused restore moves them by design.
 */
function snapshotTree(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (/\/locks\/[^/]+\/\d+\.lease$/.test(p)) continue;
      out.push(p);
      if (e.isDirectory()) walk(p);
    }
  };
  if (existsSync(dir)) walk(dir);
  return out.sort();
}

describe("restore", () => {
  let target: string;
  let r: any;
  it("restores byte-equal databases, identical files and workspace tree, suspended at generation 1", async () => {
    target = join(a.tmp, "restored1");
    const res = await a.run(["restore", second.snapshot_id, "--target", target, "--yes", "--json"]);
    expect(res.code, res.stderr).toBe(3); // warnings: credentials missing here
    r = json(res);
    expect(r.restored).toBe(true);
    expect(r.generation).toBe(1);
    const m = manifestOf(second.path);
    const dbc = m.components.find((c: any) => c.kind === "sqlite");
    expect(sha(join(target, "state/agent.sqlite"))).toBe(dbc.sha256);
    for (const f of ["memory/preferences.json", "memory/rules.json"]) expect(readFileSync(join(target, f)).equals(readFileSync(join(a.dir, f)))).toBe(true);
    expect((await treeDigest(join(target, "workspace"))).sha256).toBe((await treeDigest(join(a.dir, "workspace"))).sha256);
    expect((await execa("git", ["rev-parse", "HEAD"], { cwd: join(target, "workspace") })).stdout).toBe(a.commit);
    expect((await execa("git", ["status", "--porcelain"], { cwd: join(target, "workspace") })).stdout).toContain("?? src/draft-reply.txt");
    expect(existsSync(join(target, ".agentbak/SUSPENDED"))).toBe(true);
    expect(readFileSync(join(target, ".agentbak/generation"), "utf8")).toBe("1\n");
    expect(existsSync(join(target, "state/agent.sqlite-wal"))).toBe(false);
    expect(readdirSync(a.tmp).filter((e) => e.startsWith(".agentbak-restore"))).toEqual([]);
    expect(r.plan.credentials).toEqual([
      expect.objectContaining({ name: "llm", status: "missing" }),
      expect.objectContaining({ name: "mail", status: "missing" }),
    ]);
  });

  it("a payload decrypted on the worker thread (as payloads from 32 MiB are) checks every component as on the calling thread", async () => {
    const on = await a.run(["verify", second.path, "--identity", a.identity, "--json"]);
    const off = await a.run(["verify", second.path, "--identity", a.identity, "--json"], { AGENTBAK_PAYLOAD_WORKER: "1" });
    expect(off.code, off.stderr).toBe(0);
    expect(on.code, on.stderr).toBe(0);
    expect(json(off).checks).toEqual(json(on).checks);
    const n = manifestOf(second.path).components.length;
    expect(json(off).checks).toContainEqual({ name: "components", ok: true, detail: `${n} components match their sha256 and size` });
  });

  it("a reader that stops early lets go of the bundle, on the calling thread and on the worker thread", async () => {
    const { plaintext } = await import("../../dist/bundle/plaintext.js");
    const { parseIdentities } = await import("../../dist/crypto/age.js");
    // 8 MiB that does not compress: far more than the first chunk the reader takes
    const pay = await payloadFrom([{ name: "files/a", data: randomBytes(8 << 20) }], [a.recipient]);
    const bundle = join(realpathSync(a.tmp), "early-stop.age");
    writeFileSync(bundle, pay.age);
    const ids = parseIdentities(readFileSync(a.identity, "utf8"));
    const held = () =>
      readdirSync("/proc/self/fd").filter((fd) => {
        try {
          return readlinkSync(`/proc/self/fd/${fd}`) === bundle;
        } catch {
          return false;
        }
      }).length;
    const before = held();
    try {
      for (const force of ["0", "1"]) {
        process.env.AGENTBAK_PAYLOAD_WORKER = force;
        for (let i = 0; i < 5; i++) {
          const p = plaintext({ path: bundle, offset: 0, size: pay.age.length, tarSize: pay.tarSize }, ids);
          let got = 0;
          for await (const c of p.stream) {
            got += (c as Buffer).length;
            break; // leaving the loop destroys the stream, as a failing tar extract does
          }
          expect(got).toBeGreaterThan(0);
        }
        await new Promise((r) => setTimeout(r, 300));
        expect(held(), `AGENTBAK_PAYLOAD_WORKER=${force}`).toBe(before);
      }
    } finally {
      delete process.env.AGENTBAK_PAYLOAD_WORKER;
    }
  });

  it("appends a signed receipt to the hash-chained audit log, without state contents", async () => {
    const lines = String(await (await a.store()).get("tenants/acme/agents/billing-agent/audit.jsonl")).trim().split("\n").map((l) => JSON.parse(l));
    expect(lines.map((l) => l.index)).toEqual(lines.map((_, i) => i));
    const e = lines.find((l) => l.event === "restore");
    expect(e.receipt).toMatchObject({ snapshot_id: second.snapshot_id, generation: 1, activation: "suspended" });
    const pub = verifyMessage(e.receipt_signature, NS.receipt, Buffer.from(canonicalize(e.receipt)!));
    expect(pub.length).toBe(32);
    expect(JSON.stringify(lines)).not.toContain("Dear customer");
  });

  it("credential references resolve afresh: env set and a readable file are present, values never printed", async () => {
    const t2 = join(a.tmp, "plan-only");
    mkdirSync(join(t2, "secrets"), { recursive: true });
    writeFileSync(join(t2, "secrets/smtp-password"), "hunter2-value");
    const res = await a.run(["restore", "latest", "--target", t2, "--dry-run", "--json"], { OPENAI_API_KEY: "sk-test-value-123" });
    expect(res.code).toBe(0);
    const p = json(res);
    expect(p.restored).toBe(false);
    expect(p.plan.credentials.map((c: any) => c.status)).toEqual(["present", "present"]);
    expect(res.stdout + res.stderr).not.toContain("sk-test-value-123");
    expect(res.stdout + res.stderr).not.toContain("hunter2");
    expect(p.plan.open_operations).toEqual([{ id: "dlv-task-open-1", idempotency_key: "idem-task-open-1", kind: "send_invoice", strategy: "retry-safe" }]);
    expect(readdirSync(t2)).toEqual(["secrets"]);
  });

  it("dry-run writes nothing; without --yes and without a TTY it is a usage error", async () => {
    const t = join(a.tmp, "dry");
    // credentials absent here: the restore would complete with warnings, so the dry run exits 3 as it would
    // (with them present, above, it exits 0)
    const dry = await a.run(["restore", "latest", "--target", t, "--dry-run"]);
    expect(dry.code, dry.stderr).toBe(3);
    expect(dry.stderr).toMatch(/warning: credential .* is missing here/);
    expect(existsSync(t)).toBe(false);
    const n = await a.run(["restore", "latest", "--target", t]);
    expect(n.code).toBe(2);
    expect(n.stderr).toMatch(/--yes/);
    expect(existsSync(t)).toBe(false);
  });

  it("[I] refuses a non-empty target and leaves it untouched", async () => {
    const t = join(a.tmp, "busy");
    mkdirSync(t);
    writeFileSync(join(t, "keep.txt"), "mine");
    const before = snapshotTree(t);
    const res = await a.run(["restore", "latest", "--target", t, "--yes"]);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/not empty/);
    expect(snapshotTree(t)).toEqual(before);
    expect(readFileSync(join(t, "keep.txt"), "utf8")).toBe("mine");
  });

  it("[T21] stale -wal/-shm files at the target are quarantined, never paired with the restored database", async () => {
    const t = join(a.tmp, "stale");
    mkdirSync(join(t, "state"), { recursive: true });
    writeFileSync(join(t, "state/agent.sqlite-wal"), Buffer.alloc(4096, 7));
    writeFileSync(join(t, "state/agent.sqlite-shm"), Buffer.alloc(32768, 1));
    const res = await a.run(["restore", "latest", "--target", t, "--yes", "--json", "--allow-rollback"]);
    expect(res.code, res.stderr).toBe(3);
    expect(existsSync(join(t, "state/agent.sqlite-wal"))).toBe(false);
    const db = new Database(join(t, "state/agent.sqlite"), { readonly: true });
    expect(db.pragma("integrity_check", { simple: true })).toBe("ok");
    db.close();
    expect(json(res).warnings.join(" ")).toMatch(/quarantine/);
  });

  it("[T33] [T34] the same --request-id returns the first result; fencing rejects a superseded generation", async () => {
    const t1 = join(a.tmp, "req1");
    const r1 = json(await a.run(["restore", "latest", "--target", t1, "--yes", "--json", "--request-id", "INC-7"]));
    const r2 = json(await a.run(["restore", "latest", "--target", join(a.tmp, "req1-again"), "--yes", "--json", "--request-id", "INC-7"]));
    expect(r2.repeated).toBe(true);
    expect(r2.generation).toBe(r1.generation);
    expect(r2.warnings.join(" ")).toContain(`request INC-7 was already restored into ${t1}; --target ${join(a.tmp, "req1-again")} was not used`);
    expect(existsSync(join(a.tmp, "req1-again"))).toBe(false);
    const t2 = join(a.tmp, "req2");
    const r3 = json(await a.run(["restore", "latest", "--target", t2, "--yes", "--json"]));
    expect(r3.generation).toBe(r1.generation + 1);
    const stale = await a.run(["fence", "check", "--target", t1, "--generation", String(r1.generation)]);
    expect(stale.code).toBe(14);
    expect(stale.stderr).toContain(`generation ${r1.generation} of billing-agent is superseded (current generation is ${r3.generation})`);
    expect((await a.run(["fence", "check", "--target", t2, "--generation", String(r3.generation)])).code).toBe(0);
    // a number above the current one was never issued: refused, and not called "superseded"
    const future = await a.run(["fence", "check", "--target", t2, "--generation", String(r3.generation + 1)]);
    expect(future.code).toBe(14);
    expect(future.stderr).toContain(`generation ${r3.generation + 1} of billing-agent is unknown: never issued (current generation is ${r3.generation})`);
    const act1 = await a.run(["activate", "--target", t1, "--yes"]);
    expect(act1.code).toBe(14);
    expect(existsSync(join(t1, ".agentbak/SUSPENDED"))).toBe(true);
    // its open operation was never reconciled: activation needs a reason to accept it
    const unreconciled = await a.run(["activate", "--target", t2, "--yes"]);
    expect(unreconciled.code).toBe(14);
    expect(unreconciled.stderr).toContain("1 open operation(s) unresolved: idem-task-open-1 (never reconciled)");
    const accept = ["--accept-unresolved", "--reason", "test: the provider was checked by hand"];
    const noTty = await a.run(["activate", "--target", t2, ...accept]);
    expect(noTty.code).toBe(2);
    // nothing was accepted, and the refusal does not say it was (it printed "accepted unresolved" before asking)
    expect(noTty.stderr).toContain("confirmation needed and no TTY: pass --yes");
    expect(noTty.stderr).not.toContain("accepted unresolved");
    expect(existsSync(join(t2, ".agentbak/SUSPENDED"))).toBe(true);
    const act2 = await a.run(["activate", "--target", t2, ...accept, "--yes", "--json"]);
    // activated, with a warning: exit 3 (completed with warnings), never a plain 0
    expect(act2.code, act2.stderr).toBe(3);
    expect(json(act2).activated).toBe(true);
    expect(json(act2).warnings).toEqual(["activated with 1 open operation(s) accepted unresolved (reason: test: the provider was checked by hand); the agent may repeat or miss them"]);
    expect(act2.stderr).toContain("accepted unresolved (reason: test: the provider was checked by hand)");
    expect(existsSync(join(t2, ".agentbak/SUSPENDED"))).toBe(false);
  });

  it("[T34] two restores of one agent at once: one runs, the other exits 11", async () => {
    const big = await makeAgent({ sizeMb: 12 });
    try {
      expect((await big.run(["backup"])).code).toBe(0);
      const rs = await Promise.all([1, 2, 3].map((i) => big.run(["restore", "latest", "--target", join(big.tmp, `c${i}`), "--yes"])));
      const codes = rs.map((x) => x.code).sort();
      expect(codes.filter((c) => c === 11).length).toBeGreaterThanOrEqual(1);
      expect(codes.filter((c) => c === 0 || c === 3).length).toBeGreaterThanOrEqual(1);
      for (const [i, x] of rs.entries()) if (x.code === 11) expect(existsSync(join(big.tmp, `c${i + 1}`))).toBe(false);
    } finally {
      big.cleanup();
    }
  });
});

describe("restore policy refusals (exit 14, target untouched)", () => {
  const refused = async (args: string[], re: RegExp, env: Record<string, string> = {}, code = 14) => {
    const t = join(a.tmp, `refused-${Math.random().toString(16).slice(2)}`);
    const before = snapshotTree(a.tmp);
    const res = await a.run(["restore", ...args, "--target", t, "--yes"], env);
    expect(res.code, res.stderr).toBe(code);
    expect(res.stderr).toMatch(re);
    expect(existsSync(t)).toBe(false);
    expect(snapshotTree(a.tmp)).toEqual(before);
    return res;
  };

  it("[T8] rollback below the highest sequence seen here names both numbers; --allow-rollback with approval restores it", async () => {
    await refused([first.snapshot_id], /rollback: snapshot sequence 1 is older than the highest seen here \(2\)/);
    const ok = await a.run(["restore", first.snapshot_id, "--target", join(a.tmp, "rolled"), "--yes", "--allow-rollback", "--json"]);
    expect(ok.code).toBe(3);
    expect(json(ok).warnings.join(" ")).toMatch(/rollback/);
  });

  it("[T12] [T25] another tenant, and a schema newer than this runtime supports", async () => {
    const cfg = JSON.parse(readFileSync(a.config, "utf8"));
    writeFileSync(join(a.dir, "other-tenant.json"), JSON.stringify({ ...cfg, agent: { ...cfg.agent, tenant: "globex" } }));
    // another tenant's snapshot never resolves as latest; offered as a file it is refused by policy
    const none = await a.run(["restore", "latest", "--target", join(a.tmp, "other-tenant"), "--yes", "-c", "other-tenant.json"]);
    expect(none.code, none.stderr).toBe(10);
    expect(none.stderr).toMatch(/no verified snapshot in tenant globex, agent billing-agent/);
    await refused([second.path, "-c", "other-tenant.json"], /tenant "acme", target is tenant "globex"/);
    writeFileSync(join(a.dir, "old-runtime.json"), JSON.stringify({ ...cfg, runtime: { ...cfg.runtime, maxSchemaVersion: 2 } }));
    await refused(["latest", "-c", "old-runtime.json"], /schema version 3 is newer than this runtime supports \(2\)/);
  });

  it("[T4] [T11] untrusted signer is 13 naming the fingerprint; a revoked signer is 14", async () => {
    const other = join(a.tmp, "intruder");
    await run(["keygen", "--out", other]);
    const out = join(a.tmp, "resigned.agentbak");
    const m = manifestOf(second.path);
    const raw = readFileSync(second.path);
    const { readLayout } = await import("../../dist/bundle/outer.js");
    const l = readLayout(second.path);
    await craft({ baseManifest: m, payloadAge: raw.subarray(l.payloadOffset, l.payloadOffset + l.payloadSize), keyFile: join(other, "signing-key"), out });
    const fp = (await execa("ssh-keygen", ["-l", "-f", join(other, "signing-key.pub")])).stdout.split(" ")[1];
    await refused([out], new RegExp(`signer key ${fp!.replace(/[+/]/g, ".")} is not in allowed_signers$`, "m"), {}, 13);
    // with no allowed_signers file at all (AGENTBAK_HOME wrong or unset, as under cron), the line says so
    const elsewhere = join(a.tmp, "other-home");
    mkdirSync(elsewhere, { recursive: true });
    const v = await a.run(["verify", second.path], { AGENTBAK_HOME: elsewhere });
    expect(v.code, v.stderr).toBe(13);
    expect(v.stderr.trim()).toMatch(new RegExp(`is not in allowed_signers: ${join(elsewhere, "allowed_signers").replace(/[/.-]/g, "\\$&")} does not exist \\(is AGENTBAK_HOME the home that holds the signers\\?\\)$`));
    appendFileSync(join(a.home, "revoked_signers"), readFileSync(join(a.home, "signing-key.pub")));
    try {
      await refused(["latest"], /is revoked/);
      const s = json(await a.run(["snapshots", "--json"]));
      expect(s.every((e: any) => e.status === "invalid")).toBe(true);
    } finally {
      writeFileSync(join(a.home, "revoked_signers"), "");
    }
  });

  it("[T9] [T10] [T25] expired (expiry = now and now - 1 s) and a newer bundle format", async () => {
    const { readLayout } = await import("../../dist/bundle/outer.js");
    const l = readLayout(second.path);
    const payload = readFileSync(second.path).subarray(l.payloadOffset, l.payloadOffset + l.payloadSize);
    for (const ms of [0, 1000]) {
      const out = join(a.tmp, `expired-${ms}.agentbak`);
      await craft({ baseManifest: manifestOf(second.path), payloadAge: payload, keyFile: join(a.home, "signing-key"), out, patch: (m) => (m.expires_at = new Date(Date.now() - ms).toISOString()) });
      await refused([out], /expired at/);
    }
    const out = join(a.tmp, "v4.agentbak");
    await craft({ baseManifest: manifestOf(second.path), payloadAge: payload, keyFile: join(a.home, "signing-key"), out, patch: (m) => (m.format_version = 9) });
    await refused([out], /format version 9 is newer than this tool supports \(8\)/);
    const ff = join(a.tmp, "ff.agentbak");
    await craft({ baseManifest: manifestOf(second.path), payloadAge: payload, keyFile: join(a.home, "signing-key"), out: ff, patch: (m) => (m.sequence = 2 ** 53) });
    await refused([ff], /sequence 9007199254740992 is beyond the safe integer range/);
  });

  it("[T12] a bundle not encrypted to the given identity exits 12 with nothing written", async () => {
    const other = join(a.tmp, "other-id2");
    await run(["keygen", "--out", other]);
    await refused(["latest", "--identity", join(other, "age-identity.txt")], /no identity matched/, {}, 12);
    await refused(["latest", "--identity", join(other, "age-identity.txt")], /no identity matched/, { AGENTBAK_PAYLOAD_WORKER: "1" }, 12);
  });
});

describe("hostile bundles (exit 13, nothing written)", () => {
  const cases: [string, () => Promise<{ age: Buffer; tarSize: number; components: any[] }>, RegExp][] = [];
  const file = (name: string, s = "x") => ({ name, data: Buffer.from(s) });
  const recip = () => [a.recipient];
  cases.push(["[T15] traversal ../x", () => payloadFrom([file("../x")], recip(), [file("files/x")]), /not listed|missing/]);
  cases.push(["[T15] absolute /etc/x", () => payloadFrom([file("/etc/x")], recip(), [file("files/x")]), /not listed|missing/]);
  cases.push(["[T15] a/../../x", () => payloadFrom([file("files/a/../../x")], recip(), [file("files/x")]), /not listed|missing/]);
  cases.push(["[T16] symlink", () => payloadFrom([{ name: "files/x", type: "symlink", linkname: "/etc/passwd" }], recip(), [file("files/x")]), /symlink, only regular files/]);
  cases.push(["[T16] hardlink", () => payloadFrom([file("files/a"), { name: "files/x", type: "link", linkname: "files/a" }], recip(), [file("files/a"), file("files/x")]), /link, only regular files/]);
  cases.push(["[T16] fifo", () => payloadFrom([{ name: "files/x", type: "fifo" }], recip(), [file("files/x")]), /fifo, only regular files/]);
  cases.push(["[T17] extra member", () => payloadFrom([file("files/a"), file("files/extra")], recip(), [file("files/a")]), /files\/extra" is not listed/]);
  cases.push(["[T17] missing member", () => payloadFrom([file("files/a")], recip(), [file("files/a"), file("files/b")]), /component files\/b missing/]);
  cases.push(["[T16] duplicate member", () => payloadFrom([file("files/a"), file("files/a")], recip(), [file("files/a")]), /appears twice/]);
  cases.push(["[T18] declared size beyond the manifest's", () => payloadFrom([file("files/a", "x".repeat(5000))], recip(), [{ ...file("files/a", "x".repeat(5000)), size: 10 }]), /declares 5000 bytes, manifest says 10/]);
  cases.push(["[T3] content differs from its digest", () => payloadFrom([file("files/a", "evil")], recip(), [file("files/a", "good")]), /digest mismatch/]);
  cases.push([
    "[T19] zstd bomb (1 GiB of zeros declared as a small tar)",
    async () => {
      const { CompressStream } = await import("zstd-napi");
      const z = new CompressStream({ compressionLevel: 19 });
      const parts: Buffer[] = [];
      z.on("data", (c: Buffer) => parts.push(c));
      const zero = Buffer.alloc(1 << 20);
      for (let i = 0; i < 1024; i++) z.write(zero);
      await new Promise((r) => z.end(r));
      return { age: await ageEncrypt(Buffer.concat(parts), recip()), tarSize: 10240, components: [{ path: "files/a", kind: "file", name: "a", sha256: "0".repeat(64), size: 1, target: "a" }] };
    },
    /decompressed payload exceeds its declared size of 10240 bytes/,
  ]);

  cases.push([
    "[T3] a ciphertext byte flipped under a valid signature (chunk authentication)",
    async () => {
      // incompressible, so the ciphertext has two chunks; the flipped byte is in the second
      const p = await payloadFrom([{ name: "files/a", data: randomBytes(100_000) }], recip());
      p.age[p.age.length - 500] ^= 1;
      return p;
    },
    /payload chunk 1 failed authentication/,
  ]);

  // each case twice: on the calling thread (small payloads) and on the worker thread large payloads use
  const both = cases.flatMap(([n, make, re]) => [
    [n, make, re, {}],
    [`${n}, decrypted on the worker thread`, make, re, { AGENTBAK_PAYLOAD_WORKER: "1" }],
  ]) as [string, (typeof cases)[number][1], RegExp, Record<string, string>][];
  it.each(both)("%s", async (_n, make, re, env) => {
    const p = await make();
    const out = join(a.tmp, `hostile-${Math.random().toString(16).slice(2)}.agentbak`);
    await craft({ baseManifest: { ...manifestOf(second.path), workspace: null }, payloadAge: p.age, tarSize: p.tarSize, keyFile: join(a.home, "signing-key"), out, patch: (m) => (m.components = p.components) });
    const t = join(a.tmp, "hostile-target");
    const before = snapshotTree(a.tmp);
    const t0 = Date.now();
    const res = await a.run(["restore", out, "--target", t, "--yes", "--allow-rollback", "--json"], env);
    expect(res.code, res.stderr).toBe(13);
    expect(res.stderr).toMatch(re);
    expect(Date.now() - t0).toBeLessThan(20_000);
    expect(existsSync(t)).toBe(false);
    expect(snapshotTree(a.tmp)).toEqual(before);
  });

  it("[T2] [T3] swapped payload (another valid age file for the same recipient) fails on the digest, before decryption", async () => {
    const { readLayout } = await import("../../dist/bundle/outer.js");
    const l1 = readLayout(first.path);
    const l2 = readLayout(second.path);
    const b = readFileSync(second.path);
    const mixed = Buffer.concat([b.subarray(0, l2.payloadOffset - 512), readFileSync(first.path).subarray(l1.payloadOffset - 512)]);
    const out = join(a.tmp, "mixed.agentbak");
    writeFileSync(out, mixed);
    const res = await a.run(["restore", out, "--target", join(a.tmp, "mx"), "--yes"]);
    expect(res.code).toBe(13);
    expect(res.stderr).toMatch(/payload\.age: (digest mismatch|\d+ bytes, manifest says)/);
  });

  it("[T22] a database member left in WAL mode is refused: a snapshot is one self-contained file", async () => {
    const x = join(a.tmp, "walx");
    mkdirSync(x);
    await execa("sh", ["-c", `tar xOf '${second.path}' payload.age | age -d -i '${a.identity}' | zstd -d | tar x`], { cwd: x });
    const dbf = join(x, "db/state.sqlite");
    const db = new Database(dbf);
    db.pragma("journal_mode = WAL");
    db.close();
    const m0 = manifestOf(second.path);
    const comps = m0.components.map((c: any) => {
      const d = readFileSync(join(x, c.path));
      return { ...c, sha256: createHash("sha256").update(d).digest("hex"), size: d.length };
    });
    const t = await makeTar(m0.components.map((c: any) => ({ name: c.path, data: readFileSync(join(x, c.path)) })));
    const out = join(a.tmp, "wal-mode.agentbak");
    await craft({ baseManifest: m0, payloadAge: await ageEncrypt(compress(t), [a.recipient]), tarSize: t.length, keyFile: join(a.home, "signing-key"), out, patch: (m) => (m.components = comps) });
    const res = await a.run(["restore", out, "--target", join(a.tmp, "wal-target"), "--yes", "--allow-rollback"]);
    expect(res.code).toBe(13);
    expect(res.stderr).toMatch(/in WAL mode .* self-contained/);
    expect(existsSync(join(a.tmp, "wal-target"))).toBe(false);
  });

  it("[T26] a workspace patch that writes into .git (hooks, fsmonitor) never runs anything", async () => {
    const x = join(a.tmp, "wsx");
    mkdirSync(x);
    await execa("sh", ["-c", `tar xOf '${second.path}' payload.age | age -d -i '${a.identity}' | zstd -d | tar x`], { cwd: x });
    const pwned = join(a.tmp, "PWNED");
    const evil = [
      "diff --git a/.git/hooks/post-checkout b/.git/hooks/post-checkout",
      "new file mode 100755",
      "--- /dev/null",
      "+++ b/.git/hooks/post-checkout",
      "@@ -0,0 +1,2 @@",
      "+#!/bin/sh",
      `+touch ${pwned}`,
      "diff --git a/.git/config b/.git/config",
      "--- a/.git/config",
      "+++ b/.git/config",
      "@@ -1 +1,2 @@",
      " [core]",
      `+\tfsmonitor = touch ${pwned}`,
      "",
    ].join("\n");
    writeFileSync(join(x, "workspace/changes.patch"), evil);
    const members = ["db/state.sqlite", "files/memory/preferences.json", "files/memory/rules.json", "workspace/repo.bundle", "workspace/changes.patch"].map((n) => ({ name: n, data: readFileSync(join(x, n)) }));
    const t = await makeTar(members);
    const m0 = manifestOf(second.path);
    const comps = m0.components.map((c: any) => {
      const d = readFileSync(join(x, c.path));
      return { ...c, sha256: createHash("sha256").update(d).digest("hex"), size: d.length };
    });
    const out = join(a.tmp, "evil-ws.agentbak");
    await craft({ baseManifest: m0, payloadAge: await ageEncrypt(compress(t), [a.recipient]), tarSize: t.length, keyFile: join(a.home, "signing-key"), out, patch: (m) => (m.components = comps) });
    const res = await a.run(["restore", out, "--target", join(a.tmp, "evil-target"), "--yes", "--allow-rollback"]);
    expect(res.code).toBe(13);
    expect(res.stderr).toMatch(/workspace/);
    expect(existsSync(pwned)).toBe(false);
    expect(existsSync(join(a.tmp, "evil-target"))).toBe(false);
  });
});

// the sweep verifies a local copy of the bundle in this process (dist/bundle/reader.js): its subject is the bundle's
// format, not the repository's store, so it runs in the local test project only
describe.skipIf(STORE === "s3")("tamper detection sweep", () => {
  it("[T1] [T20] a bit flip at every byte of manifest.json, manifest.sig and the age header, and at 10,000 payload offsets: all detected", async ({ task }) => {
    const small = await makeAgent({ sizeMb: 0 });
    try {
      const cfg = JSON.parse(readFileSync(small.config, "utf8"));
      delete cfg.workspace;
      cfg.files = [];
      writeFileSync(small.config, JSON.stringify(cfg));
      const b = json(await small.run(["backup", "--json"]));
      b.path = await small.file(b.path);
      const { verifyBundle } = await import("../../dist/bundle/reader.js");
      const { loadTrust } = await import("../../dist/crypto/trust.js");
      const { readLayout } = await import("../../dist/bundle/outer.js");
      const trust = loadTrust(small.home);
      const orig = readFileSync(b.path);
      const l = readLayout(b.path);
      const headerEnd = orig.indexOf("\n", orig.indexOf("--- ", l.payloadOffset)) + 1 + 16;
      const offsets: number[] = [];
      for (let i = 512; i < 512 + l.manifest.length; i++) offsets.push(i);
      const sigStart = 512 + Math.ceil(l.manifest.length / 512) * 512 + 512;
      for (let i = sigStart; i < sigStart + l.signature.length; i++) offsets.push(i);
      for (let i = l.payloadOffset; i < headerEnd; i++) offsets.push(i);
      for (let k = 0; k < 10_000; k++) offsets.push(headerEnd + Math.floor((k / 10_000) * (l.payloadOffset + l.payloadSize - headerEnd)));
      const f = join(small.tmp, "flip.agentbak");
      let detected = 0;
      for (const off of offsets) {
        const buf = Buffer.from(orig);
        buf[off]! ^= 0x04;
        writeFileSync(f, buf);
        try {
          await verifyBundle(f, trust);
        } catch (e: any) {
          if (e.code === 13 || e.code === 14) detected++;
          else throw e;
        }
      }
      expect(detected).toBe(offsets.length);
      expect(offsets.length).toBe(l.manifest.length + l.signature.length + (headerEnd - l.payloadOffset) + 10_000);
      // truncated at every tar block boundary and at every age chunk boundary (64 KiB + 16 of ciphertext)
      const cuts = new Set<number>();
      for (let i = 0; i < orig.length; i += 512) cuts.add(i);
      for (let i = headerEnd; i < l.payloadOffset + l.payloadSize; i += 65536 + 16) cuts.add(i);
      let refused = 0;
      for (const cut of cuts) {
        writeFileSync(f, orig.subarray(0, cut));
        try {
          await verifyBundle(f, trust);
        } catch (e: any) {
          if (e.code === 13) refused++;
          else throw e;
        }
      }
      expect(refused).toBe(cuts.size);
      task.meta.bitFlips = {
        tried: offsets.length,
        detected,
        manifestBytes: l.manifest.length,
        signatureBytes: l.signature.length,
        headerBytes: headerEnd - l.payloadOffset,
        payloadOffsets: 10_000,
        truncations: cuts.size,
        refused,
      };
    } finally {
      small.cleanup();
    }
  });
});

describe("a bundle named by its file, with a config present, goes through the repository", () => {
  it("[T34] --request-id repeats the first result, the receipt is audited, and restores at once (--wait) never share a generation", async () => {
    const t = await makeAgent({ sizeMb: 2 });
    try {
      const b = json(await t.run(["backup", "--json"]));
      const file = await t.file(b.path); // a bucket's bundle is downloaded: a file outside the repository
      const r1 = await t.run(["restore", file, "--target", join(t.tmp, "f1"), "--yes", "--json", "--request-id", "REQ-1"]);
      expect(r1.code, r1.stderr).toBe(3);
      const first = json(r1);
      const again = json(await t.run(["restore", file, "--target", join(t.tmp, "f2"), "--yes", "--json", "--request-id", "REQ-1"]));
      expect(again).toMatchObject({ repeated: true, generation: first.generation });
      expect(existsSync(join(t.tmp, "f2"))).toBe(false);
      const audit = String(await (await t.store()).get("tenants/acme/agents/billing-agent/audit.jsonl")).trim().split("\n").map((l) => JSON.parse(l));
      expect(audit.filter((e) => e.event === "restore").map((e) => e.receipt.request_id)).toEqual(["REQ-1"]);
      // two at once: the second waits for the first's lock, then takes the next generation
      const both = await Promise.all([1, 2].map((i) => t.run(["restore", file, "--target", join(t.tmp, `w${i}`), "--yes", "--json", "--wait", "120s"])));
      for (const r of both) expect(r.code, r.stderr).toBe(3);
      const gens = both.map((r) => json(r).generation).sort();
      expect(gens).toEqual([first.generation + 1, first.generation + 2]);
      expect(readFileSync(join(t.tmp, "w1/.agentbak/generation"), "utf8")).not.toBe(readFileSync(join(t.tmp, "w2/.agentbak/generation"), "utf8"));
    } finally {
      t.cleanup();
    }
  });
});
