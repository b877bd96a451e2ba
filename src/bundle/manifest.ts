/**
 * The signed manifest: schema, canonical encoding (RFC 8785) and strict parsing.
 * Parsing accepts only the exact canonical bytes: duplicate keys, another key
 * order, floats, -0 or unsafe integers are all rejected.
 */
import { createHash } from "node:crypto";
import canonicalize from "canonicalize";
import * as z from "../zod.js";
import { SOURCE_KINDS, type SourceKind } from "../state/sources/kinds.js";
import { formatIssues, policyError } from "../errors.js";
import { TOOL_VERSION } from "../version.js";
import { ID_PATTERN, SNAPSHOT_ID, SQLITE_SIDECAR, STRATEGIES } from "../facts.js";

export const FORMAT = "agentbak-bundle";
/**
 * The newest version this tool reads and writes. 2 added `payload.chunks`, 3
 * `layout_padding`, 5 a component's `chunks` (its bytes in the agent's chunk
 * store, docs/chunk-store.md), 6 a component's `chunk_skip` (a small file packed
 * with others: its bytes are a range of its chunks' plaintext), 7 `payload.chunks.digests` (each 4 MiB chunk's
 * digest, so a reader checks each chunk before decrypting it, in the same read), 8 a database's `index_digest_checked`
 * (the backup's integrity check was quick_check and the index digests, not integrity_check): a tool that knows only an older one refuses a
 * newer bundle as newer (exit 14) rather than as an invalid manifest (13).
 * Versions 1 to 4 are still read.
 */
export const FORMAT_VERSION = 8;
/** What a bundle whose payload lists its chunks' digests (or with a recall record), and no `index_digest_checked`, is written as: the format 7 of before. */
export const CHUNK_LIST_FORMAT_VERSION = 7;
/** What a bundle with a packed small file or a source's fingerprint (and no payload chunk list) is written as: the format 6 of before. */
export const PACKED_FORMAT_VERSION = 6;
/** What a bundle with chunked components but no packed (ranged) one is written as: the format 5 of before. */
export const CHUNKED_FORMAT_VERSION = 5;
/** What a bundle without chunked components is written as: exactly the format-4 bundle of before (stock tools, older agentbak). */
export const PLAIN_FORMAT_VERSION = 4;
/** A manifest that lists chunks may be this large: about 50,000 chunks (docs/chunk-store.md). */
export const MAX_MANIFEST = 8 * 1024 * 1024;

const int = z.int().check(z.minimum(0)).check(z.maximum(Number.MAX_SAFE_INTEGER));
const sha = z.string().check(z.regex(/^[0-9a-f]{64}$/));
const time = z.string().check(z.regex(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/));
const scalar = z.union([z.string(), int, z.null()]);
const embedding = z.strictObject({ model: z.string(), dimension: int });
const relPath = z.string().check(z.maxLength(1024)).check(z.refine((p) => !p.startsWith("/") && !p.split("/").some((s) => s === ".." || s === "." || s === "") && !p.includes("\0"), "a relative path without . or .."));

/** Component paths inside the payload: relative, no `..`, no empty or dot segments. */
export const componentPath = z.string().check(z.maxLength(512)).check(z.regex(/^(?:db|files|workspace|sources)\/[A-Za-z0-9._+@=-]+(?:\/[A-Za-z0-9._+@=-]+)*$/)).check(z.refine((p) => !p.split("/").some((s) => s === "." || s === ".."), "no . or .. segments"));

