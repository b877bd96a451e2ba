/**
 * One page of an S3 ListObjectsV2 answer, read from its XML by a scan for the few elements a listing uses.
 * The SDK's schema deserializer built an object per element of every entry (owner, storage class, checksums):
 * about a fifth of a fleet listing's CPU (docs/performance.md, issue 36). The values are decoded as XML says
 * (`&amp;`, `&lt;`, `&#x1F600;`, CDATA), so a key comes back exactly as it was put.
 */
import { AgentbakError, Exit } from "../errors.js";

/** An object of a listing page: its key, ETag (as sent, quotes included), LastModified in ms (0 when absent) and size. */
export interface ListedObject {
  key: string;
  etag: string;
  lastModified: number;
  size: number;
}

/** What a listing reads of one ListObjectsV2 page. */
export interface ListPage {
  /** the page's objects with a non-empty key, in the order sent */
  objects: ListedObject[];
  /** the CommonPrefixes' Prefix values (a listing with a delimiter), in the order sent */
  prefixes: string[];
  truncated: boolean;
  next?: string;
}

const ENTITIES: Record<string, string> = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'" };

/** Refuses a page it can not read exactly: a key guessed at would be a key missed, or one taken as gone. */
function unreadable(what: string): AgentbakError {
  return new AgentbakError(Exit.failure, `the store's listing is not readable XML (${what}); refusing a listing that may miss keys`);
}

/** Character data with XML's entity and character references decoded; line ends normalized as XML 1.0 says. */
function decode(s: string): string {
  if (s.includes("<")) throw unreadable(`markup inside a value: ${JSON.stringify(s.slice(0, 200))}`); // a page cut or spliced
  return s.replace(/\r\n?/g, "\n").replace(/&([^;&<]*);?/g, (all, ref: string) => {
    if (!all.endsWith(";")) throw unreadable(`a bare & in ${JSON.stringify(s.slice(0, 200))}`);
    const m = /^#(?:x([0-9a-fA-F]{1,6})|([0-9]{1,7}))$/.exec(ref);
    if (m) {
      const cp = parseInt(m[1] ?? m[2]!, m[1] ? 16 : 10);
      if (cp > 0x10ffff || cp === 0 || (cp >= 0xd800 && cp <= 0xdfff)) throw unreadable(`the character reference &${ref};`);
      return String.fromCodePoint(cp);
    }
    const named = ENTITIES[ref];
    if (named === undefined) throw unreadable(`the entity &${ref};`);
    return named;
  });
}

/** An element's text: its CDATA sections as they are, the rest decoded. */
function text(raw: string): string {
  if (!raw.includes("<![CDATA[")) return decode(raw);
  let out = "";
  let at = 0;
  for (;;) {
    const open = raw.indexOf("<![CDATA[", at);
    if (open < 0) return out + decode(raw.slice(at));
    const close = raw.indexOf("]]>", open + 9);
    if (close < 0) throw unreadable("an unclosed CDATA section");
    out += decode(raw.slice(at, open)) + raw.slice(open + 9, close);
    at = close + 3;
  }
}

/** One element found by `elements`: where it starts and ends (one past its end tag) and its raw content. */
interface Found {
  start: number;
  end: number;
  raw: string;
}

/**
 * Each `<name>…</name>` in `xml`, in order (the start tag may carry attributes; a self-closed `<name/>` is
 * empty). Character data holds no `<`, so the first end tag after a start tag closes it unless a CDATA section holds one.
 */
