/**
 * A chain's page index rebuilt in one buffer (applyIndexChain) is the one the
 * links' changes make applied one at a time: pages added, dropped and
 * brought back, against a plain model of the index. The stored digests are
 * encrypted each on its own under the host's key.
 */
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { applyIndexChain, decodeIndex, encodeIndex, encodeIndexChanges, indexParent, storedIndex } from "../../../../src/state/pages/pageindex.js";

const KEY = Buffer.alloc(32, 7);

const HASH = 16;
/** Page hashes as a model: page number -> 16 bytes; pages past the count are gone. */
type Model = { count: number; hashes: Map<number, Buffer> };

const encodeModel = (m: Model) => {
  const hashes = Buffer.alloc(m.count * HASH);
  for (const [p, h] of m.hashes) if (p <= m.count) h.copy(hashes, (p - 1) * HASH);
  return { pageSize: 4096, pageCount: m.count, hashes };
};

describe("page index chain", () => {
  it("applies links that grow, shrink and regrow the index as one at a time would", () => {
    const link = fc.record({ count: fc.integer({ min: 0, max: 40 }), changed: fc.uniqueArray(fc.integer({ min: 1, max: 40 }), { maxLength: 12 }), salt: fc.integer({ min: 0, max: 255 }) });
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 40 }), fc.array(link, { minLength: 1, maxLength: 8 }), (start, links) => {
        const m: Model = { count: start, hashes: new Map(Array.from({ length: start }, (_, i) => [i + 1, Buffer.alloc(HASH, i + 1)])) };
        const whole = encodeIndex(encodeModel(m), KEY);
        const changes: Buffer[] = [];
        for (const [k, l] of links.entries()) {
          // a shrink drops the pages past the new end; a page that comes back is all zero until a change names it
          for (const p of [...m.hashes.keys()]) if (p > l.count) m.hashes.delete(p);
          m.count = l.count;
          const pages = l.changed.filter((p) => p <= l.count).sort((x, y) => x - y);
          for (const p of pages) m.hashes.set(p, Buffer.alloc(HASH, (l.salt + p) & 255));
          changes.push(encodeIndexChanges(encodeModel(m), pages, `20261202T000000000Z-0000000${k}`, KEY));
        }
        // as stored, a page that came back unnamed is zero bytes (no digest any page has, once decrypted)
        const want = encodeIndex(encodeModel(m), KEY);
        for (let p = 1; p <= m.count; p++) if (!m.hashes.has(p)) want.fill(0, 24 + (p - 1) * HASH, 24 + p * HASH);
        expect(applyIndexChain(Buffer.from(whole), changes).toString("hex")).toBe(want.toString("hex"));
      }),
    );
  });

  it("refuses a link for another page size, or whose entries name a page past its end", () => {
    const whole = encodeIndex({ pageSize: 4096, pageCount: 2, hashes: Buffer.alloc(2 * HASH, 1) }, KEY);
    const other = encodeIndexChanges({ pageSize: 1024, pageCount: 2, hashes: Buffer.alloc(2 * HASH, 2) }, [1], "p", KEY);
    expect(() => applyIndexChain(Buffer.from(whole), [other])).toThrow(/another page size/);
    const past = encodeIndexChanges({ pageSize: 4096, pageCount: 3, hashes: Buffer.alloc(3 * HASH, 2) }, [3], "p", KEY);
    past.writeUInt32BE(2, 12); // now says 2 pages, but names page 3
    expect(() => applyIndexChain(Buffer.from(whole), [past])).toThrow(/outside 1\.\.2/);
  });

  it("stores each digest encrypted under the host's key: decoded with it, the digests come back; another key is told apart", () => {
    const hashes = Buffer.concat([Buffer.alloc(HASH, 1), Buffer.alloc(HASH, 1), Buffer.alloc(HASH, 9)]);
    const stored = encodeIndex({ pageSize: 4096, pageCount: 3, hashes }, KEY);
    // no stored entry is its digest; equal digests are equal as stored (each entry sealed on its own)
    for (let p = 0; p < 3; p++) expect(stored.subarray(24 + p * HASH, 24 + (p + 1) * HASH).equals(hashes.subarray(p * HASH, (p + 1) * HASH))).toBe(false);
    expect(stored.subarray(24, 40).equals(stored.subarray(40, 56))).toBe(true);
    expect(decodeIndex(stored, KEY)!.hashes.equals(hashes)).toBe(true);
    // another key can not read it, and says so rather than decrypting to digests no page has
    expect(decodeIndex(stored, Buffer.alloc(32, 8))).toBeNull();
    // the changes of an incremental seal the same way: applied, they decode to the new digests
    const changed = Buffer.from(hashes);
    changed.fill(5, HASH, 2 * HASH);
    const chain = applyIndexChain(Buffer.from(stored), [encodeIndexChanges({ pageSize: 4096, pageCount: 3, hashes: changed }, [2], "p", KEY)]);
    expect(decodeIndex(chain, KEY)!.hashes.equals(changed)).toBe(true);
  });
});

describe("storedIndex (a snapshot's page index as stored)", () => {
  const ix = { pageSize: 4096, pageCount: 3, hashes: Buffer.alloc(3 * 16, 7) };
  it("an incremental's is the changes since its parent's, naming the parent; a full one's is whole", () => {
    const since = storedIndex(ix, KEY, { pages: [2], parentId: "p1", parentPageSize: 4096 });
    expect(since.equals(encodeIndexChanges(ix, [2], "p1", KEY))).toBe(true);
    expect(indexParent(since)).toBe("p1");
    expect(storedIndex(ix, KEY).equals(encodeIndex(ix, KEY))).toBe(true);
  });
  it("is whole when the page size changed since the parent (its changes could not apply)", () => {
    const whole = storedIndex(ix, KEY, { pages: [2], parentId: "p1", parentPageSize: 1024 });
    expect(whole.equals(encodeIndex(ix, KEY))).toBe(true);
    expect(indexParent(whole)).toBeNull();
  });
});