export const ComponentSchema = z.strictObject({
  path: componentPath,
  kind: z.enum(["sqlite", "sqlite-delta", "file", "git-bundle", "git-patch", ...SOURCE_KINDS]),
  name: z.string(),
  sha256: sha,
  size: int,
  records: z.optional(z.record(z.string(), int)),
  schema_version: z.optional(int),
  mode: z.optional(int),
  /**
   * this database's page index, kept beside the bundle for the next incremental (its page digests, each encrypted
   * under the backup host's key): from format 4 on the pages root of its digests, before the sha256 of the index as stored
   */
  page_index_sha256: z.optional(sha),
  /**
   * sqlite-delta: the whole rebuilt database — its pages root (format 4 on: SHA-256 over its page size, page count
   * and each page's digest, see state/pages/pageindex.ts) or, in earlier formats, its sha256 — and the delta's shape
   */
  full_pages_sha256: z.optional(sha),
  full_sha256: z.optional(sha),
  full_size: z.optional(int),
  /**
   * a database (sqlite, sqlite-delta): the digest of the image on which `PRAGMA integrity_check` returned ok at
   * backup — `sha256`, or a delta's `full_pages_sha256` — absent when the backup ran none (an incremental between
   * checks) and in bundles made before it was recorded. A restore whose image has that digest knows the check's result
   */
  integrity_checked: z.optional(sha),
  /**
   * a database (format 8 on): the digest of the image, as for `integrity_checked`, on which the backup's index digest check
   * passed instead (state/sqlite/indexdigest.ts: `PRAGMA quick_check`, every index's entries equal to those its table's
   * rows make by a keyed multiset digest, every UNIQUE index without two equal keys — what integrity_check establishes,
   * in sequential reads). A restore whose image has that digest knows that check's result
   */
  index_digest_checked: z.optional(sha),
  page_size: z.optional(int),
  page_count: z.optional(int),
  changed_pages: z.optional(int),
  /** a vector store's embedding model and dimension (from the config), checked at restore and in drills */
  embedding: z.optional(embedding),
  /** SQLite: virtual tables whose module is not loaded here, so not counted (their shadow tables are) */
  virtual_tables: z.optional(z.array(z.string())),
  /** a LanceDB table: the version captured and the dimension of its vector column */
  table_version: z.optional(int),
  dimension: z.optional(int),
  /** where the component goes inside a restored root (relative, no ..) */
  target: z.optional(relPath),
  /**
   * format 5: the component's bytes are not in the payload but in the agent's chunk store, in this order; each
   * [id, sha256 of the stored object, object bytes, plaintext bytes] (docs/chunk-store.md)
   */
  chunks: z.optional(z.array(z.tuple([sha, sha, int.check(z.minimum(1)), int.check(z.minimum(1))]))),
  /**
   * format 6: a packed small file (docs/chunk-store.md): its `size` bytes start this far into its first chunk's
   * plaintext; its chunks are exactly those that range touches
   */
  chunk_skip: z.optional(int),
  /**
   * format 6: a chunked state source's fingerprint at its capture (docs/chunk-store.md): a later capture that reads
   * the same one reuses this entry instead of dumping again
   */
  fingerprint: z.optional(sha),
});

/** When each state source was captured, and from which credential reference (never its value). */
export const CaptureInstantSchema = z.strictObject({
  started_at: time,
  finished_at: time,
  sources: z.array(
    z.strictObject({
      name: z.string(),
      kind: z.enum(SOURCE_KINDS),
      /** the credential reference the connection came from (postgres, redis) */
      ref: z.nullable(z.string()),
      /** lancedb: the folder inside a restored root */
      path: z.nullable(relPath),
      snapshot_at: time,
      server_version: z.nullable(z.string()),
    }),
  ),
});

/** A path the backup deliberately left out, and why (`detail`: the credential reference, the exclude pattern, ...). */
/** Why something was deliberately left out of a bundle. */
export const NOT_CAPTURED_REASONS = ["credential", "exclude", "repository", "nested-git"] as const;

const vectorId = z.union([z.string().check(z.maxLength(1024)), z.int()]);
/** A vector store's recall record (state/sqlite/neighbours.ts RecallRecord): each probe's exact top-10 at the snapshot instant. */
export const RecallSchema = z.strictObject({
  store: z.string(),
  kind: z.enum(["sqlite-vec", "lancedb"]),
  name: z.string(),
  table: z.string(),
  column: z.string(),
  id_column: z.string(),
  metric: z.enum(["l2", "cosine"]),
  dimension: int,
  vectors: int,
  rows_without_vector: z.nullable(int),
  vectors_without_row: z.nullable(int),
  rows: z.optional(z.strictObject({ table: z.string(), id: z.string() })),
  probes: z.array(z.strictObject({
    id: z.nullable(vectorId),
    vector_sha256: sha,
    vector: z.optional(z.string().check(z.regex(/^[A-Za-z0-9+/]*={0,2}$/))),
    neighbours: z.array(vectorId).check(z.maxLength(10)),
    kth_distance: z.number(),
  })),
});

