/**
 * Leases: which process may change one agent's part of a repository now, with
 * a fencing token, resting only on the store's atomic create (measured in
 * docs/repositories.md) and never on a sleep.
 *
 * A lease is a folder of objects `<token>.lease`, one per grant, tokens
 * counting up from 1. The holder is the writer of the highest token. To take
 * the lease, a process creates `<highest + 1>.lease` with a conditional create
 * (If-None-Match: *, link(2)): every process that wants the lease after the
 * same grant races for the same key, and the store lets exactly one create it.
 * The highest object is never deleted (a release rewrites it as released), so
 * a token is never issued twice; only the holder deletes older grants.
 *
 * The holder renews its grant (rewrites its own object with a later expiry)
 * every quarter of the lease time. A grant is free when released, expired, or
 * held by a dead process of this host. Before every delete the holder calls
 * check(): its grant must still be the highest, and its expiry more than a
 * quarter of the lease time away; a grant that ran out is extended only by
 * winning the next token with the same conditional create, so nobody can have
 * held the lease in between. What is not guaranteed: a delete that leaves after
 * a successful check and reaches the store more than a quarter of the lease
 * time later (a pause between the two), with the hosts' clocks further apart
 * than that, may land after another process took over — no store measured
 * here can refuse a delete by a fencing token (RGW ignores DELETE If-Match).
 */
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { type AgentbakError, lockedError, usageError } from "../errors.js";
import { pidAlive } from "../fsutil.js";
import type { ObjectStore } from "../storage/store.js";

/** A held lease. */
export interface Lease {
  /** the fencing token: above every token issued for this lease before (it may move up when check() extends a lease that ran out) */
  readonly token: number;
  /**
   * Confirms the lease is still held, right before a delete or a commit.
   * @throws AgentbakError(11) when another process took it over: stop before deleting anything.
   */
  check(): Promise<void>;
  /** Lets go (marks the grant released); @throws the store's error (the grant then expires by itself). */
  release(): Promise<void>;
}

interface Grant {
  format: "agentbak-lease";
  token: number;
  host: string;
  pid: number;
  nonce: string;
  acquired_at: string;
  expires_at: string;
  released: boolean;
}

const DEFAULT_SECONDS = 60;
const TOKEN_RE = /^(\d{16})\.lease$/;
const keyOf = (prefix: string, token: number) => `${prefix}${String(token).padStart(16, "0")}.lease`;
/** grants this process holds, by store and key: a grant of this pid that is not here was leaked (its release failed) */
const live = new Set<string>();
/** grants this process is creating (how many of its acquirers race for each): not leaked either */
const taking = new Map<string, number>();
/** stores whose refusal of a second conditional create of one key this process has seen */
const honoured = new WeakSet<ObjectStore>();

/** This host's name in leases: AGENTBAK_HOST_ID, else the hostname (hosts sharing a repository need distinct names). */
export const hostId = (): string => process.env.AGENTBAK_HOST_ID || hostname();

/**
 * How long a grant lasts without renewal: AGENTBAK_LEASE_SECONDS, default 60.
 * @throws AgentbakError(2) for a value that is not a whole number of seconds from 2 to 86400.
 */
export function leaseMs(): number {
  const v = process.env.AGENTBAK_LEASE_SECONDS;
  if (v === undefined || v === "") return DEFAULT_SECONDS * 1000;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < 2 || n > 86_400) throw usageError(`AGENTBAK_LEASE_SECONDS: not a whole number of seconds from 2 to 86400: ${v.slice(0, 40)}`);
  return n * 1000;
}

/** The tokens of the grants in a lease folder, ascending, from one listing. */
async function tokens(store: ObjectStore, prefix: string): Promise<number[]> {
  const out: number[] = [];
  for (const k of await store.list(prefix)) {
    const m = TOKEN_RE.exec(k.slice(prefix.length));
    if (m) out.push(Number(m[1]));
  }
  return out.sort((x, y) => x - y);
}

