/**
 * Fencing generations belong to the agent, not to one repository. Each
 * repository holding an agent's snapshots keeps its generation log (one
 * create-only entry per generation issued: genlog.ts) and a generation record:
 * the highest generation it recorded (a floor, all that repositories written
 * before the log have) and the other repositories `copy` linked with it (its
 * replicas). The agent's generation is the highest of every entry, record and
 * linked replica reached (and, for fence check and restore, the host's trusted
 * state): a record edited down changes nothing while the entries are there. A
 * restore reserves the next number above all of them and writes its entry and
 * record into each, so a restore from a copy supersedes one from the original
 * and a fence check against either sees it. A replica that can not be reached
 * is named, never silently skipped.
 */
import type { SigningKey } from "../crypto/sshsig.js";
import type { Trust } from "../crypto/trust.js";
import { AgentbakError, lockedError, policyError, verifyError } from "../errors.js";
import type { ObjectStore } from "../storage/store.js";
import { appendEntry, carryEntries, readLog, type GenerationLog } from "./genlog.js";
import { keys, legacy } from "./layout.js";
import { type AgentRef } from "../facts.js";

/** What this module needs of a repository (Repository has it; named here so the two modules do not import each other). */
export interface Repository {
  readonly location: string;
  readonly store: ObjectStore;
  readJson<T>(key: string): Promise<T | undefined>;
  writeJson(key: string, value: unknown): Promise<boolean>;
  lock(a: AgentRef, name: "generation", waitMs: number): Promise<{ release(): Promise<void> }>;
}

/** The agent's generation as seen from one repository and the replicas it links. */
export interface GenerationView {
  /** the highest generation in any record read */
  highest: number;
  /** each repository read, with the generation its record holds */
  seen: { location: string; generation: number }[];
  /** linked replicas that could not be read: a generation issued there is not seen */
  unreachable: { location: string; reason: string }[];
  /** the highest generation rests only on log entries no key this host trusts signed; entries a delete marker hides: named, and counted */
  warnings: string[];
  /** the highest generation was issued more than once (by restores in repositories that could not reach each other): who holds it, named; null when once */
  forked: string | null;
}

/** Whom entries are checked against, and the key a new entry is signed with (none: unsigned). */
export interface Signing {
  trust: Trust;
  key: SigningKey | null;
}

/** Opens a repository by location (Repository.open; passed in so this module needs no value import of it). */
export type OpenRepository = (location: string) => Promise<Repository>;

interface GenerationRecord {
  /** the highest of the record, layout v1's record and the log */
  generation: number;
  /** what the record (and v1's) alone say */
  recorded: number;
  log: GenerationLog;
  replicas: string[];
  /** the record as written, so a writer keeps what it does not own */
  raw: Record<string, unknown>;
}

/** How many repositories a walk of replica links reads at most (links are written by copy; a loop or a flood ends here). */
const MAX_REPOSITORIES = 16;
/** How long a restore or copy waits for another one's generation lock (held only while records are read and written). */
const LOCK_WAIT_MS = 30_000;

/**
 * One repository's record and log for `a` (layout v2, and v1's record as a floor).
 * @throws AgentbakError(13) naming the record when it is not a generation record, or the log entry readLog names.
 */
async function readRecord(repo: Repository, a: AgentRef, trust: Trust): Promise<GenerationRecord> {
  const key = keys.generation(a);
  const bad = (why: string) => verifyError(`generation record ${key} in ${repo.location} ${why}; it must not be guessed: restore it from a copy of the repository, or remove it knowingly`);
  const raw = (await repo.readJson<unknown>(key)) ?? {};
  if (!raw || typeof raw !== "object" || Array.isArray(raw)) throw bad("is not a JSON object");
  const r = raw as Record<string, unknown>;
  const g = r.generation ?? 0;
  // one below the largest safe integer, so the next one is still exact
  if (typeof g !== "number" || !Number.isSafeInteger(g) || g < 0 || g >= Number.MAX_SAFE_INTEGER) throw bad(`holds generation ${JSON.stringify(g)?.slice(0, 40)}, not a count`);
  const replicas = r.replicas ?? [];
  if (!Array.isArray(replicas) || !replicas.every((x) => typeof x === "string" && x.length > 0 && x.length <= 1024)) throw bad("holds replicas that are not a list of repository locations");
  const v1 = (await repo.readJson<{ generation?: unknown }>(legacy.generation(a.agent)))?.generation;
  const floor = typeof v1 === "number" && Number.isSafeInteger(v1) && v1 > 0 && v1 < Number.MAX_SAFE_INTEGER ? v1 : 0;
  const log = await readLog(repo.store, repo.location, a, trust);
  return { generation: Math.max(g, floor, log.top), recorded: Math.max(g, floor), log, replicas: replicas as string[], raw: r };
}

