/**
 * `node dist/tools/store-guarantees.js [--trials N] [--writers N]`: measures,
 * with real concurrent requests, which conditional operations a store makes
 * atomic, so the repository's leases rest on what was measured and not on a
 * sleep. Against the S3 endpoint in AGENTBAK_S3_ENDPOINT (or
 * AGENTBAK_TEST_S3_ENDPOINT) it makes three fresh buckets (unversioned,
 * versioned, Object Lock) and tries, in each:
 *   - create race: N writers PUT one new key with If-None-Match: * at once
 *     (how many are told they won; whose body is there after);
 *   - compare-and-swap race: N writers read an object's ETag, then PUT it with
 *     If-Match: <etag> at once;
 *   - the same two conditions one at a time, against an object that exists,
 *     that changed, and that is missing;
 *   - DELETE with If-Match: a stale ETag (is it refused?) and the current one.
 * And in a local folder: N processes at once create one file with O_EXCL, and
 * link(2) their own temp file to one name. Prints a Markdown table (the one in
 * docs/repositories.md) and, with --json, the raw counts.
 */
import { execa } from "execa";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

type S3Mod = typeof import("@aws-sdk/client-s3");

function arg(name: string, def: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
}
const TRIALS = arg("trials", 30);
const WRITERS = arg("writers", 12);
/** send ETags unquoted in If-Match (RGW 16 matches only that spelling) */
const UNQUOTED = !process.argv.includes("--quoted");

interface Race {
  trials: number;
  writers: number;
  /** trials in which exactly one writer was told it won, and the object holds its body */
  exactlyOne: number;
  /** trials in which more than one writer was told it won */
  several: number;
  /** trials in which a writer was told it won but the object holds another's body */
  lostWinner: number;
  maxWinners: number;
}