/** A grant as read, or null when it is not one agentbak wrote. */
function parseGrant(raw: Buffer, token: number): Grant | null {
  try {
    const g = JSON.parse(String(raw)) as Grant;
    const ok = g?.format === "agentbak-lease" && g.token === token && typeof g.host === "string" && Number.isSafeInteger(g.pid) && g.pid > 0 && typeof g.nonce === "string" && !Number.isNaN(Date.parse(g.expires_at));
    return ok ? g : null;
  } catch {
    return null;
  }
}

/** Whether a grant no longer holds: released, expired, or its process (of this host) is gone or leaked it. */
function free(store: ObjectStore, key: string, g: Grant): boolean {
  if (g.released || Date.now() > Date.parse(g.expires_at)) return true;
  if (g.host !== hostId()) return false;
  return g.pid === process.pid ? !live.has(`${store.url}\0${key}`) && !taking.has(`${store.url}\0${key}`) : !pidAlive(g.pid);
}

/**
 * Takes the lease whose grants live under `prefix` (a folder key ending in
 * "/"), waiting up to `waitMs` for a live holder to let go.
 * @param o.what names the lease in messages ("agent lock of acme/billing in s3://...")
 * @throws AgentbakError(11) naming the holder when it is held past `waitMs`, or a grant is unreadable;
 *   (2) when the store does not refuse a second conditional create of one key (its conditions are not honoured).
 */
export async function acquireLease(store: ObjectStore, prefix: string, o: { waitMs: number; what: string }): Promise<Lease> {
  const ttl = leaseMs();
  const deadline = Date.now() + o.waitMs;
  const nonce = randomBytes(8).toString("hex");
  for (let delay = 50; ; delay = Math.min(delay * 2, 500)) {
    const listed = await tokens(store, prefix);
    const top = listed.at(-1) ?? 0;
    const raw = top ? await store.get(keyOf(prefix, top)) : null;
    const g = raw ? parseGrant(raw, top) : null;
    if (raw && !g)
      throw lockedError(`repository lock ${keyOf(prefix, top)} in ${store.url} is unreadable (not written by agentbak); if no agentbak process uses this repository, remove that file`);
    // a create of ours that the store made but answered as failed (a retried request): ours
    if (g?.nonce === nonce) return hold(store, prefix, g, ttl, o.what);
    if (!top || (g && free(store, keyOf(prefix, top), g))) {
      const grant = newGrant(top + 1, nonce, ttl);
      const mine = `${store.url}\0${keyOf(prefix, grant.token)}`;
      // being taken before it exists: another acquirer of this process (a server's other request) reading it
      // before hold() must not take it for a grant this process leaked, and take the lease over
      taking.set(mine, (taking.get(mine) ?? 0) + 1);
      try {
        if (await store.put(keyOf(prefix, grant.token), JSON.stringify(grant), { ifNoneMatch: true })) {
          await checkHonoured(store, keyOf(prefix, grant.token), grant);
          // grants older than the one before: only the holder, this process now, removes them
          for (const t of listed) if (t < top) await store.delete(keyOf(prefix, t));
          return hold(store, prefix, grant, ttl, o.what);
        }
      } finally {
        if (taking.get(mine) === 1) taking.delete(mine);
        else taking.set(mine, taking.get(mine)! - 1);
      }
      continue; // another process won this token: look again (it is held now)
    }
    // (no grant: the highest was removed between the listing and the read, by an operator: look again)
    if (g && Date.now() >= deadline) throw lockedError(`repository locked (${o.what}) by pid ${g.pid} on ${g.host} since ${g.acquired_at}; pass --wait to wait`);
    await new Promise((r) => setTimeout(r, delay));
  }
}

const newGrant = (token: number, nonce: string, ttl: number): Grant => {
  const now = Date.now();
  return { format: "agentbak-lease", token, host: hostId(), pid: process.pid, nonce, acquired_at: new Date(now).toISOString(), expires_at: new Date(now + ttl).toISOString(), released: false };
};

/**
 * The first grant this process creates in a store is created a second time, conditionally: a store that
 * does not refuse it (Ceph RGW 16 in a versioned bucket) would let two processes hold one lease.
 * @throws AgentbakError(2) naming the store and the remedy.
 */
