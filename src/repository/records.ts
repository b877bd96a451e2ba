/**
 * Small records a repository keeps beside its bundles (fencing generations,
 * request ids, the audit log, locks), behind one async interface so restore,
 * activate and fence check work the same on a local folder and in object storage.
 */
import { randomBytes } from "node:crypto";
import { LocalRepository } from "./local.js";
import { remoteLock } from "./remote.js";
import { openStore, type ObjectStore } from "./store.js";

export interface Records {
  /** where the repository is (a folder or s3://...) */
  readonly root: string;
  read<T>(rel: string): Promise<T | undefined>;
  write(rel: string, value: unknown): Promise<void>;
  audit(entry: Record<string, unknown>): Promise<void>;
  lock(name: string, waitMs?: number): Promise<{ release(): void | Promise<void> }>;
}

/** Records in a local repository. */
export function localRecords(repo: LocalRepository): Records {
  return {
    root: repo.root,
    read: async <T>(rel: string) => repo.readRecord<T>(rel),
    write: async (rel, v) => repo.writeRecord(rel, v),
    audit: async (e) => repo.audit(e),
    lock: (name, waitMs) => repo.lock(name, waitMs),
  };
}

/** Records in object storage (the audit log is one object per entry: objects can not be appended to). */
export function storeRecords(store: ObjectStore): Records {
  return {
    root: store.url,
    read: async <T>(rel: string) => {
      const b = await store.get(rel);
      return b ? (JSON.parse(String(b)) as T) : undefined;
    },
    write: async (rel, v) => void (await store.put(rel, JSON.stringify(v, null, 2) + "\n")),
    audit: async (e) => void (await store.put(`audit/${new Date().toISOString()}-${randomBytes(4).toString("hex")}.json`, JSON.stringify({ at: new Date().toISOString(), ...e }))),
    lock: (name, waitMs) => remoteLock(store, name, waitMs),
  };
}

/** Records for a repository location. @throws AgentbakError(10) when a local one does not exist. */
export async function openRecords(location: string): Promise<Records> {
  if (location.startsWith("s3://")) return storeRecords(await openStore(location));
  const { openRepository } = await import("./local.js");
  return localRecords(openRepository(location));
}
