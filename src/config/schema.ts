/**
 * The `agentbak.json` schema: one zod definition, used for strict validation
 * and exported as JSON Schema for editors (`agentbak config schema`).
 */
import { z } from "zod";

const id = z.string().regex(/^[a-z0-9][a-z0-9._-]{0,63}$/, "lowercase letters, digits, . _ - (max 64)");
const sqlRef = z.strictObject({ database: z.string(), sql: z.string().min(1) });

export const ConfigSchema = z.strictObject({
  $schema: z.string().optional(),
  agent: z.strictObject({ id, tenant: id }),
  repository: z.string().min(1),
  recipients: z.array(z.string().regex(/^age1[0-9a-z]{58}$/, "an age1... X25519 recipient")).min(1),
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
  secretScan: z
    .strictObject({ databases: z.enum(["refuse", "warn", "off"]).default("refuse") })
    .default({ databases: "refuse" }),
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

export type Config = z.infer<typeof ConfigSchema>;

/** JSON Schema (draft 2020-12) generated from the same definition. */
export const configJsonSchema = () => z.toJSONSchema(ConfigSchema, { io: "input" });