export const NotCapturedSchema = z.strictObject({
  path: z.string().check(z.maxLength(1024)),
  reason: z.enum(NOT_CAPTURED_REASONS),
  detail: z.string().check(z.maxLength(1024)),
});

export const ManifestSchema = z.strictObject({
  format: z.literal(FORMAT),
  format_version: int,
  tool_version: z.string(),
  // both name folders in repositories and in AGENTBAK_HOME
  agent_id: z.string().check(z.regex(ID_PATTERN)),
  tenant: z.string().check(z.regex(ID_PATTERN)),
  snapshot_id: z.string().check(z.regex(SNAPSHOT_ID)),
  created_at: time,
  expires_at: time,
  sequence: int.check(z.minimum(1)),
  parent: z.nullable(z.strictObject({ snapshot_id: z.string(), manifest_sha256: sha })),
  /** set by compact: the incremental this full snapshot replaces (same state, same sequence) */
  compacted_from: z.optional(z.nullable(z.strictObject({ snapshot_id: z.string(), manifest_sha256: sha }))),
  label: z.nullable(z.string()),
  idempotency_key: z.nullable(z.string()),
  signer: z.strictObject({ fingerprint: z.string(), principal: z.string() }),
  recipients: z.array(z.string()).check(z.minLength(1)),
  runtime: z.strictObject({
    image_digest: z.nullable(z.string()),
    agent_version: z.nullable(z.string()),
    models: z.record(z.string(), z.string()),
    host: z.string(),
  }),
  schema_version: z.nullable(int),
  components: z.array(ComponentSchema),
  payload: z.strictObject({
    sha256: sha,
    size: int,
    tar_size: int,
    compression: z.literal("zstd"),
    encryption: z.literal("age-x25519"),
    /**
     * the sha256 of each `size` bytes of payload.age and their root (streams.ts ChunkDigests), which verify hashes in
     * parallel; from format 7 (payloads of LIST_FROM bytes and more) each chunk's digest too, in order, whose root
     * `sha256` must be: restore checks each chunk against it before decrypting it, in one read of the payload
     */
    chunks: z.optional(z.strictObject({ size: z.int().check(z.minimum(1 << 20)).check(z.maximum(1 << 26)), sha256: sha, digests: z.optional(z.array(sha)) })),
  }),
  workspace: z.nullable(z.strictObject({
    path: z.string().check(z.refine((p) => !p.startsWith("/") && !p.split("/").some((s) => s === ".." || s === ""), "a relative path")),
    commit: z.string().check(z.regex(/^[0-9a-f]{40,64}$/)),
    branch: z.nullable(z.string()),
    dirty: z.boolean(),
    uncommitted: z.enum(["include", "refuse", "ignore"]),
    tree_sha256: sha,
    files: int,
  })),
  credentials: z.array(z.strictObject({ name: z.string(), ref: z.string() })),
  cursors: z.record(z.string(), scalar),
  /** the queries that produced the cursors, so a drill can compare them on the restored state */
  cursor_queries: z.record(z.string(), z.strictObject({ database: z.string(), sql: z.string() })),
  open_operations: z.array(
    z.strictObject({
      id: scalar,
      idempotency_key: z.string(),
      /** what kind of effect it is (e.g. email, payment), when the open-operations query names one */
      kind: z.optional(z.nullable(z.string())),
      /** how a restore reconciles it, from the config at backup time */
      strategy: z.optional(z.enum(STRATEGIES)),
    }),
  ),
  /** how the databases were captured at one instant (absent in bundles made before agentbak recorded it) */
  cut: z.optional(z.strictObject({
    at: time,
    method: z.enum(["write-locks", "read-transaction"]),
    databases: z.array(z.string()),
    wait_ms: int,
    hold_ms: int,
  })),
  /** state sources beyond SQLite (absent in bundles made before them) */
  capture_instant: z.optional(CaptureInstantSchema),
  /** what was deliberately left out (a credential's file, an excluded name, a nested repository's history); never values */
  not_captured: z.optional(z.array(NotCapturedSchema)),
  /** recall parity: per probe set of the config, each probe's exact neighbours (absent without probe sets) */
  recall: z.optional(z.array(RecallSchema)),
  /**
   * Spaces, and nothing else: they make manifest.json fill the room the
   * writer reserved before payload.age, which it wrote first, in place
   * (bundle/writer.ts). They mean nothing.
   */
  layout_padding: z.optional(z.string().check(z.regex(/^ *$/))),
});

