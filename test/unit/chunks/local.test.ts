/**
 * What a backup host keeps about an agent's chunks (src/chunks/local.ts), in a
 * real AGENTBAK_HOME: the host's chunk key (made once, private; a damaged one
 * is 12 with what to do); cache names apart per repository, agent and key;
 * the known-chunks index round-tripped with its epoch, and read as empty when
 * damaged in any byte; the stat cache trusting a file only while its stat is
 * unchanged and not racy, and saving only the entries this run used.
 */
import { afterAll, describe, expect, it } from "vitest";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cachePaths, hostChunkKey, KnownChunks, StatCache, type ChunkRef } from "../../../src/chunks/local.js";
import { AgentbakError } from "../../../src/errors.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-chunks-local-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
let n = 0;
const home = () => join(tmp, `home${n++}`);
const scope = { tenant: "acme", agent: "billing-agent" };
const ref = (i: number): ChunkRef => ({ id: i.toString(16).padStart(64, "0"), sha256: (i + 1).toString(16).padStart(64, "a"), size: 1000 + i, length: 4000 + i });

describe("hostChunkKey", () => {
  it("is made on first use (64 hex digits, 0600) and the same ever after", () => {
    const h = home();
    const k = hostChunkKey(h);
    expect(k.length).toBe(32);
    expect(readFileSync(join(h, "chunk-key"), "utf8")).toBe(k.toString("hex") + "\n");
    expect(statSync(join(h, "chunk-key")).mode & 0o777).toBe(0o600);
    expect(hostChunkKey(h).equals(k)).toBe(true);
  });

  it("a damaged key file is 12, saying how to recover, never silently replaced", () => {
    const h = home();
    hostChunkKey(h);
    writeFileSync(join(h, "chunk-key"), "not a key\n");
    let e: unknown;
    try {
      hostChunkKey(h);
    } catch (x) {
      e = x;
    }
    expect(e).toBeInstanceOf(AgentbakError);
    expect((e as AgentbakError).code).toBe(12);
    expect((e as Error).message).toMatch(/is not a chunk key \(64 hex digits\); restore it from a copy of AGENTBAK_HOME, or remove it/);
    expect(readFileSync(join(h, "chunk-key"), "utf8")).toBe("not a key\n");
  });
});

describe("cachePaths", () => {
  it("one pair per repository, agent and chunk key, under AGENTBAK_HOME/cache/chunks", () => {
    const k = Buffer.alloc(32, 1);
    const p = cachePaths("/h", "/repo", scope, k);
    expect(p.known).toMatch(/^\/h\/cache\/chunks\/[0-9a-f]{32}\.known$/);
    expect(p.stat).toBe(p.known.replace(/\.known$/, ".stat"));
    expect(cachePaths("/h", "/repo", scope, k)).toEqual(p);
    const others = [cachePaths("/h", "/repo2", scope, k), cachePaths("/h", "/repo", { ...scope, agent: "b" }, k), cachePaths("/h", "/repo", { ...scope, tenant: "t" }, k), cachePaths("/h", "/repo", scope, Buffer.alloc(32, 2))];
    expect(new Set([p.known, ...others.map((o) => o.known)]).size).toBe(5);
  });
});

