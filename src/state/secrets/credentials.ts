/**
 * Credential references, resolved afresh where the agent is restored:
 * present / missing / unchecked, never a value. In state/secrets/: a
 * credential is a secret a bundle names and never holds.
 */
import { execa } from "execa";
import { accessSync, constants, statSync } from "node:fs";
import { usageError } from "../../errors.js";
import { isAbsolute, resolve } from "node:path";
import { readFileRegular } from "../../fsutil.js";

export interface CredentialStatus {
  name: string;
  ref: string;
  status: "present" | "missing" | "unchecked";
  detail: string;
}

/**
 * Checks each reference: `env:NAME` (set and non-empty), `file:PATH` (a readable
 * file; relative to `root`), other schemes through `checkers[scheme]` (a command
 * that gets the reference as its last argument; exit 0 means present).
 */
export async function checkCredentials(
  refs: { name: string; ref: string }[],
  root: string,
  checkers: Record<string, string[]> = {},
  env: NodeJS.ProcessEnv = process.env,
): Promise<CredentialStatus[]> {
  const out: CredentialStatus[] = [];
  for (const { name, ref } of refs) {
    const scheme = ref.slice(0, ref.indexOf(":"));
    const rest = ref.slice(scheme.length + 1);
    if (scheme === "env") {
      const ok = Boolean(env[rest]);
      out.push({ name, ref, status: ok ? "present" : "missing", detail: ok ? `environment variable ${rest} is set` : `environment variable ${rest} is not set` });
    } else if (scheme === "file") {
      const p = isAbsolute(rest) ? rest : resolve(root, rest);
      let ok = false;
      try {
        accessSync(p, constants.R_OK);
        ok = statSync(p).isFile();
      } catch {
        ok = false;
      }
      out.push({ name, ref, status: ok ? "present" : "missing", detail: ok ? `${p} is readable` : `${p} is not a readable file` });
    } else if (checkers[scheme]?.length) {
      const [cmd, ...args] = checkers[scheme]!;
      const r = await execa(cmd!, [...args, ref], { reject: false, stdio: "ignore", timeout: 30_000 });
      out.push({ name, ref, status: r.exitCode === 0 ? "present" : "missing", detail: `check command exited ${r.exitCode ?? r.signal}` });
    } else {
      out.push({ name, ref, status: "unchecked", detail: `no check configured for scheme "${scheme}" (restore.credentialCheck)` });
    }
  }
  return out;
}

/**
 * A credential's value, read at the moment it is needed (a probe header) and
 * never stored: `env:NAME` (set and non-empty) or `file:PATH` (relative to
 * `root`, trailing newline dropped). Other schemes can not be read here.
 * @throws AgentbakError(2) naming the reference, never a value.
 */
export function readCredential(name: string, ref: string, root: string, env: NodeJS.ProcessEnv = process.env): string {
  const scheme = ref.slice(0, ref.indexOf(":"));
  const rest = ref.slice(scheme.length + 1);
  if (scheme === "env") {
    if (!env[rest]) throw usageError(`credential ${name} (${ref}): environment variable ${rest} is not set`);
    return env[rest]!;
  }
  if (scheme === "file") {
    const p = isAbsolute(rest) ? rest : resolve(root, rest);
    try {
      return readFileRegular(p, "utf8").replace(/\r?\n$/, "");
    } catch (e) {
      throw usageError(`credential ${name} (${ref}): ${p} is not readable (${(e as NodeJS.ErrnoException).code})`);
    }
  }
  throw usageError(`credential ${name} (${ref}): a ${scheme}: reference can not be read by agentbak; use env: or file:, or a command probe that reads it itself`);
}
