/**
 * The agent interface's one service: the operations an agent may call (take a
 * checkpoint, read its snapshots, verify one, plan a restore, ask for one),
 * each checked against the caller's tier, scoped to the caller's own tenant
 * and agent, and written to that agent's audit log. The MCP tools and the
 * HTTP routes are thin adapters over it. No operation deletes or restores.
 */
import { basename, dirname, isAbsolute, join, posix } from "node:path";
import * as z from "zod";
import { verifyChain } from "../bundle/chain.js";
import { verifyChunked } from "../bundle/chunked.js";
import { verifyBundle } from "../bundle/reader.js";
import type { BackupReceipt } from "../capture/backup.js";
import { backupOrSpool } from "../capture/spool.js";
import type { LoadedConfig } from "../config/load.js";
import { TIERS, type Tier } from "../config/schema.js";
import type { SigningKey } from "../crypto/sshsig.js";
import type { Trust } from "../crypto/trust.js";
import { AgentbakError, Exit, formatIssues, hasCause, notFound, policyError, UnreachableError, usageError } from "../errors.js";
import { type AgentRef, hasUnsafeText, REQUEST_ID, SNAPSHOT_ID } from "../facts.js";
import type { CatalogEntry, Repository } from "../repository/repository.js";
import { openSpool, spoolFor, spools } from "../repository/spool.js";
import { runRestore } from "../restore/apply.js";
import type { RestorePlan } from "../restore/plan.js";
import { getRequest, recordRequest, type RequestStatus } from "../restore/request.js";
import { gatherStatus, mergeReports, statusTarget, type StatusReport } from "../status/gather.js";

export type { Tier };
export { TIERS };

/** Who is calling: the agent a token (or the local MCP server) speaks for, and at which tier. */
export interface Caller {
  tenant: string;
  agent: string;
  tier: Tier;
  /** for the audit log: a token id or "mcp-stdio user@host", never a secret */
  by: string;
  transport: "mcp-stdio" | "mcp-http" | "http";
}

/** What the service needs to act for one agent; built once by the command and kept warm (config, trust, keys, catalog). */
export interface AgentHandle {
  lc: LoadedConfig;
  home: string;
  /** where the repository is (a folder or s3://...) */
  location: string;
  /** current trust (re-read when its files change) */
  readonly trust: Trust;
  /** the repositories opened, by location (the handle's own, or shared among the agents of serve --host) */
  repositories: Map<string, Promise<Repository>>;
  repository(): Promise<Repository>;
  signingKey: SigningKey;
  principal: string;
}

const snapshotId = z.string().regex(SNAPSHOT_ID, "a snapshot id (YYYYMMDDTHHMMSSmmmZ-xxxxxxxx)");
const snapshotRef = z
  .string()
  .regex(/^(latest|\d{8}T[0-9TZ-]*[0-9a-f-]*)$/, "latest, a snapshot id, or a unique prefix of one")
  .default("latest")
  .describe("latest, a snapshot id, or a unique prefix of one");
const key = z.string().min(1).max(200).regex(/^[\x21-\x7e]+$/, "printable ASCII without spaces");
/** Text a person reads later (in a listing, at an approval prompt) is refused when it holds a character that could steer a terminal. */
const readable = [(s: string) => !hasUnsafeText(s), "no control characters, escape sequences, Unicode bidi/format controls or noncharacters"] as const;
/** A folder the agent names on the operator's host: absolute, since a relative one would mean wherever the operator happens to run approve. */
const absolute = [(s: string) => isAbsolute(s), "an absolute path (a relative one would be resolved in the operator's working folder)"] as const;
/** ...spelled as the folder it is: no `.` or `..` segment, no `//` (`/srv/agent/../../etc` reads as under /srv/agent). */
const normal = [(s: string) => !isAbsolute(s) || posix.normalize(s) === s, "a path without . or .. segments or //"] as const;

/**
 * Input schemas of the operations (MCP input schemas and HTTP bodies are built from these). Strict: a field
 * this interface does not know (`snapshot_id` for `snapshot`, a typo) is refused naming it, never dropped so
 * that the request silently means something else (a restore request for the latest snapshot).
 */
