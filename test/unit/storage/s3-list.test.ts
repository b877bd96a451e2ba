// scanListPage: one ListObjectsV2 page read from its XML without the SDK's deserializer. Keys must come back exactly
// as they were put (entities, character references, CDATA), a page it can not read exactly is refused, and the page's
// own fields are never taken from inside an entry. The same scan against the real gateway: test/e2e/store.test.ts.
import { describe, expect, it } from "vitest";
import { scanListPage } from "../../../src/storage/s3-list.js";
import { AgentbakError } from "../../../src/errors.js";

const page = (inner: string) => `<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys>${inner}</ListBucketResult>`;
const entry = (key: string, extra = "") => `<Contents><Key>${key}</Key><LastModified>2026-12-07T18:59:54.296Z</LastModified><ETag>&quot;396fb09b&quot;</ETag><Size>7</Size><StorageClass>STANDARD</StorageClass><Owner><ID>o</ID><DisplayName>o &amp; co</DisplayName></Owner>${extra}</Contents>`;

function refused(xml: string): string {
  try {
    scanListPage(xml);
  } catch (e) {
    expect(e).toBeInstanceOf(AgentbakError);
    expect((e as AgentbakError).code).toBe(1);
    return (e as Error).message;
  }
  throw new Error("not refused");
}

