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
/** How an open operation is reconciled after a restore (DESIGN.md, Recovery protocol). */
export const STRATEGIES = ["observe", "retry-safe", "escalate"] as const;
export type Strategy = (typeof STRATEGIES)[number];
const strategy = z.enum(STRATEGIES);
const ident = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "a plain SQL identifier (letters, digits, _)");
/** `{credential:NAME}` in a probe header: the named credential's value, resolved when the probe runs */
export const CREDENTIAL_PLACEHOLDER = /\{credential:([^}]+)\}/g;
const reconcile = z.strictObject({
  probe: z.union([
    z.strictObject({
      http: z.strictObject({
        url: z.string().regex(/^https?:\/\/[^\s]+$/, "an http(s) URL").refine((u) => !u.includes("{credential:"), "credentials belong in headers, never in the URL"),
        headers: z.record(z.string(), z.string()).default({}),
      }),
    }),
    z.strictObject({ command: z.array(z.string().min(1)).min(1) }),
  ]),
  onCompleted: sqlRef,
  onRetry: sqlRef.optional(),
  onEscalate: sqlRef.optional(),
  timeoutSeconds: z.number().positive().max(300).default(10),
  attempts: z.number().int().min(1).max(10).default(3),
});

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
  openOperations: z
    .strictObject({ database: z.string(), sql: z.string().min(1), strategies: z.record(z.string(), strategy).default({}), defaultStrategy: strategy.default("observe") })
    .optional(),
  /** reconciliation of open operations after a restore: probe, and the SQL that writes each outcome into the restored state */
  reconcile: reconcile.optional(),
  /** lease and deadline columns rebased at restore by the time elapsed since the snapshot (shift) or set to the restore time (expire) */
  timers: z
    .array(
      z.strictObject({
        database: z.string(),
        table: ident,
        column: ident,
        mode: z.enum(["shift", "expire"]),
        format: z.enum(["epoch_ms", "epoch_s", "iso8601"]).default("epoch_ms"),
      }),
    )
    .default([]),
  /** recovery objectives: a drill fails when missed; snapshots warns when the newest snapshot is older than the RPO */
  objectives: z.strictObject({ rpoMinutes: z.number().positive().optional(), rtoSeconds: z.number().positive().optional() }).optional(),
  /** who owns an unresolved difference a drill reports: by category (open_operation, credential, check, or a scenario name), then default */
  owners: z.record(z.string(), z.string().min(1)).optional(),
  /** all databases are captured at one instant: how long to wait for their write locks */
  cut: z.strictObject({ waitSeconds: z.number().positive().max(3600).default(10) }).default({ waitSeconds: 10 }),
  runtime: z
    .strictObject({
      imageDigest: z.string().optional(),
      agentVersion: z.string().optional(),
      models: z.record(z.string(), z.string()).optional(),
      maxSchemaVersion: z.number().int().min(0).optional(),
      /** snapshot-side values this runtime accepts besides its own (exact, or with * wildcards) */
      compatible: z
        .strictObject({
          agentVersion: z.array(z.string()).optional(),
          imageDigest: z.array(z.string()).optional(),
          models: z.record(z.string(), z.array(z.string())).optional(),
        })
        .optional(),
      /** how to tell whether the original runtime still runs: activation refuses while it answers alive */
      liveness: z
        .strictObject({
          pidFile: z.string().min(1).optional(),
          http: z.string().regex(/^https?:\/\/[^\s]+$/, "an http(s) URL").optional(),
          command: z.array(z.string().min(1)).min(1).optional(),
          timeoutSeconds: z.number().positive().max(60).default(3),
        })
        .refine((l) => l.pidFile || l.http || l.command, "name a pidFile, an http URL or a command")
        .optional(),
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
  const r = c.reconcile;
  if (r) {
    for (const k of ["onCompleted", "onRetry", "onEscalate"] as const)
      if (r[k] && !names.has(r[k].database)) ctx.addIssue({ code: "custom", path: ["reconcile", k, "database"], message: `no database named "${r[k].database}"` });
    const ops = c.openOperations;
    if (!ops) ctx.addIssue({ code: "custom", path: ["reconcile"], message: "reconcile needs openOperations (the query that finds them)" });
    else if (!r.onRetry && [ops.defaultStrategy, ...Object.values(ops.strategies)].includes("retry-safe"))
      ctx.addIssue({ code: "custom", path: ["reconcile", "onRetry"], message: "a retry-safe strategy needs onRetry (the SQL that queues the resend)" });
    const creds = new Set(c.credentials.map((x) => x.name));
    if ("http" in r.probe)
      for (const [h, v] of Object.entries(r.probe.http.headers))
        for (const m of v.matchAll(CREDENTIAL_PLACEHOLDER))
          if (!creds.has(m[1]!)) ctx.addIssue({ code: "custom", path: ["reconcile", "probe", "http", "headers", h], message: `no credential named "${m[1]}"` });
  }
  c.timers.forEach((t, i) => {
    if (!names.has(t.database)) ctx.addIssue({ code: "custom", path: ["timers", i, "database"], message: `no database named "${t.database}"` });
  });
});

export type Config = z.infer<typeof ConfigSchema>;

/** The strategy for an open operation of `kind`: its own in `strategies`, else the default (observe when nothing is configured). */
export const strategyFor = (kind: string | null | undefined, ops: Config["openOperations"]): Strategy =>
  (kind != null ? ops?.strategies[kind] : undefined) ?? ops?.defaultStrategy ?? "observe";

/** JSON Schema (draft 2020-12) generated from the same definition. */
export const configJsonSchema = () => z.toJSONSchema(ConfigSchema, { io: "input" });
