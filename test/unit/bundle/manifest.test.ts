// Strict manifest parsing: only the exact canonical bytes of a valid manifest are accepted.
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import canonicalize from "canonicalize";
import { attestedCheck, encodeManifest, integrityAttested, parseManifest, rememberValidManifest } from "../../../src/bundle/manifest.js";
import { createHash } from "node:crypto";

const base = {
  format: "agentbak-bundle",
  format_version: 1,
  tool_version: "0.1.0",
  agent_id: "a",
  tenant: "t",
  snapshot_id: "20261129T120000000Z-0123abcd",
  created_at: "2026-11-29T12:00:00.000Z",
  expires_at: "2027-11-29T12:00:00.000Z",
  sequence: 1,
  parent: null,
  label: null,
  idempotency_key: null,
  signer: { fingerprint: "SHA256:x", principal: "p" },
  recipients: ["age1xyz"],
  runtime: { image_digest: null, agent_version: null, models: {}, host: "h" },
  schema_version: 3,
  components: [{ path: "db/state.sqlite", kind: "sqlite", name: "state", sha256: "a".repeat(64), size: 10, target: "state/agent.sqlite" }],
  payload: { sha256: "b".repeat(64), size: 100, tar_size: 2048, compression: "zstd", encryption: "age-x25519" },
  workspace: null,
  credentials: [{ name: "llm", ref: "env:KEY" }],
  cursors: { last_event_id: 5 },
  cursor_queries: { last_event_id: { database: "state", sql: "SELECT max(id) FROM events" } },
  open_operations: [],
};

