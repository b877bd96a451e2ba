/**
 * What a capture keeps out of the bundle and collects across `files` and the workspace.
 */
import { relative, sep } from "node:path";
import type { NotCaptured } from "../bundle/manifest.js";
import type { LoadedConfig } from "../config/load.js";
import { leaveOutOf, type SecretFinding } from "../state/secrets/scan.js";

/** A config path as a path inside a restored root; paths outside the config folder fall back to `fallback`. */
export function restoreTarget(lc: LoadedConfig, p: string, fallback: string): string {
  const rel = relative(lc.dir, lc.resolve(p)).split(sep).join("/");
  return rel === "" || rel.startsWith("..") || rel.startsWith("/") ? fallback : rel;
}

/** Where each configured part lands in a restored root (restoreTarget): computed once per capture. */
export interface RestoreTargets {
  /** each database, by name */
  databases: Map<string, string>;
  /** each state source with a path, by name (null: a server's, it has none) */
  sources: Map<string, string | null>;
  /** the workspace (null: none configured) */
  workspace: string | null;
}

/** The restore targets of this config's databases, state sources and workspace. */
export function restoreTargets(lc: LoadedConfig): RestoreTargets {
  const cfg = lc.config;
  return {
    databases: new Map(cfg.databases.map((d) => [d.name, restoreTarget(lc, d.path, `db/${d.name}.sqlite`)])),
    sources: new Map(cfg.sources.map((s) => [s.name, s.path ? restoreTarget(lc, s.path, `sources/${s.name}`) : null])),
    workspace: cfg.workspace ? restoreTarget(lc, cfg.workspace.path, "workspace") : null,
  };
}

/** A credential's file is a secret by definition: by absolute path, which credential it is. */
export const credentialFiles = (lc: LoadedConfig) => new Map(lc.config.credentials.filter((c) => c.ref.startsWith("file:")).map((c) => [lc.resolve(c.ref.slice(5)), c]));

/** What a capture keeps out of the bundle and collects, across `files` and the workspace. */
export interface CaptureScope {
  lc: LoadedConfig;
  staging: string;
  /** AGENTBAK_HOME: the last proven workspace capture is kept in its cache folder */
  home: string;
  /** why a file (absolute, and relative to its root) stays out, or null */
  leaveOut: (abs: string, rel: string) => Omit<NotCaptured, "path"> | null;
  /** a credential's file, by absolute path */
  credentialFiles: Map<string, { name: string; ref: string }>;
  notCaptured: NotCaptured[];
  findings: { workspace: SecretFinding[]; files: SecretFinding[] };
  warnings: string[];
  /** where the databases, state sources and workspace land in a restored root */
  targets: RestoreTargets;
}

/** A fresh scope: a credential's file, and names like .env (secretScan.exclude), stay out. */
export function captureScope(lc: LoadedConfig, staging: string, home: string, warnings: string[]): CaptureScope {
  const credentials = credentialFiles(lc);
  return {
    lc,
    staging,
    home,
    credentialFiles: credentials,
    leaveOut: leaveOutOf({ credentials, exclude: lc.config.secretScan.exclude }),
    notCaptured: [],
    findings: { workspace: [], files: [] },
    warnings,
    targets: restoreTargets(lc),
  };
}
