/**
 * An agent's catalog record: what a listing prints of each of its snapshots,
 * written signed by the agent's own backup (and forget) under its lease, so
 * that `snapshots --all` and `status --all` over a fleet cost one LIST and one
 * GET per agent instead of a HEAD and a header read per snapshot.
 *
 * The record is trusted only where the objects agree: it names, per snapshot,
 * whether its bundle was there; a listing compares that with a LIST of the
 * agent's snapshots folder, and any difference (a commit marker more or
 * less, a bundle gone or back), like a record that is missing, unparsable,
 * unsigned or signed by a key not trusted now, means the agent is listed
 * from its objects instead. Signer trust (revocation, windows), expiry and
 * the chain's links are judged again at every read. Verify, restore and drill
 * never read it: they read the bundle.
 */
import { Exit } from "../errors.js";
import { NS } from "../crypto/sshsig.js";
import { trusts, type Trust, type TrustResult } from "../crypto/trust.js";
import { parseSnapshotKey } from "./layout.js";
import type { VerifiedBundle } from "../bundle/header.js";

export const CATALOG_KIND = "agent-catalog";

/** One listed snapshot. `status` is "ok" only when its signature and manifest verify and its chain is complete. */
export interface CatalogEntry {
  tenant: string | null;
  agent_id: string;
  snapshot_id: string;
  kind: "full" | "incremental" | null;
  parent: string | null;
  sequence: number | null;
  created_at: string | null;
  expires_at: string | null;
  label: string | null;
  size: number;
  status: "ok" | "expired" | "invalid";
  problem: string | null;
  /** exit code of the problem, for entries that are not ok */
  problem_code: number | null;
  signer: string | null;
  schema_version: number | null;
  /** where the bundle is, for people (a file path or a URL) */
  path: string;
}

/** A listing entry read from the objects, with the header it verified with (repository.ts's Snapshot). */
type Listed = CatalogEntry & { header: VerifiedBundle | null };

/** One snapshot in a catalog record: the listing's fields, and either what its signature verified with or its problem. */
export type CatalogItem = Pick<CatalogEntry, "snapshot_id" | "kind" | "parent" | "sequence" | "created_at" | "expires_at" | "label" | "size" | "schema_version" | "problem" | "problem_code"> & {
  /** whether its bundle object was there when the record was written */
  bundle: boolean;
  /** its bundle object's identity when the record was written (ObjectStore.tagged; absent in records of earlier builds) */
  bundle_tag?: string;
  /** a bundle whose own signature and manifest verified: its manifest's digest, the one it records of its parent, its signer's key (base64 SSH wire form) */
  verified: { manifest_sha256: string; parent_manifest_sha256: string | null; signer_key: string } | null;
};

/** A catalog record's signed body. */
export interface CatalogRecord {
  kind: typeof CATALOG_KIND;
  tenant: string;
  agent_id: string;
  at: string;
  /** the highest sequence it lists (0: none) */
  sequence: number;
  snapshots: CatalogItem[];
}

/**
 * Which snapshots a snapshots folder's keys hold committed, and whether each one's bundle is there.
 * @returns id → bundle present, for every id with a commit marker
 */
export function committedObjects(listed: string[], dir: string): Map<string, boolean> {
  const commits = new Set<string>();
  const bundles = new Set<string>();
  for (const k of listed) {
    const p = parseSnapshotKey(k);
    if (!p || p.dir !== dir) continue;
    if (p.ext === "commit") commits.add(p.id);
    else if (p.ext === "agentbak") bundles.add(p.id);
  }
  return new Map([...commits].sort().map((id) => [id, bundles.has(id)]));
}

/** The identity of each bundle object in a snapshots folder's tagged listing, by snapshot id. */
export function bundleTags(tagged: ReadonlyMap<string, { tag: string }>, dir: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const [k, { tag }] of tagged) {
    const p = parseSnapshotKey(k);
    if (p?.dir === dir && p.ext === "agentbak") out.set(p.id, tag);
  }
  return out;
}

/** The committed snapshots a record names, and whether each one's bundle was there: committedObjects as the record saw them. */
export function recordedObjects(rec: CatalogRecord): Map<string, boolean> {
  return new Map(Array.isArray(rec.snapshots) ? rec.snapshots.map((s) => [s.snapshot_id, s.bundle]) : []);
}

/**
 * The record of an agent's snapshots in `dir` as its own listing (from the objects) found them.
 * @param objects committedObjects of the folder, read with the listing
 * @param tags bundleTags of the same listing: bound into the record, so a bundle written over in place makes it disagree
 */
export function summarize(a: { tenant: string; agent: string }, list: Listed[], objects: Map<string, boolean>, at: Date, tags: ReadonlyMap<string, string> = new Map()): CatalogRecord {
  const mine = list.filter((e) => objects.has(e.snapshot_id));
  const snapshots = mine.map(
    (e): CatalogItem => ({
      snapshot_id: e.snapshot_id,
      bundle: objects.get(e.snapshot_id)!,
      ...(tags.has(e.snapshot_id) ? { bundle_tag: tags.get(e.snapshot_id)! } : {}),
      kind: e.kind,
      parent: e.parent,
      sequence: e.sequence,
      created_at: e.created_at,
      expires_at: e.expires_at,
      label: e.label,
      size: e.size,
      schema_version: e.schema_version,
      // a verified header is the bundle's own verdict; a chain problem on top of it is judged again at every read
      verified: e.header && {
        manifest_sha256: e.header.manifestSha256,
        parent_manifest_sha256: e.header.manifest.parent?.manifest_sha256 ?? null,
        signer_key: Buffer.from(e.header.layout.signedBy!).toString("base64"),
      },
      problem: e.header ? null : e.problem,
      problem_code: e.header ? null : e.problem_code,
    }),
  );
  return { kind: CATALOG_KIND, tenant: a.tenant, agent_id: a.agent, at: at.toISOString(), sequence: Math.max(0, ...mine.map((e) => e.sequence ?? 0)), snapshots };
}

