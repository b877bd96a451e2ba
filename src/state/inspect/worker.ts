/**
 * Worker-thread entry: inspectSnapshot of one snapshot per message (of a
 * copy, or of live databases in read transactions it opens at the caller's
 * instant), the integrity_check of a restored database file, or the census
 * and page digests of a pinned live snapshot's last pages (an in-place
 * incremental splits its read between two threads), for as long as the
 * process keeps the thread.
 */
import Database from "better-sqlite3";
import { parentPort } from "node:worker_threads";
import { AgentbakError } from "../../errors.js";
import { inspectSnapshot, type WorkerRequest } from "./inspect.js";
import { pinnedSource } from "../sqlite/livesnap.js";
import { hashTail } from "../pages/index.js";
import { joinInstant, releaseAll } from "../sqlite/cut.js";
import { integrityCheck, openDefensive } from "../sqlite/open.js";

parentPort!.on("message", (m: WorkerRequest) => {
  try {
    if (m.kind === "inspect") {
      // the caller holds the write locks until it hears `pinned`: these read transactions see its instant
      const pinned = m.pin ? joinInstant(m.input.dbs) : undefined;
      if (pinned) parentPort!.postMessage({ pinned: true });
      let result;
      try {
        result = inspectSnapshot(m.input, pinned);
      } finally {
        if (pinned) releaseAll(pinned);
      }
      // the page indexes (megabytes at a GiB) move to the caller rather than being copied
      const own = (b?: Uint8Array) => (b && b.byteOffset === 0 && b.byteLength === b.buffer.byteLength ? [b.buffer as ArrayBuffer] : []);
      return parentPort!.postMessage({ ok: true, result }, result.dbs.flatMap((d) => own(d.index?.hashes)));
    }
    if (m.kind === "check") {
      const db = openDefensive(m.file);
      try {
        return parentPort!.postMessage({ ok: true, result: integrityCheck(db, m.check) });
      } finally {
        db.close();
      }
    }
    // each part's list of pages is its own: moved, not copied (its digests may share a pooled buffer: copied)
    const tail = hashTail(pinnedSource(m.pages), m.from, m.sums, (part) => parentPort!.postMessage({ part }, [part.changed.buffer as ArrayBuffer]));
    // the census part's arrays are its own (slices): moved, not copied
    parentPort!.postMessage({ ok: true, result: tail }, [tail.census.kind.buffer, tail.census.cells.buffer, tail.census.links.buffer] as ArrayBuffer[]);
  } catch (e) {
    parentPort!.postMessage({ ok: false, code: e instanceof AgentbakError ? e.code : 1, message: (e as Error).message });
  }
});
// better-sqlite3 loads SQLite's library at its first connection: made here, so the first one a request opens (perhaps
// while the caller holds write locks) does not pay for it
new Database(":memory:").close();
// said once the modules and SQLite's library are loaded: a caller may wait for it before taking write locks (warmInspection)
parentPort!.postMessage({ loaded: true });
