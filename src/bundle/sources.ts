/**
 * Restoring a bundle's state sources into their targets, for restore and
 * drill alike: every target is checked first (each must be empty), then each
 * source is restored with the time elapsed since its own snapshot.
 */
import { usageError, wrap } from "../errors.js";
import type { SourceKind } from "../state/sources/index.js";
import type { ExtractedSource } from "./extract.js";
import type { Manifest } from "./manifest.js";

/** What restoring one source did. */
export interface SourceOutcome {
  name: string;
  kind: SourceKind;
  records: Record<string, number>;
  /** redis keys whose TTL ran out since the snapshot: not written */
  skipped: string[];
  /** lancedb: vector dimension per restored table */
  dimensions: Record<string, number>;
  detail: string;
}

/** The sources a manifest records (empty for bundles made before sources existed). */
export const manifestSources = (m: Manifest) => m.capture_instant?.sources ?? [];

/** The URL schemes a server source's connection may use. */
const SCHEMES: Partial<Record<SourceKind, string[]>> = { postgres: ["postgres:", "postgresql:"], redis: ["redis:", "rediss:"] };

/**
 * Parses `--source NAME=URL` values.
 * @throws AgentbakError(2) for a value without `=`, a name the bundle has no source for, or a value that is not a URL of its kind.
 */
export function parseSourceFlags(values: string[] | undefined, m: Manifest): Map<string, string> {
  const out = new Map<string, string>();
  for (const v of values ?? []) {
    const i = v.indexOf("=");
    const name = i > 0 ? v.slice(0, i) : "";
    // the value is never echoed: it may be a connection URL with a password in it
    if (!/^[A-Za-z0-9_.-]{1,64}$/.test(name) || i === v.length - 1) throw usageError("--source: expected NAME=URL, where NAME is a state source of the snapshot (the value given is not shown: it may hold a password)");
    const s = manifestSources(m).find((x) => x.name === name);
    if (!s) throw usageError(`--source ${name}: snapshot ${m.snapshot_id} has no source named "${name}"`);
    const schemes = SCHEMES[s.kind];
    const value = v.slice(i + 1);
    if (schemes && !(URL.canParse(value) && schemes.includes(new URL(value).protocol)))
      throw usageError(`--source ${name}: not a ${schemes.map((x) => `${x}//`).join(" or ")} URL (the value given is not shown: it may hold a password)`);
    out.set(name, value);
  }
  return out;
}

/**
 * Restores every source of an extracted bundle. `targets` gives each
 * source's URL or folder. Nothing is written until every target has been
 * found empty (or, for names in `allowNonEmpty`, free of the captured keys).
 * @throws AgentbakError(2) naming the source and what its target holds; (13) when counts differ after a restore.
 */
export async function restoreSources(m: Manifest, extracted: ExtractedSource[], targets: Map<string, string>, allowNonEmpty: string[] = []): Promise<SourceOutcome[]> {
  const recorded = new Map(manifestSources(m).map((s) => [s.name, s]));
  for (const name of allowNonEmpty) {
    const s = recorded.get(name);
    if (!s) throw usageError(`--allow-nonempty-source ${name}: the snapshot has no source named "${name}"`);
    if (s.kind !== "redis") throw usageError(`--allow-nonempty-source ${name}: only a redis source can be restored beside other keys; a ${s.kind} source goes only into an empty target`);
  }
  if (!extracted.length) return [];
  // the drivers (and the client programs they start) load only for a snapshot with sources: a restore of databases and files never needs them
  const { driverFor, sourceError, targetIsFolder } = await import("../state/sources/index.js");
  for (const x of extracted) {
    const target = targets.get(x.name)!;
    // a target that can not be reached or read is one line naming the source and the client's code, never its URL
    const held = await driverFor(x.kind)
      .occupant(target, x.files, allowNonEmpty.includes(x.name))
      .catch((e: unknown) => Promise.reject(sourceError(x.name, e, target, "checking its target")));
    if (held) {
      const where = targetIsFolder(x.kind) ? target : "its target";
      const hint = x.kind === "redis" ? " (--allow-nonempty-source to restore beside other keys)" : "";
      throw usageError(`source ${x.name}: ${where} is not empty: ${held}; restore only into an empty ${x.kind === "postgres" ? "database" : "target"}${hint}`);
    }
  }
  const out: SourceOutcome[] = [];
  for (const x of extracted) {
    const at = new Date(recorded.get(x.name)?.snapshot_at ?? m.created_at).getTime();
    try {
      const r = await driverFor(x.kind).restore(x.name, x.files, targets.get(x.name)!, Date.now() - at);
      out.push({ name: x.name, kind: x.kind, ...r });
    } catch (e) {
      // the failed source's target is left as it was; say which ones already hold their restored state
      throw out.length ? wrap(e, `after restoring ${out.map((o) => o.name).join(", ")}`) : e;
    }
  }
  return out;
}