export type Manifest = z.infer<typeof ManifestSchema>;
export type NotCaptured = z.infer<typeof NotCapturedSchema>;
export type Component = z.infer<typeof ComponentSchema>;

/** The digest of the database image a component restores: a delta's rebuilt database's, else its own sha256. */
export const imageDigest = (c: Component): string => (c.kind === "sqlite-delta" ? (c.full_pages_sha256 ?? c.full_sha256 ?? c.sha256) : c.sha256);

/** Whether the backup's integrity_check is attested, in the signed manifest, for exactly the image `c` restores. */
export const integrityAttested = (c: Component): boolean => attestedCheck(c) !== null;

/** Which backup check the signed manifest attests for exactly the image `c` restores, if one. */
export function attestedCheck(c: Component): "integrity_check" | "index_digest" | null {
  const image = imageDigest(c);
  return c.integrity_checked === image ? "integrity_check" : c.index_digest_checked === image ? "index_digest" : null;
}

/** A chunk as the restoring side needs it (the store's ChunkRef). */
export interface ChunkRef {
  id: string;
  sha256: string;
  size: number;
  length: number;
}

/** A chunked component's chunks as refs, or null for a component in the payload. */
export const chunkRefs = (c: Pick<Component, "chunks">): ChunkRef[] | null => c.chunks?.map(([id, sha256, size, length]) => ({ id, sha256, size, length })) ?? null;

/**
 * Whether chunks of these plaintext lengths hold a component of `size` bytes: all of them exactly, or, from `skip`
 * bytes into the first, a range that every one of them touches (a packed small file).
 * @returns null when they do, else what is wrong
 */
export function chunkRange(lengths: number[], size: number, skip?: number): string | null {
  const total = lengths.reduce((n, x) => n + x, 0);
  if (skip === undefined) return total === size ? null : `hold another number of bytes than its size ${size}`;
  if (!lengths.length || size < 1) return "are no range: a packed file lists at least one chunk and one byte";
  if (skip >= lengths[0]! || skip + size > total || total - lengths[lengths.length - 1]! >= skip + size)
    return `do not hold exactly the range of ${size} bytes from ${skip} (${lengths.length} chunk(s), ${total} bytes)`;
  return null;
}

/** A component's chunk list as the manifest writes it. */
export const chunkTuples = (refs: ChunkRef[]): [string, string, number, number][] => refs.map((r) => [r.id, r.sha256, r.size, r.length]);

/** Whether a component is a database (a whole copy or a page delta against the parent's). */
export const isDatabase = (c: Pick<Component, "kind">) => c.kind === "sqlite" || c.kind === "sqlite-delta";

/** Whether a component is captured state of a source (postgres, redis, lancedb). */
export const isSource = (c: Pick<Component, "kind">): c is Pick<Component, "kind"> & { kind: SourceKind } => (SOURCE_KINDS as readonly string[]).includes(c.kind);

/** An embedding model and the dimension of its vectors. */
export type Embedding = { model: string; dimension: number };

/**
 * How a bundle's vector stores differ from the embedding models configured
 * where it is restored (by database or source name): `changes` must be
 * approved, `unknown` (nothing recorded, a bundle made before the config
 * named one) are only warned about. Stores the config does not name are not compared.
 */
