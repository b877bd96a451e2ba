/**
 * The host file (`agentbak-host.json`): which agents one `serve --host`
 * process backs up, each on its schedule, with its objectives and the highest
 * tier its tokens are honoured at. Validated strictly like agentbak.json;
 * paths and globs resolve against the host file's folder.
 *
 * Loading it reads no agent config in full: a fleet of a thousand agents is
 * a thousand paths and a few numbers each, and each config is loaded when its
 * agent runs (a parsed config with its trust and repository handle costs far
 * more than its entry here; docs/fleet.md has the measurement).
 */
import { statSync } from "node:fs";
import { dirname, isAbsolute, resolve } from "node:path";
import { globSync, isDynamicPattern } from "tinyglobby";
import { TIERS, type Tier } from "../config/schema.js";
import { ID_PATTERN } from "../facts.js";
import { objectives } from "../config/recovery.js";
import { parseDuration } from "../duration.js";
import { formatIssues, notFound, usageError } from "../errors.js";
import { readFileRegular } from "../fsutil.js";
import * as z from "../zod.js";

const isDuration = (s: string) => /^\d+(ms|s|m|h|d|w)?$/.test(s);
const duration = z.string().check(z.refine(isDuration, "a duration like 30s, 15m, 2h, 1d"));
const schedule = z.strictObject({ every: duration, jitter: z.optional(duration) });
/** the highest tier a token of this agent is honoured at by this host's server (a token's own tier may be lower) */
const tokens = z.strictObject({ maxTier: z.enum(TIERS) });
const settings = { schedule: z.optional(schedule), objectives, tokens: z.optional(tokens) };

const HostFileObject = z.strictObject({
  $schema: z.optional(z.string()),
  /** this host's name in leases and records (else AGENTBAK_HOST_ID, else the hostname) */
  hostId: z.optional(z.string().check(z.regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, "letters, digits, . _ - (max 64)"))),
  /** where the agent interface listens (HOST:PORT) */
  listen: z.optional(z.string()),
  /** how many agents are captured at once */
  maxConcurrent: z._default(z.int().check(z.minimum(1)).check(z.maximum(64)), 4),
  /** what an agent's entry does not say */
  defaults: z._default(z.strictObject(settings), {}),
  agents: z.array(z.strictObject({ config: z.string().check(z.minLength(1)), enabled: z._default(z.boolean(), true), ...settings })).check(z.minLength(1)),
});

/** The host file schema: every key, plus what one key can not say alone (a jitter below its interval). */
export const HostFileSchema = HostFileObject.check(
  z.superRefine((h, ctx) => {
    const check = (s: z.infer<typeof schedule> | undefined, path: (string | number)[]) => {
      if (!s || !isDuration(s.every) || (s.jitter && !isDuration(s.jitter))) return; // named by the key's own check
      if (parseDuration(s.every) < 10_000) ctx.addIssue({ code: "custom", path: [...path, "every"], message: "at least 10s" });
      if (s.jitter && parseDuration(s.jitter) >= parseDuration(s.every)) ctx.addIssue({ code: "custom", path: [...path, "jitter"], message: `below schedule.every (${s.every})` });
    };
    check(h.defaults.schedule, ["defaults", "schedule"]);
    h.agents.forEach((a, i) => check(a.schedule, ["agents", i, "schedule"]));
    if (!h.defaults.schedule && h.agents.some((a) => a.enabled && !a.schedule))
      ctx.addIssue({ code: "custom", path: ["defaults", "schedule"], message: "needed: an agent entry without a schedule takes this one" });
  }),
);

export type HostFile = z.infer<typeof HostFileSchema>;

/** JSON Schema (draft 2020-12) of the host file, for editors. */
export const hostFileJsonSchema = () => z.toJSONSchema(HostFileSchema, { io: "input" });

/** One agent of a host: where its config is and how it is run. */
export interface HostAgent {
  /** absolute path of its agentbak.json */
  config: string;
  everyMs: number;
  jitterMs: number;
  /** objectives the host file sets (they replace the config's own when given) */
  objectives: { rpoMinutes?: number; rtoSeconds?: number } | null;
  maxTier: Tier;
}

/** A loaded host file. */
export interface LoadedHostFile {
  path: string;
  hostId: string | null;
  listen: string | null;
  maxConcurrent: number;
  /** the enabled agents, by config path */
  agents: HostAgent[];
  /** entries whose glob matched nothing, and the like: said, not refused */
  warnings: string[];
}

