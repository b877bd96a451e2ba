// The catalog record's rule: trusted only where the objects agree (the same committed ids, each bundle there or not
// as recorded), its signers' trust, expiry and the chain judged again at every read.
import { describe, expect, it } from "vitest";
import { bundleTags, committedObjects, fromRecord, summarize } from "../../../src/repository/catalog.js";
import { generateSigningKey, publicKeyBlob } from "../../../src/crypto/sshsig.js";
import type { Trust } from "../../../src/crypto/trust.js";

const a = { tenant: "acme", agent: "billing-agent" };
const dir = "tenants/acme/agents/billing-agent/snapshots";
const key = publicKeyBlob(generateSigningKey("t").publicKey);
const trust: Trust = { signers: [{ principals: ["ops"], namespaces: null, validAfter: null, validBefore: null, publicKey: key, line: 1 }], revoked: [] };
const now = new Date("2026-06-01T00:00:00Z");
const id = (n: number) => `2026050${n}T100000000Z-0000000${n}`;
const path = (i: string) => `/repo/${dir}/${i}.agentbak`;

/** A listed snapshot as the objects gave it: verified (a header) or not (a problem). */
function listed(n: number, o: { parent?: number; recorded?: string; problem?: string; expires?: string } = {}) {
  const verified = !o.problem;
  return {
    tenant: "acme",
    agent_id: "billing-agent",
    snapshot_id: id(n),
    kind: o.parent ? "incremental" : "full",
    parent: o.parent ? id(o.parent) : null,
    sequence: n,
    created_at: `2026-05-0${n}T10:00:00.000Z`,
    expires_at: o.expires ?? "2027-01-01T00:00:00.000Z",
    label: n === 2 ? "nightly" : null,
    size: 1000 + n,
    status: verified ? "ok" : "invalid",
    problem: o.problem ?? null,
    problem_code: verified ? null : 13,
    signer: verified ? "ops" : null,
    schema_version: 3,
    path: path(id(n)),
    header: verified ? ({ manifestSha256: `sha-${n}`, manifest: { parent: o.parent ? { snapshot_id: id(o.parent), manifest_sha256: o.recorded ?? `sha-${o.parent}` } : null }, layout: { signedBy: key } } as any) : null,
  } as const;
}
const keysOf = (ids: [number, boolean][]) => ids.flatMap(([n, bundle]) => [`${dir}/${id(n)}.commit`, ...(bundle ? [`${dir}/${id(n)}.agentbak`, `${dir}/${id(n)}.main.pageindex`] : [])]);
const strip = ({ header: _h, ...e }: ReturnType<typeof listed>) => e;

describe("committedObjects", () => {
  it("only ids with a commit marker, each with whether its bundle is there; other folders and files ignored", () => {
    const m = committedObjects([...keysOf([[1, true], [2, false]]), `${dir}/${id(3)}.agentbak`, `tenants/acme/agents/other/snapshots/${id(4)}.commit`, `${dir}/../x`], dir);
    expect([...m]).toEqual([[id(1), true], [id(2), false]]);
  });
});

