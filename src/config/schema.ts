/**
 * The `agentbak.json` schema: one zod definition, used for strict validation
 * and exported as JSON Schema for editors (`agentbak config schema`).
 */
import * as z from "../zod.js";
import { parseRecipient } from "../crypto/age.js";
import * as recovery from "./recovery.js";
import { ID_PATTERN } from "../facts.js";

const id = z.string().check(z.regex(ID_PATTERN, "lowercase letters, digits, . _ - (max 64)"));
const recipient = z.string().check(z.refine((r) => {
  try {
    parseRecipient(r);
    return true;
  } catch {
    return false;
  }
}, "not an age X25519 recipient (age1..., 62 characters, valid bech32 checksum)"));
/** A path in the config: not empty, and no NUL byte (no file system takes one; node would throw deep in a stage). */
const path = z.string().check(z.minLength(1), z.refine((p) => !p.includes("\0"), "contains a NUL byte"));
const sqlRef = z.strictObject({ database: z.string(), sql: z.string().check(z.minLength(1)) });
const stateName = z.string().check(z.regex(/^[a-z][a-z0-9_]{0,31}$/, "lowercase name"));
/** The embedding model a vector store was written with: part of the restore compatibility policy. */
const embedding = z.strictObject({ model: z.string().check(z.minLength(1)), dimension: z.int().check(z.positive()).check(z.maximum(65536)) });
/** A state source beside the SQLite files: its connection is a credential reference, resolved only to connect. */
const source = z.strictObject({
  name: stateName,
  kind: z.enum(["postgres", "redis", "lancedb"]),
  url: z.optional(z.string().check(z.regex(/^(env|file):.+/, "a credential reference: env:NAME or file:PATH holding the connection URL"))),
  path: z.optional(path),
  schemas: z.optional(z.array(z.string().check(z.regex(/^[A-Za-z_][A-Za-z0-9_$]{0,62}$/, "a schema name"))).check(z.minLength(1))),
  patterns: z.optional(z.array(z.string().check(z.minLength(1))).check(z.minLength(1))),
  embedding: z.optional(embedding),
  /** postgres: how long a backup waits for a table another session holds locked before it fails (exit 11 naming the table); default 10 */
  lockTimeoutSeconds: z.optional(z.number().check(z.positive()).check(z.maximum(3600))),
});

/**
 * A probe set for recall parity (docs/drills.md): a sqlite-vec `vec0` table of a database, or a table of a lancedb
 * source; K probes sampled from its vectors with `seed`, or the `vectors` given. Backup records each probe's exact
 * top-10 neighbours in the manifest; a drill whose spec has a `recall` section asks the restored store again.
 */
const recall = z.strictObject({
  /** a database (its vec0 table) or a lancedb source, by name */
  store: stateName,
  table: z.string().check(z.regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, "a table name")),
  column: z._default(z.string().check(z.regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, "a column name")), "embedding"),
  /** the id the store's query answers with: vec0's `rowid` or its text primary key; a lancedb column */
  id: z._default(z.string().check(z.regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, "a column name")), "rowid"),
  /** sqlite: the table the vectors belong to, for rows without a vector and vectors whose row is gone */
  rows: z.optional(z.strictObject({ table: z.string().check(z.regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, "a table name")), id: z.string().check(z.regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, "a column name")) })),
  metric: z._default(z.enum(["l2", "cosine"]), "l2"),
  probes: z._default(z.int().check(z.minimum(1)).check(z.maximum(1000)), 20),
  seed: z._default(z.string(), "agentbak"),
  vectors: z.optional(z.array(z.array(z.number()).check(z.minLength(1))).check(z.minLength(1)).check(z.maxLength(1000))),
});

/** Access tiers of the agent interface (MCP and HTTP), each including the ones before it; no tier deletes or restores. */
export const TIERS = ["read", "checkpoint", "restore-request"] as const;
export type Tier = (typeof TIERS)[number];
const scanPolicy = z._default(z.enum(["refuse", "warn", "off"]), "refuse");

/**
 * Names that commonly hold secrets, never captured from uncommitted work or
 * `files` (gitignore-style; see nameMatcher): dotenv files, SSH keys, key and
 * certificate stores, and the credential files of cloud CLIs and tools.
 */
export const DEFAULT_EXCLUDE = [
  ".env",
  ".env.*",
  "id_*",
  "*.pem",
  "*.key",
  "*.p12",
  "*.pfx",
  ".netrc",
  ".git-credentials",
  ".pgpass",
  "**/.aws/credentials",
  "**/.aws/config",
  "**/.config/gcloud",
  "application_default_credentials.json",
  "**/.azure",
  "**/.kube/config",
  "**/.docker/config.json",
];

