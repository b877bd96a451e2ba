/** `agentbak verify`: signature, manifest and payload digest; with an identity, every component too. */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { verifyBundle } from "../bundle/reader.js";
import { loadIdentities } from "../crypto/keys.js";
import { resolveSnapshot } from "../repository/catalog.js";
import { openRepository } from "../repository/local.js";
import { extractAndCheck, type Check } from "../restore/extract.js";
import { context, localRef, type Context, type GlobalOpts } from "./common.js";

export interface VerifyOptions extends GlobalOpts {
  identity?: string;
}

export interface VerifyResult {
  ok: true;
  snapshot_id: string;
  agent_id: string;
  sequence: number;
  path: string;
  signer: { principal: string; fingerprint: string };
  deep: boolean;
  checks: Check[];
}

export async function verify(ref: string, opts: VerifyOptions): Promise<VerifyResult> {
  const ctx = context(opts, !(ref.endsWith(".agentbak") || ref.includes("/")));
  const l = await localRef(ctx, ref, ctx.lc?.config.agent.id);
  try {
    return await verifyLocal(l.ref, ctx, opts);
  } finally {
    l.done();
  }
}

async function verifyLocal(ref: string, ctx: Context, opts: VerifyOptions): Promise<VerifyResult> {
  const repo = ctx.repoPath && !ctx.remote ? openRepository(ctx.repoPath) : undefined;
  const path = resolveSnapshot(repo, ref, ctx.trust, ctx.lc?.config.agent.id);
  const v = await verifyBundle(path, ctx.trust);
  const checks: Check[] = [
    { name: "signature", ok: true, detail: `signed by ${v.signer.principal} (${v.signer.fingerprint}), namespace agentbak-manifest` },
    { name: "manifest", ok: true, detail: "canonical JSON, schema valid" },
    { name: "payload", ok: true, detail: `sha256 ${v.manifest.payload.sha256.slice(0, 16)}… matches, ${v.manifest.payload.size} bytes` },
  ];
  const deep = Boolean(opts.identity || process.env.AGENTBAK_IDENTITY || process.env.AGENTBAK_IDENTITY_FILE);
  if (deep) {
    const ids = loadIdentities(opts.identity);
    const tmp = mkdtempSync(join(tmpdir(), "agentbak-verify-"));
    try {
      const x = await extractAndCheck(v, ids, join(tmp, "root"), ctx.trust);
      checks.push(...x.checks);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  }
  return { ok: true, snapshot_id: v.manifest.snapshot_id, agent_id: v.manifest.agent_id, sequence: v.manifest.sequence, path, signer: v.signer, deep, checks };
}