/** Every repository reachable from `start` through replica links, with its record; the record of `start` must read. */
async function reach(start: Repository, a: AgentRef, open: OpenRepository, trust: Trust): Promise<{ found: { repo: Repository; rec: GenerationRecord }[]; unreachable: GenerationView["unreachable"] }> {
  const found = [{ repo: start, rec: await readRecord(start, a, trust) }];
  const unreachable: GenerationView["unreachable"] = [];
  const known = new Set([start.location]);
  for (let i = 0; i < found.length; i++)
    for (const location of found[i]!.rec.replicas) {
      if (known.has(location)) continue;
      known.add(location);
      if (found.length >= MAX_REPOSITORIES) {
        unreachable.push({ location, reason: `more than ${MAX_REPOSITORIES} linked repositories` });
        continue;
      }
      try {
        const repo = await open(location);
        if (repo.location !== location && known.has(repo.location)) continue; // the same repository, spelled otherwise
        known.add(repo.location);
        found.push({ repo, rec: await readRecord(repo, a, trust) });
      } catch (e) {
        unreachable.push({ location, reason: (e as Error).message });
      }
    }
  return { found, unreachable };
}

/** The one sentence naming a replica that could not be reached, for restore, fence check and activation alike. */
export const unreachableWarning = (u: { location: string; reason: string }): string =>
  `generation: ${u.location}, a repository linked with this one by copy, could not be read (${u.reason}); a generation issued there is not seen here, nor one issued here seen there, until it is reachable again: keep any agent restored from it stopped`;

/**
 * The agent's generation across `repo` and every replica it links, with a warning when it rests only on log
 * entries no trusted key signed. @throws AgentbakError(13) when `repo`'s own record or log is damaged.
 */
export async function readGenerations(repo: Repository, a: AgentRef, open: OpenRepository, trust: Trust): Promise<GenerationView> {
  const { found, unreachable } = await reach(repo, a, open, trust);
  const highest = Math.max(0, ...found.map((f) => f.rec.generation));
  // a record saying as much (as an unsigned restore writes it) is no less than before the log; an entry above every one is named
  const vouched = Math.max(0, ...found.map((f) => Math.max(f.rec.recorded, f.rec.log.trustedTop)));
  const doubted = found.find((f) => f.rec.log.top === highest && f.rec.log.topDoubt);
  const warnings = highest > vouched && doubted ? [doubtWarning(a, doubted.repo.location, highest, doubted.rec.log.topDoubt!)] : [];
  for (const f of found) for (const n of f.rec.log.hidden) warnings.push(hiddenWarning(a, f.repo.location, n));
  return { highest, seen: found.map((f) => ({ location: f.repo.location, generation: f.rec.generation })), unreachable, warnings, forked: forkOf(found, highest) };
}

/**
 * Whether generation `n` was issued more than once: the repositories' entries for it name different restores
 * (a copied entry keeps what it names, whatever its chain). @returns the restores holding it, named, or null.
 */
function forkOf(found: { rec: GenerationRecord }[], n: number): string | null {
  const issued = new Map<string, string>();
  for (const f of found) {
    const b = f.rec.log.entries.get(n);
    if (!b) continue;
    const e = JSON.parse(String(b)) as Record<string, unknown>; // readLog parsed and checked it
    const id = JSON.stringify([e.issued_in, e.target, e.snapshot_id, e.at]);
    if (!issued.has(id)) issued.set(id, `to ${String(e.target)} from ${String(e.issued_in)} at ${String(e.at)}`);
  }
  return issued.size > 1 ? `generation ${n} was issued ${issued.size} times (${[...issued.values()].join("; ")}), by restores that could not reach each other's repository` : null;
}

const hiddenWarning = (a: AgentRef, location: string, n: number) =>
  `generation: ${keys.generationEntry(a, n)} in ${location} was deleted without its version id (a delete marker hides it); the version the bucket keeps is counted: find out who deleted it, and remove the delete marker to bring it back`;

const doubtWarning = (a: AgentRef, location: string, n: number, doubt: string) =>
  `generation: ${n}, the current generation of ${a.tenant}/${a.agent}, rests on ${keys.generationEntry(a, n)} in ${location}, ${doubt}; it is counted (believing a higher generation only fences more): if no restore of yours issued it, someone wrote it into the repository`;

/** Takes the generation lock of each repository in one order (by location), so two reservations never wait on each other in a circle. */
async function lockAll(repos: Repository[], a: AgentRef, optional: (r: Repository) => boolean): Promise<{ held: Repository[]; release: () => Promise<void>; failed: Map<Repository, string> }> {
  const locks: { release(): Promise<void> }[] = [];
  const held: Repository[] = [];
  const failed = new Map<Repository, string>();
  const release = async () => void (await Promise.allSettled(locks.reverse().map((l) => l.release())));
  try {
    for (const r of [...repos].sort((x, y) => (x.location < y.location ? -1 : x.location > y.location ? 1 : 0))) {
      try {
        locks.push(await r.lock(a, "generation", LOCK_WAIT_MS));
        held.push(r);
      } catch (e) {
        if (!optional(r)) throw e;
        failed.set(r, (e as Error).message);
      }
    }
  } catch (e) {
    await release();
    throw e;
  }
  return { held, release, failed };
}

