/**
 * `agentbak key check`: which keys this host has (age identities, the
 * signing key, allowed_signers) and whether a restore is possible from here:
 * an identity for a recipient the snapshots are encrypted to, a signer the
 * snapshots verify against, and (with a repository) a latest snapshot whose
 * signature verifies. Reads keys; prints no secret.
 */
import { loadIdentities, loadSigningKey } from "../crypto/keys.js";
import { fingerprint, NS } from "../crypto/sshsig.js";
import { trusts } from "../crypto/trust.js";
import { AgentbakError, Exit, type ExitCode } from "../errors.js";
import { homePaths } from "../home.js";
import { catalogEntry } from "../repository/repository.js";
import { context, type GlobalOpts } from "./context.js";

export interface KeyCheckOptions extends GlobalOpts {
  identity?: string;
  agent?: string;
  tenant?: string;
}

export interface KeyCheckResult {
  home: string;
  /** the public keys of the identities this host can read (never the identities) */
  identities: { source: string; recipients: string[]; problem: string | null };
  /** the config's recipients (what snapshots are encrypted to), each with whether an identity here opens it */
  recipients: { recipient: string; identity_here: boolean }[];
  signing_key: { fingerprint: string | null; trusted_here: boolean; problem: string | null };
  allowed_signers: { file: string; signers: { principals: string[]; fingerprint: string; revoked: boolean }[]; missing: boolean };
  latest: { snapshot_id: string; signer: string | null; status: string; problem: string | null } | null;
  restore_possible: boolean;
  /** why a restore is not possible from here, each with the exit code it stands for (12 a key, 13 a signature, 10 no repository) */
  problems: { code: ExitCode; message: string }[];
  warnings: string[];
}

/**
 * Checks this host's keys against the config (if any) and the repository's latest snapshot (if one is named).
 * @throws AgentbakError(2) for a bad config; a missing key is a finding (its exit code in `problems`), not an error.
 */
export async function keyCheck(opts: KeyCheckOptions): Promise<KeyCheckResult> {
  const ctx = context(opts);
  const problems: KeyCheckResult["problems"] = [];
  const problem = (code: ExitCode, message: string) => problems.push({ code, message });
  const warnings: string[] = [];
  const source = opts.identity ?? (process.env.AGENTBAK_IDENTITY ? "AGENTBAK_IDENTITY" : process.env.AGENTBAK_IDENTITY_FILE ?? homePaths(ctx.home).identity);
  let mine: string[] = [];
  let idProblem: string | null = null;
  try {
    mine = loadIdentities(opts.identity).map((i) => i.recipient);
  } catch (e) {
    idProblem = (e as Error).message;
    problem(Exit.noKey, idProblem);
  }
  const recipients = (ctx.lc?.config.recipients ?? []).map((r) => ({ recipient: r, identity_here: mine.includes(r) }));
  if (mine.length && recipients.length && !recipients.some((r) => r.identity_here)) problem(Exit.noKey, `no identity here opens the config's recipients (${recipients.map((r) => r.recipient).join(", ")}): snapshots can not be decrypted`);

  const trust = ctx.trust;
  const signers = trust.signers.map((s) => ({ principals: s.principals, fingerprint: fingerprint(s.publicKey), revoked: trust.revoked.some((k) => k.equals(s.publicKey)) }));
  if (trust.missing) problem(Exit.noKey, `${trust.missing} does not exist: no snapshot's signature can be trusted here`);
  else if (!signers.some((s) => !s.revoked)) problem(Exit.noKey, "allowed_signers trusts no (unrevoked) signer: no snapshot's signature can be trusted here");

  let signing: KeyCheckResult["signing_key"];
  try {
    const k = loadSigningKey(ctx.lc?.config.signing.key ? ctx.lc.resolve(ctx.lc.config.signing.key) : undefined);
    const t = trusts(trust, k.publicKey, NS.manifest, new Date());
    signing = { fingerprint: fingerprint(k.publicKey), trusted_here: t.trusted, problem: t.trusted ? null : t.reason };
    if (!t.trusted) warnings.push(`this host's signing key ${signing.fingerprint} is not trusted here (${t.reason}): its backups would not verify on this host`);
  } catch (e) {
    // restoring needs no signing key; backing up from here does
    signing = { fingerprint: null, trusted_here: false, problem: (e as Error).message };
  }

  let latest: KeyCheckResult["latest"] = null;
  if (ctx.repoLocation) {
    const f = ctx.agentFilter(opts);
    try {
      const all = (await (await ctx.repository()).list(trust, f)).map(catalogEntry);
      const last = all.at(-1);
      if (!last) warnings.push(`the repository holds no snapshot${f.agent ? ` of ${f.agent}` : ""} yet`);
      else {
        latest = { snapshot_id: last.snapshot_id, signer: last.signer, status: last.status, problem: last.problem };
        if (last.status !== "ok") problem(Exit.verify, `latest snapshot ${last.snapshot_id} does not verify here: ${last.problem}`);
      }
    } catch (e) {
      if (!(e instanceof AgentbakError)) throw e;
      problem(e.code, `repository ${ctx.repoLocation}: ${e.message}`);
    }
  }
  return {
    home: ctx.home,
    identities: { source, recipients: mine, problem: idProblem },
    recipients,
    signing_key: signing,
    allowed_signers: { file: ctx.lc?.config.signing.allowedSigners ? ctx.lc.resolve(ctx.lc.config.signing.allowedSigners) : homePaths(ctx.home).allowedSigners, signers, missing: Boolean(trust.missing) },
    latest,
    restore_possible: problems.length === 0,
    problems,
    warnings,
  };
}
