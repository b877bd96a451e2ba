/**
 * The storage interface every repository runs on: keys (slash-separated
 * relative paths) to objects. Two implementations, a local folder and an
 * S3-compatible bucket, pass one conformance suite; nothing above this layer
 * knows which one it has.
 */
import { usageError } from "../errors.js";

export interface UploadOptions {
  /** S3 Object Lock: retain until this time in this mode (ignored by stores without retention) */
  retainUntil?: Date;
  lockMode?: "GOVERNANCE" | "COMPLIANCE";
}

export interface ObjectStore {
  /** where the store is, for messages (a folder path or s3://bucket/prefix) */
  readonly url: string;
  /**
   * Capabilities that change cost, never correctness: `inPlace` stores can
   * hand out a local path to read an object without copying it.
   */
  readonly inPlace: boolean;
  /** Writes a small object; with ifNoneMatch returns false (and writes nothing) when it exists. */
  put(key: string, body: Buffer | string, opts?: { ifNoneMatch?: boolean }): Promise<boolean>;
  /**
   * Stores a local file under `key`, streaming, never visible half-written.
   * The file may be consumed (a local store links it into place).
   */
  upload(key: string, file: string, opts?: UploadOptions): Promise<void>;
  /** Appends one line (a local store appends in place; others rewrite the object). */
  append(key: string, line: string): Promise<void>;
  /** The whole object, or null when missing: a buffer of the caller's own (it may change it). */
  get(key: string): Promise<Buffer | null>;
  /** Bytes [start, end] inclusive. @throws AgentbakError(10) when missing. */
  getRange(key: string, start: number, end: number): Promise<Buffer>;
  /** Streams the object into a new local file. @throws AgentbakError(10) when missing. */
  download(key: string, file: string): Promise<void>;
  /** A local path to read the object from: the object itself when `inPlace`, else a download into `tempDir`. */
  localPath(key: string, tempDir: string): Promise<string>;
  /** Size, modification time and an identity that changes when the object does; null when missing. */
  head(key: string): Promise<{ size: number; mtimeMs: number; etag: string } | null>;
  /** Every key under the prefix, sorted. */
  list(prefix: string): Promise<string[]>;
  /**
   * Every key under the prefix with an identity that changes whenever the object is written again, as the
   * same listing gives it (S3: ETag and LastModified of ListObjectsV2, 1,000 keys a page; a folder: device,
   * inode, size and time), so a caller can tell which objects changed without a request per object; and each
   * object's size as the same listing gives it.
   */
  tagged(prefix: string): Promise<Map<string, { tag: string; size: number }>>;
  /**
   * Objects under the prefix that a delete without a version id hid in a versioned bucket (a delete marker is
   * their newest version) while an older version is still kept, as Object Lock retention keeps it: each key with
   * the bytes of its newest kept version. A store without versions has none.
   */
  hidden(prefix: string): Promise<Map<string, Buffer>>;
  /**
   * Keys directly under `prefix` (a prefix ending in "/") that hold no object: in a folder, a FIFO, device,
   * socket, link or folder in a file's place, which list() never names. A bucket has none.
   */
  strays(prefix: string): Promise<string[]>;
  /**
   * The names of the folders directly under `prefix` (a prefix ending in "/"): the next segment of every
   * key below it that has more segments, sorted (S3: one LIST with delimiter "/" per 1,000 names).
   */
  folders(prefix: string): Promise<string[]>;
  /** Deletes; @returns false when retention (Object Lock) refused it. Missing objects are not an error. */
  delete(key: string): Promise<boolean>;
  /**
   * A private local folder for files on their way into this store (for a
   * local store inside it, so an upload is a link). Its name carries the pid,
   * so `sweep` can remove it once the process is gone.
   */
  tempDir(tag: string): string;
  /** Removes temp files and folders of dead processes and incomplete uploads older than `olderThanMs`; @returns how many. */
  sweep(olderThanMs: number): Promise<number>;
}

/** Checks a key: relative, slash-separated, no empty, `.` or `..` segments. @throws AgentbakError(2). */
export function checkKey(key: string): string[] {
  const parts = key.split("/");
  if (parts.some((s) => s === "" || s === "." || s === ".." || s.includes("\0"))) throw usageError(`invalid object key ${JSON.stringify(key.slice(0, 200))}`);
  return parts;
}