/** The largest message an agent may send: a request body over HTTP (413 beyond it), a line of MCP on stdio (-32600). */
export const MAX_MESSAGE_BYTES = 64 * 1024;

export const INPUTS = {
  create_backup: z.strictObject({
    idempotency_key: key.optional().describe("the same key again returns the first receipt; another label or incremental choice with it is refused (409)"),
    label: z.string().max(200).refine(...readable).optional().describe("free-form label, e.g. the sub-task just finished"),
    incremental: z.boolean().optional().describe("store only the SQLite pages changed since the latest snapshot (default: the config's choice)"),
  }),
  get_backup: z.strictObject({ snapshot_id: snapshotId }),
  list_snapshots: z.strictObject({}),
  verify_snapshot: z.strictObject({ snapshot: snapshotRef }),
  plan_restore: z.strictObject({
    snapshot: snapshotRef,
    target: z.string().min(1).max(4096).refine(...absolute).optional().describe("folder the restore would write, absolute (default: <agent folder>-restored)"),
  }),
  request_restore: z.strictObject({
    snapshot: snapshotRef,
    reason: z.string().min(1).max(1000).refine(...readable).describe("why the agent asks; the operator reads it"),
    target: z.string().min(1).max(4096).refine(...readable).refine(...absolute).refine(...normal).optional().describe("folder proposed for the restore, absolute; the operator may choose another"),
    idempotency_key: key.optional().describe("the same key again returns the first request"),
  }),
  get_restore_request: z.strictObject({ request_id: z.string().regex(REQUEST_ID, "a restore request id (req-...)") }),
};

export type Operation = keyof typeof INPUTS;

/** The least tier each operation needs. */
export const NEEDS: Record<Operation, Tier> = {
  create_backup: "checkpoint",
  get_backup: "read",
  list_snapshots: "read",
  verify_snapshot: "read",
  plan_restore: "read",
  request_restore: "restore-request",
  get_restore_request: "read",
};

/**
 * Text for the agent with the server's folders named, not spelled: AGENTBAK_HOME (where the keys and the spool
 * are) and a folder repository's path. The agent knows its checkpoints by snapshot id; where they lie on the
 * server's host is not its business (an object-storage location is the agent's own config's, and stays).
 */
const unspelled = (h: AgentHandle, text: string): string => {
  const t = text.split(h.home).join("AGENTBAK_HOME");
  return spools(h.location) ? t : t.split(h.location).join("the repository's folder");
};

/**
 * The server's one log line for a backup that wrote: a scheduled one of `serve --host` or an agent's checkpoint
 * (`by`: the caller; a repeated idempotency key's answer says so), with every warning its receipt carries, so
 * an operator reads of a spooled bundle set aside while the server runs. Null for an unchanged run. The log escapes the line (ui/agentapi.ts): a warning may
 * hold agent-controlled text, such as a file's name.
 */
export function backupLine(who: string, r: Pick<BackupReceipt, "status" | "snapshot_id" | "kind" | "size" | "warnings" | "repeated">, by?: string): string | null {
  if (r.status === "unchanged") return null;
  return `backup ${who}${by ? ` (checkpoint by ${by})` : ""}: ${r.status} ${r.snapshot_id} (${r.kind}, ${r.size} bytes${r.repeated ? ", the answer to a repeated idempotency key" : ""})${r.warnings.length ? `; ${r.warnings.join("; ")}` : ""}`;
}

/** Whether `tier` includes `need`. */
export const allows = (tier: Tier, need: Tier) => TIERS.indexOf(tier) >= TIERS.indexOf(need);
/** The lower of two tiers. */
export const lowerTier = (x: Tier, y: Tier): Tier => (allows(x, y) ? y : x);

/** One snapshot as the agent sees it: committed in the repository, or spooled locally until it can be uploaded. */
export interface BackupView {
  snapshot_id: string;
  status: "committed" | "spooled";
  sequence: number | null;
  created_at: string | null;
  kind: "full" | "incremental" | null;
  parent: string | null;
  label: string | null;
  size: number;
  verification: CatalogEntry["status"];
  problem: string | null;
}