/**
 * Reads and strictly validates a host file and resolves its entries to
 * config files: a path names one (it must exist), a glob any number. A config
 * matched by several entries takes the last one's settings (a broad glob
 * first, exceptions after); an entry with `enabled: false` removes what it
 * matches. No config is read here.
 * @throws AgentbakError(2) naming the file and every bad key path; (10) when it, or a config it names by path, is missing.
 */
export function loadHostFile(path: string): LoadedHostFile {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileRegular(path, "utf8"));
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (err.code === "ENOENT") throw notFound(`host file ${path}: not found`);
    throw usageError(`host file ${path}: ${err.message}`);
  }
  const parsed = HostFileSchema.safeParse(raw);
  if (!parsed.success) throw usageError(`host file ${path}: ${formatIssues(parsed.error.issues)}`);
  const h = parsed.data;
  const dir = dirname(path);
  const warnings: string[] = [];
  const byPath = new Map<string, HostAgent | null>();
  h.agents.forEach((e, i) => {
    const named = isAbsolute(e.config) ? e.config : resolve(dir, e.config);
    // (a glob like *.json in the host file's own folder does not take the host file for a config)
    const files = isDynamicPattern(e.config) ? globSync(e.config, { cwd: dir, absolute: true, onlyFiles: true }).filter((f) => resolve(f) !== resolve(path)) : [named];
    if (!files.length) warnings.push(`host file ${path}: agents.${i}.config: ${e.config} matches no file`);
    const st = isDynamicPattern(e.config) ? null : statSync(named, { throwIfNoEntry: false });
    if (st === undefined && e.enabled) throw notFound(`host file ${path}: agents.${i}.config: ${named}: not found`);
    if (st && !st.isFile()) throw usageError(`host file ${path}: agents.${i}.config: ${named} is not a regular file`);
    const s = e.schedule ?? h.defaults.schedule;
    for (const f of files.map((x) => resolve(x))) {
      byPath.delete(f); // the last entry naming it decides, and its place in the order
      byPath.set(
        f,
        e.enabled
          ? { config: f, everyMs: parseDuration(s!.every), jitterMs: s!.jitter ? parseDuration(s!.jitter) : 0, objectives: e.objectives ?? h.defaults.objectives ?? null, maxTier: (e.tokens ?? h.defaults.tokens)?.maxTier ?? "checkpoint" }
          : null,
      );
    }
  });
  const agents = [...byPath.values()].filter((a): a is HostAgent => a !== null).sort((x, y) => (x.config < y.config ? -1 : 1));
  return { path, hostId: h.hostId ?? null, listen: h.listen ?? null, maxConcurrent: h.maxConcurrent, agents, warnings };
}

/** Which agent a config backs up, read without validating the rest (the config is validated when its agent runs). */
export interface AgentIdentity {
  config: string;
  tenant: string;
  agent: string;
}

/**
 * The tenant and agent id of each config, from a plain JSON read of its
 * `agent` key: what the server needs to route requests and tokens, at a few
 * hundred bytes an agent.
 * @throws AgentbakError(2) naming the config whose `agent` is missing or malformed, and two configs of one agent.
 */
export function agentIdentities(agents: readonly HostAgent[]): AgentIdentity[] {
  const seen = new Map<string, string>();
  return agents.map(({ config }) => {
    let a: { id?: unknown; tenant?: unknown } | undefined;
    try {
      a = (JSON.parse(readFileRegular(config, "utf8")) as { agent?: { id?: unknown; tenant?: unknown } }).agent;
    } catch (e) {
      throw usageError(`config ${config}: ${(e as Error).message}`);
    }
    if (typeof a?.id !== "string" || typeof a.tenant !== "string" || !ID_PATTERN.test(a.id) || !ID_PATTERN.test(a.tenant))
      throw usageError(`config ${config}: agent.id and agent.tenant: lowercase letters, digits, . _ - (max 64)`);
    const key = `${a.tenant}/${a.id}`;
    const other = seen.get(key);
    if (other) throw usageError(`configs ${other} and ${config} both back up agent ${key}: one agent, one config`);
    seen.set(key, config);
    return { config, tenant: a.tenant, agent: a.id };
  });
}