function* elements(xml: string, name: string): Generator<Found> {
  const open = `<${name}`;
  const close = `</${name}>`;
  let at = 0;
  // where the next CDATA section starts (-1: none is left), found once per page and not once per element: an
  // element's search from its own start to the page's end made a page of 1,000 entries cost O(n²) (~1 s of CPU a
  // fleet listing; docs/performance.md, Fleet)
  let cdata = -2;
  for (;;) {
    const start = xml.indexOf(open, at);
    if (start < 0) return;
    const after = xml[start + open.length];
    if (after !== ">" && after !== "/" && after !== " " && after !== "\t" && after !== "\n" && after !== "\r") {
      at = start + open.length; // another element whose name begins with this one's
      continue;
    }
    const gt = xml.indexOf(">", start);
    if (gt < 0) throw unreadable(`an unclosed <${name}> tag`);
    if (xml[gt - 1] === "/") {
      yield { start, end: gt + 1, raw: "" };
      at = gt + 1;
      continue;
    }
    let end = xml.indexOf(close, gt + 1);
    if (cdata !== -1 && cdata <= gt) cdata = xml.indexOf("<![CDATA[", gt + 1);
    while (cdata >= 0 && cdata < end) {
      const past = xml.indexOf("]]>", cdata + 9) + 3;
      if (past < 3) throw unreadable("an unclosed CDATA section");
      end = xml.indexOf(close, past);
      cdata = xml.indexOf("<![CDATA[", past);
    }
    if (end < 0) throw unreadable(`no </${name}>`);
    const raw = xml.slice(gt + 1, end);
    if (raw.includes(`<${name}>`)) throw unreadable(`<${name}> inside <${name}>: the page was spliced`);
    yield { start, end: end + close.length, raw };
    at = end + close.length;
  }
}

/** The text of the first `<name>` in `raw` (an entry's or the page's own field), undefined when there is none. */
function field(raw: string, name: string): string | undefined {
  for (const v of elements(raw, name)) return text(v.raw);
  return undefined;
}

/** Calls `each` with the content of every `<name>` of `xml`, in order. @returns the text outside them */
function cut(xml: string, name: string, each: (raw: string) => void): string {
  let rest = "";
  let at = 0;
  for (const e of elements(xml, name)) {
    each(e.raw);
    rest += xml.slice(at, e.start);
    at = e.end;
  }
  return rest + xml.slice(at);
}

/** LastModified in ms as the SDK reads it: RFC 3339, a fraction of a second rounded to the ms. */
function isoMs(s: string): number {
  const m = /^(\d{4}-\d\d-\d\d)[Tt](\d\d:\d\d:\d\d)(?:\.(\d+))?([Zz]|[+-]\d\d:\d\d)$/.exec(s.trim());
  if (!m) throw unreadable(`the LastModified ${JSON.stringify(s.slice(0, 100))}`);
  const ms = Date.parse(`${m[1]}T${m[2]}${m[4]!.toUpperCase()}`);
  if (Number.isNaN(ms)) throw unreadable(`the LastModified ${JSON.stringify(s.slice(0, 100))}`);
  return ms + (m[3] ? Math.round(Number(`0.${m[3]}`) * 1000) : 0);
}

/**
 * Reads one ListObjectsV2 page.
 * @param xml the answer's body (a 2xx answer's)
 * @returns its objects, common prefixes, whether it is truncated and its NextContinuationToken
 * @throws AgentbakError(1) when it is not a ListBucketResult, or holds a value it can not decode exactly
 */
export function scanListPage(xml: string): ListPage {
  const root = xml.indexOf("<ListBucketResult");
  if (root < 0) throw unreadable(`no ListBucketResult in ${JSON.stringify(xml.slice(0, 200))}`);
  if (!xml.trimEnd().endsWith("</ListBucketResult>")) throw unreadable("no </ListBucketResult>: the page was cut short");
  const objects: ListedObject[] = [];
  const prefixes: string[] = [];
  // the page's own fields are read outside its entries, where no entry's field can be taken for one
  const rest = cut(cut(xml.slice(root), "Contents", (raw) => {
    const key = field(raw, "Key") ?? "";
    const when = field(raw, "LastModified");
    if (key) objects.push({ key, etag: field(raw, "ETag") ?? "", lastModified: when === undefined ? 0 : isoMs(when), size: Number(field(raw, "Size") ?? 0) });
  }), "CommonPrefixes", (raw) => {
    const p = field(raw, "Prefix");
    if (p) prefixes.push(p);
  });
  const truncated = field(rest, "IsTruncated")?.trim();
  if (truncated !== undefined && truncated !== "true" && truncated !== "false") throw unreadable(`IsTruncated ${JSON.stringify(truncated.slice(0, 20))}`);
  const next = field(rest, "NextContinuationToken");
  return { objects, prefixes, truncated: truncated === "true", ...(next ? { next } : {}) };
}
