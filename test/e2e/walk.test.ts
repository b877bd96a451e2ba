// The walk of a backup on this checkout (node dist/tools/walk.js, issue 33): the backup's path (commands/, capture/)
// climbs nowhere, and makes no more calls between files than when issue 33 was closed (136 calls and 4 climbs when
// it was worked on; lower the figure when the walk gets shorter, never raise it without saying why).
import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";

describe("node dist/tools/walk.js", () => {
  it("the backup's path: at most 53 calls between files, 0 climbs, every call returns; the whole house climbs at most 9 times", () => {
    const out = execFileSync(process.execPath, ["dist/tools/walk.js", "."], { encoding: "utf8" });
    const figures = (what: string) => {
      const m = out.match(new RegExp(`^walk of a backup, ${what}: (\\d+) calls between files, of them (\\d+) climbs; (\\d+) returns$`, "m"));
      expect(m, out).not.toBeNull();
      return { calls: Number(m![1]), climbs: Number(m![2]), returns: Number(m![3]) };
    };
    const path = figures("on its path \\(commands/, capture/\\)");
    expect(path.climbs).toBe(0);
    // 93 when issue 33 was worked on; the chunk store (issue 35) added the files' and sources' calls into it (106);
    // wings offering one operation instead of steps brought it to 79; packing small files and reusing unchanged
    // sources (issue 35) added their stages: 89; the files stage opening the chunk writer once, with one scan and
    // one manifest entry builder: 86; one owner releasing a pinned read: 85; the
    // repository's beginBackup giving the sequence and newest manifest, its chainHead the parent's page indexes, the
    // chunk writer storing and answering holds itself: 80; recall parity's records at backup (issue 37: a LanceDB
    // table's vectors, then its probes' exact neighbours) added 3: 83; the answer to a repeated idempotency key beside
    // runBackup (its digest passed to takeSnapshot as data), the repository opening the chunk writer with the signed
    // chunks it lists itself, and its publish remembering the checked payload (its chainHead reads that cache): 79;
    // probeRecords taking a captured table's vectors as they are held: 78; an open operation's strategy looked up
    // among the shared facts (facts.ts, beside the strategies), and the signing key carrying its fingerprint from
    // where it is made: 76 (docs/architecture.md); the config and the repository's location read in one call
    // (config/load.ts: loadNamed): 75; the repository answering once at the start (beginBackup: an incremental's
    // chain head, the chunk writer and the source entries it may reuse, carried forward as data): 69; the databases
    // read at their instant in one state/ call taking the mode (state/inspect/read.ts: readInstant): 65; the copies
    // staged beside their inspection in one call as well (stageCopies): 63; the sources' large files stored by the
    // files stage, the page engine opened (openSnapshotPages) and its block sums ended (finish) in one call each: 58;
    // what the instant took staged (stageTaken) and its inspection settled (settleInspection) in one call each: 56;
    // where a backup goes answered once before it and settled once after (repository/spool.ts backupTarget,
    // settleBackup): 52; the block sums to keep returned by the payload writer as data: 51; the files stage's secret
    // scan streamed (files35: one scanText call became TextScanner's constructor, push and end): 53
    expect(path.calls).toBeLessThanOrEqual(53);
    expect(path.returns).toBe(path.calls);
    // the whole house grows with every feature (the generation log, the catalog): only its climbs are held
    expect(figures("the whole house").climbs).toBeLessThanOrEqual(9);
  }, 180_000);
});