export interface VerifyView {
  snapshot_id: string;
  ok: boolean;
  sequence: number | null;
  signer: string | null;
  chain_length: number;
  problem: string | null;
}

export interface Results {
  create_backup: Omit<BackupReceipt, "path" | "status"> & { status: "committed" | "spooled" };
  get_backup: BackupView;
  list_snapshots: { snapshots: BackupView[]; warnings: string[] };
  verify_snapshot: VerifyView;
  plan_restore: { plan: RestorePlan; warnings: string[] };
  request_restore: RequestStatus & { repeated: boolean };
  get_restore_request: RequestStatus;
}

const view = (e: CatalogEntry, status: BackupView["status"]): BackupView => ({
  snapshot_id: e.snapshot_id,
  status,
  sequence: e.sequence,
  created_at: e.created_at,
  kind: e.kind,
  parent: e.parent,
  label: e.label,
  size: e.size,
  verification: e.status,
  problem: e.problem,
});

/** A short name for an operation's subject, for the audit log. */
function subject(r: unknown): Record<string, unknown> {
  const o = (r ?? {}) as Record<string, unknown>;
  return Object.fromEntries(Object.entries({ snapshot_id: o.snapshot_id ?? (o.plan as RestorePlan | undefined)?.snapshot_id, request_id: o.request_id }).filter(([, v]) => v));
}

export class AgentService {
  private readonly agents = new Map<string, AgentHandle>();

  /**
   * @param handles the agents this service acts for (one per config)
   * @param log the server's log (its stderr): each checkpoint that wrote, with its warnings (backupLine), and an audit entry that could not be written
   * @throws AgentbakError(2) when two handles are for the same agent
   */
  constructor(handles: AgentHandle[], private readonly log: (line: string) => void = () => undefined) {
    for (const h of handles) {
      const k = `${h.lc.config.agent.tenant}/${h.lc.config.agent.id}`;
      if (this.agents.has(k)) throw usageError(`two configs for agent ${k}`);
      this.agents.set(k, h);
    }
  }

  /** The agents served, as tenant/agent. */
  get served(): string[] {
    return [...this.agents.keys()];
  }

  /**
   * Runs one operation for `caller`, and audits it (who, what, outcome; never a token or state contents).
   * @throws AgentbakError: 14 the tier does not allow it or this service does not serve the caller's agent,
   *   2 bad input, ConflictError an idempotency key reused with other parameters, 10 not found, 11 locked,
   *   UnreachableError the repository is down (a checkpoint spools instead), and what the stage throws.
   */
  async call<K extends Operation>(caller: Caller, op: K, raw: unknown): Promise<Results[K]> {
    const a: AgentRef = { tenant: caller.tenant, agent: caller.agent };
    const h = this.agents.get(`${a.tenant}/${a.agent}`);
    let result: Results[K] | undefined;
    let failure: unknown;
    try {
      if (!h) throw policyError(`this server does not serve agent ${a.tenant}/${a.agent}`);
      if (!allows(caller.tier, NEEDS[op])) throw policyError(`${op} needs tier ${NEEDS[op]} or higher; this caller has tier ${caller.tier}`);
      const parsed = INPUTS[op].safeParse(raw ?? {});
      if (!parsed.success) throw usageError(`${op}: ${formatIssues(parsed.error.issues)}`);
      result = (await this.run(h, a, caller, op, parsed.data)) as Results[K];
      const w = (result as { warnings?: unknown }).warnings;
      if (Array.isArray(w)) (result as { warnings: string[] }).warnings = w.map((x: string) => unspelled(h, x));
      return result;
    } catch (e) {
      failure = e;
      if (h && e instanceof Error) e.message = unspelled(h, e.message);
      throw e;
    } finally {
      if (h) await this.audit(h, a, caller, op, result, failure);
    }
  }