describe("summarize, then fromRecord", () => {
  const list = [listed(1), listed(2, { parent: 1 }), listed(3, { problem: "manifest.sig: signature does not match" })];
  const objects = committedObjects(keysOf([[1, true], [2, true], [3, true]]), dir);
  const rec = summarize(a, list as any, objects, now);

  it("gives back the listing the objects gave (round trip), with the highest sequence recorded", () => {
    expect(rec.sequence).toBe(3);
    expect(fromRecord(rec, a, objects, trust, now, path)).toEqual(list.map(strip));
  });

  it("is not used when the objects disagree: a snapshot committed since, one removed, a bundle gone, another agent's record", () => {
    expect(fromRecord(rec, a, committedObjects(keysOf([[1, true], [2, true], [3, true], [4, true]]), dir), trust, now, path)).toBeNull();
    expect(fromRecord(rec, a, committedObjects(keysOf([[1, true], [2, true]]), dir), trust, now, path)).toBeNull();
    expect(fromRecord(rec, a, committedObjects(keysOf([[1, false], [2, true], [3, true]]), dir), trust, now, path)).toBeNull();
    expect(fromRecord(rec, { tenant: "acme", agent: "other" }, objects, trust, now, path)).toBeNull();
    expect(fromRecord({ ...rec, snapshots: "x" } as any, a, objects, trust, now, path)).toBeNull();
  });

  it("binds each bundle's identity: a bundle written over since (another tag) is not listed from the record; a record of earlier builds (no tag) is, as before", () => {
    const tagged = new Map(keysOf([[1, true], [2, true], [3, true]]).map((k, i) => [k, { tag: `t${i}`, size: 1 }]));
    const tags = bundleTags(tagged, dir);
    const bound = summarize(a, list as any, objects, now, tags);
    expect(bound.snapshots.map((s) => s.bundle_tag)).toEqual([...tags.values()]);
    expect(fromRecord(bound, a, objects, trust, now, path, tags)).toEqual(list.map(strip));
    const over = new Map(tags).set(id(2), "written over");
    expect(fromRecord(bound, a, objects, trust, now, path, over)).toBeNull();
    expect(fromRecord(bound, a, objects, trust, now, path, null)).toEqual(list.map(strip)); // a record this host checked: no listing
    expect(fromRecord(rec, a, objects, trust, now, path, over)).toEqual(list.map(strip));
  });

  it("judges trust and expiry now: a signer revoked since is invalid (14), one no longer allowed (13); an expiry passed is expired", () => {
    const revoked = fromRecord(rec, a, objects, { ...trust, revoked: [key] }, now, path)!;
    expect(revoked.map((e) => [e.status, e.problem_code, e.signer])).toEqual([["invalid", 14, null], ["invalid", 14, null], ["invalid", 13, null]]);
    expect(revoked[0]!.problem).toMatch(/^manifest\.sig: signer key .* is revoked$/);
    const unknown = fromRecord(rec, a, objects, { signers: [], revoked: [] }, now, path)!;
    expect(unknown[0]!.problem).toMatch(/^manifest\.sig: signer key .* is not in allowed_signers$/);
    expect(unknown[0]!.problem_code).toBe(13);
    const later = fromRecord(rec, a, objects, trust, new Date("2027-02-01T00:00:00Z"), path)!;
    expect(later.slice(0, 2).map((e) => [e.status, e.problem])).toEqual([["expired", "expired at 2027-01-01T00:00:00.000Z"], ["expired", "expired at 2027-01-01T00:00:00.000Z"]]);
  });

  it("judges the chain: a parent whose bundle is gone, or whose manifest is not the one recorded, breaks its children", () => {
    const three = [listed(1), listed(2, { parent: 1 }), listed(3, { parent: 2 })];
    const gone = committedObjects(keysOf([[1, false], [2, true], [3, true]]), dir);
    const noBundle = summarize(a, [{ ...listed(1), header: null, status: "invalid", problem: "x: committed but the bundle object is missing", problem_code: 10 }, ...three.slice(1)] as any, gone, now);
    const r = fromRecord(noBundle, a, gone, trust, now, path)!;
    expect(r.map((e) => e.problem)).toEqual(["x: committed but the bundle object is missing", `chain broken: parent snapshot ${id(1)} is missing`, `parent ${id(2)}: chain broken: parent snapshot ${id(1)} is missing`]);
    const all = committedObjects(keysOf([[1, true], [2, true], [3, true]]), dir);
    const other = fromRecord(summarize(a, [listed(1), listed(2, { parent: 1, recorded: "sha-other" }), listed(3, { parent: 2 })] as any, all, now), a, all, trust, now, path)!;
    expect(other.map((e) => e.status)).toEqual(["ok", "invalid", "invalid"]);
    expect(other[1]!.problem).toBe(`parent ${id(1)}: its manifest is not the one ${id(2)} recorded (digest differs)`);
  });
});