const status = (e: unknown) => (e as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode ?? -1;

async function s3Probe(sdk: S3Mod, endpoint: string, kind: "unversioned" | "versioned" | "object-lock") {
  const mk = () => new sdk.S3Client({ endpoint, region: process.env.AWS_REGION ?? "us-east-1", forcePathStyle: true, requestChecksumCalculation: "WHEN_REQUIRED", maxAttempts: 1 });
  const c = mk();
  // one client per writer: separate connection pools, so the requests really are concurrent
  const clients = Array.from({ length: WRITERS }, mk);
  const Bucket = `guar-${kind.slice(0, 5)}-${randomBytes(4).toString("hex")}`;
  await c.send(new sdk.CreateBucketCommand({ Bucket, ...(kind === "object-lock" ? { ObjectLockEnabledForBucket: true } : {}) }));
  if (kind === "versioned") await c.send(new sdk.PutBucketVersioningCommand({ Bucket, VersioningConfiguration: { Status: "Enabled" } }));
  const put = async (cl: InstanceType<S3Mod["S3Client"]>, Key: string, Body: string, cond: { IfNoneMatch?: string; IfMatch?: string } = {}) => {
    // RGW compares If-Match with the stored ETag byte for byte, and stores it unquoted
    if (cond.IfMatch && UNQUOTED) cond = { ...cond, IfMatch: cond.IfMatch.replace(/^"|"$/g, "") };
    try {
      const r = await cl.send(new sdk.PutObjectCommand({ Bucket, Key, Body, ...cond }));
      return { ok: true, status: 200, etag: r.ETag ?? "" };
    } catch (e) {
      return { ok: false, status: status(e), etag: "" };
    }
  };
  const body = async (Key: string) => {
    const r = await c.send(new sdk.GetObjectCommand({ Bucket, Key }));
    return { text: await r.Body!.transformToString(), etag: r.ETag ?? "" };
  };
  const tally = (r: Race, won: number[], holder: string) => {
    r.maxWinners = Math.max(r.maxWinners, won.length);
    if (won.length > 1) r.several++;
    if (won.length === 1 && holder === `w${won[0]}`) r.exactlyOne++;
    if (won.length >= 1 && !won.some((w) => holder === `w${w}`)) r.lostWinner++;
  };
  const create: Race = { trials: TRIALS, writers: WRITERS, exactlyOne: 0, several: 0, lostWinner: 0, maxWinners: 0 };
  const cas: Race = { ...create };
  const codes = { createLoser: new Set<number>(), casLoser: new Set<number>() };
  for (let t = 0; t < TRIALS; t++) {
    const key = `race/create-${t}`;
    const rs = await Promise.all(clients.map((cl, i) => put(cl, key, `w${i}`, { IfNoneMatch: "*" })));
    rs.filter((r) => !r.ok).forEach((r) => codes.createLoser.add(r.status));
    tally(create, rs.flatMap((r, i) => (r.ok ? [i] : [])), (await body(key)).text);
    const ckey = `race/cas-${t}`;
    const first = await put(c, ckey, `start-${t}`);
    const etag = first.etag;
    const rc = await Promise.all(clients.map((cl, i) => put(cl, ckey, `w${i}`, { IfMatch: etag })));
    rc.filter((r) => !r.ok).forEach((r) => codes.casLoser.add(r.status));
    tally(cas, rc.flatMap((r, i) => (r.ok ? [i] : [])), (await body(ckey)).text);
  }
  // one at a time
  const k = "seq/obj";
  const p1 = await put(c, k, "one");
  const inmExisting = await put(c, k, "two", { IfNoneMatch: "*" });
  const p2 = await put(c, k, "three");
  const imStale = await put(c, k, "four", { IfMatch: p1.etag });
  const imCurrent = await put(c, k, "five", { IfMatch: p2.etag });
  const imMissing = await put(c, "seq/missing", "six", { IfMatch: p1.etag });
  // same bytes again: is the ETag the same (an MD5 of the body), so an A-B-A rewrite is invisible to If-Match?
  const same1 = await put(c, "seq/same", "identical");
  const same2 = await put(c, "seq/same", "identical");
  let delStale = -1;
  let delStaleGone = false;
  let delCurrent = -1;
  try {
    await c.send(new sdk.DeleteObjectCommand({ Bucket, Key: k, IfMatch: UNQUOTED ? p1.etag.replace(/"/g, "") : p1.etag }));
    delStale = 200;
  } catch (e) {
    delStale = status(e);
  }
  delStaleGone = await c.send(new sdk.HeadObjectCommand({ Bucket, Key: k })).then(
    () => false,
    () => true,
  );
  if (!delStaleGone) {
    try {
      await c.send(new sdk.DeleteObjectCommand({ Bucket, Key: k, IfMatch: UNQUOTED ? imCurrent.etag.replace(/"/g, "") : imCurrent.etag }));
      delCurrent = 200;
    } catch (e) {
      delCurrent = status(e);
    }
  }
  return {
    store: `Ceph RGW, ${kind} bucket`,
    create,
    cas,
    loserCodes: { create: [...codes.createLoser], cas: [...codes.casLoser] },
    sequential: {
      ifNoneMatchOnExisting: inmExisting.ok ? "written (not refused)" : `refused ${inmExisting.status}`,
      ifMatchStale: imStale.ok ? "written (not refused)" : `refused ${imStale.status}`,
      ifMatchCurrent: imCurrent.ok ? "written" : `refused ${imCurrent.status}`,
      ifMatchMissing: imMissing.ok ? "written (not refused)" : `refused ${imMissing.status}`,
      sameBodySameEtag: same1.etag === same2.etag,
      deleteIfMatchStale: delStaleGone ? `deleted (condition ignored, answer ${delStale})` : `refused ${delStale}`,
      deleteIfMatchCurrent: delStaleGone ? "n/a" : delCurrent === 200 || delCurrent === 204 ? "deleted" : `refused ${delCurrent}`,
    },
  };
}

/** N processes at once: create one file with O_EXCL, or link(2) a file of their own to one name. */
async function localProbe() {
  const dir = mkdtempSync(join(tmpdir(), "agentbak-guarantees-"));
  const script = `
const fs = require("node:fs");
const [mode, target, me, go] = process.argv.slice(1);
while (Date.now() < Number(go)) {}
try {
  if (mode === "excl") fs.writeFileSync(target, me, { flag: "wx" });
  else { const t = target + ".tmp-" + me; fs.writeFileSync(t, me); try { fs.linkSync(t, target); } finally { fs.unlinkSync(t); } }
  process.stdout.write("won");
} catch (e) { process.stdout.write(e.code); }`;
  const out: Record<string, Race> = {};
  try {
    for (const mode of ["excl", "link"] as const) {
      const r: Race = { trials: TRIALS, writers: WRITERS, exactlyOne: 0, several: 0, lostWinner: 0, maxWinners: 0 };
      for (let t = 0; t < TRIALS; t++) {
        const target = join(dir, `${mode}-${t}`);
        const go = String(Date.now() + 400); // every process is started before any tries
        const rs = await Promise.all(Array.from({ length: WRITERS }, (_, i) => execa("node", ["-e", script, mode, target, `w${i}`, go], { reject: false })));
        const won = rs.flatMap((x, i) => (x.stdout === "won" ? [i] : []));
        const { readFileSync } = await import("node:fs");
        const holder = readFileSync(target, "utf8");
        r.maxWinners = Math.max(r.maxWinners, won.length);
        if (won.length > 1) r.several++;
        if (won.length === 1 && holder === `w${won[0]}`) r.exactlyOne++;
        if (won.length >= 1 && !won.some((w) => holder === `w${w}`)) r.lostWinner++;
      }
      out[mode] = r;
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return out;
}

const race = (r: Race) => `${r.exactlyOne}/${r.trials} exactly one${r.several ? `; ${r.several} with several (up to ${r.maxWinners})` : ""}${r.lostWinner ? `; ${r.lostWinner} whose winner's body was not there` : ""}`;

async function main() {
  const endpoint = process.env.AGENTBAK_S3_ENDPOINT ?? process.env.AGENTBAK_TEST_S3_ENDPOINT;
  const rows: string[] = [];
  const raw: unknown[] = [];
  const local = await localProbe();
  raw.push({ store: "local folder", ...local });
  rows.push(`| local folder (${process.platform}) | O_EXCL create: ${race(local.excl!)}; link(2): ${race(local.link!)} | no compare-and-swap primitive (rename replaces unconditionally) | n/a | n/a | n/a |`);
  if (endpoint) {
    process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";
    const sdk = await import("@aws-sdk/client-s3");
    for (const kind of ["unversioned", "versioned", "object-lock"] as const) {
      const r = await s3Probe(sdk, endpoint, kind);
      raw.push(r);
      const s = r.sequential;
      rows.push(
        `| ${r.store} | ${race(r.create)} (losers: ${r.loserCodes.create.join(", ") || "none"}) | ${race(r.cas)} (losers: ${r.loserCodes.cas.join(", ") || "none"}) | on an existing key: ${s.ifNoneMatchOnExisting}; If-Match stale: ${s.ifMatchStale}, current: ${s.ifMatchCurrent}, missing key: ${s.ifMatchMissing} | stale: ${s.deleteIfMatchStale}; current: ${s.deleteIfMatchCurrent} | ${s.sameBodySameEtag ? "yes (MD5 of the body)" : "no"} |`,
      );
    }
  }
  if (process.argv.includes("--json")) console.log(JSON.stringify(raw, null, 2));
  console.log(`${WRITERS} concurrent writers, ${TRIALS} trials each\n`);
  console.log("| store | atomic create (If-None-Match: * / O_EXCL / link) | compare-and-swap (If-Match: ETag) | one at a time | DELETE If-Match | same body, same ETag |");
  console.log("|---|---|---|---|---|---|");
  for (const r of rows) console.log(r);
}

await main();
