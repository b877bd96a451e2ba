/**
 * An agent's generation log in one repository: one object per generation
 * issued, `generations/<n>.json`, created once (a conditional create, after a
 * read: a versioned bucket on Ceph RGW does not refuse a second create, and
 * writers hold the agent's generation lease anyway) and never rewritten. Each
 * entry names the generation, snapshot, target, host and time, and `prev`, the
 * sha256 of entry n-1's bytes in this repository (null when this repository
 * does not hold n-1: the log starts there); it is signed (SSHSIG, namespace
 * agentbak-receipt, kind generation-entry) when the restoring host has a key.
 *
 * Reading fails closed: every entry present counts, signed or not (believing
 * a higher generation only fences more), and one whose bytes changed (its
 * signature, or the `prev` of the entry after it) or whose predecessor is
 * missing is named (13), and so is a name in the log's folder that is no
 * regular file (a link, FIFO or folder hides an entry from the listing). Lowering the agent's generation from the repository
 * takes deleting the newest entries: what a store that refuses deletes
 * (Object Lock retention) or a host's trusted state stops.
 */
import { createHash } from "node:crypto";
import { signerOf, signRecord } from "../crypto/signed.js";
import { NS, type SigningKey } from "../crypto/sshsig.js";
import type { Trust } from "../crypto/trust.js";
import { verifyError } from "../errors.js";
import type { AgentRef } from "../facts.js";
import type { ObjectStore } from "../storage/store.js";
import { keys } from "./layout.js";
import { hostId } from "./lease.js";

export const ENTRY_KIND = "generation-entry";

/** One repository's generation log of one agent, as read and checked. */
export interface GenerationLog {
  /** the entries present, by generation: their bytes as stored */
  entries: Map<number, Buffer>;
  /** the highest entry (0: none) */
  top: number;
  /** the highest entry signed by a key this host trusts (0: none) */
  trustedTop: number;
  /** why the highest entry is not vouched for ("unsigned", or why its signer is not trusted); null when it is, or this host has no allowed_signers to ask */
  topDoubt: string | null;
  /** entries a delete marker hides in a versioned bucket, read from their kept version and counted */
  hidden: number[];
}

/** What an entry says besides its number, chain and signature. */
export interface EntryBody {
  snapshot_id?: unknown;
  target?: unknown;
  at?: unknown;
  issued_in: string;
}

const ENTRY_NAME = /^(\d{16})\.json$/;
/** how many entries are read at once from a bucket */
const READ_BATCH = 16;
const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");

