/**
 * Restoring a bundle's state sources (src/bundle/sources.ts): `--source
 * NAME=URL` values checked against the snapshot's sources and their URL
 * schemes, a refusal never echoing the value (it may hold a password); every
 * target checked before anything is written (a lancedb folder that is not
 * empty, a server that can not be reached: named by source, its password never
 * shown); --allow-nonempty-source only for a redis source the snapshot has.
 */
import { afterAll, describe, expect, it } from "vitest";
import { createServer } from "node:net";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Manifest } from "../../../src/bundle/manifest.js";
import { manifestSources, parseSourceFlags, restoreSources } from "../../../src/bundle/sources.js";
import type { ExtractedSource } from "../../../src/bundle/extract.js";
import { AgentbakError } from "../../../src/errors.js";

const tmp = mkdtempSync(join(tmpdir(), "agentbak-sources-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const at = "2026-12-06T12:00:00.000Z";
const src = (name: string, kind: "postgres" | "redis" | "lancedb") => ({ name, kind, ref: kind === "lancedb" ? null : "env:URL", path: kind === "lancedb" ? "vectors" : null, snapshot_at: at, server_version: null });
const m = {
  snapshot_id: "20261206T120000000Z-0123abcd",
  created_at: at,
  capture_instant: { started_at: at, finished_at: at, sources: [src("crm", "postgres"), src("cache", "redis"), src("vectors", "lancedb")] },
} as unknown as Manifest;
const failure = async (f: () => unknown) => {
  try {
    await f();
  } catch (e) {
    expect(e).toBeInstanceOf(AgentbakError);
    return [(e as AgentbakError).code, (e as Error).message] as const;
  }
  throw new Error("accepted");
};
/** a port on 127.0.0.1 with nothing listening */
const closedPort = () =>
  new Promise<number>((ok) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => ok(p));
    });
  });

describe("manifestSources and parseSourceFlags", () => {
  it("a manifest from before sources has none", () => {
    expect(manifestSources({ ...m, capture_instant: undefined })).toEqual([]);
    expect(manifestSources(m).map((s) => s.name)).toEqual(["crm", "cache", "vectors"]);
  });

  it("takes NAME=URL for each source of its kind's schemes (a folder for lancedb)", async () => {
    const r = parseSourceFlags(["crm=postgresql://u:pw@db/crm", "cache=rediss://h:6380/2", "vectors=/srv/vectors"], m);
    expect([...r]).toEqual([["crm", "postgresql://u:pw@db/crm"], ["cache", "rediss://h:6380/2"], ["vectors", "/srv/vectors"]]);
    expect(parseSourceFlags(undefined, m).size).toBe(0);
  });

  it("refuses (2) a value without a name or a URL, and a URL of another kind, never echoing the value", async () => {
    for (const v of ["postgres://u:s3cret@db/crm", "crm=", "=postgres://u:s3cret@db", "bad name=x"]) {
      const [code, msg] = await failure(() => parseSourceFlags([v], m));
      expect([code, msg]).toEqual([2, "--source: expected NAME=URL, where NAME is a state source of the snapshot (the value given is not shown: it may hold a password)"]);
    }
    const [code, msg] = await failure(() => parseSourceFlags(["crm=redis://:s3cret@h"], m));
    expect(code).toBe(2);
    expect(msg).toBe("--source crm: not a postgres:// or postgresql:// URL (the value given is not shown: it may hold a password)");
    expect(await failure(() => parseSourceFlags(["cache=not a url s3cret"], m))).toEqual([2, "--source cache: not a redis:// or rediss:// URL (the value given is not shown: it may hold a password)"]);
    expect(await failure(() => parseSourceFlags(["other=x"], m))).toEqual([2, `--source other: snapshot ${m.snapshot_id} has no source named "other"`]);
  });
});

describe("restoreSources checks every target first", () => {
  const extracted = (names: [string, "postgres" | "redis" | "lancedb"][]): ExtractedSource[] => names.map(([name, kind]) => ({ name, kind, files: [] }));

  it("--allow-nonempty-source: only a redis source the snapshot has", async () => {
    expect(await failure(() => restoreSources(m, [], new Map(), ["nope"]))).toEqual([2, '--allow-nonempty-source nope: the snapshot has no source named "nope"']);
    expect(await failure(() => restoreSources(m, [], new Map(), ["vectors"]))).toEqual([
      2,
      "--allow-nonempty-source vectors: only a redis source can be restored beside other keys; a lancedb source goes only into an empty target",
    ]);
  });

  it("a lancedb folder that is not empty is 2 naming it once and what it holds; nothing is written", async () => {
    const full = join(tmp, "full");
    mkdirSync(full);
    writeFileSync(join(full, "keep.lance"), "someone's data");
    const [code, msg] = await failure(() => restoreSources(m, extracted([["vectors", "lancedb"]]), new Map([["vectors", full]])));
    expect(code).toBe(2);
    expect(msg).toBe(`source vectors: ${full} is not empty: the folder holds 1 entry; restore only into an empty target`);
    expect(readdirSync(full)).toEqual(["keep.lance"]);
  });

  it("a server that can not be reached is named by its source, with neither URL nor password", async () => {
    const port = await closedPort();
    const url = `postgres://agent:s3cret-pw@127.0.0.1:${port}/crm`;
    const [code, msg] = await failure(() => restoreSources(m, extracted([["crm", "postgres"]]), new Map([["crm", url]])));
    expect(code).toBe(1);
    expect(msg).toMatch(/^source crm: checking its target: /);
    expect(msg).not.toContain("s3cret-pw");
    expect(msg).not.toContain(url);
  });
});
