/** `agentbak verify`: signature, manifest and payload digest, of the bundle and every link of its chain; with an identity, every component too. */
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Check } from "../bundle/extract.js";
import type { Manifest } from "../bundle/manifest.js";
import { warmDigestWorker } from "../bundle/chunks.js";
import { verifyChain } from "../bundle/chain.js";
import { verifyChunked } from "../bundle/chunked.js";
import { verifyBundle } from "../bundle/reader.js";
import { pidDir } from "../fsutil.js";
import { verifyError } from "../errors.js";
import { MISPLACED } from "../repository/repository.js";
import { context, type GlobalOpts } from "./context.js";
import { removeOnInterrupt, removeTree } from "../cleanup.js";
import type { Progress } from "../progress.js";

export interface VerifyOptions extends GlobalOpts {
  identity?: string;
  agent?: string;
  tenant?: string;
  progress?: Progress;
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
  warmDigestWorker();
  const ctx = context(opts);
  const b = await ctx.openRef(ref, ctx.agentFilter(opts));
  try {
    // a genuine bundle of another agent or snapshot in this one's place: named as such, before its own chain is followed
    if (b.snapshot?.problem === MISPLACED) throw verifyError(`snapshot ${b.snapshot.snapshot_id}: ${MISPLACED}`);
    const deep = Boolean(opts.identity || process.env.AGENTBAK_IDENTITY || process.env.AGENTBAK_IDENTITY_FILE);
    // with keys, a payload that lists its chunks' digests (format 7) is read once: each chunk checked as the extraction
    // below reads it, before it is decrypted; its check is said once that read has ended
    const v = await verifyBundle(b.path, ctx.trust, undefined, opts.progress, { decrypting: deep });
    const payload: Check = { name: "payload", ok: true, detail: payloadDetail(v.manifest.payload, v.payloadUnchecked) };
    const checks: Check[] = [
      { name: "signature", ok: true, detail: `signed by ${v.signer.principal} (${v.signer.fingerprint}), namespace agentbak-manifest` },
      { name: "manifest", ok: true, detail: "canonical JSON, schema valid" },
      ...(v.payloadUnchecked ? [] : [payload]),
    ];
    // without keys: every chunk the manifest lists is there with its size (with keys the extraction below reads each
    // one, checks its digest before decrypting it, and the whole component's sha256)
    const chunked = deep ? null : await verifyChunked(v.manifest, b.chunks);
    if (chunked) checks.push({ name: "chunks", ok: true, detail: `${chunked.chunks} chunk(s) of ${chunked.components} chunked component(s) present with their sizes, ${chunked.bytes} bytes` });
    if (!deep && v.manifest.parent) {
      // every link, without keys too: its signature, manifest, payload digest and the manifest digest its child recorded
      // (with an identity the extraction below verifies them before it rebuilds the databases through them)
      const chain = await verifyChain(v, b.links, ctx.trust);
      checks.push({ name: "chain", ok: true, detail: `${chain.length} parent link(s) verified: signature, manifest, payload digest, and the manifest digest each child recorded` });
    }
    if (deep) {
      const ids = ctx.identities(opts.identity);
      const tmp = pidDir(tmpdir(), "agentbak-verify");
      const unregister = removeOnInterrupt(tmp); // decrypted state: removed on Ctrl-C or SIGTERM too
      try {
        // loaded only here: the deep checks bring SQLite, git and the payload's decoders, which a check without keys never uses
        const { extractAndCheck } = await import("../bundle/extract.js");
        const x = await extractAndCheck(v, ids, join(tmp, "root"), ctx.trust, b, undefined, opts.progress);
        if (v.payloadUnchecked) checks.push(payload);
        checks.push(...x.checks);
      } finally {
        removeTree(tmp);
        unregister();
      }
    }
    const m = v.manifest;
    return { ok: true, snapshot_id: m.snapshot_id, tenant: m.tenant, agent_id: m.agent_id, sequence: m.sequence, path: b.snapshot?.path ?? b.path, signer: v.signer, deep, checks };
  } finally {
    b.release();
  }
}

/** What the payload check compared: the chunk digests' root when the manifest lists one, else the whole sha256; `asRead`: each chunk as it was decrypted. */
function payloadDetail(p: Manifest["payload"], asRead?: boolean): string {
  const what = p.chunks ? `sha256 of each ${p.chunks.size >> 20} MiB chunk (root ${p.chunks.sha256.slice(0, 16)}…)` : `sha256 ${p.sha256.slice(0, 16)}…`;
  return `${what} matches, ${p.size} bytes${asRead ? ", each chunk checked as it was read, before it was decrypted" : ""}`;
}