export function embeddingChanges(m: Manifest, configured: Map<string, Embedding | undefined>): { changes: string[]; unknown: string[] } {
  const recorded = new Map<string, Embedding>();
  for (const c of m.components) if (c.embedding) recorded.set(c.name, c.embedding);
  const show = (e: Embedding) => `${e.model} (dimension ${e.dimension})`;
  const out = { changes: [] as string[], unknown: [] as string[] };
  for (const [name, want] of configured) {
    const had = recorded.get(name);
    if (had && !want) out.changes.push(`vector store ${name}: the snapshot's vectors are from ${show(had)}, the config here names no embedding model`);
    else if (had && want && (had.model !== want.model || had.dimension !== want.dimension))
      out.changes.push(`vector store ${name}: the snapshot's vectors are from ${show(had)}, the config here uses ${show(want)}`);
    else if (!had && want && m.components.some((c) => c.name === name)) out.unknown.push(`vector store ${name}: the snapshot records no embedding model; the config here uses ${show(want)}`);
  }
  return out;
}

/** Where a component lands in a restored root: databases and files have a place of their own; workspace parts are rebuilt at workspace.path. */
export const targetOf = (c: Pick<Component, "kind" | "path" | "target">): string | null => (isDatabase(c) || c.kind === "file" ? (c.target ?? c.path) : null);

/** The payload folder each kind lives in. */
const KIND_DIR: Record<Component["kind"], string> = { sqlite: "db", "sqlite-delta": "db", file: "files", "git-bundle": "workspace", "git-patch": "workspace", postgres: "sources", redis: "sources", lancedb: "sources" };

/** A name for error lines: long or odd names are cut, so a hostile bundle can not flood the terminal. */
export const clipName = (s: string, max = 120) => JSON.stringify(s.length > max ? `${s.slice(0, max)}…` : s);

/**
 * What one field can not say alone: every component in its kind's folder,
 * one database per name, no SQLite sidecar (-wal, -shm, -journal) of a
 * database, nothing inside agentbak's own `.agentbak` folders, no two
 * components (or a component and the workspace) restoring to one place or
 * one inside the other, and a tar size its components can fill.
 * @throws Error naming the component and the target.
 */
function checkPlacement(m: Manifest): void {
  const dbNames = new Set<string>();
  const dbTargets = new Set(m.components.filter(isDatabase).map((c) => targetOf(c)!));
  // restored paths, and every folder above one, with what goes there
  const placed = new Map<string, string>();
  const above = new Map<string, string>();
  const place = (t: string, what: string) => {
    const segs = t.split("/");
    for (let i = 1; i <= segs.length; i++) {
      const p = segs.slice(0, i).join("/");
      const other = placed.get(p) ?? (i === segs.length ? above.get(p) : undefined);
      // the same place, or one inside the other: the later would replace or break the earlier
      if (other) throw new Error(`${what} and ${other} both restore to ${clipName(p)}`);
    }
    placed.set(t, what);
    for (let i = 1; i < segs.length; i++) if (!above.has(segs.slice(0, i).join("/"))) above.set(segs.slice(0, i).join("/"), what);
  };
  if (m.workspace) place(m.workspace.path, "the workspace");
  let tarBound = TAR_SLACK;
  for (const c of m.components) {
    if (c.chunks && c.kind !== "file" && !isSource(c)) throw new Error(`component ${clipName(c.path)} of kind ${c.kind} lists chunks; only files and state sources are chunked`);
    if (!c.chunks) tarBound += Math.ceil(c.size / 512) * 512 + TAR_ENTRY_OVERHEAD;
    const what = `component ${clipName(c.path)}`;
    const t = targetOf(c);
    if (t !== null && SQLITE_SIDECAR.test(t) && dbTargets.has(t.replace(SQLITE_SIDECAR, "")))
      throw new Error(`${what} targets ${clipName(t)}, a SQLite sidecar of a restored database; a snapshot is one self-contained file`);
    if (c.path.split("/")[0] !== KIND_DIR[c.kind]) throw new Error(`${what} of kind ${c.kind} is outside ${KIND_DIR[c.kind]}/`);
    if (isDatabase(c)) {
      if (dbNames.has(c.name)) throw new Error(`manifest lists database ${clipName(c.name)} twice`);
      dbNames.add(c.name);
    }
    if (t === null) continue;
    if (t.split("/")[0]!.startsWith(".agentbak")) throw new Error(`${what} targets ${clipName(t)}, inside agentbak's own folder`);
    place(t, what);
  }
  if (m.payload.tar_size > tarBound) throw new Error(`payload.tar_size ${m.payload.tar_size} is more than its components can fill (at most ${tarBound} bytes)`);
}

