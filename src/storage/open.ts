/** Which store a repository location names: a folder or `s3://bucket/prefix`. */
import { usageError } from "../errors.js";
import type { ObjectStore } from "./store.js";

/**
 * The store for a location: `s3://bucket/prefix` or a local folder.
 * @param opts.create make the folder of a local store (only `init` does: every other use finds it or fails)
 * @param opts.endpoint an S3 store's endpoint instead of AGENTBAK_S3_ENDPOINT's
 * @throws AgentbakError(2) for another URL scheme, or credentials in the URL.
 */
export async function openStore(location: string, opts: { create?: boolean; endpoint?: string } = {}): Promise<ObjectStore> {
  const store = await open(location, opts);
  const file = process.env.AGENTBAK_STORE_COUNTS;
  return file ? (await import("./counting.js")).counting(store, file) : store;
}

async function open(location: string, opts: { create?: boolean; endpoint?: string }): Promise<ObjectStore> {
  // credentials in a repository URL would be echoed by every message naming the repository: refused unshown
  if (isUrl(location) && /^[a-z][a-z0-9+.-]*:\/\/[^/]*@/i.test(location))
    throw usageError("a repository URL must not hold credentials (user:secret@): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY instead (the URL given is not shown)");
  if (location.startsWith("s3://")) {
    const { S3Store } = await import("./s3.js");
    return new S3Store(location, { endpoint: opts.endpoint }).init();
  }
  if (isUrl(location)) throw usageError(`unsupported repository URL ${location} (a folder or s3://BUCKET/PREFIX)`);
  const { LocalStore } = await import("./local.js");
  return new LocalStore(location, opts);
}

/** Whether `location` names object storage rather than a folder (paths are resolved only for folders). */
export const isUrl = (location: string) => /^[a-z][a-z0-9+.-]*:\/\//i.test(location);