describe("manifest", () => {
  it("round-trips: encode(parse(x)) == x", () => {
    const bytes = encodeManifest(base as any);
    expect(encodeManifest(parseManifest(bytes)).equals(bytes)).toBe(true);
  });

  const text = canonicalize(base)!;
  it.each([
    ["duplicate key", text.replace('{"agent_id":"a"', '{"agent_id":"a","agent_id":"b"')],
    ["non-canonical order", text.replace('{"agent_id":"a","components"', '{"components"').replace('"format"', '"agent_id":"a","format"')],
    ["whitespace", text.replace('"tenant":"t"', '"tenant": "t"')],
    ["float", text.replace('"sequence":1', '"sequence":1.5')],
    ["float spelled as 1.0", text.replace('"sequence":1', '"sequence":1.0')],
    ["-0", text.replace('"last_event_id":5', '"last_event_id":-0')],
    ["unsafe integer", text.replace('"sequence":1', '"sequence":9007199254740993')],
    ["unknown key", canonicalize({ ...base, extra: 1 })!],
    ["traversal in a component path", canonicalize({ ...base, components: [{ ...base.components[0], path: "db/../x" }] })!],
    ["absolute restore target", canonicalize({ ...base, components: [{ ...base.components[0], target: "/etc/x" }] })!],
    ["duplicate component", canonicalize({ ...base, components: [base.components[0], base.components[0]] })!],
  ])("rejects %s", (_name, t) => {
    expect(() => parseManifest(Buffer.from(t))).toThrow();
  });

  it("refuses a newer format version with a policy error naming both versions", () => {
    expect(() => parseManifest(Buffer.from(canonicalize({ ...base, format_version: 9 })!))).toThrow(/version 9 .*\(8\)/);
  });

  it("reads format versions 1 and 2; payload.chunks only in 2, where it was added", () => {
    const chunks = { size: 4 << 20, sha256: "ab".repeat(32) };
    expect(parseManifest(Buffer.from(canonicalize(base)!)).format_version).toBe(1);
    expect(parseManifest(Buffer.from(canonicalize({ ...base, format_version: 2, payload: { ...base.payload, chunks } })!)).payload.chunks).toEqual(chunks);
    expect(() => parseManifest(Buffer.from(canonicalize({ ...base, payload: { ...base.payload, chunks } })!))).toThrow(/payload\.chunks in a format version 1 manifest/);
    // a chunk size outside 1-64 MiB: a hostile manifest can not make the digest table large
    expect(() => parseManifest(Buffer.from(canonicalize({ ...base, format_version: 2, payload: { ...base.payload, chunks: { ...chunks, size: 4096 } } })!))).toThrow(/manifest invalid/);
  });

  it("a newer format version is refused even when its bytes were remembered as valid (a header cache another version wrote)", () => {
    const newer = Buffer.from(canonicalize({ ...base, format_version: 9 })!);
    rememberValidManifest(createHash("sha256").update(newer).digest("hex"));
    expect(() => parseManifest(newer)).toThrow(/version 9 .*\(8\)/);
  });

  it("index_digest_checked: on a database from format version 8 on, attested for the image it names; refused before 8 and on a file", () => {
    const db = (v: number, extra: Record<string, string>, kind = "sqlite") =>
      Buffer.from(canonicalize({ ...base, format_version: v, components: [{ path: "db/state.sqlite", kind, name: "state", sha256: "a".repeat(64), size: 10, target: "state/agent.sqlite", ...extra }] })!);
    const c = parseManifest(db(8, { index_digest_checked: "a".repeat(64) })).components[0]!;
    expect([integrityAttested(c), attestedCheck(c)]).toEqual([true, "index_digest"]);
    const other = parseManifest(db(8, { index_digest_checked: "b".repeat(64) })).components[0]!;
    expect([integrityAttested(other), attestedCheck(other)]).toEqual([false, null]);
    const old = parseManifest(db(7, { integrity_checked: "a".repeat(64) })).components[0]!;
    expect(attestedCheck(old)).toBe("integrity_check");
    expect(() => parseManifest(db(7, { index_digest_checked: "a".repeat(64) }))).toThrow(/index_digest_checked in a format version 7 manifest \(added in version 8; component db\/state.sqlite\)/);
    expect(() => parseManifest(db(8, { index_digest_checked: "a".repeat(64) }, "file"))).toThrow(/index_digest_checked on file component \(databases only; component db\/state.sqlite\)/);
  });

  it("a delta records its rebuilt database's pages root from format version 4 on, its sha256 before; never both, never neither", () => {
    const delta = (v: number, digests: Record<string, string>) =>
      Buffer.from(canonicalize({ ...base, format_version: v, components: [{ path: "db/state.delta", kind: "sqlite-delta", name: "state", sha256: "a".repeat(64), size: 10, target: "state/agent.sqlite", ...digests }] })!);
    expect(parseManifest(delta(4, { full_pages_sha256: "c".repeat(64) })).components[0]!.full_pages_sha256).toBe("c".repeat(64));
    expect(parseManifest(delta(3, { full_sha256: "c".repeat(64) })).components[0]!.full_sha256).toBe("c".repeat(64));
    expect(() => parseManifest(delta(4, { full_sha256: "c".repeat(64) }))).toThrow(/full_sha256 in a format version 4 manifest/);
    expect(() => parseManifest(delta(3, { full_pages_sha256: "c".repeat(64) }))).toThrow(/full_pages_sha256 in a format version 3 manifest/);
    expect(() => parseManifest(delta(4, {}))).toThrow(/has no full_pages_sha256/);
    expect(() => parseManifest(delta(2, {}))).toThrow(/has no full_sha256/);
  });

  it("integrity_checked: a database's attested image digest, refused on other kinds; integrityAttested compares it with the image restored", () => {
    const db = { ...base.components[0]!, integrity_checked: "a".repeat(64) };
    const at = (c: object) => Buffer.from(canonicalize({ ...base, format_version: 4, components: [c] })!);
    const m = parseManifest(at(db));
    expect(integrityAttested(m.components[0]!)).toBe(true);
    expect(integrityAttested(parseManifest(at({ ...db, integrity_checked: "b".repeat(64) })).components[0]!)).toBe(false);
    expect(integrityAttested(parseManifest(at(base.components[0]!)).components[0]!)).toBe(false);
    const delta = { path: "db/state.delta", kind: "sqlite-delta", name: "state", sha256: "a".repeat(64), size: 10, target: "state/agent.sqlite", full_pages_sha256: "c".repeat(64), full_size: 4096, page_size: 4096, page_count: 1, changed_pages: 1 };
    // a delta attests its rebuilt database (the pages root), never the delta file's sha256
    expect(integrityAttested(parseManifest(at({ ...delta, integrity_checked: "c".repeat(64) })).components[0]!)).toBe(true);
    expect(integrityAttested(parseManifest(at({ ...delta, integrity_checked: "a".repeat(64) })).components[0]!)).toBe(false);
    expect(() => parseManifest(at({ path: "files/a.json", kind: "file", name: "a.json", sha256: "a".repeat(64), size: 10, target: "a.json", integrity_checked: "a".repeat(64) }))).toThrow(/integrity_checked on file component files\/a.json \(databases only\)/);
  });

  it("a component's chunks (format 5): only from version 5, only on files and sources, adding up to its size; an 8 MiB cap", () => {
    const chunk = (len: number, c: string) => [c.repeat(64), "d".repeat(64), len + 300, len];
    const file = { path: "files/models/a.bin", kind: "file", name: "models/a.bin", sha256: "c".repeat(64), size: 3000, target: "models/a.bin", chunks: [chunk(1000, "1"), chunk(2000, "2")] };
    const at = (v: number, c: object) => Buffer.from(canonicalize({ ...base, format_version: v, components: [...base.components, c] })!);
    expect(parseManifest(at(5, file)).components[1]!.chunks).toEqual(file.chunks);
    expect(() => parseManifest(at(4, file))).toThrow(/chunks in a format version 4 manifest \(added in version 5/);
    expect(() => parseManifest(at(5, { ...file, size: 2999 }))).toThrow(/hold another number of bytes than its size 2999/);
    expect(() => parseManifest(at(5, { ...file, chunks: [[..."1".repeat(64)], ...file.chunks.slice(1)] }))).toThrow(/manifest invalid/);
    expect(() => parseManifest(at(5, { ...file, chunks: [chunk(0, "1"), ...file.chunks] }))).toThrow(/manifest invalid/);
    expect(parseManifest(at(5, { ...file, path: "sources/pg/dump", kind: "postgres", name: "pg", target: undefined })).components[1]!.kind).toBe("postgres");
    expect(() => parseManifest(at(5, { ...file, path: "db/x.sqlite", kind: "sqlite", name: "x", target: "x.sqlite" }))).toThrow(/only files and state sources are chunked/);
    expect(() => parseManifest(Buffer.alloc(8 * 1024 * 1024 + 1, 0x20))).toThrow(/larger than 8 MiB/);
  });

  it("a source's fingerprint (format 6): only on a chunked state source, from version 6", () => {
    const src = { path: "sources/pg/dump.pgdump", kind: "postgres", name: "pg", sha256: "c".repeat(64), size: 1000, chunks: [["1".repeat(64), "d".repeat(64), 1300, 1000]], fingerprint: "e".repeat(64) };
    const at = (v: number, c: object) => Buffer.from(canonicalize({ ...base, format_version: v, components: [...base.components, c] })!);
    expect(parseManifest(at(6, src)).components[1]!.fingerprint).toBe("e".repeat(64));
    expect(() => parseManifest(at(5, src))).toThrow(/fingerprint on sources\/pg\/dump\.pgdump: only on a chunked state source, from format version 6/);
    const { chunks: _c, ...inPayload } = src;
    expect(() => parseManifest(at(6, inPayload))).toThrow(/only on a chunked state source/);
    expect(() => parseManifest(at(6, { ...src, path: "files/a.bin", kind: "file", name: "a.bin", target: "a.bin" }))).toThrow(/only on a chunked state source/);
    expect(() => parseManifest(at(6, { ...src, fingerprint: "not hex" }))).toThrow(/manifest invalid/);
  });

  it("a packed file's chunk_skip (format 6): only from version 6, only with chunks, a range that touches every chunk it lists", () => {
    const chunk = (len: number, c: string) => [c.repeat(64), "d".repeat(64), len + 300, len];
    // 500 bytes from 900 into the first of two chunks of 1000 and 2000 bytes: ends 400 bytes into the second
    const packed = { path: "files/p/a.md", kind: "file", name: "p/a.md", sha256: "c".repeat(64), size: 500, target: "p/a.md", chunks: [chunk(1000, "1"), chunk(2000, "2")], chunk_skip: 900 };
    const at = (v: number, c: object) => Buffer.from(canonicalize({ ...base, format_version: v, components: [...base.components, c] })!);
    expect(parseManifest(at(6, packed)).components[1]!.chunk_skip).toBe(900);
    expect(parseManifest(at(6, { ...packed, chunks: [chunk(1000, "1")], chunk_skip: 0, size: 1000 })).components[1]!.size).toBe(1000);
    expect(() => parseManifest(at(5, packed))).toThrow(/chunk_skip in a format version 5 manifest \(added in version 6/);
    const { chunks: _c, ...bare } = packed;
    expect(() => parseManifest(at(6, bare))).toThrow(/chunk_skip without chunks/);
    // a range inside the first chunk that still lists the second; one past the end; a skip beyond the first chunk; no byte
    for (const bad of [{ size: 50 }, { size: 2101 }, { chunk_skip: 1000, size: 100 }, { size: 0, chunk_skip: 0, chunks: [chunk(1000, "1")] }])
      expect(() => parseManifest(at(6, { ...packed, ...bad })), JSON.stringify(bad)).toThrow(/the chunks of files\/p\/a\.md/);
  });

  it("reads layout_padding (spaces only) in format version 3, where it was added", () => {
    const padded = (v: number, pad: string) => Buffer.from(canonicalize({ ...base, format_version: v, layout_padding: pad })!);
    expect(parseManifest(padded(3, " ".repeat(700))).layout_padding).toHaveLength(700);
    expect(parseManifest(padded(3, "")).layout_padding).toBe("");
    expect(() => parseManifest(padded(2, "  "))).toThrow(/layout_padding in a format version 2 manifest/);
    // padding carries nothing: anything but spaces is refused
    expect(() => parseManifest(padded(3, "  x "))).toThrow(/manifest invalid/);
    expect(() => parseManifest(padded(3, "\t"))).toThrow(/manifest invalid/);
  });

  it("accepts no mutation of a valid manifest other than re-canonicalised equivalents (property)", () => {
    const bytes = Buffer.from(text);
    fc.assert(
      fc.property(fc.integer({ min: 0, max: bytes.length - 1 }), fc.integer({ min: 1, max: 255 }), (off, x) => {
        const b = Buffer.from(bytes);
        b[off]! ^= x;
        try {
          const m = parseManifest(b);
          // the only acceptable outcome: a different but still canonical, valid manifest
          return encodeManifest(m).equals(b);
        } catch {
          return true;
        }
      }),
      { numRuns: 2000 },
    );
  });
});

describe("buildManifest (the one pure function a backup's manifest comes from)", () => {
  const input = () => ({
    agent: { id: "billing-agent", tenant: "acme" },
    snapshotId: "20261129T120000000Z-0123abcd",
    created: new Date("2026-11-29T12:00:00.000Z"),
    expireDays: 30,
    sequence: 7,
    parent: { snapshot_id: "20261128T120000000Z-00000000", manifest_sha256: "c".repeat(64) },
    label: "nightly",
    idempotencyKey: "job-7",
    signer: { fingerprint: "SHA256:x", principal: "ops" },
    recipients: ["age1xyz"],
    runtime: { image_digest: null, agent_version: "1.4.2", models: {}, host: "h" },
    databases: [
      { name: "state", target: "state/agent.sqlite", written: { path: "db/state.delta", sha256: "a".repeat(64), size: 40 }, delta: { full_pages_sha256: "d".repeat(64), full_size: 8192, page_size: 4096, page_count: 2, changed_pages: 1 }, records: { messages: 3 }, schemaVersion: 3, pageIndexSha256: "e".repeat(64) },
      { name: "memory", target: "memory.sqlite", written: { path: "db/memory.sqlite", sha256: "f".repeat(64), size: 4096 }, delta: null, records: {}, schemaVersion: 9, pageIndexSha256: "1".repeat(64) },
    ],
    others: [{ path: "files/notes.json", kind: "file" as const, name: "notes.json", sha256: "2".repeat(64), size: 5, target: "notes.json" }],
    payload: { sha256: "b".repeat(64), size: 100, tar_size: 2048, compression: "zstd" as const, encryption: "age-x25519" as const },
    workspace: null,
    credentials: [{ name: "llm", ref: "env:KEY" }],
    cursors: { last_event_id: 5 },
    cursorQueries: { last_event_id: { database: "state", sql: "SELECT max(id) FROM events" } },
    openOperations: [{ id: "d1", idempotency_key: "k1" }],
  });

  it("states every input, databases first in config order with their delta, counts and page index digest", async () => {
    const { buildManifest } = await import("../../../src/bundle/manifest.js");
    const m = buildManifest(input());
    expect(m.components.map((c: any) => [c.path, c.kind])).toEqual([["db/state.delta", "sqlite-delta"], ["db/memory.sqlite", "sqlite"], ["files/notes.json", "file"]]);
    expect(m.components[0]).toMatchObject({ name: "state", target: "state/agent.sqlite", records: { messages: 3 }, schema_version: 3, page_index_sha256: "e".repeat(64), full_pages_sha256: "d".repeat(64), changed_pages: 1 });
    expect(m.components[1]).not.toHaveProperty("full_pages_sha256");
    expect(m.schema_version).toBe(3); // the first database's
    expect(m.expires_at).toBe("2026-12-29T12:00:00.000Z");
    expect(m).toMatchObject({ agent_id: "billing-agent", tenant: "acme", sequence: 7, label: "nightly", idempotency_key: "job-7", open_operations: [{ id: "d1", idempotency_key: "k1" }] });
    // what it builds is what the reader accepts, byte for byte
    const bytes = encodeManifest(m);
    expect(encodeManifest(parseManifest(bytes)).equals(bytes)).toBe(true);
  });

  it("is pure: the same input gives the same bytes; no database means no schema version", async () => {
    const { buildManifest } = await import("../../../src/bundle/manifest.js");
    expect(encodeManifest(buildManifest(input())).equals(encodeManifest(buildManifest(input())))).toBe(true);
    const none = buildManifest({ ...input(), databases: [], parent: null });
    expect(none.schema_version).toBe(null);
    expect(none.components.map((c: any) => c.kind)).toEqual(["file"]);
  });
});