describe("KnownChunks", () => {
  it("round-trips its refs and epoch; a missing file is an empty index", () => {
    const f = join(home(), "cache", "x.known");
    const k = KnownChunks.load(f);
    expect([k.size, k.epoch]).toEqual([0, ""]);
    for (let i = 0; i < 50; i++) k.add(ref(i));
    k.retain(() => true, "0123456789abcdef0123456789abcdef");
    k.save();
    const back = KnownChunks.load(f);
    expect(back.size).toBe(50);
    expect(back.epoch).toBe("0123456789abcdef0123456789abcdef");
    expect(back.get(ref(7).id)).toEqual(ref(7));
    expect([...back.ids()].sort()).toEqual([...Array(50).keys()].map((i) => ref(i).id).sort());
  });

  it("any damaged byte, a cut or a grown file: read as empty (the next backup checks the repository)", () => {
    const f = join(home(), "x.known");
    const k = KnownChunks.load(f);
    for (let i = 0; i < 5; i++) k.add(ref(i));
    k.save();
    const good = readFileSync(f);
    for (const at of [0, 10, 30, good.length - 40, good.length - 1]) {
      const b = Buffer.from(good);
      b[at] ^= 0x10;
      writeFileSync(f, b);
      expect(KnownChunks.load(f).size, `byte ${at}`).toBe(0);
    }
    writeFileSync(f, good.subarray(0, good.length - 1));
    expect(KnownChunks.load(f).size).toBe(0);
    writeFileSync(f, Buffer.concat([good, Buffer.alloc(1)]));
    expect(KnownChunks.load(f).size).toBe(0);
    writeFileSync(f, good);
    expect(KnownChunks.load(f).size).toBe(5);
    // a count that is not the file's, under a checksum that matches (the checksum is no key): empty, not a throw
    const lying = Buffer.from(good);
    lying.writeUInt32BE(10, 24);
    createHash("sha256").update(lying.subarray(0, lying.length - 32)).digest().copy(lying, lying.length - 32);
    writeFileSync(f, lying);
    expect(KnownChunks.load(f).size).toBe(0);
  });

  it("retain keeps only what the repository still holds; save writes only when something changed", () => {
    const f = join(home(), "x.known");
    const k = KnownChunks.load(f);
    for (let i = 0; i < 4; i++) k.add(ref(i));
    k.retain((id) => id !== ref(2).id, "ffffffffffffffffffffffffffffffff");
    k.save();
    expect(KnownChunks.load(f).get(ref(2).id)).toBeUndefined();
    expect(KnownChunks.load(f).size).toBe(3);
    const again = KnownChunks.load(f);
    again.add(ref(0));
    rmSync(f);
    again.save();
    expect(existsSync(f)).toBe(false);
  });
});

describe("StatCache", () => {
  const past = (f: string) => {
    const t = new Date(Date.now() - 60_000);
    utimesSync(f, t, t);
    return statSync(f, { bigint: true });
  };
  /** a stat taken 3 s after the file last changed (its ctime, which no program can set back): not racy */
  const settled = (st: { ctimeNs: bigint }) => st.ctimeNs + 3_000_000_000n;

  it("gives the chunk list of a file whose stat is the one recorded; a changed size or mtime misses", () => {
    const h = home();
    const f = join(tmp, `data${n++}`);
    writeFileSync(f, "contents");
    const st = past(f);
    const c = StatCache.load(join(h, "x.stat"));
    expect(c.lookup(f, st)).toBeNull();
    c.record(f, st, settled(st), "a".repeat(64), ["c1", "c2"]);
    c.save();
    const back = StatCache.load(join(h, "x.stat"));
    expect(back.lookup(f, statSync(f, { bigint: true }))).toEqual({ sha256: "a".repeat(64), chunks: ["c1", "c2"] });
    writeFileSync(f, "contents, longer");
    expect(back.lookup(f, past(f))).toBeNull();
  });

  it("an entry whose stat was taken within 2 s of the file's last change (racy) is not trusted", () => {
    const f = join(tmp, `data${n++}`);
    writeFileSync(f, "x");
    const st = statSync(f, { bigint: true });
    const c = StatCache.load(join(home(), "x.stat"));
    c.record(f, st, st.ctimeNs + 1_000_000_000n, "b".repeat(64), ["c"]);
    expect(c.lookup(f, st)).toBeNull();
    c.record(f, st, settled(st), "b".repeat(64), ["c"]);
    expect(c.lookup(f, st)).not.toBeNull();
  });

  it("saves only the entries this run used or wrote; a damaged file is an empty cache", () => {
    const h = home();
    const [a, b] = [join(tmp, `data${n++}`), join(tmp, `data${n++}`)];
    writeFileSync(a, "a");
    writeFileSync(b, "b");
    const c = StatCache.load(join(h, "x.stat"));
    const sa = past(a);
    c.record(a, sa, settled(sa), "a".repeat(64), ["ca"]);
    const sb = past(b);
    c.record(b, sb, settled(sb), "b".repeat(64), ["cb"]);
    c.save();
    const next = StatCache.load(join(h, "x.stat"));
    expect(next.lookup(a, statSync(a, { bigint: true }))).not.toBeNull();
    next.save();
    const third = StatCache.load(join(h, "x.stat"));
    expect(third.lookup(a, statSync(a, { bigint: true }))).not.toBeNull();
    expect(third.lookup(b, statSync(b, { bigint: true }))).toBeNull();
    writeFileSync(join(h, "x.stat"), '{"v":1,"entries":');
    expect(StatCache.load(join(h, "x.stat")).lookup(a, statSync(a, { bigint: true }))).toBeNull();
  });
});
