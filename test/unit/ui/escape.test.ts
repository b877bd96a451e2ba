// ui/escape.ts: the one escaping function for text from an agent, its database, a provider or a bundle.
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { safe } from "../../../src/ui/escape.js";
import { hasUnsafeText } from "../../../src/facts.js";

describe("safe", () => {
  it("[E2] shows controls, escape sequences, bidi/format controls and separators as visible escapes", () => {
    expect(safe("a\x1b[2Jb")).toBe("a\\x1b[2Jb");
    expect(safe("x\r\ny\tz\x00\x7f\x9b")).toBe("x\\x0d\\x0ay\\x09z\\x00\\x7f\\x9b");
    expect(safe("invoice \u202egpj.exe")).toBe("invoice \\u202egpj.exe");
    expect(safe("zero\u200bwidth \u2066iso\u2069 \ufeff")).toBe("zero\\u200bwidth \\u2066iso\\u2069 \\ufeff");
    expect(safe("line\u2028para\u2029")).toBe("line\\u2028para\\u2029");
    expect(safe("lone \ud800 surrogate")).toBe("lone \\ud800 surrogate");
  });
  it("leaves printable text alone (accents, CJK, emoji, backslashes)", () => {
    for (const s of ["billing-agent", "café 日本語 🚀", "C:\\path\\x", "a b\u00a0c"]) expect(safe(s)).toBe(s);
  });
  it("[E2] its output never holds a character the predicate calls unsafe, for any string", () => {
    fc.assert(fc.property(fc.string({ unit: "binary" }), (s) => !hasUnsafeText(safe(s)) && (hasUnsafeText(s) || safe(s) === s)), { numRuns: 2000 });
  });
});