const ConfigObject = z.strictObject({
  $schema: z.optional(z.string()),
  agent: z.strictObject({ id, tenant: id }),
  repository: path,
  recipients: z.array(recipient).check(z.minLength(1)),
  databases: z._default(z.array(z.strictObject({ name: stateName, path, embedding: z.optional(embedding) })), []),
  sources: z._default(z.array(source), []),
  /** recall parity: probe sets whose exact neighbours backup records for the drill */
  recall: z._default(z.array(recall), []),
  files: z._default(z.array(path), []),
  workspace: z.optional(z.strictObject({ path, uncommitted: z._default(z.enum(["include", "refuse", "ignore"]), "include") })),
  credentials: z._default(z.array(z.strictObject({ name: z.string().check(z.minLength(1)), ref: z.string().check(z.regex(/^[a-z][a-z0-9+.-]*:.+/, "a reference like env:NAME or file:PATH")) })), []),
  cursors: z._default(z.record(z.string().check(z.regex(/^[a-z][a-z0-9_]*$/)), sqlRef), {}),
  openOperations: recovery.openOperations,
  /** reconciliation of open operations after a restore: probe, and the SQL that writes each outcome into the restored state */
  reconcile: z.optional(recovery.reconcile),
  timers: recovery.timers,
  objectives: recovery.objectives,
  owners: recovery.owners,
  cut: recovery.cut,
  runtime: z._default(z.strictObject({
    imageDigest: z.optional(z.string()),
    agentVersion: z.optional(z.string()),
    models: z.optional(z.record(z.string(), z.string())),
    maxSchemaVersion: z.optional(z.int().check(z.minimum(0))),
    compatible: recovery.compatible,
    liveness: recovery.liveness,
  }), {}),
  hooks: z._default(z.strictObject({
    pre: z._default(z.array(z.string()), []),
    post: z._default(z.array(z.string()), []),
    timeoutSeconds: z._default(z.int().check(z.positive()), 30),
  }), { pre: [], post: [], timeoutSeconds: 30 }),
  retention: z._default(z.strictObject({
    keepLast: z.optional(z.int().check(z.positive())),
    keepHourly: z.optional(z.int().check(z.positive())),
    keepDaily: z.optional(z.int().check(z.positive())),
    keepWeekly: z.optional(z.int().check(z.positive())),
    keepMonthly: z.optional(z.int().check(z.positive())),
    keepYearly: z.optional(z.int().check(z.positive())),
    expireDays: z._default(z.int().check(z.positive()), 365),
  }), { expireDays: 365 }),
  /** per source: refuse (exit 14), warn (exit 3) or off; `exclude`: names never captured from the workspace's uncommitted work or `files` */
  secretScan: z._default(z.strictObject({
    databases: scanPolicy,
    workspace: scanPolicy,
    files: scanPolicy,
    exclude: z._default(z.array(z.string().check(z.minLength(1))), DEFAULT_EXCLUDE),
  }), { databases: "refuse", workspace: "refuse", files: "refuse", exclude: DEFAULT_EXCLUDE }),
  /** S3 Object Lock for uploaded bundles: a compromised agent host can not delete its history */
  objectLock: z.optional(z.strictObject({ mode: z.enum(["governance", "compliance"]), days: z.int().check(z.positive()) })),
  /**
   * `fullEvery`: a full snapshot after this many incrementals. `integrityEvery`: integrity_check runs on every full
   * snapshot and on every Nth incremental of a chain; the others read only the pages in place (no copy) and check
   * the counts (restore and drill always check the rebuilt database in full)
   */
  incremental: z._default(z.strictObject({ enabled: z._default(z.boolean(), false), fullEvery: z._default(z.int().check(z.minimum(1)), 10), integrityEvery: z._default(z.int().check(z.minimum(1)), 5) }), { enabled: false, fullEvery: 10, integrityEvery: 5 }),
  signing: z._default(z.strictObject({ key: z.optional(z.string()), allowedSigners: z.optional(z.string()) }), {}),
  /** the agent interface: the tier `agentbak mcp` runs at (--tier beats it), and where `agentbak serve` listens */
  agentInterface: z.optional(z.strictObject({ tier: z._default(z.enum(TIERS), "read"), listen: z.optional(z.string()) })),
  restore: z._default(z.strictObject({
    staleAfterHours: z._default(z.int().check(z.positive()), 24),
    credentialCheck: z.optional(z.record(z.string(), z.array(z.string()))),
  }), { staleAfterHours: 24 }),
});

