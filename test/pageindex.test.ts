/**
 * A chain's page index rebuilt in one buffer (applyIndexChain) is the one the
 * links' changes make applied one at a time: pages added, dropped and
 * brought back, against a plain model of the index.
 */
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { applyIndexChain, encodeIndex, encodeIndexChanges } from "../src/state/pages.js";

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
        const whole = encodeIndex(encodeModel(m));
        const changes: Buffer[] = [];
        for (const [k, l] of links.entries()) {
          // a shrink drops the pages past the new end; a page that comes back is all zero until a change names it
          for (const p of [...m.hashes.keys()]) if (p > l.count) m.hashes.delete(p);
          m.count = l.count;
          const pages = l.changed.filter((p) => p <= l.count).sort((x, y) => x - y);
          for (const p of pages) m.hashes.set(p, Buffer.alloc(HASH, (l.salt + p) & 255));
          changes.push(encodeIndexChanges(encodeModel(m), pages, `20261202T000000000Z-0000000${k}`));
        }
        expect(applyIndexChain(Buffer.from(whole), changes).toString("hex")).toBe(encodeIndex(encodeModel(m)).toString("hex"));
      }),
    );
  });

  it("refuses a link for another page size, or whose entries name a page past its end", () => {
    const whole = encodeIndex({ pageSize: 4096, pageCount: 2, hashes: Buffer.alloc(2 * HASH, 1) });
    const other = encodeIndexChanges({ pageSize: 1024, pageCount: 2, hashes: Buffer.alloc(2 * HASH, 2) }, [1], "p");
    expect(() => applyIndexChain(Buffer.from(whole), [other])).toThrow(/another page size/);
    const past = encodeIndexChanges({ pageSize: 4096, pageCount: 3, hashes: Buffer.alloc(3 * HASH, 2) }, [3], "p");
    past.writeUInt32BE(2, 12); // now says 2 pages, but names page 3
    expect(() => applyIndexChain(Buffer.from(whole), [past])).toThrow(/outside 1\.\.2/);
  });
});