  private async audit(h: AgentHandle, a: AgentRef, caller: Caller, op: Operation, result: unknown, failure: unknown): Promise<void> {
    const err = failure instanceof AgentbakError ? failure : failure ? new AgentbakError(Exit.failure, String((failure as Error).message)) : null;
    const entry = { event: "agent-interface", operation: op, transport: caller.transport, by: caller.by, tier: caller.tier, outcome: err ? "refused" : "ok", ...(err ? { code: err.code, error: err.message } : subject(result)) };
    try {
      // a spooled checkpoint is recorded where its bundle waits (the repository is down)
      const spooled = (result as { status?: unknown } | undefined)?.status === "spooled";
      // written only into the very repository the server opened: one gone or replaced gets no entry (the server's log says so)
      await (spooled ? await openSpool(h.home, h.location) : await this.present(h)).audit(a, entry, h.signingKey);
    } catch (e) {
      this.log(`audit entry for ${op} by ${caller.by} not written to ${h.location}: ${(e as Error).message}`);
    }
  }

  private async run(h: AgentHandle, a: AgentRef, caller: Caller, op: Operation, input: Record<string, unknown>): Promise<unknown> {
    switch (op) {
      case "create_backup": {
        const i = input as z.infer<(typeof INPUTS)["create_backup"]>;
        // the agent knows its checkpoint by snapshot id (and status URL), not by a path on the server
        const { path: _path, ...receipt } = await backupOrSpool(h.lc, {
          location: h.location,
          repositories: h.repositories,
          fresh: true,
          trust: h.trust,
          home: h.home,
          signingKey: h.signingKey,
          principal: h.principal,
          idempotencyKey: i.idempotency_key,
          label: i.label,
          incremental: i.incremental,
          waitMs: 0, // the agent hears 423 / "locked" at once and may try again
        });
        // only a run asked to skip an unchanged state answers "unchanged", and a checkpoint never asks
        if (receipt.status === "unchanged") throw new AgentbakError(Exit.failure, "internal error: a checkpoint was skipped as unchanged");
        // the operator hears of it while the server runs, as of a scheduled backup: a set-aside spooled bundle, a changed file
        const line = backupLine(`${a.tenant}/${a.agent}`, receipt, caller.by);
        if (line) this.log(line);
        return { ...receipt, status: receipt.status };
      }
      case "get_backup": {
        const id = (input as { snapshot_id: string }).snapshot_id;
        const { entries, down } = await this.catalogs(h, a);
        const found = entries.find((x) => x.entry.snapshot_id === id);
        if (!found) throw down ?? notFound(`snapshot ${id} not found for ${a.tenant}/${a.agent}`);
        return view(found.entry, found.status);
      }
      case "list_snapshots": {
        const { entries, down } = await this.catalogs(h, a);
        return { snapshots: entries.map((x) => view(x.entry, x.status)), warnings: down ? [`${down.message}; only the spooled snapshots are listed`] : [] };
      }
      case "verify_snapshot":
        return this.verify(h, a, (input as { snapshot: string }).snapshot);
      case "plan_restore": {
        const i = input as { snapshot: string; target?: string };
        const repo = await this.fresh(h);
        const bundle = await repo.open(await repo.resolve(i.snapshot, h.trust, a), h.trust);
        try {
          const r = await runRestore({
            bundle,
            target: i.target ?? join(dirname(h.lc.dir), `${basename(h.lc.dir)}-restored`),
            repo,
            lc: h.lc,
            trust: h.trust,
            identities: () => [],
            signingKey: () => null,
            dryRun: true,
            // nor what exists on that host: a credential check at a target the agent named would tell it whether any file
            // there is readable, or an environment variable set (in the plan or its warnings), and run check commands there
            uncheckedCredentials: "not checked for an agent's plan: the operator's restore checks it where it restores",
            approve: async () => false,
            expectAgent: a.agent,
            expectTenant: a.tenant,
          });
          // the agent learns its snapshot by id: where the bundle lies on the server's host is not its business
          const { bundle: _onServer, ...plan } = r.plan;
          return { plan, warnings: r.warnings };
        } finally {
          bundle.release();
        }
      }
      case "request_restore": {
        const i = input as z.infer<(typeof INPUTS)["request_restore"]>;
        const r = await recordRequest(await this.fresh(h), h.trust, a, { snapshot: i.snapshot, reason: i.reason, target: i.target, by: caller.by, idempotencyKey: i.idempotency_key, signingKey: h.signingKey });
        return { ...r.request, repeated: r.repeated };
      }
      case "get_restore_request":
        return getRequest(await this.fresh(h), h.trust, a, (input as { request_id: string }).request_id);
    }
  }

