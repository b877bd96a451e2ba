/**
 * Counting a store's requests, for the fleet bench and the tests that prove a listing's cost:
 * with AGENTBAK_STORE_COUNTS=FILE every store a process opens counts its calls by operation and the
 * bytes it writes, and one JSON line per store is appended to FILE when the process exits:
 * `{"pid","url","counts":{"list":1,"get":3,...},"bytes_put":N}`. A call is one request on S3 except
 * `upload` (one per 8 MiB part) and `append` (a GET and a PUT). Off, nothing is wrapped.
 */
import { appendFileSync, statSync } from "node:fs";
import type { ObjectStore } from "./store.js";

interface Tally {
  url: string;
  counts: Record<string, number>;
  bytes_put: number;
}

const tallies: Tally[] = [];
let hooked = false;

/** `store`, counting every request into a line of `file` at exit. */
export function counting(store: ObjectStore, file: string): ObjectStore {
  const t: Tally = { url: store.url, counts: {}, bytes_put: 0 };
  tallies.push(t);
  if (!hooked) {
    hooked = true;
    process.once("exit", () => {
      try {
        appendFileSync(file, tallies.map((x) => JSON.stringify({ pid: process.pid, ...x }) + "\n").join(""));
      } catch {
        /* a measurement that can not be written changes nothing else */
      }
    });
  }
  const count = <R>(op: string, r: R, bytes = 0): R => {
    t.counts[op] = (t.counts[op] ?? 0) + 1;
    t.bytes_put += bytes;
    return r;
  };
  return {
    url: store.url,
    inPlace: store.inPlace,
    put: (k, body, o) => count("put", store.put(k, body, o), Buffer.byteLength(body)),
    upload: (k, f, o) => count("upload", store.upload(k, f, o), statSync(f, { throwIfNoEntry: false })?.size ?? 0),
    append: (k, line) => count("append", store.append(k, line), Buffer.byteLength(line)),
    get: (k) => count("get", store.get(k)),
    getRange: (k, s, e) => count("get", store.getRange(k, s, e)),
    download: (k, f) => count("get", store.download(k, f)),
    localPath: (k, d) => (store.inPlace ? store.localPath(k, d) : count("get", store.localPath(k, d))),
    head: (k) => count("head", store.head(k)),
    list: (p) => count("list", store.list(p)),
    tagged: (p) => count("list", store.tagged(p)),
    folders: (p) => count("list", store.folders(p)),
    hidden: (p) => count("list", store.hidden(p)),
    strays: (p) => store.strays(p), // no request: a bucket has none, a folder reads its own
    delete: (k) => count("delete", store.delete(k)),
    tempDir: (tag) => store.tempDir(tag),
    sweep: (ms) => store.sweep(ms),
  };
}