/** Parses an entry's bytes; null when it is not a JSON object. */
function parse(b: Buffer): Record<string, unknown> | null {
  try {
    const v: unknown = JSON.parse(String(b));
    return v && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/**
 * Reads and checks `a`'s generation log in `store`.
 * @throws AgentbakError(13) naming the entry: not an entry of `a` for its number, edited after it was signed,
 *   changed after its successor was written, or missing while its successor names it.
 */
export async function readLog(store: ObjectStore, location: string, a: AgentRef, trust: Trust): Promise<GenerationLog> {
  const prefix = keys.generationLog(a);
  const numberOf = (k: string) => Number(ENTRY_NAME.exec(k.slice(prefix.length))?.[1] ?? NaN);
  // a FIFO, device, link or folder in an entry's place is no entry list() names: damage, never a shorter log
  const stray = (await store.strays(prefix))[0];
  if (stray) throw verifyError(`generation log ${prefix} in ${location} is damaged: ${stray} is not a regular file (a link, FIFO, device or folder in an entry's place); it must not be guessed: restore it from a copy of the repository`);
  const numbers = (await store.list(prefix)).map(numberOf).filter((n) => !Number.isNaN(n));
  const got = new Map<number, Buffer>();
  for (let i = 0; i < numbers.length; i += READ_BATCH) {
    const batch = numbers.slice(i, i + READ_BATCH);
    const bodies = await Promise.all(batch.map((n) => store.get(keys.generationEntry(a, n))));
    batch.forEach((n, j) => bodies[j] && got.set(n, bodies[j]!)); // gone since the listing: as if never there
  }
  // deleted without a version id in a versioned bucket: the kept version is the entry, and still counts
  const hidden: number[] = [];
  for (const [k, bytes] of await store.hidden(prefix))
    if (!Number.isNaN(numberOf(k)) && !got.has(numberOf(k))) got.set(numberOf(k), bytes), hidden.push(numberOf(k));
  const entries = new Map([...got].sort(([x], [y]) => x - y));
  const name = (n: number) => `generation log entry ${keys.generationEntry(a, n)} in ${location}`;
  const log: GenerationLog = { entries, top: 0, trustedTop: 0, topDoubt: null, hidden: hidden.sort((x, y) => x - y) };
  for (const [n, bytes] of entries) {
    const e = parse(bytes);
    const what = name(n);
    if (!e || e.kind !== ENTRY_KIND || e.generation !== n || e.tenant !== a.tenant || e.agent_id !== a.agent)
      throw verifyError(`${what} is not the entry of generation ${n} of ${a.tenant}/${a.agent}; it must not be guessed: restore it from a copy of the repository, or remove the log knowingly`);
    if (e.prev !== null && !(typeof e.prev === "string" && /^[0-9a-f]{64}$/.test(e.prev))) throw verifyError(`${what}: its prev is not a sha256`);
    const signer = signerOf(e, trust, NS.receipt, what);
    if (typeof e.prev === "string") {
      const before = entries.get(n - 1);
      if (!before) throw verifyError(`${name(n - 1)} is missing: entry ${n} was written after it (removed from the repository?)`);
      if (sha256(before) !== e.prev) throw verifyError(`${name(n - 1)} was changed after entry ${n} was written (its sha256 is not the one entry ${n} records)`);
    }
    log.top = n;
    log.topDoubt = trust.missing || signer?.trusted ? null : signer ? `signed by a key this host does not trust (${signer.reason})` : "unsigned";
    if (signer?.trusted) log.trustedTop = n;
  }
  return log;
}

/** Creates `key` once: false when it is there already (read first: a versioned bucket on Ceph RGW does not refuse the create). */
async function createOnce(store: ObjectStore, key: string, bytes: Buffer): Promise<boolean> {
  if (await store.head(key)) return false;
  return store.put(key, bytes, { ifNoneMatch: true });
}

const entryBytes = (e: Record<string, unknown> & { kind: string }, key: SigningKey | null) => Buffer.from(JSON.stringify(key ? signRecord(e, key, NS.receipt) : e, null, 2) + "\n");

/**
 * Writes entry `n` of `a` into `log`'s repository, chained to its entry n-1 there, signed with `key` when there is one.
 * @returns false when entry `n` is there already (another writer issued it): `log` is left as it was.
 */
export async function appendEntry(store: ObjectStore, a: AgentRef, log: GenerationLog, n: number, body: EntryBody, key: SigningKey | null): Promise<boolean> {
  const before = log.entries.get(n - 1);
  const e = { kind: ENTRY_KIND, tenant: a.tenant, agent_id: a.agent, generation: n, ...body, host: hostId(), prev: before ? sha256(before) : null };
  const bytes = entryBytes(e, key);
  if (!(await createOnce(store, keys.generationEntry(a, n), bytes))) return false;
  log.entries.set(n, bytes); // (top only: who signed what is judged when the log is read)
  log.top = Math.max(log.top, n);
  return true;
}

/**
 * Carries the entries other repositories hold above `into`'s highest into its repository, lowest first: byte for
 * byte when they chain onto what it holds (signer kept), else restated with its own `prev` and `carried_from`
 * (signed with `key` when there is one).
 */
export async function carryEntries(store: ObjectStore, a: AgentRef, into: GenerationLog, from: { location: string; log: GenerationLog }[], key: SigningKey | null): Promise<void> {
  const top = Math.max(0, ...from.map((f) => f.log.top));
  for (let n = into.top + 1; n <= top; n++) {
    const src = from.find((f) => f.log.entries.has(n));
    if (!src) continue;
    const bytes = src.log.entries.get(n)!;
    const e = parse(bytes)!;
    const before = into.entries.get(n - 1);
    const chains = before ? e.prev === sha256(before) : e.prev === null;
    const { signature: _s, ...body } = e;
    const out = chains ? bytes : entryBytes({ ...body, kind: ENTRY_KIND, prev: before ? sha256(before) : null, carried_from: src.location }, key);
    if (!(await createOnce(store, keys.generationEntry(a, n), out))) continue; // written meanwhile: counted when read next
    into.entries.set(n, out);
    into.top = n;
  }
}