/** Per tar entry beyond its padded data: header, and a pax or GNU long-name header with its data. */
const TAR_ENTRY_OVERHEAD = 2048;
/** End-of-archive blocks and record padding (GNU tar pads to 10240-byte records). */
const TAR_SLACK = 20480;

/** "full" when a bundle restores on its own, "incremental" when it needs its parent chain. */
export const snapshotKind = (m: Pick<Manifest, "parent">) => (m.parent ? "incremental" : "full");

/** A database as a backup captured it: the payload member and what inspection found. */
export interface CapturedDatabase {
  name: string;
  /** where it goes in a restored root */
  target: string;
  written: { path: string; sha256: string; size: number };
  /** a page delta against the parent's copy, or null for a whole copy */
  delta: { full_pages_sha256: string; full_size: number; page_size: number; page_count: number; changed_pages: number } | null;
  records: Record<string, number>;
  schemaVersion: number;
  pageIndexSha256: string;
  /** the digest of the image the integrity check passed on (written sha256, or the delta's full_pages_sha256), if it ran */
  integrityChecked?: string;
  /** which check that was (state/sqlite/indexdigest.ts); integrity_check when not said */
  integrityMethod?: "integrity_check" | "index_digest";
  /** virtual tables not counted (their module is not loaded here) */
  virtualTables?: string[];
  embedding?: { model: string; dimension: number };
}

/** Everything a manifest states, as the backup pipeline produced it. */
export interface ManifestInput {
  agent: { id: string; tenant: string };
  snapshotId: string;
  created: Date;
  expireDays: number;
  sequence: number;
  parent: { snapshot_id: string; manifest_sha256: string } | null;
  label: string | null;
  idempotencyKey: string | null;
  signer: { fingerprint: string; principal: string };
  recipients: string[];
  runtime: Manifest["runtime"];
  /** how the databases were captured at one instant */
  cut: Manifest["cut"];
  databases: CapturedDatabase[];
  /** every other component (files, workspace), as written */
  others: Component[];
  payload: Manifest["payload"];
  workspace: Manifest["workspace"];
  credentials: Manifest["credentials"];
  cursors: Manifest["cursors"];
  cursorQueries: Manifest["cursor_queries"];
  openOperations: Manifest["open_operations"];
  /** when each state source was captured; omitted when the config has none */
  captureInstant?: Manifest["capture_instant"];
  notCaptured?: NotCaptured[];
  recall?: Manifest["recall"];
}

/**
 * The manifest for one backup: a pure function of what the pipeline captured
 * (databases first, in config order, then the other components).
 */