  /**
   * The status of the agents served, or of `only` (a token's agent): one gather per repository (status/gather.ts),
   * as `agentbak status` shows it. @throws AgentbakError(14) when `only` is not served here, and what listing throws.
   */
  async status(only?: AgentRef): Promise<StatusReport> {
    const handles = [...this.agents.values()].filter((h) => !only || (h.lc.config.agent.tenant === only.tenant && h.lc.config.agent.id === only.agent));
    if (only && !handles.length) throw policyError(`this server does not serve agent ${only.tenant}/${only.agent}`);
    const byRepo = new Map<string, AgentHandle[]>();
    for (const h of handles) byRepo.set(h.location, [...(byRepo.get(h.location) ?? []), h]);
    const reports: StatusReport[] = [];
    for (const [location, hs] of byRepo)
      reports.push(await gatherStatus({ repo: await this.fresh(hs[0]!), location, trust: hs[0]!.trust, home: hs[0]!.home, targets: hs.map((h) => statusTarget(h.lc.config)), tenant: only?.tenant }));
    return mergeReports(reports);
  }

  /** Whether every repository served is reachable and still the one opened (the re-check each operation makes): null, or why not. */
  async unhealthy(): Promise<string | null> {
    for (const h of this.agents.values())
      try {
        await this.present(h);
      } catch (e) {
        return `${h.location}: ${(e as Error).message}`;
      }
    return null;
  }

  /** The repository, listing afresh: other processes (a cron backup, an operator's approve) write it too. */
  private async fresh(h: AgentHandle): Promise<Repository> {
    const repo = await this.present(h);
    repo.refresh();
    return repo;
  }

  /** The repository, checked to be still there and the same one (a folder renamed or unmounted under the server is 10, never an empty one). */
  private async present(h: AgentHandle): Promise<Repository> {
    const repo = await h.repository();
    await repo.recheck();
    return repo;
  }

  /**
   * The agent's snapshots: committed ones, then those waiting in the spool;
   * while the repository is down, the spooled ones and why the rest are missing.
   */
  private async catalogs(h: AgentHandle, a: AgentRef): Promise<{ entries: { entry: CatalogEntry; status: BackupView["status"] }[]; down: AgentbakError | null }> {
    const entries: { entry: CatalogEntry; status: BackupView["status"] }[] = [];
    let down: AgentbakError | null = null;
    try {
      for (const entry of await (await this.fresh(h)).list(h.trust, a)) entries.push({ entry, status: "committed" });
    } catch (e) {
      if (!hasCause(e, UnreachableError) || !spools(h.location)) throw e;
      down = e as AgentbakError;
    }
    const spool = await spoolFor(h.home, h.location);
    if (spool) {
      spool.refresh();
      for (const entry of await spool.list(h.trust, a)) entries.push({ entry, status: "spooled" });
    }
    return { entries, down };
  }

  private async verify(h: AgentHandle, a: AgentRef, ref: string): Promise<VerifyView> {
    const repo = await this.fresh(h);
    const s = await repo.resolve(ref, h.trust, a);
    const opened = await repo.open(s, h.trust);
    try {
      const v = await verifyBundle(opened.path, h.trust);
      const chain = await verifyChain(v, opened.links, h.trust);
      // a format-5 snapshot's chunks: each one there with its size (a missing one makes the snapshot unrestorable)
      await verifyChunked(v.manifest, opened.chunks);
      return { snapshot_id: s.snapshot_id, ok: true, sequence: v.manifest.sequence, signer: `${v.signer.principal} ${v.signer.fingerprint}`, chain_length: chain.length, problem: null };
    } catch (e) {
      // a bundle that does not verify is an answer, not an error of the call
      if (!(e instanceof AgentbakError) || (e.code !== Exit.verify && e.code !== Exit.policy)) throw e;
      return { snapshot_id: s.snapshot_id, ok: false, sequence: s.sequence, signer: null, chain_length: 0, problem: e.message };
    } finally {
      opened.release();
    }
  }
}
