/**
 * Runtime compatibility: a pure comparison of the runtime a snapshot was made
 * under (its manifest) with the runtime that would run it here (the target's
 * config). Restore policy and the drill both decide from this one list.
 */
import type { Manifest } from "./manifest.js";

/**
 * What a target states about the runtime that would run a snapshot: the
 * config's `runtime` (bundle does not read config; restore and drill pass it
 * in). A fact left out is not compared.
 */
export interface StatedRuntime {
  agentVersion?: string;
  imageDigest?: string;
  models?: Record<string, string>;
  /** snapshot values declared compatible with these (`*` matches any run of characters) */
  compatible?: { agentVersion?: string[]; imageDigest?: string[]; models?: Record<string, string[]> };
}

/** One runtime fact that differs between the snapshot and here. */
export interface RuntimeDifference {
  /** stable key: agent_version, image_digest, model:<name> (more sources may add their own) */
  key: string;
  /** for people: "agent version", "model embedding" */
  what: string;
  /** the snapshot's value; null when the snapshot did not record one */
  snapshot: string | null;
  here: string;
  /** the config declares the snapshot's value compatible (runtime.compatible) */
  compatible: boolean;
}

const matches = (pattern: string, value: string) =>
  new RegExp(`^${pattern.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*")}$`).test(value);

/**
 * The facts the target's config states that the snapshot's runtime does not
 * share. A fact the config leaves out is not compared.
 */
export function runtimeDifferences(snapshot: Manifest["runtime"], here: StatedRuntime): RuntimeDifference[] {
  const c = here.compatible ?? {};
  const facts: [string, string, string | null, string | undefined, string[] | undefined][] = [
    ["agent_version", "agent version", snapshot.agent_version, here.agentVersion, c.agentVersion],
    ["image_digest", "image digest", snapshot.image_digest, here.imageDigest, c.imageDigest],
    ...Object.entries(here.models ?? {}).map(([name, v]): [string, string, string | null, string, string[] | undefined] => [`model:${name}`, `model ${name}`, snapshot.models[name] ?? null, v, c.models?.[name]]),
  ];
  return facts
    .filter(([, , snap, mine]) => mine !== undefined && snap !== mine)
    .map(([key, what, snap, mine, ok]) => ({ key, what, snapshot: snap, here: mine!, compatible: snap !== null && (ok ?? []).some((p) => matches(p, snap)) }));
}

/** "agent version 1.4.2 -> 1.5.0" */
export const describeDifference = (d: RuntimeDifference) => `${d.what} ${d.snapshot ?? "(not recorded)"} -> ${d.here}`;