export function buildManifest(i: ManifestInput): Manifest {
  const databases: Component[] = i.databases.map((d) => ({
    path: d.written.path,
    kind: d.delta ? "sqlite-delta" : "sqlite",
    name: d.name,
    sha256: d.written.sha256,
    size: d.written.size,
    target: d.target,
    records: d.records,
    schema_version: d.schemaVersion,
    page_index_sha256: d.pageIndexSha256,
    ...(d.delta ?? {}),
    ...(d.integrityChecked ? (d.integrityMethod === "index_digest" ? { index_digest_checked: d.integrityChecked } : { integrity_checked: d.integrityChecked }) : {}),
    ...(d.virtualTables?.length ? { virtual_tables: d.virtualTables } : {}),
    ...(d.embedding ? { embedding: d.embedding } : {}),
  }));
  return {
    format: FORMAT,
    format_version: FORMAT_VERSION,
    tool_version: TOOL_VERSION,
    agent_id: i.agent.id,
    tenant: i.agent.tenant,
    snapshot_id: i.snapshotId,
    created_at: i.created.toISOString(),
    expires_at: new Date(i.created.getTime() + i.expireDays * 86_400_000).toISOString(),
    sequence: i.sequence,
    parent: i.parent,
    label: i.label,
    idempotency_key: i.idempotencyKey,
    signer: i.signer,
    recipients: i.recipients,
    runtime: i.runtime,
    ...(i.cut ? { cut: i.cut } : {}),
    schema_version: i.databases[0]?.schemaVersion ?? null,
    components: [...databases, ...i.others],
    payload: i.payload,
    workspace: i.workspace,
    credentials: i.credentials,
    cursors: i.cursors,
    cursor_queries: i.cursorQueries,
    open_operations: i.openOperations,
    ...(i.captureInstant ? { capture_instant: i.captureInstant } : {}),
    // absent when empty: bundles stay readable by tools that predate the field
    ...(i.notCaptured?.length ? { not_captured: i.notCaptured } : {}),
    ...(i.recall?.length ? { recall: i.recall } : {}),
  };
}

/**
 * The manifest for one backup (buildManifest), checked as the reader will check it (placement, sizes) before
 * anything is signed.
 * @throws Error with the reader's complaint: a bundle that can never be restored is not written
 */
export function checkedManifest(i: ManifestInput): Manifest {
  const m = buildManifest(i);
  parseManifest(encodeManifest(m));
  return m;
}

/** The canonical bytes of a manifest. */
export function encodeManifest(m: Manifest): Buffer {
  const s = canonicalize(m);
  if (s === undefined) throw new Error("manifest is not serialisable");
  return Buffer.from(s, "utf8");
}

export const sha256hex = (b: Uint8Array | string) => createHash("sha256").update(b).digest("hex");

/**
 * sha256 of manifest bytes already found valid, here or (through the
 * repository's header cache in AGENTBAK_HOME, trusted local state) in an
 * earlier run: the same bytes parse the same, so they are only JSON-parsed.
 */
const valid = new Set<string>();

/** Records manifest bytes (by sha256) known to pass parseManifest. */
export const rememberValidManifest = (sha256: string) => void valid.add(sha256);

const newerFormat = (v: number) => policyError(`bundle format version ${v} is newer than this tool supports (${FORMAT_VERSION})`);

/** `payload.chunks.digests`: from format 7, one per chunk of the payload's size, their root the signed `sha256`. */
function checkChunkList(version: number, size: number, c: { size: number; sha256: string; digests?: string[] }): void {
  const list = c.digests!;
  if (version < 7) throw new Error(`payload.chunks.digests in a format version ${version} manifest (added in version 7)`);
  if (list.length !== Math.ceil(size / c.size)) throw new Error(`payload.chunks.digests lists ${list.length} chunks; a payload of ${size} bytes has ${Math.ceil(size / c.size)}`);
  const root = createHash("sha256");
  for (const d of list) root.update(Buffer.from(d, "hex"));
  if (root.digest("hex") !== c.sha256) throw new Error("payload.chunks.digests: their root is not payload.chunks.sha256");
}

/**
 * Parses manifest bytes strictly. `digest`: their sha256, when the caller has it.
 * @throws Error naming the problem: `not canonical JSON`, `manifest.<path>: ...`.
 */
