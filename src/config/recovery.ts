/**
 * The recovery protocol's config keys (DESIGN.md, Recovery protocol): open
 * operation strategies, the reconcile probe and outcome SQL, timers,
 * objectives, the capture cut, runtime compatibility and liveness.
 */
import * as z from "../zod.js";
import { STRATEGIES, type Strategy } from "../facts.js";
import { parseDuration } from "../duration.js";

const sqlRef = z.strictObject({ database: z.string(), sql: z.string().check(z.minLength(1)) });
// fetch refuses a URL with user:password@ in it, and one would be echoed in details and receipts: credentials go in headers
const url = z.string().check(z.regex(/^https?:\/\/[^\s]+$/, "an http(s) URL")).check(z.refine((u) => !/^https?:\/\/[^/?#]*@/.test(u), "no user:password@ in the URL (credentials belong in headers)"));
/** How an open operation is reconciled after a restore (DESIGN.md, Recovery protocol). */
export const strategy = z.enum(STRATEGIES);
/** How strict a strategy is: operations sharing an idempotency key are all reconciled by the strictest of theirs. */
export const STRICTNESS: Record<Strategy, number> = { "retry-safe": 0, observe: 1, escalate: 2 };
const ident = z.string().check(z.regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "a plain SQL identifier (letters, digits, _)"));
/** A name a command probe's config may set in its environment: AGENTBAK_* is agentbak's own. */
export const PROBE_ENV_NAME = /^(?!AGENTBAK_)[A-Za-z_][A-Za-z0-9_]*$/;
/** `{credential:NAME}` in a probe header: the named credential's value, resolved when the probe runs */
export const CREDENTIAL_PLACEHOLDER = /\{credential:([^}]+)\}/g;
export const reconcile = z.strictObject({
  probe: z.union([
    z.strictObject({
      http: z.strictObject({
        url: url.check(z.refine((u) => !u.includes("{credential:"), "credentials belong in headers, never in the URL")),
        headers: z._default(z.record(z.string(), z.string()), {}),
      }),
    }),
    z.strictObject({
      command: z.array(z.string().check(z.minLength(1))).check(z.minLength(1)),
      /** the command's environment beyond PATH, HOME and the like (values may hold {credential:NAME}); AGENTBAK_* is agentbak's */
      env: z._default(z.record(z.string(), z.string()), {}),
    }),
  ]),
  /** the fields of the provider's answer kept as the receipt (dotted paths; default "receipt"): nothing else of the answer is stored */
  receiptFields: z._default(z.array(z.string().check(z.regex(/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/, "a field name, or a dotted path of them"))).check(z.minLength(1)), ["receipt"]),
  onCompleted: sqlRef,
  onRetry: z.optional(sqlRef),
  onEscalate: z.optional(sqlRef),
  timeoutSeconds: z._default(z.number().check(z.positive()).check(z.maximum(300)), 10),
  attempts: z._default(z.int().check(z.minimum(1)).check(z.maximum(10)), 3),
});

export const openOperations = z.optional(z.strictObject({ database: z.string(), sql: z.string().check(z.minLength(1)), strategies: z._default(z.record(z.string(), strategy), {}), defaultStrategy: z._default(strategy, "observe") }));

/** lease and deadline columns rebased at restore by the time elapsed since the snapshot (shift) or set to the restore time (expire) */
export const timers = z._default(z.array(
  z.strictObject({
    database: z.string(),
    table: ident,
    column: ident,
    mode: z.enum(["shift", "expire"]),
    format: z._default(z.enum(["epoch_ms", "epoch_s", "iso8601"]), "epoch_ms"),
  }),
), []);

/** a duration as people write it (30s, 5m, 2h, 7d, 1w; duration.ts) */
const duration = z.string().check(z.refine((s) => {
  try {
    return parseDuration(s) > 0;
  } catch {
    return false;
  }
}, "a duration such as 12h, 7d or 2w"));

/**
 * recovery objectives: a drill fails when missed; snapshots and status warn when the newest snapshot is older than
 * the RPO; status warns when the last drill is older than `drillEvery`
 */
export const objectives = z.optional(z.strictObject({
  rpoMinutes: z.optional(z.number().check(z.positive())),
  rtoSeconds: z.optional(z.number().check(z.positive())),
  drillEvery: z.optional(duration),
}));

/** who owns an unresolved difference a drill reports: by category (open_operation, credential, check, or a scenario name), then default */
export const owners = z.optional(z.record(z.string(), z.string().check(z.minLength(1))));

/** all databases are captured at one instant: how long to wait for their write locks */
export const cut = z._default(z.strictObject({ waitSeconds: z._default(z.number().check(z.positive()).check(z.maximum(3600)), 10) }), { waitSeconds: 10 });

/** snapshot-side runtime values this runtime accepts besides its own (exact, or with * wildcards) */
export const compatible = z.optional(z.strictObject({
  agentVersion: z.optional(z.array(z.string())),
  imageDigest: z.optional(z.array(z.string())),
  models: z.optional(z.record(z.string(), z.array(z.string()))),
}));

/** how to tell whether the original runtime still runs: activation refuses while it answers alive */
export const liveness = z.optional(z.strictObject({
  pidFile: z.optional(z.string().check(z.minLength(1))),
  http: z.optional(url),
  command: z.optional(z.array(z.string().check(z.minLength(1))).check(z.minLength(1))),
  timeoutSeconds: z._default(z.number().check(z.positive()).check(z.maximum(60)), 3),
}).check(z.refine((l) => l.pidFile || l.http || l.command, "name a pidFile, an http URL or a command")));
