/**
 * The recovery protocol's config keys (DESIGN.md, Recovery protocol): open
 * operation strategies, the reconcile probe and outcome SQL, timers,
 * objectives, the capture cut, runtime compatibility and liveness.
 */
import * as z from "zod";

const sqlRef = z.strictObject({ database: z.string(), sql: z.string().min(1) });
const url = z.string().regex(/^https?:\/\/[^\s]+$/, "an http(s) URL");
/** How an open operation is reconciled after a restore (DESIGN.md, Recovery protocol). */
export const STRATEGIES = ["observe", "retry-safe", "escalate"] as const;
export type Strategy = (typeof STRATEGIES)[number];
export const strategy = z.enum(STRATEGIES);
const ident = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "a plain SQL identifier (letters, digits, _)");
/** `{credential:NAME}` in a probe header: the named credential's value, resolved when the probe runs */
export const CREDENTIAL_PLACEHOLDER = /\{credential:([^}]+)\}/g;
export const reconcile = z.strictObject({
  probe: z.union([
    z.strictObject({
      http: z.strictObject({
        url: url.refine((u) => !u.includes("{credential:"), "credentials belong in headers, never in the URL"),
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

export const openOperations = z
  .strictObject({ database: z.string(), sql: z.string().min(1), strategies: z.record(z.string(), strategy).default({}), defaultStrategy: strategy.default("observe") })
  .optional();

/** lease and deadline columns rebased at restore by the time elapsed since the snapshot (shift) or set to the restore time (expire) */
export const timers = z
  .array(
    z.strictObject({
      database: z.string(),
      table: ident,
      column: ident,
      mode: z.enum(["shift", "expire"]),
      format: z.enum(["epoch_ms", "epoch_s", "iso8601"]).default("epoch_ms"),
    }),
  )
  .default([]);

/** recovery objectives: a drill fails when missed; snapshots warns when the newest snapshot is older than the RPO */
export const objectives = z.strictObject({ rpoMinutes: z.number().positive().optional(), rtoSeconds: z.number().positive().optional() }).optional();

/** who owns an unresolved difference a drill reports: by category (open_operation, credential, check, or a scenario name), then default */
export const owners = z.record(z.string(), z.string().min(1)).optional();

/** all databases are captured at one instant: how long to wait for their write locks */
export const cut = z.strictObject({ waitSeconds: z.number().positive().max(3600).default(10) }).default({ waitSeconds: 10 });

/** snapshot-side runtime values this runtime accepts besides its own (exact, or with * wildcards) */
export const compatible = z
  .strictObject({
    agentVersion: z.array(z.string()).optional(),
    imageDigest: z.array(z.string()).optional(),
    models: z.record(z.string(), z.array(z.string())).optional(),
  })
  .optional();

/** how to tell whether the original runtime still runs: activation refuses while it answers alive */
export const liveness = z
  .strictObject({
    pidFile: z.string().min(1).optional(),
    http: url.optional(),
    command: z.array(z.string().min(1)).min(1).optional(),
    timeoutSeconds: z.number().positive().max(60).default(3),
  })
  .refine((l) => l.pidFile || l.http || l.command, "name a pidFile, an http URL or a command")
  .optional();

/** The strategy for an open operation of `kind`: its own in `strategies`, else the default (observe when nothing is configured). */
export const strategyFor = (kind: string | null | undefined, ops: z.infer<typeof openOperations>): Strategy =>
  (kind != null ? ops?.strategies[kind] : undefined) ?? ops?.defaultStrategy ?? "observe";