export function parseManifest(bytes: Buffer, digest = sha256hex(bytes)): Manifest {
  if (bytes.length > MAX_MANIFEST) throw new Error("manifest larger than 8 MiB");
  if (valid.has(digest)) {
    // bytes found valid by another version of agentbak (the header cache in AGENTBAK_HOME outlives upgrades and
    // downgrades): a newer format is still refused as newer
    const m = JSON.parse(bytes.toString("utf8")) as Manifest;
    if (m.format_version > FORMAT_VERSION) throw newerFormat(m.format_version);
    return m;
  }
  const text = bytes.toString("utf8");
  if (!Buffer.from(text, "utf8").equals(bytes)) throw new Error("manifest is not valid UTF-8");
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw new Error("manifest is not JSON");
  }
  const head = raw as { format_version?: unknown; sequence?: unknown } | null;
  if (typeof head?.format_version === "number" && head.format_version > FORMAT_VERSION)
    throw newerFormat(head.format_version);
  if (typeof head?.sequence === "number" && Number.isInteger(head.sequence) && !Number.isSafeInteger(head.sequence))
    throw policyError(`checkpoint sequence ${head.sequence} is beyond the safe integer range; refusing a fast-forward`);
  // duplicate keys, other key orders, whitespace, -0 and float spellings all change the canonical form
  if (canonicalize(raw) !== text) throw new Error("manifest is not canonical JSON (RFC 8785)");
  const parsed = ManifestSchema.safeParse(raw);
  if (!parsed.success) throw new Error(`manifest invalid: ${formatIssues(parsed.error.issues)}`);
  const m = parsed.data;
  if (m.format_version < 1 || m.format_version > FORMAT_VERSION) throw new Error(`unsupported bundle format version ${m.format_version}`);
  if (m.format_version < 2 && m.payload.chunks) throw new Error("payload.chunks in a format version 1 manifest (added in version 2)");
  if (m.payload.chunks?.digests) checkChunkList(m.format_version, m.payload.size, m.payload.chunks);
  if (m.recall && m.format_version < 7) throw new Error(`recall in a format version ${m.format_version} manifest (added in version 7)`);
  if (m.format_version < 3 && m.layout_padding !== undefined) throw new Error(`layout_padding in a format version ${m.format_version} manifest (added in version 3)`);
  const seen = new Set<string>();
  for (const c of m.components) {
    if (c.chunks && m.format_version < 5) throw new Error(`manifest.components: chunks in a format version ${m.format_version} manifest (added in version 5; component ${c.path})`);
    if (c.chunk_skip !== undefined && (!c.chunks || m.format_version < 6)) throw new Error(`manifest.components: chunk_skip ${c.chunks ? `in a format version ${m.format_version} manifest (added in version 6;` : "without chunks (component"} ${c.path})`);
    if (c.fingerprint !== undefined && (!c.chunks || !isSource(c) || m.format_version < 6)) throw new Error(`manifest.components: fingerprint on ${c.path}: only on a chunked state source, from format version 6`);
    const range = c.chunks ? chunkRange(c.chunks.map((x) => x[3]), c.size, c.chunk_skip) : null;
    if (range) throw new Error(`manifest.components: the chunks of ${c.path} ${range}`);
    if (seen.has(c.path)) throw new Error(`manifest lists component ${c.path} twice`);
    seen.add(c.path);
    // a delta's rebuilt database is checked against one digest: its pages root from format 4 on, its sha256 before
    const [want, other] = m.format_version >= 4 ? (["full_pages_sha256", "full_sha256"] as const) : (["full_sha256", "full_pages_sha256"] as const);
    if (c[other] !== undefined) throw new Error(`manifest.components: ${other} in a format version ${m.format_version} manifest (component ${c.path})`);
    if (c.kind === "sqlite-delta" && c[want] === undefined) throw new Error(`manifest.components: sqlite-delta component ${c.path} has no ${want}`);
    if (c.integrity_checked !== undefined && !isDatabase(c)) throw new Error(`manifest.components: integrity_checked on ${c.kind} component ${c.path} (databases only)`);
    if (c.index_digest_checked !== undefined && (!isDatabase(c) || m.format_version < 8))
      throw new Error(`manifest.components: index_digest_checked ${isDatabase(c) ? `in a format version ${m.format_version} manifest (added in version 8;` : `on ${c.kind} component (databases only;`} component ${c.path})`);
  }
  checkPlacement(m);
  valid.add(digest);
  return m;
}