/**
 * Reserves the next generation of `a`: above `floor` (the restoring host's
 * trusted state) and every entry and record reachable from `repo`, written
 * into each of them under their generation locks (a crash after this only
 * burns a number): `repo`'s log entry first, with a conditional create (lost:
 * read again and take the next), then the others' (each first given the
 * entries it lacks), then the records.
 * @returns the generation, and the replicas it could not be recorded in.
 * @throws AgentbakError(11) when a generation lock stays held, or the entry is lost three times; (13) when
 *   `repo`'s record or log is damaged; (14) when the next number would not be exact; what writing into `repo` throws.
 */
export async function reserveGeneration(
  repo: Repository,
  a: AgentRef,
  floor: number,
  info: Record<string, unknown>,
  open: OpenRepository,
  sign: Signing,
): Promise<{ generation: number; unreachable: GenerationView["unreachable"] }> {
  const { found, unreachable } = await reach(repo, a, open, sign.trust);
  const locks = await lockAll(
    found.map((f) => f.repo),
    a,
    (r) => r !== repo,
  );
  try {
    for (const [r, reason] of locks.failed) unreachable.push({ location: r.location, reason });
    // read again under the locks: another restore may have reserved meanwhile
    const recs = new Map<Repository, GenerationRecord>();
    const read = async (r: Repository) => recs.set(r, await readRecord(r, a, sign.trust));
    for (const r of locks.held)
      try {
        await read(r);
      } catch (e) {
        if (r === repo) throw e;
        unreachable.push({ location: r.location, reason: (e as Error).message });
      }
    const others = (r: Repository) => [...recs].filter(([x]) => x !== r).map(([x, rec]) => ({ location: x.location, log: rec.log }));
    const body = { snapshot_id: info.snapshot_id, target: info.target, at: info.at, issued_in: repo.location };
    let next = 0;
    for (let lost = 0; ; lost++) {
      next = Math.max(floor, ...[...recs.values()].map((x) => x.generation)) + 1;
      if (!Number.isSafeInteger(next)) throw policyError(`generation of ${a.tenant}/${a.agent}: the next number after ${next - 1} is not exact; a record, a log entry or this host's trusted state was set absurdly high`);
      await carryEntries(repo.store, a, recs.get(repo)!.log, others(repo), sign.key);
      if (await appendEntry(repo.store, a, recs.get(repo)!.log, next, body, sign.key)) break;
      if (lost === 2) throw lockedError(`generation ${next} of ${a.tenant}/${a.agent} was issued by another process while this one held the generation lock of ${repo.location}; try again`);
      await read(repo);
    }
    for (const [r, rec] of recs) {
      try {
        if (r !== repo) {
          await carryEntries(r.store, a, rec.log, others(r), sign.key);
          await appendEntry(r.store, a, rec.log, next, body, sign.key);
        }
        await r.writeJson(keys.generation(a), { ...rec.raw, generation: next, replicas: rec.replicas, ...info, issued_in: repo.location });
      } catch (e) {
        if (r === repo || !(e instanceof Error)) throw e;
        unreachable.push({ location: r.location, reason: e instanceof AgentbakError ? e.message : `writing its record: ${e.message}` });
      }
    }
    return { generation: next, unreachable };
  } finally {
    await locks.release();
  }
}

/**
 * Links `dst` (a copy of `src`'s snapshots of `a`) with `src`: `dst` gets the
 * log entries `src` holds above its own, its record takes the higher
 * generation of the two and lists `src` and its replicas;
 * `src`'s lists `dst`, so a restore or fence check on either side looks at the
 * other. `src` may be read-only: then only `dst` records the link.
 * @returns warnings (`src` could not record the link).
 * @throws what reading either record, or writing `dst`'s, throws; AgentbakError(11) when `dst`'s generation lock stays held.
 */
export async function linkReplica(src: Repository, dst: Repository, a: AgentRef, sign: Signing): Promise<string[]> {
  const locks = await lockAll([src, dst], a, (r) => r === src);
  try {
    const s = await readRecord(src, a, sign.trust);
    const d = await readRecord(dst, a, sign.trust);
    const generation = Math.max(s.generation, d.generation);
    // the entries `src` holds above `dst`'s: a rolled-back record on either side then lowers nothing
    await carryEntries(dst.store, a, d.log, [{ location: src.location, log: s.log }], sign.key);
    const union = (own: string, ...lists: string[][]) => [...new Set(lists.flat())].filter((l) => l !== own).sort();
    const write = async (r: Repository, rec: GenerationRecord, replicas: string[]) => {
      if (rec.raw.generation === generation && replicas.join("\n") === [...rec.replicas].sort().join("\n")) return;
      await r.writeJson(keys.generation(a), { ...rec.raw, generation, replicas });
    };
    await write(dst, d, union(dst.location, d.replicas, [src.location], s.replicas));
    const problem = locks.failed.get(src) ?? (await write(src, s, union(src.location, s.replicas, [dst.location])).then(() => null, (e: Error) => e.message));
    return problem ? [`${src.location} could not record that ${a.tenant}/${a.agent} was copied to ${dst.location} (${problem}): restores and fence checks there do not look here; those from here look there`] : [];
  } finally {
    await locks.release();
  }
}