/** The config: every key, plus what one key can not say alone (names that must exist or be unique). */
export const ConfigSchema = ConfigObject.check(z.superRefine((c, ctx) => {
  const names = new Set<string>();
  c.databases.forEach((d, i) => {
    if (names.has(d.name)) ctx.addIssue({ code: "custom", path: ["databases", i, "name"], message: `database name "${d.name}" is used twice` });
    names.add(d.name);
  });
  const all = new Set(names);
  c.sources.forEach((s, i) => {
    if (all.has(s.name)) ctx.addIssue({ code: "custom", path: ["sources", i, "name"], message: `name "${s.name}" is used twice (databases and sources share one namespace)` });
    all.add(s.name);
    const want = s.kind === "lancedb" ? "path" : "url";
    if (!s[want]) ctx.addIssue({ code: "custom", path: ["sources", i, want], message: `a ${s.kind} source needs "${want}"` });
    for (const k of ["url", "path", "schemas", "patterns", "embedding", "lockTimeoutSeconds"] as const) {
      const allowed = { postgres: ["url", "schemas", "lockTimeoutSeconds"], redis: ["url", "patterns"], lancedb: ["path", "embedding"] }[s.kind];
      if (s[k] !== undefined && !allowed.includes(k)) ctx.addIssue({ code: "custom", path: ["sources", i, k], message: `not a key of a ${s.kind} source` });
    }
  });
  const stores = new Set<string>();
  c.recall.forEach((r, i) => {
    const src = c.sources.find((s) => s.name === r.store);
    if (!names.has(r.store) && src?.kind !== "lancedb")
      ctx.addIssue({ code: "custom", path: ["recall", i, "store"], message: src ? `a ${src.kind} source has no recall probes here (databases with a vec0 table and lancedb sources do)` : `no database or lancedb source named "${r.store}"` });
    if (src && r.rows) ctx.addIssue({ code: "custom", path: ["recall", i, "rows"], message: "rows is for a vec0 table in a database" });
    const key = `${r.store}.${r.table}`;
    if (stores.has(key)) ctx.addIssue({ code: "custom", path: ["recall", i, "table"], message: `${key} has two probe sets` });
    stores.add(key);
  });
  for (const [k, q] of Object.entries(c.cursors))
    if (!names.has(q.database)) ctx.addIssue({ code: "custom", path: ["cursors", k, "database"], message: `no database named "${q.database}"` });
  if (c.openOperations && !names.has(c.openOperations.database))
    ctx.addIssue({ code: "custom", path: ["openOperations", "database"], message: `no database named "${c.openOperations.database}"` });
  const r = c.reconcile;
  if (r) {
    for (const k of ["onCompleted", "onRetry", "onEscalate"] as const)
      if (r[k] && !names.has(r[k].database)) ctx.addIssue({ code: "custom", path: ["reconcile", k, "database"], message: `no database named "${r[k].database}"` });
    const ops = c.openOperations;
    if (!ops) ctx.addIssue({ code: "custom", path: ["reconcile"], message: "reconcile needs openOperations (the query that finds them)" });
    else if (!r.onRetry && [ops.defaultStrategy, ...Object.values(ops.strategies)].includes("retry-safe"))
      ctx.addIssue({ code: "custom", path: ["reconcile", "onRetry"], message: "a retry-safe strategy needs onRetry (the SQL that queues the resend)" });
    const creds = new Set(c.credentials.map((x) => x.name));
    // credentials fill an HTTP probe's headers, or a command probe's environment
    const filled = "http" in r.probe ? { path: ["http", "headers"], values: r.probe.http.headers } : { path: ["env"], values: r.probe.env };
    for (const [k, v] of Object.entries(filled.values)) {
      if ("command" in r.probe && !recovery.PROBE_ENV_NAME.test(k))
        ctx.addIssue({ code: "custom", path: ["reconcile", "probe", "env", k], message: "not an environment variable name (letters, digits, _), or an AGENTBAK_* name (agentbak's own)" });
      for (const m of v.matchAll(recovery.CREDENTIAL_PLACEHOLDER))
        if (!creds.has(m[1]!)) ctx.addIssue({ code: "custom", path: ["reconcile", "probe", ...filled.path, k], message: `no credential named "${m[1]}"` });
    }
  }
  c.timers.forEach((t, i) => {
    if (!names.has(t.database)) ctx.addIssue({ code: "custom", path: ["timers", i, "database"], message: `no database named "${t.database}"` });
  });
}));

export type Config = z.infer<typeof ConfigSchema>;

/** JSON Schema (draft 2020-12) generated from the same definition. */
export const configJsonSchema = () => z.toJSONSchema(ConfigSchema, { io: "input" });

/** The embedding model configured for each database and source (undefined: none), by name. */
export const configuredEmbeddings = (c: Config) =>
  new Map<string, { model: string; dimension: number } | undefined>([...c.databases, ...c.sources].map((x) => [x.name, x.embedding]));
