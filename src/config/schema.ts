/**
 * The `agentbak.json` schema: one zod definition, used for strict validation
 * and exported as JSON Schema for editors (`agentbak config schema`).
 */
import { z } from "zod";
import { parseRecipient } from "../crypto/age.js";

/** Agent ids and tenants: also folder names in repositories and in AGENTBAK_HOME. */
export const ID_PATTERN = /^[a-z0-9][a-z0-9._-]{0,63}$/;
const id = z.string().regex(ID_PATTERN, "lowercase letters, digits, . _ - (max 64)");
const recipient = z.string().refine((r) => {
  try {
    parseRecipient(r);
    return true;
  } catch {
    return false;
  }
}, "not an age X25519 recipient (age1..., 62 characters, valid bech32 checksum)");
const sqlRef = z.strictObject({ database: z.string(), sql: z.string().min(1) });
const scanPolicy = z.enum(["refuse", "warn", "off"]).default("refuse");

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
  $schema: z.string().optional(),
  agent: z.strictObject({ id, tenant: id }),
  repository: z.string().min(1),
  recipients: z.array(recipient).min(1),
  databases: z
    .array(z.strictObject({ name: z.string().regex(/^[a-z][a-z0-9_]{0,31}$/, "lowercase name"), path: z.string().min(1) }))
    .default([]),
  files: z.array(z.string().min(1)).default([]),
  workspace: z
    .strictObject({ path: z.string().min(1), uncommitted: z.enum(["include", "refuse", "ignore"]).default("include") })
    .optional(),
  credentials: z
    .array(z.strictObject({ name: z.string().min(1), ref: z.string().regex(/^[a-z][a-z0-9+.-]*:.+/, "a reference like env:NAME or file:PATH") }))
    .default([]),
  cursors: z.record(z.string().regex(/^[a-z][a-z0-9_]*$/), sqlRef).default({}),
  openOperations: sqlRef.optional(),
  runtime: z
    .strictObject({
      imageDigest: z.string().optional(),
      agentVersion: z.string().optional(),
      models: z.record(z.string(), z.string()).optional(),
      maxSchemaVersion: z.number().int().min(0).optional(),
    })
    .default({}),
  hooks: z
    .strictObject({
      pre: z.array(z.string()).default([]),
      post: z.array(z.string()).default([]),
      timeoutSeconds: z.number().int().positive().default(30),
    })
    .default({ pre: [], post: [], timeoutSeconds: 30 }),
  retention: z
    .strictObject({
      keepLast: z.number().int().positive().optional(),
      keepHourly: z.number().int().positive().optional(),
      keepDaily: z.number().int().positive().optional(),
      keepWeekly: z.number().int().positive().optional(),
      keepMonthly: z.number().int().positive().optional(),
      keepYearly: z.number().int().positive().optional(),
      expireDays: z.number().int().positive().default(365),
    })
    .default({ expireDays: 365 }),
  /** per source: refuse (exit 14), warn (exit 3) or off; `exclude`: names never captured from the workspace's uncommitted work or `files` */
  secretScan: z
    .strictObject({
      databases: scanPolicy,
      workspace: scanPolicy,
      files: scanPolicy,
      exclude: z.array(z.string().min(1)).default(DEFAULT_EXCLUDE),
    })
    .default({ databases: "refuse", workspace: "refuse", files: "refuse", exclude: DEFAULT_EXCLUDE }),
  /** S3 Object Lock for uploaded bundles: a compromised agent host can not delete its history */
  objectLock: z.strictObject({ mode: z.enum(["governance", "compliance"]), days: z.number().int().positive() }).optional(),
  incremental: z
    .strictObject({ enabled: z.boolean().default(false), fullEvery: z.number().int().min(1).default(10) })
    .default({ enabled: false, fullEvery: 10 }),
  signing: z.strictObject({ key: z.string().optional(), allowedSigners: z.string().optional() }).default({}),
  restore: z
    .strictObject({
      staleAfterHours: z.number().int().positive().default(24),
      credentialCheck: z.record(z.string(), z.array(z.string())).optional(),
    })
    .default({ staleAfterHours: 24 }),
});

/** The config: every key, plus what one key can not say alone (names that must exist or be unique). */
export const ConfigSchema = ConfigObject.superRefine((c, ctx) => {
  const names = new Set<string>();
  c.databases.forEach((d, i) => {
    if (names.has(d.name)) ctx.addIssue({ code: "custom", path: ["databases", i, "name"], message: `database name "${d.name}" is used twice` });
    names.add(d.name);
  });
  for (const [k, q] of Object.entries(c.cursors))
    if (!names.has(q.database)) ctx.addIssue({ code: "custom", path: ["cursors", k, "database"], message: `no database named "${q.database}"` });
  if (c.openOperations && !names.has(c.openOperations.database))
    ctx.addIssue({ code: "custom", path: ["openOperations", "database"], message: `no database named "${c.openOperations.database}"` });
});

export type Config = z.infer<typeof ConfigSchema>;

/** JSON Schema (draft 2020-12) generated from the same definition. */
export const configJsonSchema = () => z.toJSONSchema(ConfigSchema, { io: "input" });
