/** `agentbak verify`: signature, manifest and payload digest; with an identity, every component too. */
import { rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { extractAndCheck, type Check } from "../bundle/extract.js";
import { verifyBundle } from "../bundle/reader.js";
import { pidDir } from "../fsutil.js";
import { context, type GlobalOpts } from "./context.js";
import { removeOnInterrupt } from "../cleanup.js";

export interface VerifyOptions extends GlobalOpts {
  identity?: string;
  agent?: string;
  tenant?: string;
}

export interface VerifyResult {
  ok: true;
  snapshot_id: string;
  tenant: string;
  agent_id: string;
  sequence: number;
  path: string;
  signer: { principal: string; fingerprint: string };
  deep: boolean;
  checks: Check[];
}

export async function verify(ref: string, opts: VerifyOptions): Promise<VerifyResult> {
  const ctx = context(opts);
  const b = await ctx.openRef(ref, ctx.agentFilter(opts));
  try {
    const v = await verifyBundle(b.path, ctx.trust);
    const checks: Check[] = [
      { name: "signature", ok: true, detail: `signed by ${v.signer.principal} (${v.signer.fingerprint}), namespace agentbak-manifest` },
      { name: "manifest", ok: true, detail: "canonical JSON, schema valid" },
      { name: "payload", ok: true, detail: `sha256 ${v.manifest.payload.sha256.slice(0, 16)}… matches, ${v.manifest.payload.size} bytes` },
    ];
    const deep = Boolean(opts.identity || process.env.AGENTBAK_IDENTITY || process.env.AGENTBAK_IDENTITY_FILE);
    if (deep) {
      const ids = ctx.identities(opts.identity);
      const tmp = pidDir(tmpdir(), "agentbak-verify");
      const unregister = removeOnInterrupt(tmp); // decrypted state: removed on Ctrl-C or SIGTERM too
      try {
        checks.push(...(await extractAndCheck(v, ids, join(tmp, "root"), ctx.trust, b.links)).checks);
      } finally {
        rmSync(tmp, { recursive: true, force: true });
        unregister();
      }
    }
    const m = v.manifest;
    return { ok: true, snapshot_id: m.snapshot_id, tenant: m.tenant, agent_id: m.agent_id, sequence: m.sequence, path: b.snapshot?.path ?? b.path, signer: v.signer, deep, checks };
  } finally {
    b.release();
  }
}