/**
 * The listing a catalog record gives, when it agrees with the objects; null when it does not (a snapshot
 * committed or removed since, a bundle gone or back, another agent's record, or a shape this version
 * does not know): the caller lists the agent from its objects.
 * @param objects committedObjects of the agent's snapshots folder, listed now
 * @param bundlePath where a snapshot's bundle is, for people
 * @param tags bundleTags of that listing: a bundle whose identity is not the one recorded was written over since
 *   (null: a record this host checked before, used without a listing)
 */
export function fromRecord(rec: CatalogRecord, a: { tenant: string; agent: string }, objects: Map<string, boolean>, trust: Trust, now: Date, bundlePath: (id: string) => string, tags: ReadonlyMap<string, string> | null = null): CatalogEntry[] | null {
  if (rec.tenant !== a.tenant || rec.agent_id !== a.agent || !Array.isArray(rec.snapshots) || rec.snapshots.length !== objects.size) return null;
  for (const s of rec.snapshots) if (typeof s?.snapshot_id !== "string" || objects.get(s.snapshot_id) !== s.bundle) return null;
  if (tags) for (const s of rec.snapshots) if (s.bundle_tag !== undefined && tags.get(s.snapshot_id) !== s.bundle_tag) return null;
  const judge = (key: string) => judgeSigner(trust, key, NS.manifest, now);
  const out = rec.snapshots.map((s) => entryOf(s, a, judge, now.getTime(), bundlePath(s.snapshot_id)));
  chainLinks(rec.snapshots, out);
  return out.sort((x, y) => (x.snapshot_id < y.snapshot_id ? -1 : x.snapshot_id > y.snapshot_id ? 1 : 0));
}

/**
 * A signer's trust for `namespace` at `now`, judged once per listing: a fleet's 20,000 snapshots are signed by a
 * handful of keys. Keyed by the Trust object (loaded once per process) and the time.
 */
const judgements = new WeakMap<Trust, Map<string, TrustResult>>();
export function judgeSigner(trust: Trust, key: string, namespace: string, now: Date): TrustResult {
  let m = judgements.get(trust);
  if (!m) judgements.set(trust, (m = new Map()));
  const k = `${namespace}\0${now.getTime()}\0${key}`;
  let t = m.get(k);
  if (!t) m.set(k, (t = trusts(trust, Buffer.from(key, "base64"), namespace, now)));
  return t;
}

/** One item as a listing entry: its own problem, or its signer trusted now and its expiry against now (ms). Built as one literal: 20,000 of them. */
function entryOf(s: CatalogItem, a: { tenant: string; agent: string }, judge: (signerKey: string) => TrustResult, now: number, path: string): CatalogEntry {
  let status: CatalogEntry["status"] = "ok";
  let problem: string | null = null;
  let code: number | null = null;
  let signer: string | null = null;
  const t = s.verified ? judge(s.verified.signer_key) : null;
  if (!t) [status, problem, code] = ["invalid", s.problem ?? "does not verify", s.problem_code ?? Exit.verify];
  // as verifyLayout words and codes it
  else if (!t.trusted) [status, problem, code] = ["invalid", `manifest.sig: ${t.reason}`, t.kind === "unknown" || t.kind === "namespace" ? Exit.verify : Exit.policy];
  else if (s.expires_at !== null && Date.parse(s.expires_at) <= now) [status, problem, code, signer] = ["expired", `expired at ${s.expires_at}`, Exit.policy, t.principal];
  else signer = t.principal;
  return { tenant: a.tenant, agent_id: a.agent, snapshot_id: s.snapshot_id, kind: s.kind, parent: s.parent, sequence: s.sequence, created_at: s.created_at, expires_at: s.expires_at, label: s.label, size: s.size, schema_version: s.schema_version, path, status, problem, problem_code: code, signer };
}

/**
 * Marks every entry built on a link that is missing, does not verify, or is not the manifest its child
 * recorded, as invalid naming the link, down the whole chain (the listing's own rule, repository.ts).
 */
function chainLinks(items: CatalogItem[], out: CatalogEntry[]): void {
  const byId = new Map(items.map((s, i) => [s.snapshot_id, { s, e: out[i]! }]));
  const settled = new Set<string>();
  const settle = (id: string): void => {
    if (settled.has(id)) return; // once each, and a loop of parent ids ends here
    settled.add(id);
    const { s, e } = byId.get(id)!;
    if (!s.verified || !s.parent || e.status === "invalid") return;
    const parent = byId.get(s.parent);
    if (!parent || !parent.s.bundle) {
      Object.assign(e, { status: "invalid", problem: `chain broken: parent snapshot ${s.parent} is missing`, problem_code: Exit.verify });
      return;
    }
    settle(s.parent);
    const p = parent.e;
    const problem = p.status === "invalid" ? p.problem : parent.s.verified && parent.s.verified.manifest_sha256 !== s.verified.parent_manifest_sha256 ? `its manifest is not the one ${s.snapshot_id} recorded (digest differs)` : null;
    if (problem) Object.assign(e, { status: "invalid", problem: `parent ${s.parent}: ${problem}`, problem_code: Exit.verify });
  };
  for (const s of items) settle(s.snapshot_id);
}