describe("scanListPage", () => {
  it("reads each entry's key, ETag (quotes kept), LastModified in ms and size, and the page's truncation and token", () => {
    const p = scanListPage(page(`<IsTruncated>true</IsTruncated><NextContinuationToken>tok&amp;1=</NextContinuationToken>${entry("p/a")}${entry("p/b")}`));
    expect(p).toEqual({
      objects: [
        { key: "p/a", etag: '"396fb09b"', lastModified: Date.UTC(2026, 11, 7, 18, 59, 54, 296), size: 7 },
        { key: "p/b", etag: '"396fb09b"', lastModified: Date.UTC(2026, 11, 7, 18, 59, 54, 296), size: 7 },
      ],
      prefixes: [],
      truncated: true,
      next: "tok&1=",
    });
    expect(scanListPage(page(`${entry("p/a")}<IsTruncated>false</IsTruncated>`))).toMatchObject({ truncated: false });
    expect(scanListPage(page(entry("p/a")))).not.toHaveProperty("next");
  });

  it("decodes hostile keys exactly: the five entities, decimal and hex references (astral too), CDATA, line ends", () => {
    const cases: [string, string][] = [
      ["p/a&amp;b", "p/a&b"],
      ["p/&lt;Key&gt;x&lt;/Key&gt;", "p/<Key>x</Key>"],
      ["p/&quot;&apos;", `p/"'`],
      ["p/amp&amp;amp;", "p/amp&amp;"], // decoded once, not twice
      ["p/&#x1F600;&#233;&#xe9;", "p/😀éé"],
      ["p/ctrl&#x1;&#13;&#10;&#9;", "p/ctrl\u0001\r\n\t"],
      ["p/raw\r\nline\rend", "p/raw\nline\nend"], // XML 1.0 line-end normalization, as the SDK's parser does
      ["<![CDATA[p/<b>&amp;]]>", "p/<b>&amp;"],
      ["p/x<![CDATA[</Key>]]>&amp;y", "p/x</Key>&y"],
      ["p/日本語 space", "p/日本語 space"],
    ];
    const p = scanListPage(page(cases.map(([raw]) => entry(raw)).join("")));
    expect(p.objects.map((o) => o.key)).toEqual(cases.map(([, key]) => key));
  });

  it("never takes an entry's text for the page's own fields (IsTruncated, NextContinuationToken)", () => {
    const p = scanListPage(page(`<IsTruncated>false</IsTruncated>${entry("p/&lt;IsTruncated&gt;true&lt;/IsTruncated&gt;", "<ChecksumAlgorithm>CRC32</ChecksumAlgorithm>")}`));
    expect(p).toMatchObject({ truncated: false, objects: [{ key: "p/<IsTruncated>true</IsTruncated>" }] });
    expect(p).not.toHaveProperty("next");
    // a field after the entries is the page's as much as one before them
    expect(scanListPage(page(`${entry("p/a")}<CommonPrefixes><Prefix>p/d/</Prefix></CommonPrefixes><IsTruncated>true</IsTruncated><NextContinuationToken>t</NextContinuationToken>`))).toMatchObject({ truncated: true, next: "t", prefixes: ["p/d/"] });
  });

  it("reads common prefixes (not the page's own Prefix), and skips an entry with an empty key as the SDK path did", () => {
    const p = scanListPage(page(`<Delimiter>/</Delimiter><IsTruncated>false</IsTruncated><CommonPrefixes><Prefix>p/a&amp;b/</Prefix></CommonPrefixes><CommonPrefixes><Prefix>p/c/</Prefix></CommonPrefixes>${entry("")}`));
    expect(p).toEqual({ objects: [], prefixes: ["p/a&b/", "p/c/"], truncated: false });
  });

  it("LastModified as the SDK reads it: a fraction rounded to the ms, an offset applied, none = 0", () => {
    const at = (t: string) => scanListPage(page(`<Contents><Key>k</Key><LastModified>${t}</LastModified><Size>1</Size></Contents>`)).objects[0]!.lastModified;
    expect(at("2026-12-07T18:59:54Z")).toBe(Date.UTC(2026, 11, 7, 18, 59, 54));
    expect(at("2026-12-07T18:59:54.2966Z")).toBe(Date.UTC(2026, 11, 7, 18, 59, 54, 297));
    expect(at("2026-12-07T20:59:54.5+02:00")).toBe(Date.UTC(2026, 11, 7, 18, 59, 54, 500));
    expect(scanListPage(page(`<Contents><Key>k</Key></Contents>`)).objects[0]).toEqual({ key: "k", etag: "", lastModified: 0, size: 0 });
  });

  it("refuses, with exit 1, what it can not read exactly: an error body, an unknown entity, a bare &, a bad reference, a cut-off page", () => {
    expect(refused(`<?xml version="1.0"?><Error><Code>InternalError</Code></Error>`)).toMatch(/not readable XML \(no ListBucketResult/);
    expect(refused(page(entry("p/&nbsp;")))).toMatch(/the entity &nbsp;/);
    expect(refused(page(entry("p/a&b")))).toMatch(/a bare &/);
    for (const ref of ["&#xD800;", "&#0;", "&#x110000;"]) expect(refused(page(entry(`p/${ref}`)))).toMatch(/character reference/);
    expect(refused(page(entry("p/a")).slice(0, -40))).toMatch(/no <\/ListBucketResult>: the page was cut short/);
    expect(refused(page(entry("p/a")).replace("</Contents>", "") + "</ListBucketResult>")).toMatch(/no <\/Contents>/);
    // a page with bytes dropped from its middle (one entry's time to the next one's key) reads as one entry: refused
    const two = page(entry("p/first") + entry("p/second"));
    expect(refused(two.slice(0, two.indexOf("2026-12", two.indexOf("p/first")) + 7) + two.slice(two.indexOf("p/second") + 3))).toMatch(/<LastModified> inside <LastModified>: the page was spliced/);
    expect(refused(page(entry("p/a<b/>c")))).toMatch(/markup inside a value: "p\/a<b\/>c"/);
    expect(refused(page(`<Contents><Key>a</Key>${entry("p/b")}`))).toMatch(/<Contents> inside <Contents>/);
    expect(refused(page(entry("p/a", "<X><![CDATA[open</X>")))).toMatch(/unclosed CDATA/);
    expect(refused(page(`<IsTruncated>maybe</IsTruncated>`))).toMatch(/IsTruncated "maybe"/);
    expect(refused(page(`<Contents><Key>k</Key><LastModified>yesterday</LastModified></Contents>`))).toMatch(/LastModified "yesterday"/);
  });

  it("reads a page in time linear in its size: 6,000 entries and 6,000 prefixes, a CDATA key among them, each where it was", () => {
    // each element's search for a CDATA section ran to the page's end: 0.43-0.58 s for one page of 1,000 entries, some 19 s here (8.4 s at 4,000)
    const keys = Array.from({ length: 6000 }, (_, i) => `p/agent-${String(i).padStart(4, "0")}.json`);
    const body = keys.map((k, i) => entry(i === 4500 ? `<![CDATA[${k}]]>` : k)).join("") + keys.map((k) => `<CommonPrefixes><Prefix>${k}/</Prefix></CommonPrefixes>`).join("");
    const t = Date.now();
    const p = scanListPage(page(`<IsTruncated>false</IsTruncated>${body}`));
    expect(Date.now() - t).toBeLessThan(5000);
    expect(p.objects.map((o) => o.key)).toEqual(keys);
    expect(p.prefixes).toEqual(keys.map((k) => `${k}/`));
  });
});
