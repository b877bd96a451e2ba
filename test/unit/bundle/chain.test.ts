// The checked-payloads cache: a payload digest is remembered per file identity, so a changed or replaced file is read again.
import { afterAll, describe, expect, it } from "vitest";
import { existsSync, mkdtempSync, readFileSync, rmSync, unlinkSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checkedPayloads } from "../../../src/bundle/chain.js";
import { homePaths } from "../../../src/home.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-chain-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const SHA = "c".repeat(64);

describe("checkedPayloads", () => {
  it("remembers a digest for the very file across runs; another digest, or the file touched or replaced, is not remembered", () => {
    const home = mkdtempSync(join(tmp, "home-"));
    const f = join(tmp, "a.agentbak");
    writeFileSync(f, "bundle");
    const c = checkedPayloads(home);
    expect(c.has(f, SHA)).toBe(false);
    c.add(f, SHA);
    c.save();
    expect(existsSync(homePaths(home).cache.checkedPayloads)).toBe(true);
    const again = checkedPayloads(home);
    expect(again.has(f, SHA)).toBe(true);
    expect(again.has(f, "d".repeat(64))).toBe(false);
    utimesSync(f, new Date(), new Date(Date.now() + 5000));
    expect(again.has(f, SHA)).toBe(false);
    c.add(f, SHA);
    unlinkSync(f);
    writeFileSync(f, "bundle, replaced");
    expect(c.has(f, SHA)).toBe(false);
  });

  it("an unreadable cache is an empty one; save drops files that are gone and writes nothing when nothing changed", () => {
    const home = mkdtempSync(join(tmp, "home-"));
    const file = homePaths(home).cache.checkedPayloads;
    const x = join(tmp, "x.agentbak");
    const y = join(tmp, "y.agentbak");
    writeFileSync(x, "x");
    writeFileSync(y, "y");
    const c = checkedPayloads(home);
    c.add(x, SHA);
    c.add(y, SHA);
    c.save();
    writeFileSync(file, "not json");
    expect(checkedPayloads(home).has(x, SHA)).toBe(false);
    const d = checkedPayloads(home);
    d.save();
    expect(readFileSync(file, "utf8")).toBe("not json");
    d.add(x, SHA);
    c.add(y, SHA);
    unlinkSync(y);
    d.save();
    expect(Object.keys(JSON.parse(readFileSync(file, "utf8")))).toEqual([x]);
  });
});