async function checkHonoured(store: ObjectStore, key: string, grant: Grant): Promise<void> {
  if (honoured.has(store)) return;
  if (await store.put(key, JSON.stringify(grant), { ifNoneMatch: true })) {
    await store.put(key, JSON.stringify({ ...grant, released: true }));
    throw usageError(
      `${store.url} does not honour conditional writes (a second create of one object was not refused: a versioned bucket on Ceph RGW?), so two processes could hold one lock there; keep leases in an unversioned bucket: agentbak init --leases s3://BUCKET/PREFIX (docs/repositories.md)`,
    );
  }
  honoured.add(store);
}

/** A held grant: renewed in the background, checked before deletes, released at the end. */
function hold(store: ObjectStore, prefix: string, first: Grant, ttl: number, what: string): Lease {
  let g = first;
  let key = keyOf(prefix, g.token);
  let expiresAt = Date.parse(g.expires_at);
  let lost: AgentbakError | null = null;
  let done = false;
  /** renewals and extensions one at a time: two extensions at once would race each other for the next token */
  let busy: Promise<void> = Promise.resolve();
  const margin = ttl / 4;
  live.add(`${store.url}\0${key}`);
  const lose = (why: string) => {
    lost ??= lockedError(`lost the ${what}: ${why}; nothing more is changed under it`);
    throw lost;
  };
  const write = async (next: Grant) => {
    const t0 = Date.now();
    await store.put(key, JSON.stringify(next));
    g = next;
    expiresAt = t0 + ttl;
  };
  // renew while more than a margin is left; past that, only the next token (a conditional create) extends it
  const renew = () =>
    (busy = busy.catch(() => undefined).then(async () => {
      if (lost || done) return;
      const now = Date.now();
      if (now < expiresAt - margin) return write({ ...g, expires_at: new Date(now + ttl).toISOString() });
      const next = { ...g, token: g.token + 1, expires_at: new Date(now + ttl).toISOString() };
      // a taker's grant above ours may already be gone (its holder removes older grants): look before creating the next
      const top = (await tokens(store, prefix)).at(-1) ?? 0;
      if (top !== g.token) lose(`it ran out and another process took it over (token ${top})`);
      if (!(await store.put(keyOf(prefix, next.token), JSON.stringify(next), { ifNoneMatch: true }))) lose(`it ran out and another process took it over (token ${next.token})`);
      live.delete(`${store.url}\0${key}`);
      key = keyOf(prefix, next.token);
      live.add(`${store.url}\0${key}`);
      g = next;
      expiresAt = now + ttl;
    }));
  const timer = setInterval(() => void renew().catch(() => undefined), ttl / 4);
  timer.unref();
  return {
    get token() {
      return g.token;
    },
    async check() {
      if (lost) throw lost;
      if (Date.now() >= expiresAt - margin) await renew();
      const top = (await tokens(store, prefix)).at(-1) ?? 0;
      if (top !== g.token) lose(top > g.token ? `another process took it over (token ${top} was issued after ${g.token})` : `its grant (token ${g.token}) is gone from the repository`);
      if (Date.now() >= expiresAt - margin) lose("it ran out while it was being checked");
    },
    async release() {
      if (done) return;
      done = true;
      clearInterval(timer);
      await busy.catch(() => undefined);
      live.delete(`${store.url}\0${key}`);
      if (!lost) await store.put(key, JSON.stringify({ ...g, released: true }));
    },
  };
}

/**
 * Whether `store` refuses a second conditional create of one object (a probe
 * object, removed after): what `--leases` must offer before a marker names it.
 */
export async function probeConditionalWrites(store: ObjectStore): Promise<boolean> {
  const key = `leases-probe/${hostId().replace(/[^A-Za-z0-9._-]/g, "_")}-${process.pid}-${randomBytes(4).toString("hex")}`;
  try {
    await store.put(key, "1");
    return !(await store.put(key, "2", { ifNoneMatch: true }));
  } finally {
    await store.delete(key);
  }
}
